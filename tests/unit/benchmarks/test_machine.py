import errno
import os

import pytest

from benchmarks.machine import append_file, receive_append_loopback, recycle_page_cache


def test_recycle_page_cache_leaves_no_file(tmp_path):
    path = tmp_path / "recycle.bench"

    seconds = recycle_page_cache(str(path), 3 * 64 * 1024, chunk_bytes=64 * 1024)

    assert seconds >= 0
    assert not path.exists()
    assert os.listdir(tmp_path) == []


def test_recycle_page_cache_replaces_a_leftover_file(tmp_path):
    path = tmp_path / "recycle.bench"
    path.write_bytes(b"left from an interrupted run")

    recycle_page_cache(str(path), 64 * 1024, chunk_bytes=64 * 1024)

    assert not path.exists()


def test_append_file_writes_the_bytes_asked_with_or_without_reserving(tmp_path):
    for reserve_ahead in (False, True):
        path = tmp_path / f"append-{reserve_ahead}.bench"
        path.write_bytes(b"left from an interrupted run")

        appended = append_file(str(path), 64 * 1024, 5 * 64 * 1024, reserve_ahead=reserve_ahead)

        assert appended.bytes == 5 * 64 * 1024 and not appended.timed_out
        assert os.stat(path).st_size == appended.bytes


def test_receive_append_loopback_appends_every_chunk_the_sender_sent(tmp_path):
    path = tmp_path / "receive.bench"
    path.write_bytes(b"left from an interrupted run")

    received = receive_append_loopback(str(path), 64 * 1024, 7 * 64 * 1024)

    assert received.bytes == 7 * 64 * 1024 and not received.timed_out
    assert os.stat(path).st_size == received.bytes
    # both sides did work in the timed span, and none of it took longer than the span on one core
    assert 0 < received.sender_cpu and 0 < received.receiver_cpu <= received.seconds + 0.01


def test_receive_append_loopback_stops_at_its_deadline(tmp_path):
    path = tmp_path / "receive.bench"

    received = receive_append_loopback(str(path), 64 * 1024, 1 << 40, deadline_s=0.0)

    assert received.timed_out and received.bytes == 0
    assert os.stat(path).st_size == 0
    assert received.sender_cpu is None and received.receiver_cpu is None  # no whole span to count


def test_receive_append_loopback_on_a_writer_thread_appends_every_chunk_the_sender_sent(tmp_path):
    path = tmp_path / "receive.bench"

    received = receive_append_loopback(str(path), 64 * 1024, 9 * 64 * 1024, writer_thread=True)

    assert received.bytes == 9 * 64 * 1024 and not received.timed_out
    assert os.stat(path).st_size == received.bytes
    # the two threads' CPU together, which may exceed the span on one core
    assert 0 < received.sender_cpu and 0 < received.receiver_cpu <= 2 * received.seconds + 0.01


def test_receive_append_loopback_on_a_writer_thread_stops_at_its_deadline(tmp_path):
    path = tmp_path / "receive.bench"

    received = receive_append_loopback(str(path), 64 * 1024, 1 << 40, deadline_s=0.0, writer_thread=True)

    assert received.timed_out and received.bytes == 0
    assert os.stat(path).st_size == 0
    assert received.sender_cpu is None and received.receiver_cpu is None


def test_a_failed_append_on_the_writer_thread_ends_the_run_with_its_error(tmp_path, monkeypatch):
    from storage.records_file import RecordsFile

    def full_disk(self, data, writes=None):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RecordsFile, "append", full_disk)

    with pytest.raises(RuntimeError, match="the writer thread failed") as raised:
        receive_append_loopback(str(tmp_path / "receive.bench"), 64 * 1024, 64 * 64 * 1024, writer_thread=True)

    assert isinstance(raised.value.__cause__, OSError) and raised.value.__cause__.errno == errno.ENOSPC
