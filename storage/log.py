"""A partition's log: a directory of segments (Kafka's UnifiedLog and LocalLog).

Directory: <log dir>/<topic>-<partition>/ holding the segments (storage.segment), the newest of
which, the active segment, takes appends.

Offsets:
- log start offset: the first offset clients may read; retention and DeleteRecords raise it,
  and whole segments below it are deleted.
- log end offset (LEO): the offset the next appended record gets.
- high watermark (HW): records below it are committed and visible to consumers. On a single
  broker the caller moves it to the LEO after each append; replication moves it as followers
  catch up.
- recovery point: everything below it has been fsynced. After an unclean shutdown, loading
  re-validates the segments from the one holding the recovery point onwards.

Idempotent producers (storage.producer_state): a leader append of a batch with a producer id is
checked against its producer's state first; a retry of one of the producer's last five batches
is answered with that batch's offsets and not appended again. The state is snapshotted at each
roll and on close (<offset>.snapshot files next to the segments) and rebuilt on load from the
newest usable snapshot plus the batches after it; after an unclean shutdown only snapshots at or
below the recovery point are trusted. A follower records every batch it appends, unchecked, so
that a retry still finds its batch after a leader change; a truncation rebuilds the state as of
the new log end.

Transactions: the producer state follows each producer's open transaction, and the earliest
gives the last stable offset (`first_unstable_offset`); `append_marker` writes a COMMIT or ABORT
control batch (a transaction coordinator's marker) and records an aborted transaction in the
active segment's transaction index (storage.txn_index); `collect_aborted` gives read_committed
fetches the aborted transactions they span. Rebuilding the producer state replays markers too,
rebuilding the transaction index entries from where the replay starts.

Compaction (storage.cleaner) rewrites inactive segments elsewhere and hands back segments to
put in place of those they were made from (`replace_segments`); `load` completes a swap that a
crash interrupted.

Leader epochs (storage.leader_epoch): the directory's leader-epoch-checkpoint lists where each
leader epoch starts. Appends record a batch epoch that is new (`append_as_leader` stamps the
batch with the leader's epoch; `append_as_follower` keeps the leader's stamps); truncation and a
rising log start offset cut the list to match. Loading rebuilds the list from the batch headers
when the file is missing, and adds the epochs of the batches a recovery re-validated.

Replication: a follower appends the leader's batches as they are (`append_as_follower`: offsets
already assigned, CRC checked) and cuts its log back where it diverged (`truncate_to`); the
high watermark is kept by the owner (replication.partition) and checkpointed per log dir.

Thread-safety: the event loop owns a Log. Blocking work is requested from a `LogScheduler`
(fsync, deleting files), which runs it elsewhere and reports back on the loop; `Log.load` runs in
a worker thread before the log is shared. The log cleaner's threads read inactive segments through
their file descriptors only, and change nothing of the log. Other readers off the loop get a
`slice` (storage.log_slice), taken on the loop, and read files through it, never the Log.
"""

import asyncio
import functools
import logging
import os
import random
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Final, Protocol

from protocol.compression import Compression
from protocol.errors import CorruptRecordError
from protocol.record_batch import (
    NO_TIMESTAMP,
    BatchHeader,
    crc_is_valid,
    iter_batches,
    set_base_offset_and_leader_epoch,
    set_log_append_time,
)
from protocol.records import ControlRecordType, build_batch, control_batch_marker, control_record, recompress_batch
from storage.errors import OffsetMovedToTieredStorageError, OffsetOutOfRangeError
from storage.leader_epoch import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochCache
from storage.log_config import LogConfig
from storage.log_slice import LogSlice
from storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ProducerStateManager,
    SnapshotFile,
)
from storage.records_file import BatchLocation, DeferredWrites, FileRegion, RecordsFile
from storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    AppendedBatch,
    LogSegment,
    segment_path,
)
from storage.topic_partition import TopicPartition
from storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, collect_aborted
from storage.validation import ProduceChecks, validate_produced_records

log: Final = logging.getLogger(__name__)

