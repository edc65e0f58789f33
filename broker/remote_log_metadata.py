"""__remote_log_metadata shared by the brokers of a cluster (Kafka's TopicBasedRemoteLogMetadataManager:
its ConsumerTask and ProducerManager).

Every broker needs the remote log of each tiered partition it leads or follows, whoever leads the
__remote_log_metadata partition holding its records (RemoteLogMetadataTopicPartitioner's choice,
broker.remote_log.metadata_partition). So each broker consumes, as a client would, the metadata
partitions of the tiered partitions it hosts (and of those it is writing to, `publish`): one task
fetches them (Fetch v12 as a consumer, read_uncommitted, long polls of FETCH_WAIT_MS) from each
partition's leader, as this broker's metadata cache names it, over the inter-broker clients
(replication.broker_client.BrokerClients: the leader may be this broker), from offset 0, and
replays every record into the metadata cache in log order. A partition newly assigned starts over
from offset 0 with its partitions' entries dropped from the cache, as does one whose leader
answers OFFSET_OUT_OF_RANGE (it lost records read from it); one no longer needed is forgotten. A
metadata partition is loaded once the consumer has reached its high watermark; until then its
tiered partitions are left alone by the remote log manager and their remote reads answer
REPLICA_NOT_AVAILABLE (broker.remote_log).

Writes (`publish`) go to the metadata partition's leader as a Produce (v9, acks=all) over the same
clients, retried on the errors that mean the leader moved, then wait until the consumer has read
the record back (Kafka's waitTillConsumptionCatchesUp): so the cache is only ever changed by the
consumer, in the topic's order, and a caller returning from `publish` finds its record applied.

Everything runs on the event loop.
"""

import asyncio
import datetime
import logging
import time
from collections.abc import Callable, Sequence

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import iter_batches
from protocol.records import Record, build_batch, iter_records
from replication.broker_client import BrokerClientError, BrokerClients
from storage.remote.metadata import RemoteLogMetadataCache, TopicIdPartition
from storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

FETCH_VERSION = 12
PRODUCE_VERSION = 9
FETCH_WAIT_MS = 500
FETCH_PARTITION_MAX_BYTES = 1024 * 1024
BACKOFF_S = 0.5
# Kafka's rlmm.config.remote.log.metadata.consume.wait.ms default: how long a write waits to be
# read back.
CONSUME_WAIT_S = 120.0
PRODUCE_TIMEOUT = datetime.timedelta(seconds=30)
# Answers that mean the metadata partition's leader moved or is catching up: try again.
_RETRIABLE = frozenset({
    ErrorCode.not_leader_or_follower,
    ErrorCode.leader_not_available,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.request_timed_out,
    ErrorCode.network_exception,
    ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append,
    ErrorCode.kafka_storage_error,
})

Entry = tuple[bytes, bytes | None]


