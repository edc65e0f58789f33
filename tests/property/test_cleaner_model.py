"""Compaction against a model: appends of a few keys (values and tombstones), plain or in the
transactions of two producers that commit or abort them, DeleteRecords, cleanings (with key maps
of any size), the clock moving on, clean restarts, and crashes at any file operation of a swap.
After every step a read_committed consumer reading the log from its start to the last stable
offset sees, per key, the latest committed value the model holds from there on; offsets only
increase, and every record read was appended at that offset. Tombstones and transaction markers
left alone may stay or go until their delete horizon has passed, and must be gone after a
cleaning past it; a marker stays while its transaction has a batch in the log. The last stable
offset and the producers' sequences survive cleanings and crashes."""

import contextlib
import os
import shutil
import tempfile
import threading

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol.record_batch import BatchHeader, iter_batches
from protocol.records import ControlRecordType, Record, build_batch, control_record_type, iter_records
from storage.cleaner import Cleaner, CleanerConfig, OffsetMap, plan_cleaning
from storage.log import InlineScheduler, Log
from storage.log_config import LogConfig
from storage.topic_partition import TopicPartition

TP = TopicPartition("model", 0)
DELETE_RETENTION_MS = 1_000
CONFIG = LogConfig(
    cleanup_policy="compact",
    segment_bytes=400,
    segment_index_bytes=1024,
    index_interval_bytes=100,
    delete_retention_ms=DELETE_RETENTION_MS,
    file_delete_delay_ms=0,
)
KEYS = [b"a", b"b", b"c", b"d"]
PRODUCERS = [1, 2]
START_MS = 1_700_000_000_000

values = st.one_of(st.none(), st.binary(min_size=1, max_size=30))
records = st.lists(st.tuples(st.sampled_from(KEYS), values), min_size=1, max_size=4)


class Crash(Exception):
    pass


@contextlib.contextmanager
def crash_at_file_operation(step: int):
    """The `step`-th rename or unlink raises, as if the process died right there."""
    count = 0
    originals = {name: getattr(os, name) for name in ("rename", "replace", "unlink")}

    def counted(real):
        def operation(*args, **kwargs):
            nonlocal count
            count += 1
            if count == step:
                raise Crash()
            return real(*args, **kwargs)

        return operation

    for name, real in originals.items():
        setattr(os, name, counted(real))
    try:
        yield
    finally:
        for name, real in originals.items():
            setattr(os, name, real)


class CompactionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp()
        self.log = self._load(clean=True)
        self.model: dict[int, tuple[bytes, bytes | None]] = {}  # offset -> (key, value)
        self.aborted: set[int] = set()  # offsets of records of aborted transactions
        self.open_txns: dict[int, list[range]] = {}  # producer id -> offsets of its batches
        self.transactions: dict[int, list[range]] = {}  # marker -> offsets of its batches
        self.sequences = dict.fromkeys(PRODUCERS, 0)
        self.last_batches: dict[int, int] = {}  # producer id -> first offset of its last batch
        self.now = START_MS
        self.first_dirty: int | None = None  # the cleaner checkpoint
        self.passes: list[tuple[int, int]] = []  # (time, end offset) of each completed cleaning

    def _load(self, clean: bool, log_start_offset: int = 0) -> Log:
        log = Log.load(
            f"{self.root}/{TP.dir_name}",
            TP,
            CONFIG,
            scheduler=InlineScheduler(),
            log_start_offset=log_start_offset,
            had_clean_shutdown=clean,
        )
        log.high_watermark = log.log_end_offset
        return log

    # ---------------------------------------------------------------------------- rules

    @rule(batch=records)
    def append(self, batch):
        self._append(batch, build_batch([Record(i, self.now, k, v) for i, (k, v) in enumerate(batch)]))

    @rule(batch=records, producer_id=st.sampled_from(PRODUCERS))
    def append_in_transaction(self, batch, producer_id):
        built = build_batch(
            [Record(i, self.now, k, v) for i, (k, v) in enumerate(batch)],
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=self.sequences[producer_id],
            is_transactional=True,
        )
        first_offset = self._append(batch, built)
        self.sequences[producer_id] += len(batch)
        self.last_batches[producer_id] = first_offset
        self.open_txns.setdefault(producer_id, []).append(range(first_offset, first_offset + len(batch)))

    @precondition(lambda self: self.open_txns)
    @rule(data=st.data(), commit=st.booleans())
    def end_transaction(self, data, commit):
        producer_id = data.draw(st.sampled_from(sorted(self.open_txns)))
        marker = self.log.append_marker(producer_id, 0, 0, commit, leader_epoch=0).first_offset
        self.log.high_watermark = self.log.log_end_offset
        batches = self.open_txns.pop(producer_id)
        self.transactions[marker] = batches
        if not commit:
            self.aborted.update(*batches)

    def _append(self, batch, built: bytes) -> int:
        result = self.log.append_as_leader(memoryview(bytearray(built)), 0)
        self.log.high_watermark = self.log.log_end_offset
        for i, record in enumerate(batch):
            self.model[result.first_offset + i] = record
        return result.first_offset

    @rule()
    def roll(self):
        self.log.roll()

    @rule(ms=st.sampled_from([0, DELETE_RETENTION_MS // 2, DELETE_RETENTION_MS]))
    def clock_moves_on(self, ms):
        self.now += ms

    # Neither into an open transaction nor past a producer's last batch: a replay from the log
    # start would miss the transaction's start or the producer's sequence (as in Kafka), which
    # this model does not follow.
    @precondition(lambda self: self.deletable_below > self.log.log_start_offset)
    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(self.log.log_start_offset, self.deletable_below))
        self.log.delete_records_before(offset)

    @rule(keys_in_map=st.sampled_from([1, 2, 3, 1000]))
    def clean(self, keys_in_map):
        result = self._clean_thread_part(keys_in_map)
        for replaced, cleaned in result.swaps:
            self.log.replace_segments(cleaned, [s.segment for s in replaced])
        self.first_dirty = result.end_offset
        self.passes.append((self.now, result.end_offset))
        self.check_expired_tombstones_are_gone(result.end_offset)

    @rule()
    def clean_again_past_the_horizon(self):
        self.clean(1000)
        after_first = stored_headers(self.log)
        self.now += DELETE_RETENTION_MS
        self.clean(1000)
        self.check_lone_markers_are_gone(after_first, self.first_dirty)

    @rule(keys_in_map=st.sampled_from([2, 1000]), data=st.data())
    def crash_while_cleaning(self, keys_in_map, data):
        result = self._clean_thread_part(keys_in_map)
        before = set(read_all(self.log))
        replaced_records = set().union(*(records_in(s.segment for s in r) for r, _ in result.swaps))
        cleaned_records = records_in(cleaned for _, cleaned in result.swaps)
        droppable = replaced_records - cleaned_records
        # Per group: .cleaned to .swap, the replaced to .deleted, .swap to final, deletion.
        operations = sum(6 + 6 * len(replaced) for replaced, _ in result.swaps)
        try:
            with crash_at_file_operation(data.draw(st.integers(1, max(operations, 1)))):
                for replaced, cleaned in result.swaps:
                    self.log.replace_segments(cleaned, [s.segment for s in replaced])
        except Crash:
            pass
        # The process died: its checkpoint was not written; the log is recovered from disk.
        self.first_dirty = None
        self.log = self._load(clean=False, log_start_offset=self.log.log_start_offset)
        after = set(read_all(self.log))
        assert before - droppable <= after <= before

    @rule()
    def clean_restart(self):
        self.log.close()
        self.log = self._load(clean=True, log_start_offset=self.log.log_start_offset)

    def _clean_thread_part(self, keys_in_map: int):
        job = plan_cleaning(self.log, self.first_dirty, self.now)
        config = CleanerConfig(dedupe_buffer_size=keys_in_map * OffsetMap.BYTES_PER_ENTRY)
        return Cleaner(config).clean(job, threading.Event())

    @property
    def stable_offset(self) -> int:
        """The last stable offset the model expects."""
        firsts = [batches[0].start for batches in self.open_txns.values()]
        return min([self.log.high_watermark, *firsts])

    @property
    def deletable_below(self) -> int:
        return min([self.stable_offset, *self.last_batches.values()])

    # ------------------------------------------------------------------------ invariants

    @invariant()
    def a_consumer_sees_the_latest_committed_value_of_every_key(self):
        start = self.log.log_start_offset
        read = read_all(self.log)
        offsets = [offset for offset, _, _ in read]
        assert offsets == sorted(set(offsets))
        for offset, key, value in read:
            assert offset >= start and self.model[offset] == (key, value)
        stable = self.stable_offset
        assert latest_values(read_committed(self.log, stable)) == latest_values(
            (o, k, v)
            for o, (k, v) in sorted(self.model.items())
            if start <= o < stable and o not in self.aborted
        )
        ends = [*self.model, *self.transactions]
        assert self.log.log_end_offset == (max(ends) + 1 if ends else 0)

    @invariant()
    def the_producers_state_survives(self):
        first_unstable = self.log.first_unstable_offset
        stable = self.log.high_watermark if first_unstable is None else first_unstable
        assert stable == self.stable_offset
        for producer_id, entry in self.log.producer_state.producers.items():
            assert entry.last_seq in (-1, self.sequences[producer_id] - 1)

    @invariant()
    def a_marker_stays_while_its_transaction_has_a_batch(self):
        stored = {header.base_offset for header in stored_headers(self.log)}
        for marker, batches in self.transactions.items():
            if any(batch.start in stored for batch in batches):
                assert marker in stored, f"marker {marker} went before its transaction"

    @invariant()
    def segments_hold_their_own_offsets_and_seeks_land_right(self):
        segments = self.log.segments
        ends = [s.base_offset for s in segments[1:]] + [self.log.log_end_offset]
        for segment, end in zip(segments, ends):
            for offset, _, _ in records_in([segment]):
                assert segment.base_offset <= offset < end
        read = read_all(self.log)
        for position in range(0, len(read), 7):
            assert read_all(self.log, read[position][0]) == read[position:]

    def check_expired_tombstones_are_gone(self, end_offset: int):
        """A tombstone that a cleaning at t looked at (below its end) has a delete horizon of
        t + delete.retention.ms at the latest, so a cleaning after that drops it."""
        expired_below = max(
            (end for time, end in self.passes if time + DELETE_RETENTION_MS <= self.now),
            default=0,
        )
        for offset, _, value in read_all(self.log):
            if value is None:
                assert offset >= min(expired_below, end_offset), f"tombstone {offset} outlived"

    def check_lone_markers_are_gone(self, after_first: list[BatchHeader], end_offset: int):
        """Two cleanings delete.retention.ms apart: a marker below their end whose transaction
        had no batch left after the first is gone after the second, unless it is its producer's
        last batch there, or the cleanings reached segments not flushed yet."""
        if self.log.recovery_point < self.log.active_segment.base_offset:
            return
        headers = [h for h in after_first if h.base_offset < end_offset]
        before = {h.base_offset for h in headers}
        after = {h.base_offset for h in stored_headers(self.log)}
        for header in headers:
            batches = self.transactions.get(header.base_offset) if header.is_control else None
            if batches is None or any(batch.start in before for batch in batches):
                continue
            last = max(h.base_offset for h in headers if h.producer_id == header.producer_id)
            if header.base_offset != last:
                assert header.base_offset not in after, f"marker {header.base_offset} outlived"

    def teardown(self):
        try:
            self.log.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def read_batches(log: Log, start: int, end: int):
    """(header, batch) of every batch from `start` to `end`, moving from batch to batch as
    consumers do over a compacted log."""
    offset = start
    while offset < end:
        region = log.read(offset, 4096, end, min_one_batch=True)
        if region is None:
            break
        data = region.read()
        for position, header in iter_batches(data):
            yield header, data[position : position + header.size]
            offset = header.last_offset + 1


def read_all(log: Log, start: int | None = None) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every data record from `start` (the log start) to the high
    watermark, as a read_uncommitted consumer reads them."""
    start = log.log_start_offset if start is None else start
    return [
        (r.offset, r.key, r.value)
        for header, batch in read_batches(log, start, log.high_watermark)
        if not header.is_control
        for r in iter_records(batch)
        if r.offset >= start
    ]


def read_committed(log: Log, stable_offset: int) -> list[tuple[int, bytes, bytes | None]]:
    """The data records a read_committed consumer reads from the log start to the last stable
    offset: it leaves out the batches of the aborted transactions the log lists, from their
    first offset to their producer's ABORT marker, as Kafka's consumers do."""
    start = log.log_start_offset
    aborted = sorted(log.collect_aborted(start, stable_offset), key=lambda a: a.first_offset)
    aborting: set[int] = set()
    found = []
    for header, batch in read_batches(log, start, stable_offset):
        while aborted and aborted[0].first_offset <= header.last_offset:
            aborting.add(aborted.pop(0).producer_id)
        if header.is_control:
            if control_record_type(next(iter_records(batch))) == ControlRecordType.ABORT:
                aborting.discard(header.producer_id)
        elif not (header.is_transactional and header.producer_id in aborting):
            found += [(r.offset, r.key, r.value) for r in iter_records(batch) if r.offset >= start]
    return found


def stored_headers(log: Log) -> list[BatchHeader]:
    """The headers of the batches in the log's segment files, from its start."""
    headers = []
    for segment in log.segments:
        data = segment.records.read(0, segment.size)
        headers += [h for _, h in iter_batches(data) if h.last_offset >= log.log_start_offset]
    return headers


def records_in(segments) -> set[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record in the files of `segments`."""
    found = set()
    for segment in segments:
        data = segment.records.read(0, segment.size)
        for position, header in iter_batches(data):
            batch = data[position : position + header.size]
            found |= {(r.offset, r.key, r.value) for r in iter_records(batch)}
    return found


def latest_values(records) -> dict[bytes, bytes]:
    latest: dict[bytes, bytes] = {}
    for _, key, value in records:
        if value is None:
            latest.pop(key, None)
        else:
            latest[key] = value
    return latest


TestCompactionAgainstModel = CompactionMachine.TestCase
TestCompactionAgainstModel.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
