import ctypes
import errno
import logging
import os

import pytest

from storage import descriptor_pool, records_file
from storage.records_file import DeferredWrites, RecordsFile
from tests.compat.test_storage_failure import tmpfs


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def at_most():
    """Bound the process's open records files for one test, then size the pool as before."""

    def set_bound(capacity: int) -> None:
        descriptor_pool.set_capacity(capacity)

    yield set_bound
    descriptor_pool.fit_to_open_files_limit()


def test_files_past_the_bound_let_go_of_their_descriptors_and_reopen_when_used(tmp_path, at_most):
    at_most(4)
    before = open_descriptors()
    files = [RecordsFile.open(str(tmp_path / f"{n}.log")) for n in range(20)]
    for n, file in enumerate(files):
        file.append(b"file %d" % n)

    assert open_descriptors() - before <= 4
    assert [file.read(0, file.size) for file in files] == [b"file %d" % n for n in range(20)]
    assert open_descriptors() - before <= 4
    for file in files:
        file.close()


def test_the_most_recently_used_files_keep_their_descriptors(tmp_path, at_most):
    at_most(2)
    first, second, third = (RecordsFile.open(str(tmp_path / f"{n}.log")) for n in range(3))
    first.append(b"a")  # first is now the most recent, second the least

    assert first.holds_descriptor and third.holds_descriptor
    assert not second.holds_descriptor
    for file in (first, second, third):
        file.close()


def test_a_region_keeps_its_descriptor_after_the_pool_and_the_file_let_go(tmp_path, at_most):
    at_most(1)
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.append(b"0123456789")
    region = records.region(2, 5)
    RecordsFile.open(str(tmp_path / "1.log")).close()  # takes the only place in the pool
    records.close()
    os.unlink(tmp_path / "0.log")

    assert not records.holds_descriptor
    assert region.read() == b"23456"
    os.fstat(region.fd)  # still open


def test_a_renamed_file_reopens_by_its_new_path(tmp_path, at_most):
    at_most(1)
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.append(b"abc")
    records.rename(str(tmp_path / "0.log.deleted"))
    other = RecordsFile.open(str(tmp_path / "1.log"))

    assert not records.holds_descriptor
    assert records.read(0, 3) == b"abc"
    records.close()
    other.close()


def test_a_closed_file_refuses_reads_and_writes(tmp_path):
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.append(b"abc")
    records.close()

    for use in (lambda: records.read(0, 3), lambda: records.append(b"d")):
        with pytest.raises(OSError) as raised:
            use()
        assert raised.value.errno == errno.EBADF


def test_a_flush_of_a_file_closed_meanwhile_does_nothing(tmp_path):
    """A log's flush runs on its dir's thread with the segments it chose on the loop; a segment
    deleted meanwhile (file.delete.delay.ms 0, the cleaner's swap) had its fsync raise EBADF,
    which took the whole log dir offline (a CI run of tests/spark/test_source.py)."""
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.append(b"abc")
    records.close()
    os.unlink(records.path)

    records.flush()
    assert records.is_closed()


def test_a_read_only_file_is_not_created_and_reopens_read_only(tmp_path, at_most):
    with pytest.raises(FileNotFoundError):
        RecordsFile.open(str(tmp_path / "missing.log"), read_only=True)
    (tmp_path / "0.log").write_bytes(b"xyz")
    os.chmod(tmp_path / "0.log", 0o444)
    at_most(1)
    records = RecordsFile.open(str(tmp_path / "0.log"), read_only=True)
    RecordsFile.open(str(tmp_path / "1.log")).close()

    assert records.read(0, 3) == b"xyz"
    records.close()


# Blocks reserved ahead of appends (fallocate, FALLOC_FL_KEEP_SIZE). The machine's /tmp (ext4)
# and tmpfs both support it; a file system without it is the faked case at the end.
BLOCK = 4096
APPEND = b"r" * 16 * 1024


def allocated(path) -> int:
    return os.stat(path).st_blocks * 512


def test_large_appends_reserve_blocks_past_the_end_and_the_size_stays_the_end(tmp_path):
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.reserve_ahead = True
    for _ in range(3):
        records.append(APPEND)

    assert os.stat(records.path).st_size == records.size == 3 * len(APPEND)
    assert allocated(records.path) >= records_file._RESERVE_MIN
    assert records.read(len(APPEND), len(APPEND)) == APPEND
    records.close()


