"""Offset resolution and range planning, against a fake log."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.options import EARLIEST, LATEST, OffsetSpec, OptionError
from spark_jobs.planning import (
    DataLossError,
    OffsetRange,
    contiguous_end,
    plan_ranges,
    resolve,
    split_ranges,
    subtract,
)
from spark_jobs.reading import CachedLookup


class FakeLookup:
    def __init__(self, earliest, latest, records=None):
        self._earliest = earliest
        self._latest = latest
        self._records = records or {}  # tp -> [(offset, timestamp)]
        self.calls = []

    def topics(self):
        return {}

    def earliest(self, tps):
        self.calls.append(("earliest", sorted(tps)))
        return {tp: self._earliest[tp] for tp in tps}

    def latest(self, tps):
        self.calls.append(("latest", sorted(tps)))
        return {tp: self._latest[tp] for tp in tps}

    def for_timestamps(self, timestamps):
        found = {}
        for tp, ts in timestamps.items():
            found[tp] = next((o for o, t in self._records.get(tp, []) if t >= ts), None)
        return found


A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)
TPS = [A0, A1, B0]
LOOKUP = FakeLookup(
    {A0: 0, A1: 10, B0: 5},
    {A0: 100, A1: 20, B0: 5},
    {A0: [(o, 1000 + o) for o in range(100)], A1: [(o, 2000 + o) for o in range(10, 20)]},
)


def test_earliest_latest_and_json_offsets():
    assert resolve(OffsetSpec("earliest"), TPS, LOOKUP, is_start=True) == {A0: 0, A1: 10, B0: 5}
    assert resolve(OffsetSpec("latest"), TPS, LOOKUP, is_start=False) == {A0: 100, A1: 20, B0: 5}
    spec = OffsetSpec("offsets", offsets=((A0, 7), (A1, LATEST)))
    # Left out: earliest when starting, latest when ending.
    assert resolve(spec, TPS, LOOKUP, is_start=True) == {A0: 7, A1: 20, B0: 5}
    spec = OffsetSpec("offsets", offsets=((A0, 7), (A1, EARLIEST)))
    assert resolve(spec, TPS, LOOKUP, is_start=False) == {A0: 7, A1: 10, B0: 5}
    with pytest.raises(OptionError, match="not read: c-0"):
        resolve(OffsetSpec("offsets", offsets=((("c", 0), 1),)), TPS, LOOKUP, is_start=True)


def test_timestamps():
    spec = OffsetSpec("timestamp", timestamp=1050)
    assert resolve(spec, [A0, A1], LOOKUP, is_start=True) == {A0: 50, A1: 10}
    with pytest.raises(OptionError, match="b-0"):
        resolve(spec, TPS, LOOKUP, is_start=True)
    assert resolve(spec, TPS, LOOKUP, is_start=True, timestamp_strategy="latest") == {A0: 50, A1: 10, B0: 5}
    # Ending: no record stamped that late means the latest offset.
    late = OffsetSpec("timestamp", timestamp=5000)
    assert resolve(late, TPS, LOOKUP, is_start=False) == {A0: 100, A1: 20, B0: 5}
    per_partition = OffsetSpec("timestamps", timestamps=((A0, 1090),))
    assert resolve(per_partition, TPS, LOOKUP, is_start=True) == {A0: 90, A1: 10, B0: 5}
    assert resolve(per_partition, TPS, LOOKUP, is_start=False) == {A0: 90, A1: 20, B0: 5}


def test_plan_ranges_checks_the_log_and_drops_empty_ranges():
    earliest, latest = {A0: 0, A1: 10, B0: 5}, {A0: 100, A1: 20, B0: 5}
    ranges = plan_ranges({A0: 3, A1: 10, B0: 5}, {A0: 50, A1: 20, B0: 5}, earliest, latest, fail_on_data_loss=True)
    assert ranges == [OffsetRange("a", 0, 3, 50), OffsetRange("a", 1, 10, 20)]
    with pytest.raises(DataLossError, match="a-1.*log starts at 10"):
        plan_ranges({A1: 4}, {A1: 20}, earliest, latest, fail_on_data_loss=True)
    assert plan_ranges({A1: 4}, {A1: 20}, earliest, latest, fail_on_data_loss=False) == [OffsetRange("a", 1, 10, 20)]
    assert plan_ranges({A1: 4}, {A1: 8}, earliest, latest, fail_on_data_loss=False) == []
    with pytest.raises(OptionError, match="beyond"):
        plan_ranges({A1: 10}, {A1: 21}, earliest, latest, fail_on_data_loss=True)
    with pytest.raises(OptionError, match="after its ending"):
        plan_ranges({A0: 30}, {A0: 20}, earliest, latest, fail_on_data_loss=True)


def test_min_partitions_splits_big_ranges_in_proportion():
    big, small = OffsetRange("a", 0, 0, 900), OffsetRange("b", 0, 50, 150)
    pieces = split_ranges([big, small], min_partitions=10)
    assert len(pieces) == 10
    assert [p for p in pieces if p.topic == "a"] == [OffsetRange("a", 0, 100 * i, 100 * i + 100) for i in range(9)]
    assert [p for p in pieces if p.topic == "b"] == [small]
    assert split_ranges([big, small], min_partitions=2) == [big, small]  # already enough
    assert split_ranges([OffsetRange("a", 0, 0, 3)], min_partitions=10) == [
        OffsetRange("a", 0, i, i + 1) for i in range(3)
    ]


def test_max_records_per_partition():
    assert split_ranges([OffsetRange("a", 0, 10, 20)], max_records=4) == [
        OffsetRange("a", 0, 10, 13),
        OffsetRange("a", 0, 13, 16),
        OffsetRange("a", 0, 16, 20),
    ]


@given(
    sizes=st.lists(st.integers(0, 10_000), min_size=1, max_size=8),
    min_partitions=st.none() | st.integers(1, 64),
    max_records=st.none() | st.integers(1, 5_000),
)
def test_pieces_cover_every_offset_once(sizes, min_partitions, max_records):
    ranges = [OffsetRange("t", p, 1000 * p, 1000 * p + size) for p, size in enumerate(sizes) if size]
    pieces = split_ranges(ranges, min_partitions, max_records)
    for r in ranges:
        mine = [p for p in pieces if p.partition == r.partition]
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:]))
        assert all(p.size > 0 for p in mine)
        if max_records:
            assert all(p.size <= max_records for p in mine)
    total = sum(r.size for r in ranges)
    if min_partitions and ranges:
        assert len(pieces) >= min(min_partitions, total)


def test_subtract_and_contiguous_end():
    want = OffsetRange("t", 0, 0, 100)
    assert subtract(want, []) == [want]
    assert subtract(want, [(0, 100)]) == []
    assert subtract(want, [(20, 30), (0, 10), (30, 50), (90, 120)]) == [
        OffsetRange("t", 0, 10, 20),
        OffsetRange("t", 0, 50, 90),
    ]
    assert subtract(OffsetRange("t", 0, 40, 60), [(0, 45), (55, 70)]) == [OffsetRange("t", 0, 45, 55)]
    assert contiguous_end(0, [(0, 10), (10, 30), (40, 50)]) == 30
    assert contiguous_end(5, [(0, 10), (10, 30)]) == 30
    assert contiguous_end(0, [(5, 10)]) == 0


def test_cached_lookup_asks_once():
    fake = FakeLookup({A0: 0, A1: 10}, {A0: 1, A1: 2})
    cached = CachedLookup(fake)
    assert cached.earliest([A0]) == {A0: 0}
    assert cached.earliest([A0, A1]) == {A0: 0, A1: 10}
    assert cached.latest([A1]) == {A1: 2} and cached.latest([A1]) == {A1: 2}
    assert fake.calls == [("earliest", [A0]), ("earliest", [A1]), ("latest", [A1])]
