"""Offline reads: a partition's records straight from its segment files, the broker up or down.

For loads off a JBOD of disks: option logDirs lists the log dirs (the broker's log.dirs), and
each partition is found in whichever of them holds its <topic>-<partition> directory. Every
executor must see the same paths (local mode, or the disks mounted where the tasks run).

Strictly read-only: files are opened O_RDONLY and read with pread, never mapped (a broker that
is running may trim an index it rolls, and a read of a mapped page past the new end would kill
the task with SIGBUS), and nothing goes through storage.log.Log.load, which recovers logs:
cutting torn tails, deleting leftovers, finishing swaps. What recovery would do is mirrored in
what is read instead:

- Segments: the <base>.log files; .deleted and .cleaned files are ignored. A <base>.log.swap (a
  compaction swap a crash interrupted) stands for the segments whose base offsets it spans, as
  Log.load would make it.
- The log start: the log-start-offset-checkpoint of the log dir, or the first segment's base
  offset when higher. A running broker checkpoints it once a minute, so offline reads may still
  see records that DeleteRecords removed less than a minute ago.
- The log end: after the last whole, CRC-valid batch of the last segment. A torn tail (a batch
  cut short, or a zeroed or corrupt end, as a crash leaves) ends the log there, as recovery would
  cut it, so reads planned up to the log end never reach it. A bad batch (CRC, impossible
  header) that a read meets before its range's end is corruption: DataLossError, or with
  failOnDataLoss=false a warning and the rest of that segment skipped. A batch cut short at the
  end of an older segment cannot be told from a compaction gap, and ends that segment quietly.
- Seeks use the .index file (read with pread, checked against the .log); without a usable index
  a segment is scanned from its start.
- Timestamps (startingTimestamp and friends) scan batch headers, decoding only batches whose
  maxTimestamp reaches the timestamp.

Transactions: control batches (transaction markers) are never returned. read_uncommitted returns
every transactional record, as the broker does. read_committed skips those of aborted
transactions, known from the segments' .txnindex files (storage.txn_index, read-only) or, for a
transaction they do not list, from its producer's next marker, found by reading batch headers
forward from the record (markers follow their transactions closely). A transaction with no marker
yet is open: the broker's read_committed consumers stop at it (the LSO), and so does an offline
read, refusing the range (TransactionalDataError) rather than returning records that may yet be
aborted.

Records come out as the tuples spark_jobs.rows.RowBuilder.add takes, the same as online.
"""

import logging
import os
import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from protocol.errors import CorruptRecordError
from protocol.record_batch import MAGIC_V2, TimestampType, crc_is_valid
from protocol.records import ControlRecordType, control_batch_type, iter_records
from spark_jobs.options import TP, OptionError
from spark_jobs.planning import DataLossError, OffsetRange
from spark_jobs.rows import CREATE_TIME, LOG_APPEND_TIME
from storage.checkpoint import LOG_START_OFFSET_CHECKPOINT, CorruptCheckpointError, OffsetCheckpointFile
from storage.records_file import BatchLocation, RecordsFile
from storage.topic_partition import TopicPartition
from storage.txn_index import read_entries

log = logging.getLogger(__name__)

_SEGMENT_NAME = re.compile(r"^(\d{20})\.log(\.swap)?$")
_INDEX_ENTRY = struct.Struct(">ii")  # relative offset, position


class TransactionalDataError(RuntimeError):
    """read_committed offline met records of a transaction still open."""


@dataclass(frozen=True)
class SegmentFile:
    base_offset: int
    log_path: str
    index_path: str | None


def find_partitions(log_dirs: Iterable[str]) -> dict[TP, str]:
    """Every partition directory under `log_dirs`. A partition in two of them is refused: one
    is a stale copy, and which one is not for a reader to guess."""
    found: dict[TP, str] = {}
    for log_dir in log_dirs:
        try:
            names = sorted(os.listdir(log_dir))
        except FileNotFoundError:
            raise OptionError(f"log dir {log_dir} does not exist") from None
        for name in names:
            tp = TopicPartition.from_dir_name(name)
            path = os.path.join(log_dir, name)
            if tp is None or not os.path.isdir(path):
                continue
            key = (tp.topic, tp.partition)
            if key in found:
                raise OptionError(f"partition {name} is in two log dirs: {found[key]} and {path}")
            found[key] = path
    return found


