"""Reading a tiered topic's history straight from the brokers' remote store (KIP-405).

With the option rsm.config.url (and rsm.config.* for the store's fsspec options: the brokers'
own settings), a read takes the offsets the store holds from the store, one Spark task per
remote segment (or piece of one, by minPartitions and maxRecordsPerPartition), and only the
rest, the live tail, from the brokers: no broker is on the data path of those offsets.

Planning, on the driver (`plan`):

1. The topic ids of the partitions read (DescribeTopics): remote segments belong to a topic id,
   so a topic deleted and made again under the same name is never mixed up with the old one.
2. The remote log metadata, read as a client reads a topic: a consumer reads every partition of
   `__remote_log_metadata` from its start to its end (it is compacted: one record per segment
   still in the store), and storage.remote.metadata replays the records into the same view the
   brokers build from them (Kafka's record formats and segment states). Only segments in
   COPY_SEGMENT_FINISHED are read, as the brokers read only those. Every metadata partition is
   read rather than the one Kafka's partitioner picks: the topic is small, and reading all of it
   needs no partition count nor partitioner agreed with the brokers.
3. For read_committed, the transaction index of each segment and the producer snapshot of the
   last one (through storage.remote.storage_manager). The snapshot lists the transactions still
   open at the store's end: their markers are not in the store, so the store cannot tell whether
   they were aborted, and the offsets from the first of them on are left to the brokers
   (planning.StoredLog.end). Below that, every transaction with records in the store ended
   inside it, and the store's transaction indexes list every aborted one.
4. planning.cut_at_remote_segments cuts the ranges at segment boundaries.

Reading, in a task (`read_range`): the segment's batches from its offset index's position for
the range start, through storage.remote.reader (range reads of 1 MiB chunks), CRC-checked,
control batches left out, and for read_committed the batches of the aborted transactions the
plan listed. A segment missing from the store (retention deleted it after planning) or ending
before the range does is data loss: DataLossError, or with failOnDataLoss=false a warning and
the range's remaining offsets skipped. Nothing is ever skipped quietly.

The store is read-only here: nothing is written, listed or deleted.
"""

import concurrent.futures
import logging
import uuid
from collections.abc import Iterable, Iterator

from protocol.errors import CorruptRecordError
from protocol.record_batch import crc_is_valid
from spark_jobs.offline import batch_rows
from spark_jobs.options import TP, OptionError, ReadOptions
from spark_jobs.planning import DataLossError, OffsetRange, StoredLog, StoredSegment, cut_at_remote_segments
from storage.producer_state import NO_OFFSET, parse_snapshot
from storage.remote.metadata import RemoteLogMetadataCache, TopicIdPartition
from storage.remote.reader import RemoteLogReader
from storage.remote.storage_manager import FsspecRemoteStorageManager, IndexType
from storage.txn_index import parse_entries

log = logging.getLogger(__name__)

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
_REQUEST_TIMEOUT_S = 30
_CACHE_BYTES = 8 * 1024 * 1024
_INDEX_FETCH_THREADS = 16  # a task reads forward: the offset index and a few chunks


def open_store(options: ReadOptions) -> FsspecRemoteStorageManager:
    if options.remote_store_url is None:
        raise OptionError("rsm.config.url is not set")
    return FsspecRemoteStorageManager(options.remote_store_url, dict(options.remote_store_options))


def _admin(options: ReadOptions):
    from confluent_kafka.admin import AdminClient

    from spark_jobs.online import client_config

    return AdminClient(client_config(options.bootstrap_servers, options.client_config))


def topic_ids(options: ReadOptions, topics: Iterable[str]) -> dict[str, uuid.UUID]:
    from confluent_kafka import TopicCollection

    names = sorted(set(topics))
    if not names:
        return {}
    admin = _admin(options)  # kept until the answers come: its end fails them
    futures = admin.describe_topics(TopicCollection(names), request_timeout=_REQUEST_TIMEOUT_S)
    found = {}
    for name, future in futures.items():
        topic_id = future.result(_REQUEST_TIMEOUT_S).topic_id
        found[name] = uuid.UUID(
            int=((topic_id.get_most_significant_bits() & (2**64 - 1)) << 64)
            | (topic_id.get_least_significant_bits() & (2**64 - 1))
        )
    return found