class SharedMetadataTopic:
    def __init__(
        self,
        topic: str,
        cache: RemoteLogMetadataCache,
        clients: BrokerClients,
        leader_of: Callable[[TopicPartition], int | None],
        needed: Callable[[], set[int]],
        partition_of: Callable[[TopicIdPartition], int | None],
    ) -> None:
        """`needed()`: the metadata partitions of the tiered partitions this broker hosts;
        `partition_of(tip)`: the metadata partition of a partition's records (None while the
        topic does not exist)."""
        self.topic = topic
        self.cache = cache
        self._clients = clients
        self._leader_of = leader_of
        self._needed = needed
        self._partition_of = partition_of
        self.positions: dict[int, int] = {}  # next offset to read, per assigned partition
        self.loaded: set[int] = set()
        self._pinned: dict[int, int] = {}  # partitions being written to, and by how many writers
        self._waiters: dict[int, list[tuple[int, asyncio.Future]]] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._clients.close()

    def wake(self) -> None:
        """The partitions hosted here may have changed: look again."""
        self._changed.set()

    def is_loaded(self, partition: int) -> bool:
        return partition in self.loaded

    # ----------------------------------------------------------------------------- reading

    async def _run(self) -> None:
        while True:
            self._changed.clear()
            try:
                fetched = await self.consume_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not stop the metadata for good: log it, back off
                log.exception("consuming %s failed", self.topic)
                await asyncio.sleep(BACKOFF_S)
                continue
            if not fetched:
                try:
                    await asyncio.wait_for(self._changed.wait(), BACKOFF_S)
                except TimeoutError:
                    pass

    def _assignment(self) -> None:
        wanted = self._needed() | set(self._pinned)
        for partition in [p for p in self.positions if p not in wanted]:
            del self.positions[partition]
            self.loaded.discard(partition)
            log.info("%s-%d: no longer consumed", self.topic, partition)
        for partition in sorted(wanted - set(self.positions)):
            self._replay_from_start(partition)
            log.info("%s-%d: consuming", self.topic, partition)

    def _replay_from_start(self, partition: int) -> None:
        """Read the partition again from offset 0, its tiered partitions' entries dropped from
        the cache first: what the cache had of them may be stale."""
        for tip in [t for t in self.cache.partitions if self._partition_of(t) == partition]:
            del self.cache.partitions[tip]
        self.positions[partition] = 0
        self.loaded.discard(partition)

    async def consume_once(self) -> bool:
        """One fetch from each leader of the assigned partitions; False when there was none
        to fetch from."""
        self._assignment()
        by_leader: dict[int, list[int]] = {}
        for partition in self.positions:
            leader = self._leader_of(TopicPartition(self.topic, partition))
            if leader is not None:
                by_leader.setdefault(leader, []).append(partition)
        if not by_leader:
            return False
        await asyncio.gather(*(self._fetch(leader, partitions) for leader, partitions in by_leader.items()))
        return True

    async def _fetch(self, leader: int, partitions: list[int]) -> None:
        asked = {p: self.positions[p] for p in partitions}
        request = FetchRequest(
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=FETCH_WAIT_MS),
            min_bytes=1,
            topics=(FetchTopic(topic=self.topic, partitions=tuple(
                FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=FETCH_PARTITION_MAX_BYTES)
                for p, offset in asked.items()
            )),),
            forgotten_topics_data=(),
        )
        try:
            response = await self._clients.send_to(leader, ApiKey.FETCH, FETCH_VERSION, request)
        except BrokerClientError as exc:
            log.info("fetching %s from broker %d failed: %s", self.topic, leader, exc)
            await asyncio.sleep(BACKOFF_S)
            return
        failed = False
        for topic in response.topics:
            for result in topic.partitions:
                partition = result.partition_index
                if partition not in asked or self.positions.get(partition) != asked[partition]:
                    continue  # unassigned meanwhile
                if result.error_code == ErrorCode.offset_out_of_range:
                    # The partition lost records this broker had read (an unclean election):
                    # replayed whole, as a consumer with auto.offset.reset=earliest would, so
                    # that the cache holds what the topic holds.
                    log.warning("%s-%d: broker %d answered offset_out_of_range at offset %d; replaying it from the start",
                                self.topic, partition, leader, asked[partition])
                    self._replay_from_start(partition)
                    failed = True
                    continue
                if result.error_code != ErrorCode.none:
                    log.info("%s-%d: broker %d answered %s", self.topic, partition, leader, ErrorCode(result.error_code).name)
                    failed = True
                    continue
                self._apply(partition, memoryview(result.records or b""), result.high_watermark)
        if failed:
            await asyncio.sleep(BACKOFF_S)

    def _apply(self, partition: int, records: memoryview, high_watermark: int) -> None:
        values: list[bytes | None] = []
        position = self.positions[partition]
        for start, header in iter_batches(records):
            if header.last_offset < position:
                continue
            if not header.is_control:
                values.extend(
                    record.value for record in iter_records(records[start : start + header.size]) if record.offset >= position
                )
            position = header.last_offset + 1
        self.cache.replay(values)
        self.positions[partition] = position
        if position >= high_watermark and partition not in self.loaded:
            self.loaded.add(partition)
            log.info("%s-%d: loaded up to offset %d", self.topic, partition, position)
        waiters = self._waiters.get(partition)
        if waiters:
            for offset, future in waiters:
                if offset < position and not future.done():
                    future.set_result(None)
            self._waiters[partition] = [(o, f) for o, f in waiters if not f.done()]

    # ----------------------------------------------------------------------------- writing

    async def publish(self, partition: int, entries: Sequence[Entry]) -> None:
        """Write `entries` as one batch to the metadata partition's leader and return once the
        consumer has read them back; KafkaError when that cannot be done."""
        self._pinned[partition] = self._pinned.get(partition, 0) + 1
        self.wake()
        deadline = time.monotonic() + CONSUME_WAIT_S
        try:
            last_offset = await self._produce(partition, entries, deadline)
            await self._read_back(partition, last_offset, deadline)
        finally:
            self._pinned[partition] -= 1
            if not self._pinned[partition]:
                del self._pinned[partition]

    async def _produce(self, partition: int, entries: Sequence[Entry], deadline: float) -> int:
        now = int(time.time() * 1000)
        batch = build_batch([Record(i, now, key, value) for i, (key, value) in enumerate(entries)])
        request = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout=PRODUCE_TIMEOUT,
            topic_data=(TopicProduceData(name=self.topic, partition_data=(PartitionProduceData(index=partition, records=batch),)),),
        )
        tp = TopicPartition(self.topic, partition)
        while True:
            leader = self._leader_of(tp)
            if leader is None:
                error = ErrorCode.leader_not_available
            else:
                try:
                    response = await self._clients.send_to(leader, ApiKey.PRODUCE, PRODUCE_VERSION, request)
                except BrokerClientError as exc:
                    log.info("writing to %s at broker %d failed: %s", tp, leader, exc)
                    error = ErrorCode.network_exception
                else:
                    answer = response.responses[0].partition_responses[0]
                    error = ErrorCode(answer.error_code)
                    if error is ErrorCode.none:
                        return answer.base_offset + len(entries) - 1
            if error not in _RETRIABLE or time.monotonic() + BACKOFF_S > deadline:
                raise KafkaError(f"cannot write to {tp}: {error.name}", error)
            await asyncio.sleep(BACKOFF_S)

    async def _read_back(self, partition: int, offset: int, deadline: float) -> None:
        if self.positions.get(partition, 0) > offset:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(partition, []).append((offset, future))
        try:
            await asyncio.wait_for(future, max(deadline - time.monotonic(), 0.001))
        except TimeoutError:
            raise KafkaError(
                f"{self.topic}-{partition}: offset {offset} not read back within {CONSUME_WAIT_S:.0f} s",
                ErrorCode.request_timed_out,
            ) from None
        finally:
            waiters = self._waiters.get(partition)
            if waiters is not None:
                self._waiters[partition] = [(o, f) for o, f in waiters if f is not future]
                if not self._waiters[partition]:
                    del self._waiters[partition]