_base_offset: Final = attrgetter("base_offset")
_TEMP_SUFFIXES: Final = (DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")
_SEGMENT_FILE_SUFFIXES: Final = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_BASE_OFFSET_DIGITS: Final = 20


class LogScheduler(Protocol):
    """Where a log sends the work it must not do on the event loop."""

    def flush(self, log: "Log", up_to_offset: int) -> "asyncio.Future | None":
        """fsync `log.files_to_flush(up_to_offset)`, then call `log.mark_flushed(up_to_offset,
        truncations)` with the log's `truncations` when the files were chosen: a future done once
        that is (failed with the OSError of a failed fsync), None when done already."""

    def delete_segments(self, log: "Log", segments: list[LogSegment]) -> None:
        """Delete segments already removed from the log, after file.delete.delay.ms."""

    def write_leader_epochs(self, log: "Log", entries: list[EpochEntry]) -> None:
        """Write `entries` to the log's leader-epoch-checkpoint, after any earlier write of it."""

    def write_index_entries_soon(self, log: "Log") -> None:
        """Call `log.write_pending_index_entries()` on the loop within a short while: the index
        entries an append made wait in memory (storage.index) until then, or until 32 of them
        go out together, so that readers of the files (an operator's dump-log) see them."""


class InlineScheduler:
    """Does the work at once, on the caller's thread: for tests and offline tools."""

    def flush(self, log: "Log", up_to_offset: int) -> "asyncio.Future | None":
        for file in log.files_to_flush(up_to_offset):
            file.flush()
        log.mark_flushed(up_to_offset, log.truncations)
        return None

    def delete_segments(self, log: "Log", segments: list[LogSegment]) -> None:
        for segment in segments:
            segment.delete()

    def write_leader_epochs(self, log: "Log", entries: list[EpochEntry]) -> None:
        log.leader_epochs.write(entries)

    def write_index_entries_soon(self, log: "Log") -> None:
        log.write_pending_index_entries()


@dataclass(slots=True, init=False)  # its own __init__, which compiled code calls directly
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    # The fsync under way that the batch waits for before it is acknowledged (flush.messages
    # reached: Kafka fsyncs in the append itself); None when there is none.
    flush: "asyncio.Future | None"

    def __init__(
        self,
        first_offset: int,
        last_offset: int,
        log_append_time_ms: int,
        log_start_offset: int,
        flush: "asyncio.Future | None",
    ) -> None:
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.log_append_time_ms = log_append_time_ms
        self.log_start_offset = log_start_offset
        self.flush = flush


# Bound once: compiled code looks a module's attribute up at every use.
_time: Final = time.time


def _now_ms() -> int:
    return int(_time() * 1000)


class Log:
    def __init__(
        self,
        directory: str,
        topic_partition: TopicPartition,
        config: LogConfig,
        segments: list[LogSegment],
        log_start_offset: int,
        recovery_point: int,
        scheduler: LogScheduler,
        producer_state: ProducerStateManager,
        leader_epochs: LeaderEpochCache | None = None,
        high_watermark: int | None = None,
    ) -> None:
        self.directory = directory
        self.topic_partition = topic_partition
        self._take_config(config)
        self.segments = segments
        self.scheduler = scheduler
        self.log_end_offset = segments[-1].read_next_offset()
        self.log_start_offset = log_start_offset
        self.leader_epochs = leader_epochs or LeaderEpochCache(_epoch_path(directory))
        # Without a checkpointed one (tools, tests) everything written counts as committed.
        self.high_watermark = self.log_end_offset if high_watermark is None else min(high_watermark, self.log_end_offset)
        self.truncations = 0  # how many times truncate_to cut records (the cleaner checks it)
        # Tiered logs (remote.storage.enable): the last offset the remote store holds, told by
        # the remote log manager (storage.remote.manager); only segments below it may go locally.
        self.highest_remote_offset = -1
        self.recovery_point = min(recovery_point, self.log_end_offset)
        self.producer_state = producer_state
        self._unflushed_messages = 0
        self.last_flush_ms = _now_ms()
        # The last flush started (flush()) that is not done at once, and the offset it covers
        # up to (excluded): appends below that offset wait for it before they are acknowledged.
        self._flushing: asyncio.Future | None = None
        self._flushing_to = 0
        # A flush asked for while that one was under way, started when it ends (one fsync of a
        # log at a time), and the offset it was last asked to cover up to (excluded).
        self._next_flush: asyncio.Future | None = None
        self._next_flush_to = 0
        self._roll_jitter_ms = self._pick_roll_jitter()
        self._index_write_asked = False  # write_index_entries_soon asked for, not yet done
        # Set by the log manager that serves the log to connections: appends made while it
        # defers wait in memory until its finish (storage.records_file); None: written at once.
        self.deferred_writes: DeferredWrites | None = None

    # ----------------------------------------------------------------------------- loading

    @classmethod
    def load(
        cls,
        directory: str,
        topic_partition: TopicPartition,
        config: LogConfig,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        had_clean_shutdown: bool = True,
        high_watermark: int | None = None,
        scheduler: LogScheduler,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> "Log":
        """Open a partition directory (creating it if missing) and recover it if needed.

        Blocking: call from a worker thread. Leftovers of interrupted deletions and cleanings are
        removed and interrupted swaps completed; after an unclean shutdown the segments from the
        recovery point on are re-validated and a torn or corrupt tail is cut, along with every
        segment after it. Then the producer state is loaded.
        """
        os.makedirs(directory, exist_ok=True)
        _remove_leftovers(directory)
        _complete_swaps(directory)
        bases = _segment_base_offsets(directory)
        if bases:
            segments = [
                cls._open_segment(directory, base, config, had_clean_shutdown) for base in bases
            ]
            if not had_clean_shutdown:
                segments = cls._recover(topic_partition, segments, recovery_point, config)
            segments[-1].make_active(config)
        else:
            segments = [LogSegment.open(directory, log_start_offset, config, active=True)]
        if not config.remote_storage_enable:
            # A tiered log's start is that of its remote part, below its first local segment.
            log_start_offset = max(log_start_offset, segments[0].base_offset)
        producer_state = ProducerStateManager(directory, topic_partition, producer_id_expiration_ms)
        leader_epochs = _load_leader_epochs(directory, segments, recovery_point, had_clean_shutdown)
        loaded = cls(
            directory,
            topic_partition,
            config,
            segments,
            log_start_offset,
            recovery_point,
            scheduler,
            producer_state,
            leader_epochs,
            high_watermark,
        )
        changed = leader_epochs.truncate_from_end(loaded.log_end_offset)
        changed |= leader_epochs.truncate_from_start(loaded.log_start_offset)
        # A rebuilt list is written at once; an empty one waits for its first epoch (a new
        # partition gets it from becoming leader or follower, in the background): two fsyncs of
        # every partition CreateTopics makes, on the event loop, were most of its time.
        if changed or (leader_epochs.entries and not os.path.exists(leader_epochs.path)):
            leader_epochs.write()
        loaded._load_producer_state(had_clean_shutdown)
        return loaded

    def _load_producer_state(self, had_clean_shutdown: bool) -> None:
        state = self.producer_state
        bases = [segment.base_offset for segment in self.segments]
        state.remove_stray_snapshots(bases)
        if had_clean_shutdown and not state.snapshot_offsets:
            # A log written before producer state was kept: it has none to rebuild, and scanning
            # it would only slow the first start. As Kafka does, start with empty snapshots.
            for offset in (*bases[-2:], self.log_end_offset):
                state.take_snapshot(offset)
            return
        if not had_clean_shutdown:
            # Snapshots above the recovery point may describe records the crash lost.
            state.delete_snapshots_above(self.recovery_point)
        self.rebuild_producer_state(self.log_end_offset)

    def rebuild_producer_state(self, end_offset: int) -> None:
        """Make the producer state that of the batches below `end_offset`: the newest snapshot
        at or below it, then the batches after that snapshot replayed; snapshots above it are
        deleted. Loading calls it, and so does a truncation once the segments are cut."""
        state = self.producer_state
        replay_from = state.truncate_and_reload(self.log_start_offset, end_offset, _now_ms())
        for segment in self.segments:
            segment.txn_index.truncate_to(replay_from)  # the replay writes these again
        for segment, location in self._batches(replay_from, end_offset):
            self._record_unchecked(
                location.header, segment, lambda: segment.records.read(location.position, location.size)
            )
        state.take_snapshot(end_offset)

    def _record_unchecked(
        self, header: BatchHeader, segment: LogSegment, read_batch: Callable[[], bytes | memoryview]
    ) -> None:
        """Take a batch written before (replayed, or a follower's copy) into the producer state
        without checks; a marker also records its coordinator epoch (which fences older
        coordinators' markers), and an ABORT that closes a transaction goes into `segment`'s
        transaction index. `read_batch` gives the batch's bytes, read only for a marker."""
        if not header.is_control or header.producer_id < 0:
            self.producer_state.record_batch(header)
            return
        record_type, coordinator_epoch = control_batch_marker(read_batch())
        first_offset = self.producer_state.record_marker(header, coordinator_epoch)
        if first_offset is not None and record_type is ControlRecordType.ABORT:
            segment.txn_index.append(self._aborted(header.producer_id, first_offset, header.base_offset))

    def _batches(self, start_offset: int, end_offset: int) -> Iterator[tuple[LogSegment, BatchLocation]]:
        """The batches from the one holding `start_offset` to the last before `end_offset`."""
        for segment in self.segments[self._segment_index(start_offset) :]:
            if segment.base_offset >= end_offset:
                return
            first = segment.translate_offset(start_offset)
            if first is None:
                continue
            for location in segment.records.batches(first.position):
                if location.header.base_offset >= end_offset:
                    return
                yield segment, location

    def _aborted(self, producer_id: int, first_offset: int, marker_offset: int) -> AbortedTxn:
        """The index entry of a transaction its marker just closed: the LSO is now the first
        offset of the earliest transaction still open, or the offset after the marker."""
        others = self.producer_state.first_unstable_offset
        return AbortedTxn(producer_id, first_offset, marker_offset, marker_offset + 1 if others is None else others)

    @staticmethod
    def _open_segment(
        directory: str, base_offset: int, config: LogConfig, had_clean_shutdown: bool
    ) -> LogSegment:
        """Open a segment, rebuilding its indexes if missing or corrupt. After a clean shutdown
        only their ends are checked (Kafka's check); after a crash every entry is."""
        indexes_present = all(
            os.path.exists(segment_path(directory, base_offset, suffix))
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
        )
        segment = LogSegment.open(directory, base_offset, config, active=False)
        if not indexes_present or not segment.sanity_check_indexes(every_entry=not had_clean_shutdown):
            log.warning("rebuilding the indexes of %s", segment.records.path)
            _recover_segment(segment, config)
        return segment

    @staticmethod
    def _recover(
        topic_partition: TopicPartition,
        segments: list[LogSegment],
        recovery_point: int,
        config: LogConfig,
    ) -> list[LogSegment]:
        first_unflushed = max(bisect_right(segments, recovery_point, key=_base_offset) - 1, 0)
        for position in range(first_unflushed, len(segments)):
            segment = segments[position]
            truncated = _recover_segment(segment, config)
            if truncated:
                log.warning(
                    "%s: cut %d invalid bytes at the end of %s",
                    topic_partition,
                    truncated,
                    segment.records.path,
                )
                for later in segments[position + 1 :]:
                    log.warning("%s: deleting %s, which follows the cut", topic_partition, later.records.path)
                    later.delete()
                return segments[: position + 1]
        return segments

    # ---------------------------------------------------------------------------- appending

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    def append_as_leader(self, records: memoryview, leader_epoch: int, from_coordinator: bool = False) -> AppendResult:
        """Validate one produced batch, give it offsets and append it.

        `records` must be writable: baseOffset, partitionLeaderEpoch and (for LogAppendTime
        topics) the timestamp are set in place before the bytes go to the file. A batch of an
        idempotent producer must follow the producer's previous one; a retry of one of its last
        five batches is not appended again: the result gives that batch's offsets, its
        timestamp as log_append_time_ms, as Kafka answers. A coordinator's batch (transactional
        offsets in __consumer_offsets) has no sequence: only its epoch is checked.
        """
        now = _now_ms()
        header = validate_produced_records(records, self._produce_checks, now)
        if header.producer_id < 0:
            return self._assign_offsets_and_append(records, header, leader_epoch, now)
        if from_coordinator:
            self.producer_state.check_epoch(header)
            duplicate = None
        else:
            duplicate = self.producer_state.check_append(header)
        if duplicate is not None:
            first, last = duplicate.first_offset, duplicate.last_offset
            return AppendResult(first, last, duplicate.timestamp, self.log_start_offset, self.flush_covering(last))
        result = self._assign_offsets_and_append(records, header, leader_epoch, now)
        max_timestamp = now if result.log_append_time_ms >= 0 else header.max_timestamp
        self.producer_state.record_batch(
            header._replace(base_offset=result.first_offset, max_timestamp=max_timestamp)
        )
        return result

    def _assign_offsets_and_append(
        self, records: memoryview, header: BatchHeader, leader_epoch: int, now: int
    ) -> AppendResult:
        codec = self._codec
        if codec is not None and header.compression != codec:
            records = memoryview(bytearray(recompress_batch(records, codec)))
            header = BatchHeader.from_buffer(records)
        first_offset = self.log_end_offset
        last_offset = first_offset + header.last_offset_delta
        set_base_offset_and_leader_epoch(records, 0, first_offset, leader_epoch, header.batch_length)
        max_timestamp, log_append_time = header.max_timestamp, -1
        if self._log_append_time:
            set_log_append_time(records, 0, now)
            max_timestamp = log_append_time = now
        batch = AppendedBatch(last_offset, max_timestamp, header.size)
        self._append(records, [batch], header.record_count, now)
        self.assign_epoch_start(leader_epoch, first_offset)
        return AppendResult(
            first_offset, last_offset, log_append_time, self.log_start_offset, self.flush_covering(last_offset)
        )

    def append_as_follower(self, records: memoryview) -> int:
        """Append the leader's batches as they are: offsets, epochs and timestamps already set.

        Every whole batch must be magic v2, pass its CRC and continue the log: the first at the
        log end offset, each next one where the previous ended (CorruptRecordError otherwise,
        and nothing is appended). A partial batch at the end (a fetch response cut by its size
        limit) is left out. The batches' producers are recorded in the producer state, and
        markers close their transactions (aborted ones go to the transaction index). Returns
        the number of bytes appended.
        """
        batches: list[AppendedBatch] = []
        headers: list[tuple[BatchHeader, int]] = []
        expected_offset = self.log_end_offset
        end = record_count = 0
        for position, header in iter_batches(records):
            if header.base_offset != expected_offset:
                raise CorruptRecordError(
                    f"{self.topic_partition}: batch at offset {header.base_offset} does not "
                    f"continue the log at {expected_offset}"
                )
            if not crc_is_valid(records[position : position + header.size]):
                raise CorruptRecordError(f"{self.topic_partition}: batch at offset {header.base_offset} fails its CRC")
            batches.append(AppendedBatch(header.last_offset, header.max_timestamp, header.size))
            headers.append((header, position))
            record_count += header.record_count
            expected_offset = header.next_offset
            end = position + header.size
        if not batches:
            return 0
        self._append(records[:end], batches, record_count, _now_ms())
        segment = self.active_segment  # _append wrote them all there
        for header, position in headers:
            # Unchecked: the leader checked them. Kept so that dedup, the LSO and the aborted
            # transactions hold if this replica leads.
            self._record_unchecked(header, segment, lambda: records[position : position + header.size])
            self.assign_epoch_start(header.partition_leader_epoch, header.base_offset)
        return end

    def assign_epoch_start(self, epoch: int, start_offset: int) -> None:
        """Note that `epoch` starts at `start_offset`, if it is newer than the latest known."""
        if epoch > self.leader_epochs.latest_epoch and self.leader_epochs.assign(epoch, start_offset):
            self._write_leader_epochs()

    def take_leader_epochs(self, entries: Sequence[EpochEntry]) -> None:
        """Make the leader epochs those of another copy of this log (a moved replica's future
        log taking the place of the current one, which may know epochs begun without a batch)."""
        self.leader_epochs.clear()
        for entry in entries:
            self.leader_epochs.assign(entry.epoch, entry.start_offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        self._write_leader_epochs()

    def _write_leader_epochs(self) -> None:
        self.scheduler.write_leader_epochs(self, self.leader_epochs.snapshot())

    def append_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, leader_epoch: int
    ) -> AppendResult:
        """Append a transaction marker (a control batch of one COMMIT or ABORT record) for the
        producer's transaction, closing it. Refused from a fenced producer epoch or coordinator
        epoch (storage.producer_state.check_marker)."""
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now = _now_ms()
        offset = self.log_end_offset
        record_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        batch = build_batch(
            [control_record(record_type, coordinator_epoch, offset, now)],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=True,
            is_control=True,
            partition_leader_epoch=leader_epoch,
        )
        self._append(memoryview(batch), [AppendedBatch(offset, now, len(batch))], 1, now)
        self.assign_epoch_start(leader_epoch, offset)
        first_offset = self.producer_state.record_marker(BatchHeader.from_buffer(batch), coordinator_epoch)
        if first_offset is not None and not commit:
            self.active_segment.txn_index.append(self._aborted(producer_id, first_offset, offset))
        return AppendResult(offset, offset, -1, self.log_start_offset, self.flush_covering(offset))

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction (None: none is open)."""
        return self.producer_state.first_unstable_offset

    def _append(
        self, data: memoryview, batches: Sequence[AppendedBatch], record_count: int, now_ms: int
    ) -> None:
        self._maybe_roll(len(data), batches[0].max_timestamp, batches[-1].last_offset, now_ms)
        self.active_segment.append(data, batches, self.deferred_writes)
        self.log_end_offset = batches[-1].last_offset + 1
        if not self._index_write_asked:
            self._index_write_asked = True
            self.scheduler.write_index_entries_soon(self)
        self._unflushed_messages += record_count
        if self._unflushed_messages >= self._flush_messages:
            self.flush()

    def _maybe_roll(self, size: int, max_timestamp: int, last_offset: int, now_ms: int) -> None:
        segment = self.active_segment
        if segment.size == 0:
            return
        if (
            segment.size + size > self._segment_bytes
            or segment.time_waited_for_roll(now_ms, max_timestamp)
            > self._max_segment_ms - self._roll_jitter_ms
            or segment.is_full()
            or not segment.can_hold_offset(last_offset)
        ):
            self.roll()

    def roll(self) -> None:
        """Start a new active segment at the log end offset, and flush the one it replaces."""
        old = self.active_segment
        if old.size == 0:
            return
        old.on_become_inactive()
        new_base = self.log_end_offset
        self.segments.append(LogSegment.open(self.directory, new_base, self.config, active=True))
        self.producer_state.take_snapshot(new_base)
        self._roll_jitter_ms = self._pick_roll_jitter()
        self.scheduler.flush(self, new_base)

    def _pick_roll_jitter(self) -> int:
        jitter = min(self.config.segment_jitter_ms, self._max_segment_ms)
        return random.randrange(jitter) if jitter > 0 else 0

    # ---------------------------------------------------------------------------- truncation

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch ending at or after `offset` (a follower cutting a divergent
        suffix); True when anything was removed. The log end offset becomes `offset` (or the
        start of a batch straddling it), and the high watermark, recovery point, leader epochs
        and producer state follow. Later segments go the way retention deletes them; the segment holding
        `offset` is cut in place and becomes the active one. The caller stops the cleaner's
        work on this log first (LogManager.truncate_to)."""
        if offset >= self.log_end_offset:
            # Nothing to cut, but epochs begun without a record (a leader that wrote nothing)
            # past `offset` go: a follower asking again must see its latest epoch fall.
            if self.leader_epochs.truncate_from_end(offset):
                self._write_leader_epochs()
            return False
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        known_producers = self.producer_state.producers
        keep = self._segment_index(offset)
        doomed = self.segments[keep + 1 :]
        self.segments = self.segments[: keep + 1]
        self._discard(doomed)
        self.active_segment.truncate_to(offset, self.config)
        self._after_truncation()
        # A snapshot keeps one batch per producer: the rebuilt state would recognise fewer
        # retries than the leader's.
        self.producer_state.keep_known_batches(known_producers, self.log_end_offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at `offset` (a follower whose fetch offset fell outside
        the leader's log)."""
        doomed = self.segments
        self.segments = []
        self._discard(doomed)
        self.segments = [LogSegment.open(self.directory, offset, self.config, active=True)]
        self.log_start_offset = self.high_watermark = self.recovery_point = offset
        self.leader_epochs.clear()
        self._after_truncation()
        self._write_leader_epochs()

    def take_remote_aux_state(
        self, log_start_offset: int, leader_epochs: Sequence[EpochEntry], producer_snapshot: bytes | None
    ) -> None:
        """A tiered follower restarted (truncate_fully_and_start_at) at the end of the remote
        segment holding its leader's local log start takes that segment's state (Kafka's
        buildRemoteLogAuxState): its leader epochs, its producer snapshot, and the leader's log
        start offset, below which the remote store holds the records."""
        offset = self.log_end_offset
        self.leader_epochs.clear()
        for entry in leader_epochs:
            if entry.start_offset < offset:
                self.leader_epochs.assign(entry.epoch, entry.start_offset)
        self.log_start_offset = min(log_start_offset, offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        self._write_leader_epochs()
        if producer_snapshot is not None:
            self.producer_state.install_snapshot(offset, producer_snapshot)
        self.rebuild_producer_state(offset)

    def _discard(self, doomed: list[LogSegment]) -> None:
        for segment in doomed:
            segment.rename_to_deleted()
        if doomed:
            self.scheduler.delete_segments(self, doomed)

    def _after_truncation(self) -> None:
        self.log_end_offset = self.active_segment.read_next_offset()
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        # The fsync under way may miss what is appended again above the cut: appends there wait
        # for the next (mark_flushed, likewise, takes nothing from it).
        self._flushing_to = min(self._flushing_to, self.log_end_offset)
        self.truncations += 1
        if self.leader_epochs.truncate_from_end(self.log_end_offset):
            self._write_leader_epochs()
        self.rebuild_producer_state(self.log_end_offset)

    # ------------------------------------------------------------------------------ reading

    def _segment_index(self, offset: int) -> int:
        # Nearly always the active segment's: found without bisect, whose key= is a generic
        # keyword call in compiled code.
        segments = self.segments
        last = len(segments) - 1
        if offset >= segments[last].base_offset:
            return last
        return max(bisect_right(segments, offset, key=_base_offset) - 1, 0)

    @property
    def local_log_start_offset(self) -> int:
        """The first offset held on local disk: the log start offset, except for a tiered log
        whose older segments are in the remote store only (Kafka's localLogStartOffset)."""
        return max(self.log_start_offset, self.segments[0].base_offset)

    def check_offset(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}] "
                f"of {self.topic_partition}"
            )

    def read(
        self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> FileRegion | None:
        """Record bytes from the batch holding `offset`, none at or beyond `max_offset`.

        `max_offset` is the high watermark for consumers and the log end offset for followers.
        None when there is nothing to read yet. OffsetMovedToTieredStorageError for an offset of
        a tiered log that is only in the remote store.
        """
        if offset == self.log_end_offset:
            # A reader caught up (an idle follower, a tailing consumer): in range, at or above
            # the local log start, and at or past max_offset, which is at most the log end.
            return None
        self.check_offset(offset)
        if offset < self.local_log_start_offset:
            raise OffsetMovedToTieredStorageError(
                f"offset {offset} of {self.topic_partition} is below its local log start "
                f"{self.local_log_start_offset}: it is in the remote store"
            )
        if offset >= max_offset:
            return None
        for position in range(self._segment_index(offset), len(self.segments)):
            segment = self.segments[position]
            max_position = self._max_position(position, max_offset)
            region = segment.read(offset, max_bytes, max_position, min_one_batch)
            if region is not None:
                return region
        return None

    def slice(self, start: int, end: int) -> LogSlice:
        """The batches from the one holding `start` up to, not including, the one holding `end`,
        for a reader on another thread (storage.log_slice): on the loop, each segment's records
        file is duplicated and its byte range fixed, and nothing of the log is left to read."""
        self.check_offset(start)
        log_slice = LogSlice(self.topic_partition)
        try:
            first = self._segment_index(start)
            for position in range(first, len(self.segments)):
                segment = self.segments[position]
                if segment.base_offset >= end:
                    break
                begin = 0
                if position == first:
                    location = segment.translate_offset(start)
                    if location is None:
                        continue
                    begin = location.position
                stop = self._max_position(position, end)
                if stop > begin:
                    # The region holds the file's descriptor (opened again if the pool had
                    # dropped it) while the slice duplicates it.
                    region = segment.records.region(begin, stop - begin)
                    log_slice.add_file(region.fd, begin, stop)
        except BaseException:
            log_slice.close()
            raise
        return log_slice

    def _max_position(self, segment_position: int, max_offset: int) -> int:
        """Where in a segment the bytes at or beyond `max_offset` begin."""
        segment = self.segments[segment_position]
        is_last = segment_position == len(self.segments) - 1
        next_base = None if is_last else self.segments[segment_position + 1].base_offset
        if max_offset >= self.log_end_offset or (next_base is not None and max_offset >= next_base):
            return segment.size
        location = segment.translate_offset(max_offset)
        return segment.size if location is None else location.position

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record stamped at or after `timestamp`."""
        for segment in self.segments:
            if segment.max_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the record with the largest timestamp (ListOffsets -3)."""
        newest = max(self.segments, key=attrgetter("max_timestamp"))
        if newest.max_timestamp == NO_TIMESTAMP:
            return None
        return newest.find_max_timestamp()

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [fetch_offset, upper_bound_offset).

        An abort marker may lie in any later segment (past the bound, when another transaction
        was open meanwhile): the search goes on until an entry says it is complete, as Kafka's.
        """
        found: list[AbortedTxn] = []
        segments = self.segments
        for index in range(self._segment_index(fetch_offset), len(segments)):
            entries = segments[index].txn_index.entries
            if not entries:
                continue  # nearly every segment of most logs: no call, no slice of the list
            aborted, complete = collect_aborted(entries, fetch_offset, upper_bound_offset)
            found += aborted
            if complete:
                break
        return found

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    # ---------------------------------------------------------------- log start and retention

    def delete_records_before(self, offset: int) -> int:
        """Raise the log start offset to `offset` (DeleteRecords); return the new start."""
        if offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.topic_partition} up to {offset}: "
                f"beyond the high watermark {self.high_watermark}"
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._delete_segments_below_log_start()
            self._truncate_epochs_from_start()
        return self.log_start_offset

    def _truncate_epochs_from_start(self) -> None:
        if self.leader_epochs.truncate_from_start(self.log_start_offset):
            self._write_leader_epochs()

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete the oldest segments breaching the log start offset, and with the delete
        cleanup policy retention.ms or retention.bytes; return how many went.

        A tiered log (remote.storage.enable) keeps the local part by local.retention.ms and
        local.retention.bytes instead, and only segments the remote store holds go (below
        `highest_remote_offset`): the log start offset stays, as the records are still read from
        the store; the total retention is the remote log manager's to apply."""
        now_ms = _now_ms() if now_ms is None else now_ms
        deleted = self._delete_segments_below_log_start()
        if not self.config.delete:
            return deleted
        tiered = self.config.remote_storage_enable
        if tiered:
            retention_ms = self.config.local_retention_ms_in_effect
            retention_bytes = self.config.local_retention_bytes_in_effect
        else:
            retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes

        def copied(upper_offset: int) -> bool:
            return not tiered or upper_offset - 1 <= self.highest_remote_offset

        if retention_ms >= 0:
            deleted += self._delete_oldest(
                lambda segment, upper, _freed: copied(upper) and now_ms - segment.largest_timestamp > retention_ms
            )
        if retention_bytes >= 0:
            excess = self.size_in_bytes - retention_bytes
            deleted += self._delete_oldest(
                lambda segment, upper, freed: copied(upper) and excess - freed >= segment.size
            )
        return deleted

    def _delete_segments_below_log_start(self) -> int:
        return self._delete_oldest(
            lambda segment, upper_offset, _freed: segment is not self.active_segment
            and upper_offset <= self.log_start_offset
        )

    def _delete_oldest(self, breached: Callable[[LogSegment, int, int], bool]) -> int:
        """Delete segments from the oldest on while `breached(segment, its upper offset, bytes
        freed so far)` holds. Only data below the high watermark goes, and the log keeps an
        active segment: deleting every segment rolls a new empty one first."""
        doomed: list[LogSegment] = []
        freed = 0
        for position, segment in enumerate(self.segments):
            is_active = position == len(self.segments) - 1
            upper_offset = (
                self.log_end_offset if is_active else self.segments[position + 1].base_offset
            )
            if upper_offset > self.high_watermark or (is_active and segment.size == 0):
                break
            if not breached(segment, upper_offset, freed):
                break
            doomed.append(segment)
            freed += segment.size
        if not doomed:
            return 0
        if len(doomed) == len(self.segments):
            self.roll()
        self.segments = self.segments[len(doomed) :]
        if not self.config.remote_storage_enable:
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self._truncate_epochs_from_start()
        for segment in doomed:
            segment.rename_to_deleted()
            self.producer_state.delete_snapshot(segment.base_offset)
        self.scheduler.delete_segments(self, doomed)
        return len(doomed)

    # ---------------------------------------------------------------------------- compaction

    def replace_segments(self, cleaned: LogSegment, replaced: Sequence[LogSegment]) -> None:
        """Put a segment the cleaner wrote (files <base>.*.cleaned, fsynced, with the base offset
        of the first replaced segment) in place of the run of segments it was made from.

        The renames go in an order `load` can finish from any point a crash stops them at:
        .cleaned to .swap, the replaced segments to .deleted, .swap to the plain names. The
        replaced segments are deleted after file.delete.delay.ms; a fetch response holding a
        region of one still sends its bytes.
        """
        first = self.segments.index(replaced[0])
        cleaned.rename_with_suffix(SWAP_SUFFIX)
        for segment in replaced:
            segment.rename_to_deleted()
        for segment in replaced[1:]:
            self.producer_state.delete_snapshot(segment.base_offset)
        cleaned.rename_with_suffix("")
        self.segments[first : first + len(replaced)] = [cleaned]
        self.scheduler.delete_segments(self, list(replaced))

    # ------------------------------------------------------------------------------ flushing

    def flush(self) -> None:
        """Ask for everything appended so far to be fsynced: now, or, while a flush of the log is
        under way, right after it, in one fsync with whatever else is appended meanwhile. With
        flush.messages=1 on a disk that takes 10 ms an fsync, the appends of those 10 ms then
        share the next fsync, instead of each queueing one of its own behind it."""
        self._unflushed_messages = 0
        self.last_flush_ms = _now_ms()
        if self.log_end_offset <= self.recovery_point:
            return
        flushing = self._flushing
        if flushing is not None and not flushing.done():
            if self._next_flush is None:
                self._next_flush = flushing.get_loop().create_future()
                flushing.add_done_callback(self._flush_next)
            self._next_flush_to = self.log_end_offset
            return
        self._start_flush()

    def _start_flush(self) -> "asyncio.Future | None":
        # The flush fsyncs files, on a worker thread; the appends and index entries the active
        # segment keeps in memory are written to them first, on the loop (the segments before
        # it wrote theirs when they rolled).
        self.active_segment.write_pending()
        self._flushing = flushing = self.scheduler.flush(self, self.log_end_offset)
        self._flushing_to = self.log_end_offset
        return flushing

    def _flush_next(self, ended: asyncio.Future) -> None:
        """The flush under way ended (the scheduler has marked the log flushed, or taken its dir
        offline): start the one asked for meanwhile, up to the log end offset now."""
        waiting, self._next_flush = self._next_flush, None
        assert waiting is not None
        if ended.cancelled() or ended.exception() is not None or self.log_end_offset <= self.recovery_point:
            # After a failed fsync the appends made since are not on disk either: their
            # waiters fail the same way (the dir is offline already).
            _settle_as(waiting, ended)
            return
        started = self._start_flush()
        if started is None:
            if not waiting.done():
                waiting.set_result(None)
        else:
            started.add_done_callback(functools.partial(_settle_as, waiting))

    def flush_covering(self, offset: int) -> "asyncio.Future | None":
        """The flush under way or asked for that covers `offset`, if one does: an append made
        with flush.messages reached, or a retry of it, is acknowledged once it is done."""
        flushing = self._flushing
        if flushing is not None and offset < self._flushing_to and not flushing.done():
            return flushing
        if self._next_flush is not None and offset < self._next_flush_to:
            return self._next_flush
        return None

    def write_pending_index_entries(self) -> None:
        """Writes the index entries the active segment keeps in memory (the scheduler's call,
        `write_index_entries_soon`); the next append asks for the next such write."""
        self._index_write_asked = False
        self.active_segment.write_pending()

    def files_to_flush(self, up_to_offset: int) -> list[LogSegment | SnapshotFile]:
        """Segments holding offsets in [recovery point, up_to_offset), and the producer
        snapshots at or below up_to_offset not flushed yet."""
        first = self._segment_index(self.recovery_point)
        segments = [s for s in self.segments[first:] if s.base_offset < up_to_offset]
        return segments + self.producer_state.pop_unflushed(up_to_offset)

    def mark_flushed(self, offset: int, truncations: int) -> None:
        """The records below `offset` are fsynced, by a flush whose files were chosen when the
        log had been truncated `truncations` times. After a later truncation the fsync vouches
        for nothing: records it covered were cut, and those appended again in their place may
        have missed it (the recovery point stays where the truncation left it)."""
        if truncations == self.truncations:
            self.recovery_point = max(self.recovery_point, min(offset, self.log_end_offset))

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self._take_config(config)

    def _take_config(self, config: LogConfig) -> None:
        """Keep what every append reads of `config` in native fields: the interpreted LogConfig's
        fields are generic lookups in compiled code (max_segment_ms a property calling another),
        several an append; what validation reads of it, likewise."""
        self._config = config
        self._max_segment_ms: int = config.max_segment_ms
        self._segment_bytes: int = config.segment_bytes
        self._flush_messages: int = config.flush_messages
        self._codec: Compression | None = _topic_codec(config.compression_type)
        self._log_append_time: bool = config.message_timestamp_type == "LogAppendTime"
        self._produce_checks = ProduceChecks(config)

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    def take_producer_snapshot(self) -> None:
        """Snapshot the producer state at the log end offset (clean shutdown)."""
        self.producer_state.take_snapshot(self.log_end_offset)

    def close(self) -> None:
        self.take_producer_snapshot()
        for segment in self.segments:
            segment.close()

    def update_parent_dir(self, directory: str) -> None:
        """The partition directory was renamed to `directory` (the partition is deleted; Kafka's
        renameDir): every path of the log follows it, so that nothing done later by path can
        reach a new partition directory of the old name."""
        self.directory = directory
        for segment in self.segments:
            segment.update_parent_dir(directory)
        self.producer_state.update_parent_dir(directory)
        self.leader_epochs.path = _epoch_path(directory)

    def release(self) -> None:
        """Let go of the open files without touching any (the directory goes whole)."""
        for segment in self.segments:
            segment.release()


def _settle_as(waiting: asyncio.Future, done: asyncio.Future) -> None:
    """End `waiting` as `done` ended. A failure is marked as read: the scheduler has dealt with
    it, and the waiters there are, if any, read it too."""
    if waiting.done():  # cancelled: its waiters await it through asyncio.shield, so not by them
        return
    if done.cancelled():
        waiting.cancel()
        return
    failure = done.exception()
    if failure is None:
        waiting.set_result(done.result())
    else:
        waiting.set_exception(failure)
        waiting.exception()


def _epoch_path(directory: str) -> str:
    return os.path.join(directory, LEADER_EPOCH_CHECKPOINT)


def _load_leader_epochs(
    directory: str, segments: list[LogSegment], recovery_point: int, had_clean_shutdown: bool
) -> LeaderEpochCache:
    """The checkpointed leader epochs, completed from the batch headers of the segments a
    recovery re-validated (a crash may have come before the file caught up with them); rebuilt
    from every batch header when there is no file."""
    path = _epoch_path(directory)
    cache = LeaderEpochCache.read(path)
    if cache is None:
        cache, scanned = LeaderEpochCache(path), segments
    elif had_clean_shutdown:
        return cache
    else:
        first_unflushed = max(bisect_right(segments, recovery_point, key=_base_offset) - 1, 0)
        scanned = segments[first_unflushed:]
    for segment in scanned:
        for location in segment.records.batches():
            header = location.header
            # Only a newer epoch is news: older ones are already listed (Kafka's recovery rule).
            if header.partition_leader_epoch > cache.latest_epoch:
                cache.assign(header.partition_leader_epoch, header.base_offset)
    return cache


def _topic_codec(compression_type: str) -> Compression | None:
    """The codec a topic's compression.type asks for; None keeps the producer's."""
    return None if compression_type == "producer" else Compression.from_name(compression_type)


def _recover_segment(segment: LogSegment, config: LogConfig) -> int:
    """Rebuild a segment's indexes from its .log (writable while doing so); bytes cut."""
    segment.make_active(config)
    truncated = segment.recover()
    segment.on_become_inactive()
    return truncated


def _segment_base_offsets(directory: str) -> list[int]:
    return sorted(
        int(name[: -len(LOG_SUFFIX)])
        for name in os.listdir(directory)
        if name.endswith(LOG_SUFFIX) and name[: -len(LOG_SUFFIX)].isdigit()
    )


def _remove_leftovers(directory: str) -> None:
    """Files of deletions or rewrites a crash interrupted."""
    for name in os.listdir(directory):
        if name.endswith(_TEMP_SUFFIXES):
            os.unlink(os.path.join(directory, name))


def _complete_swaps(directory: str) -> None:
    """Finish the swaps of cleaned segments a crash interrupted (see `Log.replace_segments`).

    A <base>.log.swap is a whole cleaned segment, fsynced before it got that name. It replaces the
    segments whose files are named by offsets it spans, whatever step their renaming reached:
    their files are removed and the .swap files renamed. A swapped index without its .log is
    removed; missing indexes are rebuilt from the .log.
    """
    swapped = [
        base
        for base, suffix in map(_parse_segment_file_name, os.listdir(directory))
        if suffix == LOG_SUFFIX + SWAP_SUFFIX
    ]
    for base in swapped:
        end = max(_next_offset(segment_path(directory, base, LOG_SUFFIX + SWAP_SUFFIX)), base + 1)
        for name in os.listdir(directory):
            other_base, suffix = _parse_segment_file_name(name)
            if suffix in _SEGMENT_FILE_SUFFIXES and base <= other_base < end:
                os.unlink(os.path.join(directory, name))
        log.info("completing the swap of cleaned segment %d in %s", base, directory)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX):
            swap = segment_path(directory, base, suffix + SWAP_SUFFIX)
            if os.path.exists(swap):
                os.rename(swap, segment_path(directory, base, suffix))
    for name in os.listdir(directory):
        if name.endswith(SWAP_SUFFIX):
            os.unlink(os.path.join(directory, name))


def _parse_segment_file_name(name: str) -> tuple[int, str]:
    """(base offset, suffix) of a segment's file name; (-1, name) for any other file."""
    digits = name[:_BASE_OFFSET_DIGITS]
    if len(digits) == _BASE_OFFSET_DIGITS and digits.isdigit():
        return int(digits), name[_BASE_OFFSET_DIGITS:]
    return -1, name


def _next_offset(path: str) -> int:
    """The offset after the last whole batch of a records file (-1 when it has none)."""
    records = RecordsFile.open(path)
    try:
        next_offset = -1
        for location in records.batches():
            next_offset = location.header.next_offset
        return next_offset
    finally:
        records.close()