def _log_start_checkpoint(log_dir: str) -> dict[TP, int]:
    try:
        entries = OffsetCheckpointFile(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT)).read()
    except CorruptCheckpointError as exc:
        log.warning("ignoring %s", exc)
        return {}
    return {(tp.topic, tp.partition): offset for tp, offset in entries.items()}


def _open(path: str) -> RecordsFile:
    return RecordsFile.open(path, read_only=True)


class PartitionFiles:
    """One partition directory, read-only."""

    def __init__(self, directory: str, checkpointed_start: int = 0) -> None:
        self.directory = directory
        self.segments = self._list_segments()
        first = self.segments[0].base_offset if self.segments else 0
        self.log_start_offset = max(checkpointed_start, first)
        self._outcomes: TransactionOutcomes | None = None

    def _list_segments(self) -> list[SegmentFile]:
        plain: dict[int, SegmentFile] = {}
        swaps: list[SegmentFile] = []
        names = set(os.listdir(self.directory))
        for name in names:
            match = _SEGMENT_NAME.match(name)
            if not match:
                continue
            base = int(match.group(1))
            suffix = match.group(2) or ""
            index_name = f"{match.group(1)}.index{suffix}"
            segment = SegmentFile(
                base,
                os.path.join(self.directory, name),
                os.path.join(self.directory, index_name) if index_name in names else None,
            )
            if suffix:
                swaps.append(segment)
            else:
                plain[base] = segment
        for swap in swaps:
            end = max(_next_offset(swap.log_path, swap.base_offset), swap.base_offset + 1)
            for base in [b for b in plain if swap.base_offset <= b < end]:
                del plain[base]
            plain[swap.base_offset] = swap
        return [plain[base] for base in sorted(plain)]

    @property
    def log_end_offset(self) -> int:
        """The offset after the last whole, valid batch (what recovery would keep)."""
        if not self.segments:
            return self.log_start_offset
        last = self.segments[-1]
        records = _open(last.log_path)
        try:
            next_offset = last.base_offset
            position = _index_position(last, records, 2**63 - 1)
            for location in _quiet(_batches(records, position)):
                if not crc_is_valid(records.read(location.position, location.size)):
                    break
                next_offset = location.header.next_offset
        finally:
            records.close()
        return max(next_offset, self.log_start_offset)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        start = self.log_start_offset
        for segment in self.segments:
            records = _open(segment.log_path)
            try:
                for location in _quiet(_batches(records, 0)):
                    header = location.header
                    if header.max_timestamp < timestamp or header.is_control:
                        continue
                    if header.last_offset < start:
                        continue
                    for record in iter_records(records.read(location.position, location.size)):
                        if record.timestamp >= timestamp and record.offset >= start:
                            return record.offset
            finally:
                records.close()
        return None

    def records(
        self, start: int, end: int, read_committed: bool, fail_on_data_loss: bool
    ) -> Iterator[tuple]:
        """(offset, timestamp, timestamp type, key, value, headers) of the records in
        [start, end), control batches left out."""
        if start < self.log_start_offset:
            message = (
                f"offsets from {start} of {self.directory} are gone: its log starts at "
                f"{self.log_start_offset}"
            )
            if fail_on_data_loss:
                raise DataLossError(message)
            log.warning("%s; skipping them (failOnDataLoss=false)", message)
            start = self.log_start_offset
        for position, segment in enumerate(self.segments):
            next_base = (
                self.segments[position + 1].base_offset
                if position + 1 < len(self.segments)
                else None
            )
            if segment.base_offset >= end:
                return
            if next_base is not None and next_base <= start:
                continue
            yield from self._segment_records(segment, start, end, read_committed, fail_on_data_loss)

    def _segment_records(
        self,
        segment: SegmentFile,
        start: int,
        end: int,
        read_committed: bool,
        fail_on_data_loss: bool,
    ) -> Iterator[tuple]:
        records = _open(segment.log_path)
        reached = start  # every offset below this was delivered or never existed
        try:
            position = _index_position(segment, records, start)
            for location in _batches(records, position):
                header = location.header
                if header.last_offset < start:
                    continue
                if header.base_offset >= end:
                    return
                data = records.read(location.position, location.size)
                if not crc_is_valid(data):
                    raise CorruptRecordError(
                        f"batch at position {location.position} fails its CRC"
                    )
                reached = header.next_offset
                if header.is_control:
                    continue
                if header.is_transactional and read_committed and not self._committed(segment, header):
                    continue
                yield from batch_rows(header, data, start, end)
        except CorruptRecordError as exc:
            if reached >= end:
                return  # past the range: a torn tail, say, which the log end stops short of
            message = f"{segment.log_path} is corrupt after offset {reached - 1}: {exc}"
            if fail_on_data_loss:
                raise DataLossError(message) from exc
            log.warning("%s; skipping the rest of the segment (failOnDataLoss=false)", message)
        finally:
            records.close()


    def _committed(self, segment: SegmentFile, header) -> bool:
        """Whether a transactional batch's transaction committed (False: aborted); raises
        TransactionalDataError for one still open."""
        if self._outcomes is None:
            self._outcomes = TransactionOutcomes(self)
        committed = self._outcomes.committed(header.producer_id, header.base_offset)
        if committed is None:
            raise TransactionalDataError(
                f"{segment.log_path} holds records of a transaction still open at offsets "
                f"{header.base_offset}..{header.last_offset}: read_committed stops there (the last "
                "stable offset); read it once the transaction ends, or with "
                "kafka.isolation.level=read_uncommitted"
            )
        return committed


