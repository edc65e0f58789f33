import bisect
import errno
import gc
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from storage import descriptor_pool
from storage.index import CorruptIndexError, IndexFullError, OffsetIndex, TimeIndex

BASE = 1000


def offset_index(tmp_path: Path, max_index_size: int = 80, writable: bool = True) -> OffsetIndex:
    return OffsetIndex(tmp_path / "00000000000000001000.index", BASE, max_index_size, writable)


def time_index(tmp_path: Path, max_index_size: int = 120, writable: bool = True) -> TimeIndex:
    return TimeIndex(tmp_path / "00000000000000001000.timeindex", BASE, max_index_size, writable)


# --- on-disk bytes ---------------------------------------------------------------------------


def test_offset_index_writes_big_endian_relative_offset_then_position(tmp_path):
    index = offset_index(tmp_path)
    index.append(1003, 120)
    index.append(1010, 4096)
    index.close()

    assert index.path.read_bytes() == bytes.fromhex(
        "00000003 00000078"  # relative offset 3, position 120
        "0000000a 00001000"  # relative offset 10, position 4096
    )


def test_time_index_writes_big_endian_timestamp_then_relative_offset(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(1_700_000_000_000, 1002)
    index.maybe_append(1_700_000_000_250, 1007)
    index.close()

    assert index.path.read_bytes() == bytes.fromhex(
        "0000018bcfe56800 00000002"  # 1_700_000_000_000, relative offset 2
        "0000018bcfe568fa 00000007"  # 1_700_000_000_250, relative offset 7
    )


def test_writable_index_is_extended_to_whole_entries_with_a_zero_tail(tmp_path):
    index = offset_index(tmp_path, max_index_size=85)
    index.append(1001, 64)
    index.write_pending()

    assert index.path.stat().st_size == 80
    assert index.max_entries == 10
    assert index.path.read_bytes() == bytes.fromhex("00000001 00000040") + bytes(72)

    timestamps = time_index(tmp_path, max_index_size=40)
    assert timestamps.path.stat().st_size == 36
    assert timestamps.max_entries == 3


def test_max_index_size_below_one_entry_is_refused(tmp_path):
    with pytest.raises(ValueError):
        offset_index(tmp_path, max_index_size=7)


def test_size_bytes_counts_entries_only(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(5, 1001)
    index.maybe_append(6, 1002)

    assert index.entries == 2
    assert index.size_bytes == 24


# --- lookups ---------------------------------------------------------------------------------


def test_empty_offset_index_answers_base_offset_and_position_zero(tmp_path):
    index = offset_index(tmp_path)

    assert index.lookup(BASE) == (BASE, 0)
    assert index.lookup(BASE + 500) == (BASE, 0)
    assert index.last_offset == BASE


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (BASE - 5, (BASE, 0)),  # below the segment
        (BASE + 2, (BASE, 0)),  # below the first entry
        (BASE + 3, (BASE + 3, 100)),  # at the first entry
        (BASE + 7, (BASE + 3, 100)),  # between entries
        (BASE + 8, (BASE + 8, 250)),
        (BASE + 20, (BASE + 20, 900)),  # at the last entry
        (BASE + 10**9, (BASE + 20, 900)),  # above the last entry
    ],
)
def test_offset_lookup_finds_greatest_entry_at_or_below(tmp_path, target, expected):
    index = offset_index(tmp_path)
    for offset, position in [(BASE + 3, 100), (BASE + 8, 250), (BASE + 20, 900)]:
        index.append(offset, position)

    assert index.lookup(target) == expected


def test_empty_time_index_answers_minus_one_and_base_offset(tmp_path):
    index = time_index(tmp_path)

    assert index.lookup(10**12) == (-1, BASE)
    assert index.last_entry == (-1, BASE)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (-1, (-1, BASE)),
        (99, (-1, BASE)),  # below the first entry
        (100, (100, BASE + 1)),  # at an entry
        (150, (100, BASE + 1)),  # between entries
        (200, (200, BASE + 5)),
        (300, (300, BASE + 5)),  # at the last entry, whose offset repeats
        (10**15, (300, BASE + 5)),  # above the last entry
    ],
)
def test_time_lookup_finds_greatest_entry_at_or_below(tmp_path, target, expected):
    index = time_index(tmp_path)
    for timestamp, offset in [(100, BASE + 1), (200, BASE + 5), (300, BASE + 5)]:
        index.maybe_append(timestamp, offset)

    assert index.lookup(target) == expected


