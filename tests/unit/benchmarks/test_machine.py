import os

from benchmarks.machine import recycle_page_cache


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