class TransactionOutcomes:
    """How the transactions of a partition ended, read-only: aborted ones from the .txnindex
    files, others from their producer's next marker (COMMIT or ABORT), found by reading batch
    headers forward, where the last read stopped."""

    def __init__(self, files: PartitionFiles) -> None:
        self._aborted: dict[int, list[tuple[int, int]]] = {}
        for segment in files.segments:
            index_path = os.path.join(files.directory, f"{segment.base_offset:020d}.txnindex")
            for entry in read_entries(index_path):
                self._aborted.setdefault(entry.producer_id, []).append((entry.first_offset, entry.last_offset))
        self._files = files
        self._markers: dict[int, list[tuple[int, bool]]] = {}  # producer id -> (offset, commit)
        self._scan: Iterator[tuple[int, int, bool]] = iter(())
        self._scan_start: int | None = None

    def committed(self, producer_id: int, offset: int) -> bool | None:
        """True: committed, False: aborted, None: no marker yet (open)."""
        if any(first <= offset <= last for first, last in self._aborted.get(producer_id, ())):
            return False
        if self._scan_start is None or offset < self._scan_start:
            self._markers = {}
            self._scan = self._read_markers(offset)
            self._scan_start = offset
        while True:
            for marker_offset, commit in self._markers.get(producer_id, ()):
                if marker_offset > offset:
                    return commit
            found = next(self._scan, None)
            if found is None:
                return None
            marker_producer, marker_offset, commit = found
            self._markers.setdefault(marker_producer, []).append((marker_offset, commit))

    def _read_markers(self, start: int) -> Iterator[tuple[int, int, bool]]:
        """(producer id, offset, commit) of the markers of the segments from the one holding
        `start` on."""
        segments = self._files.segments
        first = max((i for i, s in enumerate(segments) if s.base_offset <= start), default=0)
        for segment in segments[first:]:
            records = _open(segment.log_path)
            try:
                for location in _quiet(_batches(records, 0)):
                    header = location.header
                    if header.is_control and header.is_transactional:
                        data = records.read(location.position, location.size)
                        commit = control_batch_type(data) is ControlRecordType.COMMIT
                        yield header.producer_id, header.base_offset, commit
            finally:
                records.close()


def batch_rows(header, data, start: int, end: int) -> Iterator[tuple]:
    """The records of one data batch with offsets in [start, end), as RowBuilder.add takes them
    (offline and remote reads)."""
    timestamp_type = (
        LOG_APPEND_TIME if header.timestamp_type == TimestampType.LOG_APPEND_TIME else CREATE_TIME
    )
    for record in iter_records(data):
        if start <= record.offset < end:
            yield (
                record.offset,
                record.timestamp,
                timestamp_type,
                record.key,
                record.value,
                [(h.key, h.value) for h in record.headers],
            )


