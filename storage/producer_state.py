"""The state of a partition's idempotent producers (Kafka's ProducerStateManager).

Per producer id that wrote to the partition: its epoch, its last five batches (last sequence,
last offset, the offset delta that gives their first sequence and offset, max timestamp), the
last timestamp it wrote, and two fields for transactions: the epoch of the transaction
coordinator that last ended one of its transactions, and the first offset of its open transaction
(-1: none). A transactional batch opens its producer's transaction, a control batch (COMMIT or
ABORT marker) closes it; the earliest open one gives the partition's last stable offset.

A leader append is checked first (`check_append`, Kafka's ProducerAppendInfo since KIP-360):
- a batch with the epoch and the first and last sequence of one of the five cached batches is a
  retry whose answer was lost: it is not appended again, the client gets the original offsets;
- an epoch older than the producer's: INVALID_PRODUCER_EPOCH (a fenced zombie);
- a newer epoch must start at sequence 0, and the same epoch must go on from the last sequence
  (MAX_SEQUENCE wraps to 0): otherwise OUT_OF_ORDER_SEQUENCE_NUMBER;
- a producer id without state (never seen, expired, or lost with the snapshots of deleted
  segments) may start at any sequence. Since KIP-360 Kafka brokers no longer answer
  UNKNOWN_PRODUCER_ID to Produce, and neither does logway.
then recorded once appended (`record_batch`). Followers and log replay record batches unchecked.

State outlives its batches: retention and DeleteRecords leave it alone. A producer idle for
producer.id.expiration.ms (measured by its batches' timestamps) is dropped by
`remove_expired_producers`, unless it has an open transaction.

Snapshot files, in the partition directory: <offset as 20 digits>.snapshot holds the state after
every batch below <offset>, in Kafka's format (all big-endian):

    version int16 (1) | crc uint32: CRC-32C of all that follows | count int32 | per producer:
    producer id int64, epoch int16, last sequence int32, last offset int64 (-1: no batch),
    offset delta int32, timestamp int64, coordinator epoch int32, current txn first offset int64

A snapshot keeps only each producer's last batch, so after a reload only a retry of that batch
is recognised, as in Kafka. Snapshots are taken at each segment roll (at the new segment's base
offset) and when the log closes (at its end), written at once and fsynced by the log's next flush
(`pop_unflushed`). A torn or corrupt snapshot fails its CRC and is deleted; the one before it is
used. A snapshot is deleted with the segment starting at its offset.

Thread-safety: owned by the event loop, like its log (`Log.load` builds it in a worker thread
before the log is shared); `SnapshotFile.flush` runs wherever the log's flushes run.
"""

import bisect
import collections
import logging
import os
import struct
from collections.abc import Collection
from typing import Final, NamedTuple

import crc32c

from protocol.errors import InvalidRecordError
from protocol.primitives import INT32
from protocol.record_batch import (
    MAX_SEQUENCE,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    decrement_sequence,
)
from storage.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage.topic_partition import TopicPartition

log: Final = logging.getLogger(__name__)

SNAPSHOT_SUFFIX: Final = ".snapshot"
NUM_BATCHES_TO_RETAIN: Final = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000
NO_OFFSET: Final = -1
NO_COORDINATOR_EPOCH: Final = -1

_SNAPSHOT_VERSION: Final = 1
_VERSION_AND_CRC: Final = struct.Struct(">hI")  # the CRC covers everything after these two
_SNAPSHOT_ENTRY: Final = struct.Struct(">qhiqiqiq")
_OFFSET_DIGITS: Final = 20


class CorruptSnapshotError(ValueError):
    pass


class BatchMetadata(NamedTuple):
    """What is kept of one appended batch of a producer."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """One producer id's state; `batches` holds its last batches of its current epoch, oldest
    first."""

    __slots__ = (
        "producer_id",
        "epoch",
        "coordinator_epoch",
        "last_timestamp",
        "current_txn_first_offset",
        "batches",
    )

    def __init__(
        self,
        producer_id: int,
        epoch: int = NO_PRODUCER_EPOCH,
        coordinator_epoch: int = NO_COORDINATOR_EPOCH,
        last_timestamp: int = NO_TIMESTAMP,
        current_txn_first_offset: int = NO_OFFSET,
    ) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batches: collections.deque[BatchMetadata] = collections.deque(
            maxlen=NUM_BATCHES_TO_RETAIN
        )

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        """A new epoch starts the cached batches afresh."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.last_seq == last_seq and batch.first_seq == first_seq:
                return batch
        return None

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.epoch}, "
            f"batches={list(self.batches)}, last_timestamp={self.last_timestamp})"
        )