def test_lookups_agree_with_bisect_across_warm_and_cold_sections(tmp_path):
    # 3000 entries spans well past the newest 8 KiB that a lookup searches first.
    index = offset_index(tmp_path, max_index_size=3000 * 8)
    offsets = [BASE + 3 * n + 1 for n in range(3000)]
    for n, offset in enumerate(offsets):
        index.append(offset, 10 * (n + 1))

    for target in range(BASE - 1, offsets[-1] + 3, 7):
        slot = bisect.bisect_right(offsets, target) - 1
        expected = (offsets[slot], 10 * (slot + 1)) if slot >= 0 else (BASE, 0)
        assert index.lookup(target) == expected


def test_entry_returns_absolute_values_and_rejects_out_of_range(tmp_path):
    offsets = offset_index(tmp_path)
    offsets.append(BASE + 4, 40)
    timestamps = time_index(tmp_path)
    timestamps.maybe_append(77, BASE + 4)

    assert offsets.entry(0) == (BASE + 4, 40)
    assert timestamps.entry(0) == (77, BASE + 4)
    for index in (offsets, timestamps):
        with pytest.raises(IndexError):
            index.entry(1)
        with pytest.raises(IndexError):
            index.entry(-1)


# --- append rules ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "position"),
    [
        (BASE + 5, 60),  # offset equal to the last one
        (BASE + 4, 60),  # offset below the last one
        (BASE + 6, 49),  # position below the last one
    ],
)
def test_offset_append_must_follow_the_last_entry(tmp_path, offset, position):
    index = offset_index(tmp_path)
    index.append(BASE + 5, 50)

    with pytest.raises(ValueError):
        index.append(offset, position)
    assert index.entries == 1


def test_offset_append_accepts_an_unchanged_position(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 5, 50)
    index.append(BASE + 6, 50)

    assert index.lookup(BASE + 6) == (BASE + 6, 50)


@pytest.mark.parametrize(
    ("offset", "position"),
    [
        (BASE - 1, 10),  # below the base offset
        (BASE + 2**31, 10),  # relative offset beyond int32
        (BASE + 1, -1),  # negative position
        (BASE + 1, 2**31),  # position beyond int32
        (BASE, 0),  # all zeros: would read back as free space
    ],
)
def test_offset_append_rejects_what_the_format_cannot_hold(tmp_path, offset, position):
    index = offset_index(tmp_path)

    with pytest.raises(ValueError):
        index.append(offset, position)
    assert index.entries == 0


def test_offset_append_accepts_the_largest_relative_offset(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 2**31 - 1, 2**31 - 1)

    assert index.last_offset == BASE + 2**31 - 1


