"""Log.slice and LogSlice: a range of a log taken on the loop reads the same batches on another
thread whatever the log does after it was taken."""

import os
import shutil
import threading

from protocol.records import iter_records
from storage.log_config import LogConfig
from tests.unit.storage.conftest import batch


def append(log, *values):
    log.append_as_leader(memoryview(batch(*values)), leader_epoch=0)
    log.high_watermark = log.log_end_offset


def first_offsets(log_slice, buffer_bytes=1 << 20):
    return [header.base_offset for header, _ in log_slice.batches(buffer_bytes)]


def values(log_slice, buffer_bytes=1 << 20):
    return [record.value for _, data in log_slice.batches(buffer_bytes) for record in iter_records(data)]


def log_of_three_segments(open_log):
    log = open_log(LogConfig(index_interval_bytes=100))
    for segment in range(3):
        for i in range(4):
            append(log, f"{segment}-{i}".encode())
        log.roll()
    assert len(log.segments) == 4  # three full, the active one empty
    return log


def test_a_slice_holds_the_batches_of_its_range_across_segments(open_log):
    log = log_of_three_segments(open_log)
    with log.slice(0, log.log_end_offset) as whole:
        assert first_offsets(whole) == list(range(12))
    with log.slice(2, 9) as middle:
        assert first_offsets(middle) == [2, 3, 4, 5, 6, 7, 8]
    with log.slice(5, 5) as empty:
        assert first_offsets(empty) == []


def test_batches_larger_than_the_buffer_are_read_whole(open_log):
    log = open_log()
    append(log, b"x" * 5000, b"y")
    append(log, b"z" * 3000)
    with log.slice(0, log.log_end_offset) as whole:
        assert values(whole, buffer_bytes=100) == [b"x" * 5000, b"y", b"z" * 3000]


def test_a_slice_reads_its_range_after_the_log_is_closed_and_its_files_deleted(open_log):
    log = log_of_three_segments(open_log)
    taken = log.slice(0, log.log_end_offset)
    append(log, b"appended after the slice was taken")
    log.close()
    shutil.rmtree(log.directory)
    with taken:
        assert values(taken) == [f"{s}-{i}".encode() for s in range(3) for i in range(4)]


def test_a_slice_read_by_another_thread_needs_nothing_of_the_log(open_log):
    log = log_of_three_segments(open_log)
    taken = log.slice(0, log.log_end_offset)
    log.segments = []  # were the thread to look at the log, it would find nothing
    found: list[int] = []
    reader = threading.Thread(target=lambda: found.extend(first_offsets(taken)))
    reader.start()
    reader.join()
    assert found == list(range(12))


def test_closing_a_slice_closes_its_own_descriptors_only(open_log):
    log = log_of_three_segments(open_log)
    before = set(os.listdir("/proc/self/fd"))
    taken = log.slice(0, log.log_end_offset)
    assert len(set(os.listdir("/proc/self/fd")) - before) == 3  # one per segment in the range
    taken.close()
    assert set(os.listdir("/proc/self/fd")) == before
    append(log, b"the log's own files are still open")
    with log.slice(0, log.log_end_offset) as whole:
        assert len(first_offsets(whole)) == 13


def test_a_file_truncated_after_the_slice_was_taken_ends_it_early(open_log):
    log = open_log()
    for i in range(5):
        append(log, str(i).encode())
    taken = log.slice(0, log.log_end_offset)
    log.truncate_to(2)
    with taken:
        assert first_offsets(taken, buffer_bytes=1 << 20) == [0, 1]