def test_appends_smaller_than_a_block_or_to_a_file_not_reserving_reserve_nothing(tmp_path):
    small = RecordsFile.open(str(tmp_path / "0.log"))
    small.reserve_ahead = True
    for _ in range(100):
        small.append(b"s" * 100)
    inactive = RecordsFile.open(str(tmp_path / "1.log"))
    inactive.append(APPEND)

    assert allocated(small.path) <= 3 * BLOCK
    assert allocated(inactive.path) <= len(APPEND) + BLOCK
    small.close()
    inactive.close()


def test_stopping_gives_the_reserved_blocks_back_and_keeps_the_file_times(tmp_path):
    # A segment whose records carry no timestamps is as old as its .log's modification time.
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.reserve_ahead = True
    records.append(APPEND)
    os.utime(records.path, ns=(1_000_000_000, 2_000_000_000))
    records.stop_reserving()

    assert allocated(records.path) <= len(APPEND) + BLOCK
    assert os.stat(records.path).st_mtime_ns == 2_000_000_000
    records.append(APPEND)  # appends go on, block by block
    assert allocated(records.path) <= 2 * len(APPEND) + BLOCK
    records.close()


def test_truncating_gives_the_reserved_blocks_back(tmp_path):
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.reserve_ahead = True
    records.append(APPEND)
    records.truncate_to(100)

    assert os.stat(records.path).st_size == 100
    assert allocated(records.path) <= BLOCK
    records.close()


def test_a_reservation_a_crash_left_is_given_back_on_opening(tmp_path):
    crashed = RecordsFile.open(str(tmp_path / "0.log"))
    crashed.reserve_ahead = True
    crashed.append(APPEND)
    crashed.close()  # closing the file alone keeps the reservation, as a crash would
    assert allocated(crashed.path) >= records_file._RESERVE_MIN
    os.utime(crashed.path, ns=(1_000_000_000, 2_000_000_000))

    reopened = RecordsFile.open(str(tmp_path / "0.log"))

    assert reopened.size == len(APPEND)
    assert allocated(reopened.path) <= len(APPEND) + BLOCK
    assert os.stat(reopened.path).st_mtime_ns == 2_000_000_000
    reopened.close()


def test_a_file_system_short_of_room_gets_no_reservations(tmp_path):
    # Below the floor of free room a reservation would take what another partition's append
    # needs: appends allocate block by block, as without reservations.
    with tmpfs(tmp_path / "small", "16m") as small:
        records = RecordsFile.open(str(small / "0.log"))
        records.reserve_ahead = True
        for _ in range(4):
            records.append(APPEND)

        assert allocated(records.path) <= 4 * len(APPEND) + BLOCK
        assert records.reserve_ahead  # asked again once the file system has room
        records.close()


@pytest.mark.pure_python
def test_a_failed_reservation_stops_reserving_and_the_append_goes_on(tmp_path, monkeypatch, caplog):
    def unsupported(fd: int, mode: int, offset: int, length: int) -> int:
        ctypes.set_errno(errno.EOPNOTSUPP)
        return -1

    monkeypatch.setattr(records_file, "_fallocate", unsupported)
    caplog.set_level(logging.INFO, logger=records_file.__name__)
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.reserve_ahead = True
    records.append(APPEND)
    records.append(APPEND)

    assert records.read(0, 2 * len(APPEND)) == APPEND + APPEND
    assert not records.reserve_ahead
    assert [r.getMessage() for r in caplog.records] == [
        f"{records.path}: no longer reserving blocks ahead of appends: {os.strerror(errno.EOPNOTSUPP)}"
    ]
    records.close()


def on_disk(records: RecordsFile) -> bytes:
    with open(records.path, "rb") as f:
        return f.read()


def test_appends_while_deferring_wait_in_memory_and_go_out_together_at_finish(tmp_path, pwritev_calls):
    failures = []
    writes = DeferredWrites(lambda path, exc: failures.append(path))
    records = RecordsFile.open(str(tmp_path / "0.log"))
    writes.start()
    positions = [records.append(b"batch %d;" % n, writes) for n in range(3)]

    assert positions == [0, 8, 16] and records.size == 24
    assert on_disk(records) == b""
    writes.finish()
    assert on_disk(records) == b"batch 0;batch 1;batch 2;"
    assert pwritev_calls == [3]
    assert writes.failures == 0 and not failures
    records.append(b"batch 3;", writes)  # not deferring: written at once
    assert on_disk(records)[24:] == b"batch 3;"
    records.close()


