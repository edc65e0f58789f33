"""Model-based test: both indexes against plain sorted lists searched with bisect.

The machine plays a segment's life: appends, truncations, rolls (trim), clean restarts that reopen
the files read-only, crashes that reopen the untrimmed files, and resizes back to active.
"""

import bisect
import itertools
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from storage.index import IndexFullError, OffsetIndex, TimeIndex

BASE = 5_000
OFFSET_INDEX_BYTES = 8 * 8 + 5  # room for 8 entries, plus bytes that do not make a whole one
TIME_INDEX_BYTES = 12 * 6 + 7  # room for 6 entries


def expect(*errors: type[Exception]) -> AbstractContextManager[object]:
    return pytest.raises(errors) if errors else nullcontext()


class IndexModel(RuleBasedStateMachine):
    def __init__(self, directory: Path) -> None:
        super().__init__()
        directory.mkdir()
        self.offset_path = directory / "00000000000000005000.index"
        self.time_path = directory / "00000000000000005000.timeindex"
        self.offsets = OffsetIndex(self.offset_path, BASE, OFFSET_INDEX_BYTES)
        self.times = TimeIndex(self.time_path, BASE, TIME_INDEX_BYTES)
        self.offset_entries: list[tuple[int, int]] = []  # (offset, position)
        self.time_entries: list[tuple[int, int]] = []  # (timestamp, offset)
        # Capacities of a writable index; a read-only one is always exactly full.
        self.offset_capacity = 8
        self.time_capacity = 6
        self.read_only = False

    def offset_room(self) -> int:
        return len(self.offset_entries) if self.read_only else self.offset_capacity

    def time_room(self) -> int:
        return len(self.time_entries) if self.read_only else self.time_capacity

    # --- appends ---

    @rule(offset_step=st.integers(-1, 4), position_step=st.integers(-2, 40))
    def append_offset(self, offset_step: int, position_step: int) -> None:
        last_offset, last_position = self.offset_entries[-1] if self.offset_entries else (BASE, 0)
        offset, position = last_offset + offset_step, last_position + position_step
        errors: list[type[Exception]] = []
        if len(self.offset_entries) >= self.offset_room():
            errors.append(IndexFullError)
        follows = offset > last_offset or not self.offset_entries and offset >= BASE
        if not follows or position < last_position or (offset, position) == (BASE, 0):
            errors.append(ValueError)

        with expect(*errors):
            self.offsets.append(offset, position)
        if not errors:
            self.offset_entries.append((offset, position))

    @rule(timestamp_step=st.integers(-2, 5), offset_step=st.integers(-1, 3))
    def maybe_append_time(self, timestamp_step: int, offset_step: int) -> None:
        last_timestamp, last_offset = self.time_entries[-1] if self.time_entries else (-1, BASE)
        timestamp, offset = last_timestamp + timestamp_step, last_offset + offset_step
        appends = timestamp > last_timestamp and (timestamp, offset) != (0, BASE)
        errors: list[type[Exception]] = []
        if offset < last_offset:
            errors.append(ValueError)
        elif appends and len(self.time_entries) >= self.time_room():
            errors.append(IndexFullError)

        with expect(*errors):
            self.times.maybe_append(timestamp, offset)
        if appends and not errors:
            self.time_entries.append((timestamp, offset))

    # --- truncation ---

    @rule(offset=st.integers(BASE - 2, BASE + 45))
    def truncate_to(self, offset: int) -> None:
        self.offsets.truncate_to(offset)
        self.times.truncate_to(offset)
        self.offset_entries = [entry for entry in self.offset_entries if entry[0] < offset]
        self.time_entries = [entry for entry in self.time_entries if entry[1] < offset]

    @rule()
    def truncate(self) -> None:
        self.offsets.truncate()
        self.times.truncate()
        self.offset_entries, self.time_entries = [], []

    # --- lifecycle ---

    @rule()
    def roll(self) -> None:
        self.offsets.trim_to_valid_size()
        self.times.trim_to_valid_size()
        self.offset_capacity = len(self.offset_entries)
        self.time_capacity = len(self.time_entries)

    @rule()
    def restart_read_only(self) -> None:
        self.offsets.close()
        self.times.close()
        # A clean close leaves exactly the entries, the form Kafka reads back.
        assert self.offset_path.stat().st_size == 8 * len(self.offset_entries)
        assert self.time_path.stat().st_size == 12 * len(self.time_entries)
        self.offsets = OffsetIndex(self.offset_path, BASE, OFFSET_INDEX_BYTES, writable=False)
        self.times = TimeIndex(self.time_path, BASE, TIME_INDEX_BYTES, writable=False)
        self.read_only = True

    @rule()
    def restart_after_crash(self) -> None:
        # The old indexes are dropped without close(): their files keep whatever tail they had.
        self.offsets = OffsetIndex(self.offset_path, BASE, OFFSET_INDEX_BYTES)
        self.times = TimeIndex(self.time_path, BASE, TIME_INDEX_BYTES)
        self.offset_capacity, self.time_capacity = 8, 6
        self.read_only = False

    @rule()
    def resize(self) -> None:
        self.offsets.resize(OFFSET_INDEX_BYTES)
        self.times.resize(TIME_INDEX_BYTES)
        self.offset_capacity, self.time_capacity = 8, 6
        self.read_only = False

    @rule()
    def flush(self) -> None:
        self.offsets.flush()
        self.times.flush()

    # --- lookups ---

    @rule(offset=st.integers(BASE - 2, BASE + 45))
    def lookup_offset(self, offset: int) -> None:
        slot = bisect.bisect_right([entry[0] for entry in self.offset_entries], offset) - 1
        expected = self.offset_entries[slot] if slot >= 0 else (BASE, 0)
        assert self.offsets.lookup(offset) == expected

    @rule(timestamp=st.integers(-3, 50))
    def lookup_time(self, timestamp: int) -> None:
        slot = bisect.bisect_right([entry[0] for entry in self.time_entries], timestamp) - 1
        expected = self.time_entries[slot] if slot >= 0 else (-1, BASE)
        assert self.times.lookup(timestamp) == expected

    @invariant()
    def indexes_match_the_model(self) -> None:
        assert [self.offsets.entry(n) for n in range(self.offsets.entries)] == self.offset_entries
        assert [self.times.entry(n) for n in range(self.times.entries)] == self.time_entries
        assert self.offsets.last_offset == (self.offset_entries or [(BASE, 0)])[-1][0]
        assert self.times.last_entry == (self.time_entries or [(-1, BASE)])[-1]
        assert self.offsets.max_entries == self.offset_room()
        assert self.times.max_entries == self.time_room()
        self.offsets.sanity_check()
        self.times.sanity_check()

    def teardown(self) -> None:
        self.offsets.close()
        self.times.close()


def test_indexes_agree_with_a_sorted_list_model(tmp_path: Path) -> None:
    directories = (tmp_path / str(n) for n in itertools.count())
    run_state_machine_as_test(
        lambda: IndexModel(next(directories)),
        settings=settings(
            max_examples=200,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
