"""Compaction against a model: appends of a few keys (values and tombstones), DeleteRecords,
cleanings (with key maps of any size), the clock moving on, clean restarts, and crashes at any
file operation of a swap. After every step a consumer reading the log from its start sees, per
key, the latest value the model holds from there on, offsets only increase, and every record it
reads was appended at that offset. Tombstones may stay or go until their delete horizon has
passed, and must be gone after a cleaning past it."""

import contextlib
import os
import shutil
import tempfile
import threading

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol.record_batch import iter_batches
from protocol.records import Record, build_batch, iter_records
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
        built = build_batch([Record(i, self.now, k, v) for i, (k, v) in enumerate(batch)])
        result = self.log.append_as_leader(memoryview(bytearray(built)), 0)
        self.log.high_watermark = self.log.log_end_offset
        for i, record in enumerate(batch):
            self.model[result.first_offset + i] = record

    @rule()
    def roll(self):
        self.log.roll()

    @rule(ms=st.sampled_from([0, DELETE_RETENTION_MS // 2, DELETE_RETENTION_MS]))
    def clock_moves_on(self, ms):
        self.now += ms

    @precondition(lambda self: self.log.high_watermark > self.log.log_start_offset)
    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(self.log.log_start_offset, self.log.high_watermark))
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
        self.now += DELETE_RETENTION_MS
        self.clean(1000)

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

    # ------------------------------------------------------------------------ invariants

    @invariant()
    def a_consumer_sees_the_latest_value_of_every_key(self):
        start = self.log.log_start_offset
        read = read_all(self.log)
        offsets = [offset for offset, _, _ in read]
        assert offsets == sorted(set(offsets))
        for offset, key, value in read:
            assert offset >= start and self.model[offset] == (key, value)
        assert latest_values(read) == latest_values(
            (o, k, v) for o, (k, v) in sorted(self.model.items()) if o >= start
        )
        assert self.log.log_end_offset == (max(self.model) + 1 if self.model else 0)

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

    def teardown(self):
        try:
            self.log.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def read_all(log: Log, start: int | None = None) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from `start` (the log start) to the high watermark,
    moving from batch to batch as consumers do over a compacted log."""
    offset, found = log.log_start_offset if start is None else start, []
    while offset < log.high_watermark:
        region = log.read(offset, 4096, log.high_watermark, min_one_batch=True)
        if region is None:
            break
        data = region.read()
        for position, header in iter_batches(data):
            found += [
                (r.offset, r.key, r.value)
                for r in iter_records(data[position : position + header.size])
                if r.offset >= offset
            ]
            offset = header.last_offset + 1
    return found


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