def _batches(records: RecordsFile, position: int) -> Iterator[BatchLocation]:
    """The whole batches from `position` on; CorruptRecordError at a header that cannot be a
    v2 batch. A batch cut short at the end of the file ends them quietly."""
    for location in records.batches(position):
        if location.header.magic != MAGIC_V2:
            raise CorruptRecordError(
                f"batch at position {location.position} of {records.path} has magic "
                f"{location.header.magic}"
            )
        yield location


def _quiet(locations: Iterator[BatchLocation]) -> Iterator[BatchLocation]:
    """`locations` up to the first that cannot be a batch: the end of the log as recovery would
    cut it."""
    try:
        yield from locations
    except CorruptRecordError:
        return


def _next_offset(path: str, default: int) -> int:
    records = _open(path)
    try:
        next_offset = default
        for location in _quiet(_batches(records, 0)):
            next_offset = location.header.next_offset
        return next_offset
    finally:
        records.close()


def _index_position(segment: SegmentFile, records: RecordsFile, offset: int) -> int:
    """Where in the segment's .log to start looking for `offset`: the position of the last
    indexed batch ending at or before it, checked against the .log; 0 without a usable index."""
    if segment.index_path is None or offset <= segment.base_offset:
        return 0
    try:
        fd = os.open(segment.index_path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        slots = os.fstat(fd).st_size // _INDEX_ENTRY.size

        def entry(slot: int) -> tuple[int, int]:
            raw = os.pread(fd, _INDEX_ENTRY.size, slot * _INDEX_ENTRY.size)
            return _INDEX_ENTRY.unpack(raw) if len(raw) == _INDEX_ENTRY.size else (0, 0)

        # Entries end at the first all-zero slot (an active index is preallocated with zeros).
        low, high = 0, slots
        while low < high:
            middle = (low + high) // 2
            if entry(middle) == (0, 0):
                high = middle
            else:
                low = middle + 1
        # The last entry whose offset is at most the target.
        target = offset - segment.base_offset
        low, high = 0, low
        while low < high:
            middle = (low + high) // 2
            if entry(middle)[0] <= target:
                low = middle + 1
            else:
                high = middle
        if low == 0:
            return 0
        relative, position = entry(low - 1)
    finally:
        os.close(fd)
    # Trust the entry only if a batch ending at that offset is really there.
    if not 0 <= position < records.size:
        return 0
    location = next(_quiet(_batches(records, position)), None)
    if location is None or location.header.last_offset != segment.base_offset + relative:
        return 0
    return position


class OfflineLog:
    """The partitions under a set of log dirs, answering planning's questions (OffsetLookup)."""

    def __init__(self, log_dirs: Iterable[str]) -> None:
        self.log_dirs = tuple(log_dirs)
        self.directories = find_partitions(self.log_dirs)
        self._starts: dict[str, dict[TP, int]] = {}

    def partition(self, tp: TP) -> PartitionFiles:
        directory = self.directories.get(tp)
        if directory is None:
            raise OptionError(
                f"partition {tp[0]}-{tp[1]} is in none of the log dirs {', '.join(self.log_dirs)}"
            )
        log_dir = os.path.dirname(directory)
        if log_dir not in self._starts:
            self._starts[log_dir] = _log_start_checkpoint(log_dir)
        return PartitionFiles(directory, self._starts[log_dir].get(tp, 0))

    def topics(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for topic, partition in self.directories:
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        return counts

    def earliest(self, tps: Iterable[TP]) -> dict[TP, int]:
        return {tp: self.partition(tp).log_start_offset for tp in tps}

    def latest(self, tps: Iterable[TP]) -> dict[TP, int]:
        return {tp: self.partition(tp).log_end_offset for tp in tps}

    def for_timestamps(self, timestamps: Mapping[TP, int]) -> dict[TP, int | None]:
        return {tp: self.partition(tp).offset_for_timestamp(ts) for tp, ts in timestamps.items()}


def read_range(
    log_dirs: Iterable[str], offsets: OffsetRange, read_committed: bool, fail_on_data_loss: bool
) -> Iterator[tuple]:
    """The records of one offset range, from whichever log dir holds its partition."""
    files = OfflineLog(log_dirs).partition(offsets.tp)
    return files.records(offsets.start, offsets.end, read_committed, fail_on_data_loss)