def read_metadata(options: ReadOptions) -> RemoteLogMetadataCache:
    """The remote log metadata, replayed from every partition of __remote_log_metadata."""
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

    from spark_jobs.online import client_config

    cache = RemoteLogMetadataCache()
    metadata = _admin(options).list_topics(REMOTE_LOG_METADATA_TOPIC, timeout=_REQUEST_TIMEOUT_S)
    topic = metadata.topics.get(REMOTE_LOG_METADATA_TOPIC)
    if topic is None or topic.error is not None:
        if topic is not None and topic.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise KafkaException(topic.error)
        return cache  # no segment was ever copied
    consumer = Consumer(
        client_config(
            options.bootstrap_servers,
            options.client_config,
            **{
                "group.id": "logway-spark-reader",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",
            },
        )
    )
    try:
        pending = set(topic.partitions)
        consumer.assign([TopicPartition(REMOTE_LOG_METADATA_TOPIC, p, OFFSET_BEGINNING) for p in sorted(pending)])
        values: dict[int, list[bytes | None]] = {p: [] for p in pending}
        deadline = time.monotonic() + options.poll_timeout_ms / 1000
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{REMOTE_LOG_METADATA_TOPIC} partitions {sorted(pending)} not read to their end in "
                    f"{options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)"
                )
            for message in consumer.consume(1000, timeout=1.0):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(message.partition())
                        continue
                    if error.fatal() or not error.retriable():
                        raise KafkaException(error)
                    continue
                values[message.partition()].append(message.value())
    finally:
        consumer.close()
    for partition in sorted(values):
        cache.replay(values[partition])
    return cache


def stored_logs(
    options: ReadOptions, tps: Iterable[TP], store: FsspecRemoteStorageManager | None = None
) -> dict[TP, StoredLog]:
    """The remote part of each partition of `tps` that has one (see the module docstring)."""
    tps = sorted(set(tps))
    ids = topic_ids(options, {topic for topic, _ in tps})
    cache = read_metadata(options)
    store = store or open_store(options)
    found: dict[TP, StoredLog] = {}
    for topic, partition in tps:
        state = cache.partitions.get(TopicIdPartition(ids[topic], topic, partition))
        copied = state.copied if state is not None else []
        if not copied:
            continue
        end = copied[-1].end_offset + 1
        if options.read_committed:
            # One small file per segment: fetched side by side (an object store's latency).
            with concurrent.futures.ThreadPoolExecutor(_INDEX_FETCH_THREADS) as pool:
                indexes = list(pool.map(lambda m: _fetch_index(store, m, IndexType.TRANSACTION), copied))
            segments = [StoredSegment(m, tuple(parse_entries(index))) for m, index in zip(copied, indexes)]
        else:
            segments = [StoredSegment(m) for m in copied]
        if options.read_committed:
            snapshot = _fetch_index(store, copied[-1], IndexType.PRODUCER_SNAPSHOT)
            open_at_end = [
                entry.current_txn_first_offset
                for entry in (parse_snapshot(snapshot) if snapshot else ())
                if entry.current_txn_first_offset != NO_OFFSET
            ]
            end = min([end, *open_at_end])
        found[(topic, partition)] = StoredLog(tuple(segments), end)
    return found


def _fetch_index(store: FsspecRemoteStorageManager, metadata, index: IndexType) -> bytes:
    try:
        return store.fetch_index(metadata, index)
    except FileNotFoundError:
        raise DataLossError(
            f"the {index.value} file of remote segment {metadata.segment_id} of {metadata.partition} "
            f"(offsets {metadata.start_offset}..{metadata.end_offset}) is not in the store {store.url}"
        ) from None


def plan(options: ReadOptions, ranges: list[OffsetRange]) -> list[OffsetRange]:
    """`ranges` with the offsets the store holds cut out into remote pieces (module docstring)."""
    if options.remote_store_url is None or not ranges:
        return ranges
    stored = stored_logs(options, [r.tp for r in ranges])
    return cut_at_remote_segments(ranges, stored, options.read_committed)


def read_range(options: ReadOptions, r: OffsetRange) -> Iterator[tuple]:
    """The records of a remote range, as RowBuilder.add takes them."""
    source = r.remote
    assert source is not None, f"{r} is not a remote range"
    segment = source.segment
    reader = RemoteLogReader(open_store(options), _CACHE_BYTES)
    aborted: dict[int, list[tuple[int, int]]] = {}
    for entry in source.aborted:
        aborted.setdefault(entry.producer_id, []).append((entry.first_offset, entry.last_offset))
    reached = r.start  # every offset below this was delivered or never existed
    try:
        for header, data in reader.batches_from(segment, r.start):
            if header.last_offset < r.start:
                continue
            if header.base_offset >= r.end:
                break
            if not crc_is_valid(data):
                raise CorruptRecordError(f"batch at offsets {header.base_offset}..{header.last_offset} fails its CRC")
            reached = header.next_offset
            if header.is_control:
                continue
            if (
                header.is_transactional
                and options.read_committed
                and any(first <= header.base_offset <= last for first, last in aborted.get(header.producer_id, ()))
            ):
                continue
            yield from batch_rows(header, data, r.start, r.end)
        if reached < min(r.end, segment.end_offset + 1):
            raise CorruptRecordError(f"the segment ends at offset {reached - 1}")
    except (FileNotFoundError, CorruptRecordError) as exc:
        message = (
            f"{r}: remote segment {segment.segment_id} (offsets {segment.start_offset}..{segment.end_offset}) "
            f"cannot be read from offset {reached} on: {type(exc).__name__}: {exc}"
        )
        if options.fail_on_data_loss:
            raise DataLossError(message) from exc
        log.warning("%s; skipping the rest of the range (failOnDataLoss=false)", message)