class SnapshotFile(NamedTuple):
    offset: int
    path: str

    def flush(self) -> None:
        """fsync the snapshot; one deleted meanwhile needs none."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class ProducerStateManager:
    def __init__(
        self,
        directory: str,
        topic_partition: TopicPartition,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.directory = directory
        self.topic_partition = topic_partition
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # producer id -> first offset of its open transaction: the producers whose entry has a
        # current_txn_first_offset, kept apart so the LSO costs no walk over every producer
        self.ongoing_txns: dict[int, int] = {}
        self.snapshot_offsets: list[int] = _list_snapshot_offsets(directory)
        self._last_snapshot_offset = 0  # a snapshot at or below it would hold nothing new
        self._unflushed: list[SnapshotFile] = []

    # ------------------------------------------------------------------------------ appends

    def check_append(self, header: BatchHeader) -> BatchMetadata | None:
        """Check a produced batch of a producer id (>= 0) against the producer's state.

        Returns the cached batch it repeats (to be answered with that batch's offsets, not
        appended), or None when it may be appended; raises InvalidRecordError,
        InvalidProducerEpochError or OutOfOrderSequenceError otherwise.
        """
        producer_id, epoch = header.producer_id, header.producer_epoch
        first_seq = header.base_sequence
        if first_seq < 0:
            raise InvalidRecordError(
                f"invalid sequence number {first_seq} in a batch of producer id {producer_id}"
            )
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        duplicate = entry.find_duplicate(epoch, first_seq, header.last_sequence)
        if duplicate is not None:
            return duplicate
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {producer_id} in {self.topic_partition} is older "
                f"than its last epoch {entry.epoch}"
            )
        if entry.epoch == NO_PRODUCER_EPOCH:
            return None
        if epoch != entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"new epoch {epoch} of producer {producer_id} in {self.topic_partition} "
                    f"starts at sequence {first_seq}, not 0"
                )
        elif not _in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {producer_id} in "
                f"{self.topic_partition}: {first_seq} (incoming), {entry.last_seq} (last written)"
            )
        return None

    def check_epoch(self, header: BatchHeader) -> None:
        """Check a coordinator's batch of a producer (transactional offsets), which carries no
        sequence: only a fenced epoch is refused (INVALID_PRODUCER_EPOCH)."""
        entry = self.producers.get(header.producer_id)
        if entry is not None and header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"epoch {header.producer_epoch} of producer {header.producer_id} in "
                f"{self.topic_partition} is older than its last epoch {entry.epoch}"
            )

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Check a transaction marker before it is written: INVALID_PRODUCER_EPOCH for an epoch
        older than the producer's, TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older
        than that of the producer's last marker."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker epoch {epoch} of producer {producer_id} in {self.topic_partition} is "
                f"older than its epoch {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker of producer {producer_id} in {self.topic_partition} from coordinator "
                f"epoch {coordinator_epoch}, older than {entry.coordinator_epoch}"
            )

    def record_marker(self, header: BatchHeader, coordinator_epoch: int) -> int | None:
        """`record_batch` for a marker this broker writes, which also remembers the epoch of
        the coordinator that wrote it."""
        first_offset = self.record_batch(header)
        self.producers[header.producer_id].coordinator_epoch = coordinator_epoch
        return first_offset

    def record_batch(self, header: BatchHeader) -> int | None:
        """Take an appended batch, its header as stored (base offset and max timestamp final),
        into its producer's state; batches without a producer id change nothing. Leader appends
        call it after `check_append`; followers and log replay call it for every batch.

        A transactional batch opens its producer's transaction if none is open; a control batch
        (a COMMIT or ABORT marker) closes it and returns its first offset (None: there was no
        open transaction)."""
        producer_id = header.producer_id
        if producer_id < 0:
            return None
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        if header.is_control:
            # A marker written under a bumped epoch (the coordinator fenced the producer)
            # fences the old epoch here too.
            first_offset = self.ongoing_txns.pop(producer_id, None)
            entry.current_txn_first_offset = NO_OFFSET
            if header.producer_epoch > entry.epoch:
                entry.epoch = header.producer_epoch
                entry.batches.clear()
            return first_offset
        if header.is_transactional and entry.current_txn_first_offset == NO_OFFSET:
            entry.current_txn_first_offset = header.base_offset
            self.ongoing_txns[producer_id] = header.base_offset
        delta = header.last_offset_delta
        last_offset = header.base_offset + delta
        batch = BatchMetadata(header.last_sequence, last_offset, delta, header.max_timestamp)
        entry.add_batch(header.producer_epoch, batch)
        return None

    def keep_known_batches(self, known: dict[int, ProducerStateEntry], end_offset: int) -> None:
        """After a truncation to `end_offset`, put back the batches below it that the state
        knew before the cut (`known`, the producers as they were). The rebuilt state has, per
        producer, the last batch of a snapshot and the batches replayed after it; the batches
        it knew are still in the log, and a retry of any of a producer's last five must be
        recognised as on a replica that never truncated (a leader's state). Both are the
        producer's latest batches below the cut, so the longer run is kept."""
        for producer_id, entry in self.producers.items():
            before = known.get(producer_id)
            if before is None or before.epoch != entry.epoch:
                continue  # a newer epoch before the cut began after it: its batches are gone
            kept = [batch for batch in before.batches if batch.last_offset < end_offset]
            if len(kept) > len(entry.batches):
                entry.batches.clear()
                entry.batches.extend(kept)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction."""
        # Asked for every Fetch answer: without open transactions, no call to min (with its
        # keyword, a generic call of about 3,000 instructions in compiled code).
        ongoing = self.ongoing_txns
        return min(ongoing.values()) if ongoing else None

    def remove_expired_producers(self, now_ms: int) -> int:
        """Drop producers idle for producer.id.expiration.ms; return how many went."""
        expired = [pid for pid, entry in self.producers.items() if self._is_expired(entry, now_ms)]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (
            entry.current_txn_first_offset == NO_OFFSET
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    # ---------------------------------------------------------------------------- snapshots

    def take_snapshot(self, offset: int) -> None:
        """Write the state as the snapshot at `offset` (everything below it is recorded), unless
        a snapshot at or above it was taken or loaded already."""
        if offset <= self._last_snapshot_offset:
            return
        path = self._snapshot_path(offset)
        with open(path, "wb") as f:
            f.write(_encode_snapshot(self.producers.values()))
        bisect.insort(self.snapshot_offsets, offset)
        self._unflushed.append(SnapshotFile(offset, path))
        self._last_snapshot_offset = offset

    def install_snapshot(self, offset: int, data: bytes) -> None:
        """Take another copy's snapshot at `offset` (a tiered follower's, from the remote store),
        replacing any there; the next truncate_and_reload loads it."""
        self.delete_snapshot(offset)
        path = self._snapshot_path(offset)
        with open(path, "wb") as f:
            f.write(data)
        bisect.insort(self.snapshot_offsets, offset)
        self._unflushed.append(SnapshotFile(offset, path))

    def update_parent_dir(self, directory: str) -> None:
        """The partition directory was renamed (the partition is deleted): follow it."""
        self.directory = directory
        self._unflushed = [SnapshotFile(s.offset, self._snapshot_path(s.offset)) for s in self._unflushed]

    def pop_unflushed(self, up_to_offset: int) -> list[SnapshotFile]:
        """Snapshots at or below `up_to_offset` written since the last call: the caller fsyncs
        them with the segments below that offset."""
        due = [s for s in self._unflushed if s.offset <= up_to_offset]
        if due:
            self._unflushed = [s for s in self._unflushed if s.offset > up_to_offset]
        return due

    def snapshot_path(self, offset: int) -> str | None:
        """The path of the snapshot at `offset`, if there is one."""
        position = bisect.bisect_left(self.snapshot_offsets, offset)
        if position == len(self.snapshot_offsets) or self.snapshot_offsets[position] != offset:
            return None
        return self._snapshot_path(offset)

    def delete_snapshot(self, offset: int) -> None:
        position = bisect.bisect_left(self.snapshot_offsets, offset)
        if position == len(self.snapshot_offsets) or self.snapshot_offsets[position] != offset:
            return
        del self.snapshot_offsets[position]
        try:
            os.unlink(self._snapshot_path(offset))
        except FileNotFoundError:
            pass

    def delete_snapshots_above(self, offset: int) -> None:
        for above in self.snapshot_offsets[bisect.bisect_right(self.snapshot_offsets, offset) :]:
            self.delete_snapshot(above)

    def remove_stray_snapshots(self, segment_base_offsets: list[int]) -> None:
        """Delete snapshots whose segment is gone, except the newest if it lies beyond every
        segment's base (the one taken at the log end on close)."""
        bases = set(segment_base_offsets)
        strays = [offset for offset in self.snapshot_offsets if offset not in bases]
        if strays and (not bases or strays[-1] > max(bases)):
            strays.pop()
        for offset in strays:
            self.delete_snapshot(offset)

    def truncate_and_reload(self, log_start_offset: int, end_offset: int, now_ms: int) -> int:
        """Forget the state and load the newest snapshot in (log_start_offset, end_offset],
        deleting those outside that range and corrupt ones on the way. Returns the snapshot's
        offset (log_start_offset without one): the caller replays the log's batches from there
        to end_offset."""
        for offset in list(self.snapshot_offsets):
            if offset > end_offset or offset <= log_start_offset:
                self.delete_snapshot(offset)
        self.producers = {}
        self.ongoing_txns = {}
        while self.snapshot_offsets:
            offset = self.snapshot_offsets[-1]
            try:
                entries = read_snapshot(self._snapshot_path(offset))
            except CorruptSnapshotError as exc:
                log.warning(
                    "%s: deleting producer snapshot %d: %s", self.topic_partition, offset, exc
                )
                self.delete_snapshot(offset)
                continue
            self.producers = {e.producer_id: e for e in entries if not self._is_expired(e, now_ms)}
            self.ongoing_txns = {
                e.producer_id: e.current_txn_first_offset
                for e in entries
                if e.current_txn_first_offset != NO_OFFSET
            }
            self._last_snapshot_offset = offset
            return offset
        self._last_snapshot_offset = log_start_offset
        return log_start_offset

    def _snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:0{_OFFSET_DIGITS}d}{SNAPSHOT_SUFFIX}")


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == MAX_SEQUENCE)