def test_time_append_ignores_timestamps_not_above_the_last(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(100, BASE + 1)
    index.maybe_append(100, BASE + 2)
    index.maybe_append(90, BASE + 3)

    assert index.entries == 1
    assert index.last_entry == (100, BASE + 1)


def test_time_append_accepts_a_repeated_offset(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(100, BASE + 1)
    index.maybe_append(101, BASE + 1)

    assert index.last_entry == (101, BASE + 1)


@pytest.mark.parametrize("offset", [BASE + 1, BASE - 1, BASE + 2**31])
def test_time_append_rejects_an_offset_below_the_last_or_out_of_range(tmp_path, offset):
    index = time_index(tmp_path)
    index.maybe_append(100, BASE + 2)

    with pytest.raises(ValueError):
        index.maybe_append(200, offset)
    assert index.entries == 1


def test_time_append_skips_epoch_zero_at_the_base_offset(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(0, BASE)

    assert index.entries == 0
    assert index.lookup(0) == (-1, BASE)
    index.maybe_append(0, BASE + 1)
    assert index.last_entry == (0, BASE + 1)


# --- full index ------------------------------------------------------------------------------


def test_full_offset_index_refuses_appends(tmp_path):
    index = offset_index(tmp_path, max_index_size=16)
    index.append(BASE + 1, 10)
    assert not index.is_full()
    index.append(BASE + 2, 20)

    assert index.is_full()
    with pytest.raises(IndexFullError):
        index.append(BASE + 3, 30)
    assert index.entries == 2


def test_a_read_only_index_is_full(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 1, 10)
    index.close()
    read_only = offset_index(tmp_path, writable=False)
    assert read_only.is_full()
    with pytest.raises(IndexFullError):
        read_only.append(BASE + 2, 20)


def test_full_time_index_refuses_appends_but_not_no_ops(tmp_path):
    index = time_index(tmp_path, max_index_size=12)
    index.maybe_append(10, BASE + 1)

    assert index.is_full()
    index.maybe_append(10, BASE + 2)  # not a larger timestamp: nothing to write
    with pytest.raises(IndexFullError):
        index.maybe_append(11, BASE + 2)


# --- truncation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("truncate_at", "remaining"),
    [
        (BASE + 30, 3),  # above the last entry: nothing to drop
        (BASE + 20, 2),  # at an entry: it goes too
        (BASE + 15, 2),  # between entries
        (BASE + 4, 1),
        (BASE + 3, 0),
        (BASE - 7, 0),  # below the segment
    ],
)
def test_offset_truncate_to_drops_entries_at_or_above(tmp_path, truncate_at, remaining):
    index = offset_index(tmp_path)
    entries = [(BASE + 3, 100), (BASE + 8, 250), (BASE + 20, 900)]
    for offset, position in entries:
        index.append(offset, position)

    index.truncate_to(truncate_at)

    assert index.entries == remaining
    assert [index.entry(n) for n in range(remaining)] == entries[:remaining]
    assert index.path.read_bytes()[8 * remaining :] == bytes(80 - 8 * remaining)
    index.append(BASE + 21, 1000)  # appends continue after the truncation point
    assert index.entry(remaining) == (BASE + 21, 1000)


def test_appends_after_a_truncation_follow_the_entry_left_last_not_the_one_dropped(tmp_path):
    offsets, times = offset_index(tmp_path), time_index(tmp_path)
    for offset, position in [(BASE + 3, 100), (BASE + 8, 250), (BASE + 20, 900)]:
        offsets.append(offset, position)
        times.maybe_append(position, offset)

    offsets.truncate_to(BASE + 15)
    times.truncate_to(BASE + 15)

    offsets.append(BASE + 9, 300)  # below the dropped entry (BASE + 20, 900)
    times.maybe_append(300, BASE + 9)
    assert offsets.entry(2) == (BASE + 9, 300) and times.last_entry == (300, BASE + 9)


def test_time_truncate_to_drops_every_entry_with_offset_at_or_above(tmp_path):
    index = time_index(tmp_path)
    for timestamp, offset in [(10, BASE + 1), (20, BASE + 4), (30, BASE + 4), (40, BASE + 9)]:
        index.maybe_append(timestamp, offset)

    index.truncate_to(BASE + 4)

    assert index.entries == 1
    assert index.last_entry == (10, BASE + 1)
    assert index.path.read_bytes()[12:] == bytes(108)


def test_truncate_drops_everything_and_keeps_room(tmp_path):
    index = offset_index(tmp_path)
    for n in range(1, 6):
        index.append(BASE + n, 10 * n)

    index.truncate()

    assert index.entries == 0
    assert index.max_entries == 10
    assert index.path.read_bytes() == bytes(80)
    index.append(BASE + 1, 5)
    assert index.lookup(BASE + 9) == (BASE + 1, 5)


def test_truncating_a_read_only_index_shrinks_its_file(tmp_path):
    index = offset_index(tmp_path)
    for n in range(1, 4):
        index.append(BASE + n, 10 * n)
    index.close()
    read_only = offset_index(tmp_path, writable=False)

    read_only.truncate_to(BASE + 2)

    assert read_only.entries == 1
    assert read_only.path.stat().st_size == 8
    assert read_only.lookup(BASE + 3) == (BASE + 1, 10)


# --- trimming, reopening, resizing -----------------------------------------------------------


def test_trim_keeps_entries_readable_and_leaves_the_index_full(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 3, 100)
    index.append(BASE + 8, 250)

    index.trim_to_valid_size()

    assert index.path.stat().st_size == 16
    assert index.lookup(BASE + 9) == (BASE + 8, 250)
    assert index.is_full()
    with pytest.raises(IndexFullError):
        index.append(BASE + 9, 300)


def test_trimmed_file_reopens_read_only_with_the_same_entries(tmp_path):
    offsets, timestamps = offset_index(tmp_path), time_index(tmp_path)
    for n in range(1, 5):
        offsets.append(BASE + 2 * n, 100 * n)
        timestamps.maybe_append(1000 * n, BASE + 2 * n)
    offsets.trim_to_valid_size()
    timestamps.trim_to_valid_size()
    offsets.close()
    timestamps.close()

    offsets = offset_index(tmp_path, writable=False)
    timestamps = time_index(tmp_path, writable=False)

    assert [offsets.entry(n) for n in range(offsets.entries)] == [
        (BASE + 2 * n, 100 * n) for n in range(1, 5)
    ]
    assert [timestamps.entry(n) for n in range(timestamps.entries)] == [
        (1000 * n, BASE + 2 * n) for n in range(1, 5)
    ]
    assert offsets.is_full() and timestamps.is_full()
    offsets.sanity_check()
    timestamps.sanity_check()


@pytest.mark.parametrize("count", [0, 1, 2, 5, 9, 10])
def test_untrimmed_file_reopens_with_the_entries_before_the_zero_tail(tmp_path, count):
    crashed = offset_index(tmp_path)
    for n in range(1, count + 1):
        crashed.append(BASE + n, 10 * n)
    crashed.write_pending()  # as a flush writes them
    # Not closed: the file keeps its sparse zero tail, as after a crash.

    reopened = offset_index(tmp_path)

    assert reopened.entries == count
    assert reopened.last_offset == BASE + count
    reopened.sanity_check()


def test_entries_still_in_memory_at_a_crash_are_lost_and_the_index_stays_sound(tmp_path):
    index = offset_index(tmp_path, max_index_size=1024)
    for n in range(1, 41):  # 32 go out in one write, 8 wait for the next
        index.append(BASE + n, 10 * n)
    assert index.entries == 40 and index.last_offset == BASE + 40
    # Not closed, as after a crash.

    reopened = offset_index(tmp_path, max_index_size=1024)

    assert reopened.entries == 32
    reopened.sanity_check()
    assert reopened.lookup(BASE + 40) == (BASE + 32, 320)  # a reader scans on from there


def test_a_read_sees_the_entries_still_in_memory(tmp_path):
    index = offset_index(tmp_path, max_index_size=1024)
    for n in range(1, 41):
        index.append(BASE + n, 10 * n)

    assert index.lookup(BASE + 40) == (BASE + 40, 400)
    assert offset_index(tmp_path, max_index_size=1024).entries == 40  # the read wrote them


def test_untrimmed_time_index_reopens_read_only_with_its_entries(tmp_path):
    crashed = time_index(tmp_path)
    for n in range(1, 4):
        crashed.maybe_append(n * 10, BASE + n)
    crashed.write_pending()

    reopened = time_index(tmp_path, writable=False)

    assert reopened.entries == 3
    assert reopened.last_entry == (30, BASE + 3)
    assert reopened.lookup(25) == (20, BASE + 2)


def test_resize_makes_a_trimmed_index_appendable_again(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 1, 10)
    index.close()
    index = offset_index(tmp_path, writable=False)

    index.resize(80)

    assert index.path.stat().st_size == 80
    assert index.max_entries == 10
    index.append(BASE + 2, 20)
    assert index.lookup(BASE + 5) == (BASE + 2, 20)


def test_resize_refuses_to_drop_entries(tmp_path):
    index = offset_index(tmp_path)
    for n in range(1, 4):
        index.append(BASE + n, 10 * n)

    with pytest.raises(ValueError):
        index.resize(16)
    assert index.entries == 3


def test_reopening_a_trimmed_file_writable_extends_it_again(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(10, BASE + 1)
    index.close()

    index = time_index(tmp_path)

    assert index.entries == 1
    assert index.path.stat().st_size == 120
    index.maybe_append(20, BASE + 2)
    assert index.last_entry == (20, BASE + 2)


def test_empty_file_opens_read_only(tmp_path):
    (tmp_path / "00000000000000001000.index").touch()

    index = offset_index(tmp_path, writable=False)

    assert index.entries == 0
    assert index.lookup(BASE + 1) == (BASE, 0)
    assert index.is_full()
    index.sanity_check()
    index.close()


def test_missing_file_is_created(tmp_path):
    index = time_index(tmp_path, writable=False)

    assert index.path.exists()
    assert index.path.stat().st_size == 0


def test_closed_index_refuses_reads(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 1, 10)
    index.close()

    with pytest.raises(ValueError):
        index.lookup(BASE + 1)
    with pytest.raises(ValueError):
        index.resize(80)
    index.close()  # closing again does nothing


# --- corruption ------------------------------------------------------------------------------


def write_file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("writable", [True, False])
def test_length_not_a_multiple_of_the_entry_size_is_corrupt(tmp_path, writable):
    write_file(tmp_path / "00000000000000001000.index", bytes.fromhex("00000001 0000000a 00"))

    index = offset_index(tmp_path, writable=writable)

    with pytest.raises(CorruptIndexError):
        index.sanity_check()


@pytest.mark.parametrize(
    "data",
    [
        bytes.fromhex("00000005 00000010  00000005 00000020"),  # repeated offset
        bytes.fromhex("00000005 00000010  00000003 00000020"),  # offset going back
        bytes.fromhex("00000005 00000010  00000006 00000008"),  # position going back
        bytes.fromhex("ffffffff 00000010"),  # negative relative offset
        bytes.fromhex("00000001 00000010  00000000 00000000  00000002 00000020"),  # hole
    ],
)
@pytest.mark.parametrize("every_entry", [True, False])
def test_unordered_offset_entries_are_corrupt(tmp_path, data, every_entry):
    write_file(tmp_path / "00000000000000001000.index", data)

    with pytest.raises(CorruptIndexError):
        offset_index(tmp_path, writable=False).sanity_check(every_entry)


@pytest.mark.parametrize(
    "data",
    [
        bytes.fromhex("0000000000000064 00000001  0000000000000064 00000002"),
        bytes.fromhex("0000000000000064 00000002  00000000000000c8 00000001"),
        bytes.fromhex("ffffffffffffff00 00000001"),  # negative timestamp
    ],
)
@pytest.mark.parametrize("every_entry", [True, False])
def test_unordered_time_entries_are_corrupt(tmp_path, data, every_entry):
    write_file(tmp_path / "00000000000000001000.timeindex", data)

    with pytest.raises(CorruptIndexError):
        time_index(tmp_path, writable=False).sanity_check(every_entry)


def test_an_entry_out_of_order_between_sound_ends_is_found_only_reading_every_entry(tmp_path):
    write_file(
        tmp_path / "00000000000000001000.index",
        bytes.fromhex("00000001 00000010  00000009 00000090  00000005 00000050  0000000a 000000a0"),
    )
    index = offset_index(tmp_path, writable=False)

    index.sanity_check(every_entry=False)
    with pytest.raises(CorruptIndexError):
        index.sanity_check(every_entry=True)
    index.close()


def test_bytes_after_the_entries_are_corrupt(tmp_path):
    write_file(
        tmp_path / "00000000000000001000.index",
        bytes.fromhex("00000001 00000010") + bytes(8) + bytes.fromhex("00000000 00000001"),
    )

    with pytest.raises(CorruptIndexError):
        offset_index(tmp_path).sanity_check()


def test_truncate_rebuilds_a_corrupt_index(tmp_path):
    write_file(tmp_path / "00000000000000001000.index", bytes.fromhex("00000005 00000010 0007"))
    index = offset_index(tmp_path)
    with pytest.raises(CorruptIndexError):
        index.sanity_check()

    index.truncate()
    index.resize(80)

    index.sanity_check()
    assert index.entries == 0
    assert index.path.read_bytes() == bytes(80)


# --- files -----------------------------------------------------------------------------------


def test_rename_moves_the_file_and_keeps_the_index_usable(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 1, 10)
    old_path = index.path
    new_path = tmp_path / "00000000000000001000.index.deleted"

    index.rename(new_path)
    index.append(BASE + 2, 20)
    index.flush()
    index.close()

    assert index.path == new_path
    assert not old_path.exists()
    assert new_path.read_bytes() == bytes.fromhex("00000001 0000000a  00000002 00000014")


def test_delete_removes_the_file_and_later_flush_and_close_do_nothing(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(10, BASE + 1)

    index.delete()
    index.flush()
    index.close()

    assert not index.path.exists()
    index.delete()  # already gone


def test_flush_from_a_worker_thread_while_appending(tmp_path):
    index = offset_index(tmp_path, max_index_size=8 * 500)
    errors: list[BaseException] = []

    def flush_repeatedly() -> None:
        try:
            for _ in range(20):
                index.flush()
        except BaseException as error:  # surfaced to the test thread below
            errors.append(error)

    worker = threading.Thread(target=flush_repeatedly)
    worker.start()
    for n in range(1, 501):
        index.append(BASE + n, n)
    worker.join()
    index.close()

    assert errors == []
    assert index.path.stat().st_size == 8 * 500


# --- disk space and descriptors --------------------------------------------------------------

MIB = 1 << 20


def allocated_bytes(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_an_empty_writable_index_is_sparse(tmp_path):
    index = offset_index(tmp_path, max_index_size=10 * MIB)

    assert index.path.stat().st_size == 10 * MIB
    assert allocated_bytes(index.path) == 0
    index.close()


def test_appends_allocate_only_the_blocks_their_entries_take(tmp_path):
    index = offset_index(tmp_path, max_index_size=10 * MIB)
    for n in range(1, 1000):
        index.append(BASE + n, 10 * n)

    assert 8 * 999 <= allocated_bytes(index.path) <= 8 * 999 + 64 * 1024
    assert index.lookup(BASE + 500) == (BASE + 500, 5000)
    index.close()


def test_a_time_index_rebuilt_on_a_sparse_file_reads_back(tmp_path):
    index = time_index(tmp_path, max_index_size=12 * 100_000)
    for n in range(1, 2000):
        index.maybe_append(n, BASE + n)
    index.truncate()
    index.maybe_append(7, BASE + 3)

    assert (index.entries, index.last_entry) == (1, (7, BASE + 3))
    assert allocated_bytes(index.path) <= 64 * 1024
    index.sanity_check()
    index.close()


# A full disk, simulated with RLIMIT_FSIZE (which needs no root): with SIGXFSZ ignored, a write
# past the limit fails with EFBIG, as one the disk cannot back fails with ENOSPC. A store into
# a mapped page would not fail at all (or, on a full disk, kill the process with SIGBUS).
_FULL_DISK_SCRIPT = """
import resource, signal, sys
from storage.index import OffsetIndex
index = OffsetIndex(sys.argv[1], 1000, 10 << 20)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (8192, resource.RLIM_INFINITY))
try:
    for n in range(1, 10_000):
        index.append(1000 + n, 10 * n)
except OSError as error:
    print(error.errno, index.entries, index.last_offset, index.lookup(2000))
"""


def test_an_append_the_disk_cannot_take_raises_and_leaves_the_index_as_it_was(tmp_path):
    path = tmp_path / "00000000000000001000.index"
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(errno.EFBIG), "1024", "2024", "(2000,", "10000)"]
    reopened = offset_index(tmp_path, writable=False)
    reopened.sanity_check()
    assert (reopened.entries, reopened.last_offset) == (1024, BASE + 1024)
    reopened.close()


def test_maps_keep_no_descriptor_and_writes_hold_at_most_the_pools(tmp_path):
    descriptor_pool.set_capacity(5)
    # Counted after the pool shrank: descriptors earlier tests of this process left in it may
    # still be evicted below, so the count can only fall by them, never grow.
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    try:
        indexes = [OffsetIndex(tmp_path / f"{n:020d}.index", n, 10 * MIB) for n in range(50)]
        assert len(os.listdir("/proc/self/fd")) <= before
        for index in indexes:
            index.append(index.base_offset + 1, 10)
        assert len(os.listdir("/proc/self/fd")) <= before + 5
        for index in indexes:
            index.close()
        reopened = [OffsetIndex(tmp_path / f"{n:020d}.index", n, 0, writable=False) for n in range(50)]
        assert [index.entries for index in reopened] == [1] * 50
        assert len(os.listdir("/proc/self/fd")) <= before
        for index in reopened:
            index.close()
    finally:
        descriptor_pool.fit_to_open_files_limit()


def test_sanity_check_of_an_untrimmed_sparse_file_reads_only_its_data(tmp_path):
    index = offset_index(tmp_path, max_index_size=10 * MIB)
    for n in range(1, 1000):
        index.append(BASE + n, 10 * n)
    index.write_pending()
    index.release()  # as a crash leaves it: 10 MiB long, entries at the start

    reopened = offset_index(tmp_path, writable=False)
    assert reopened.path.stat().st_size == 10 * MIB
    assert reopened._data_end <= 64 * 1024
    assert reopened._data_ranges(reopened.size_bytes)[-1][1] <= 64 * 1024
    reopened.sanity_check()
    assert (reopened.entries, reopened.last_offset) == (999, BASE + 999)
    reopened.close()


def test_sanity_check_finds_bytes_written_far_into_the_sparse_tail(tmp_path):
    index = offset_index(tmp_path, max_index_size=10 * MIB)
    index.append(BASE + 1, 10)
    index.release()
    with open(index.path, "r+b") as file:
        file.seek(8 * MIB)
        file.write(bytes.fromhex("00000009 00000090"))

    with pytest.raises(CorruptIndexError):
        offset_index(tmp_path, writable=False).sanity_check()
