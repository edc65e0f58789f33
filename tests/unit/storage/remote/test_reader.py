"""Reading remote segments: range reads from the offset index's position, by chunks through the
bounded cache, whole batches within the byte limit; timestamp lookups; the cache's bound."""

import asyncio

import pytest

from protocol.record_batch import iter_batches
from storage.remote import reader as reader_module
from storage.remote.reader import ByteCache, RemoteLogReader
from storage.log_config import LogConfig
from tests.unit.storage.remote.test_manager import TIP, MemoryTopic, Replica, manager_over, run
from tests.unit.storage.conftest import batch


@pytest.fixture
def copied(open_log, tmp_path, monkeypatch):
    """A log of 40 two-record batches (timestamps 5000 + 10 * batch) all copied to a store, read
    in 100-byte chunks, so batches straddle chunks."""
    monkeypatch.setattr(reader_module, "CHUNK_BYTES", 100)
    log = open_log(LogConfig(remote_storage_enable=True, segment_bytes=1200, retention_ms=-1, index_interval_bytes=200))
    for i in range(40):
        log.append_as_leader(memoryview(batch(b"a%d" % i, b"b" * 30, timestamp=5000 + 10 * i)), leader_epoch=0)
    log.high_watermark = log.log_end_offset
    topic = MemoryTopic()
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    reading = manager_over(topic, tmp_path / "store")
    yield log, reading
    reading.shutdown()


def _base_offsets(data: bytes) -> list[int]:
    return [header.base_offset for _, header in iter_batches(memoryview(data))]


def test_reads_match_the_local_log_from_any_offset(copied):
    log, manager = copied
    reader = RemoteLogReader(manager.store, cache_bytes=1 << 20)
    for segment in manager.cache.state(TIP).copied:
        for offset in range(segment.start_offset, segment.end_offset + 1):
            local = log.read(offset, 250, log.high_watermark, True).read()
            local = local[: _whole_batches_within(local, 250)]
            assert reader.read(segment, offset, 250, True) == local


def _whole_batches_within(data: bytes, limit: int) -> int:
    end = 0
    for position, header in iter_batches(memoryview(data)):
        if position + header.size > limit and end:
            break
        end = position + header.size
    return end


def test_the_first_batch_comes_whatever_its_size_only_when_asked(copied):
    _log, manager = copied
    reader = RemoteLogReader(manager.store, cache_bytes=1 << 20)
    segment = manager.cache.state(TIP).copied[0]
    assert _base_offsets(reader.read(segment, 0, 10, True)) == [0]
    assert reader.read(segment, 0, 10, False) == b""


def test_timestamps_are_found_through_the_time_index(copied):
    _log, manager = copied
    reader = RemoteLogReader(manager.store, cache_bytes=1 << 20)
    segments = manager.cache.state(TIP).copied
    last = segments[-1]

    assert asyncio.run(manager.offset_for_timestamp(TIP, 5000 + 10 * 7, 0)) == (5070, 14)
    assert asyncio.run(manager.offset_for_timestamp(TIP, 5071, 0)) == (5071, 15)
    assert asyncio.run(manager.offset_for_timestamp(TIP, 5071, 16)) == (5080, 16)  # from the log start on
    assert reader.offset_for_timestamp(last, 10**9, 0) is None


def test_the_cache_keeps_to_its_bound_dropping_the_least_recently_used():
    cache = ByteCache(10)
    loads = []

    def load(value: bytes):
        return lambda: loads.append(value) or value

    cache.get("a", load(b"aaaa"))
    cache.get("b", load(b"bbbb"))
    cache.get("a", load(b"aaaa"))  # a is now the most recently used
    cache.get("c", load(b"cccc"))  # over 10 bytes: b goes
    assert cache.size == 8
    cache.get("a", load(b"aaaa"))
    cache.get("b", load(b"bbbb"))
    assert loads == [b"aaaa", b"bbbb", b"cccc", b"bbbb"]
    assert cache.get("big", load(b"x" * 11)) == b"x" * 11 and cache.size <= 10  # too big to keep