def _list_snapshot_offsets(directory: str) -> list[int]:
    offsets = []
    for name in os.listdir(directory):
        digits = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(digits) == _OFFSET_DIGITS and digits.isdigit():
            offsets.append(int(digits))
    return sorted(offsets)


def _encode_snapshot(entries: Collection[ProducerStateEntry]) -> bytes:
    body = [INT32.pack(len(entries))]
    for entry in entries:
        last = entry.batches[-1] if entry.batches else None
        body.append(
            _SNAPSHOT_ENTRY.pack(
                entry.producer_id,
                entry.epoch,
                last.last_seq if last else NO_SEQUENCE,
                last.last_offset if last else NO_OFFSET,
                last.offset_delta if last else 0,
                entry.last_timestamp,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
            )
        )
    payload = b"".join(body)
    return _VERSION_AND_CRC.pack(_SNAPSHOT_VERSION, crc32c.crc32c(payload)) + payload


def read_snapshot(path: str) -> list[ProducerStateEntry]:
    """The producers of a snapshot file; CorruptSnapshotError for a file that is not a whole,
    intact version 1 snapshot."""
    with open(path, "rb") as f:
        return parse_snapshot(f.read())


def parse_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """The producers of a snapshot file's bytes (read_snapshot; a remote segment's .snapshot)."""
    entries_start = _VERSION_AND_CRC.size + INT32.size
    if len(data) < entries_start:
        raise CorruptSnapshotError(f"{len(data)} bytes is too short for a snapshot")
    version, crc = _VERSION_AND_CRC.unpack_from(data)
    if version != _SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if crc32c.crc32c(data[_VERSION_AND_CRC.size :]) != crc:
        raise CorruptSnapshotError("the CRC does not match")
    (count,) = INT32.unpack_from(data, _VERSION_AND_CRC.size)
    if count < 0 or len(data) != entries_start + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"{len(data)} bytes cannot hold {count} producers")
    entries = []
    for fields in _SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[entries_start:]):
        producer_id, epoch, last_seq, last_offset, offset_delta, timestamp = fields[:6]
        coordinator_epoch, txn_first_offset = fields[6:]
        entry = ProducerStateEntry(
            producer_id,
            epoch,
            coordinator_epoch,
            timestamp,
            txn_first_offset if txn_first_offset >= 0 else NO_OFFSET,
        )
        if last_offset >= 0:
            entry.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        entries.append(entry)
    return entries