def test_every_file_that_waits_is_written_at_finish_in_order(tmp_path, pwritev_calls):
    # More appends than one pwritev takes go out in as many as they need, in order.
    writes = DeferredWrites(lambda path, exc: None)
    files = [RecordsFile.open(str(tmp_path / f"{n}.log")) for n in range(2)]
    writes.start()
    for n in range(records_file._MAX_IOV + 3):
        for file in files:
            file.append(b"%05d" % n, writes)
    writes.finish()

    expected = b"".join(b"%05d" % n for n in range(records_file._MAX_IOV + 3))
    assert [on_disk(file) for file in files] == [expected, expected]
    assert pwritev_calls == [records_file._MAX_IOV, 3] * 2
    for file in files:
        file.close()


@pytest.mark.parametrize(
    "use",
    [
        lambda records: records.read(0, 4),
        lambda records: records.region(0, 4),
        lambda records: records.stop_reserving(),
        lambda records: records.truncate_to(records.size),
        lambda records: records.close(),
    ],
    ids=["read", "region", "stop_reserving", "truncate_to", "close"],  # batches() reads with read()
)
def test_a_file_writes_the_appends_waiting_in_memory_before_it_is_read_truncated_or_closed(tmp_path, use):
    writes = DeferredWrites(lambda path, exc: None)
    records = RecordsFile.open(str(tmp_path / "0.log"))
    writes.start()
    records.append(b"waiting", writes)
    use(records)

    assert on_disk(records) == b"waiting"
    writes.finish()  # nothing left to write
    assert on_disk(records) == b"waiting"
    records.close()


def test_a_deferred_write_that_fails_is_counted_and_reported_and_the_others_still_written(tmp_path):
    failures = []
    writes = DeferredWrites(lambda path, exc: failures.append((path, exc.errno)))
    with tmpfs(tmp_path / "small", "1m") as small:
        full = RecordsFile.open(str(small / "0.log"))
        healthy = RecordsFile.open(str(tmp_path / "0.log"))
        writes.start()
        full.append(b"x" * (2 * 1024 * 1024), writes)
        healthy.append(b"kept", writes)
        writes.finish()

        assert writes.failures == 1
        assert failures == [(full.path, errno.ENOSPC)]
        assert on_disk(healthy) == b"kept"
        full.close()
        healthy.close()


def _reservations(monkeypatch, seconds_between_calls: float) -> list[int]:
    """The length of each reservation while 16 KiB appends go on, with the clock advancing
    `seconds_between_calls` at every reading."""
    clock = iter(range(1, 10_000))
    monkeypatch.setattr(records_file, "monotonic", lambda: next(clock) * seconds_between_calls)
    asked: list[int] = []
    monkeypatch.setattr(records_file, "_fallocate", lambda fd, mode, start, length: asked.append(start + length) or 0)
    return asked


@pytest.mark.pure_python
def test_reservations_used_up_quickly_double_up_to_the_most(tmp_path, monkeypatch):
    reserved_ends = _reservations(monkeypatch, 0.01)
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.reserve_ahead = True
    for _ in range(2_000):
        records.append(APPEND)

    steps = [b - a for a, b in zip([0, *reserved_ends], reserved_ends)]
    least, most = records_file._RESERVE_MIN, records_file._RESERVE_MAX
    assert steps[:5] == [least, 2 * least, 4 * least, 8 * least, most]
    assert set(steps[5:]) == {most}
    records.close()


@pytest.mark.pure_python
def test_reservations_used_up_slowly_stay_small(tmp_path, monkeypatch):
    reserved_ends = _reservations(monkeypatch, 2 * records_file._BUSY_S)
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.reserve_ahead = True
    for _ in range(200):
        records.append(APPEND)

    steps = [b - a for a, b in zip([0, *reserved_ends], reserved_ends)]
    assert set(steps) == {records_file._RESERVE_MIN}
    records.close()


def test_a_file_appended_to_without_pause_reserves_more_than_the_least(tmp_path):
    # Without fakes, so that the compiled module is held to it too: 48 appends of 16 KiB use up
    # the first two reservations, which takes milliseconds, far under _BUSY_S.
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.reserve_ahead = True
    for _ in range(250):
        records.append(APPEND)

    assert allocated(records.path) - records.size > 2 * records_file._RESERVE_MIN
    assert records.read(249 * len(APPEND), len(APPEND)) == APPEND
    records.close()
