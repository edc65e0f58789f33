import os

from benchmarks.machine import append_file, recycle_page_cache


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
