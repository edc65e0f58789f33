import asyncio
import os
import struct
import time

import crc32c

import pytest

from protocol.compression import Compression
from protocol.errors import CorruptRecordError, InvalidRecordError, UnsupportedMessageFormatError
from protocol.record_batch import BatchHeader, TimestampType, crc_is_valid, iter_batches, set_base_offset
from protocol.records import iter_records
from storage.errors import (
    InvalidProducerEpochError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage.index import OffsetIndex, TimeIndex
from storage.log_config import LogConfig
from storage.log import InlineScheduler, Log
from storage.records_file import DeferredWrites
from storage.txn_index import AbortedTxn
from tests.unit.storage.conftest import TP, batch


def read_all(log, start=0):
    """Every record from `start` to the high watermark, following the log like a consumer."""
    records, offset = [], start
    while offset < log.high_watermark:
        region = log.read(offset, 1 << 20, log.high_watermark, min_one_batch=True)
        data = region.read()
        for _, header in iter_batches(data):
            whole = data[_ : _ + header.size]
            records += [r for r in iter_records(whole) if r.offset >= offset]
        offset = records[-1].offset + 1
    return records


def append(log, *values, **kwargs):
    result = log.append_as_leader(memoryview(batch(*values, **kwargs)), leader_epoch=3)
    log.high_watermark = log.log_end_offset
    return result


def test_append_assigns_offsets_and_reads_back(open_log):
    log = open_log()
    first = append(log, b"a", b"b")
    second = append(log, b"c")
    assert (first.first_offset, first.last_offset, second.first_offset) == (0, 1, 2)
    assert log.log_end_offset == 3
    assert [(r.offset, r.value) for r in read_all(log)] == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_stored_batches_carry_offsets_and_leader_epoch_with_a_valid_crc(open_log):
    log = open_log()
    append(log, b"a")
    append(log, b"b", b"c")
    data = log.read(0, 1 << 20, log.high_watermark, True).read()
    headers = [h for _, h in iter_batches(data)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 3), (1, 3)]
    assert all(crc_is_valid(data[p : p + h.size]) for p, h in iter_batches(data))


def test_read_limits_and_the_first_batch_rule(open_log):
    log = open_log()
    for i in range(5):
        append(log, bytes([i]) * 1000)
    one = BatchHeader.from_buffer(log.read(0, 1 << 20, 5, True).read()).size
    assert len(log.read(0, 10, 5, min_one_batch=True)) == one  # KIP-74: a whole batch anyway
    assert log.read(0, 0, 5, min_one_batch=False) is None
    assert len(log.read(1, 2 * one + 10, 5, True)) == 2 * one  # ends at the last whole batch
    assert len(log.read(1, one - 1, 5, min_one_batch=False) or ()) == 0
    assert log.read(5, 1000, 5, True) is None  # caught up
    assert log.read(1, 1 << 20, max_offset=3, min_one_batch=True).length == 2 * one


def test_reads_end_at_whole_batches_anywhere_in_a_segment(open_log):
    log = open_log(LogConfig(index_interval_bytes=300))
    for i in range(200):
        append(log, bytes([i % 256]) * (20 + i % 50))
    for offset, limit in [(0, 5000), (37, 1234), (150, 777), (199, 10)]:
        data = log.read(offset, limit, log.high_watermark, True).read()
        positions = [(p, h.size) for p, h in iter_batches(data)]
        assert sum(size for _, size in positions) == len(data)  # nothing partial at the end
        assert len(data) <= limit or len(positions) == 1


def test_out_of_range_reads(open_log):
    log = open_log()
    append(log, b"a")
    assert log.read(1, 100, 1, True) is None  # at the log end: in range, nothing to read yet
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100, 1, True)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100, 1, True)


def test_segments_roll_on_size_and_reads_cross_them(open_log):
    log = open_log(LogConfig(segment_bytes=3000, index_interval_bytes=100))
    for i in range(20):
        append(log, bytes([i]) * 500)
    assert len(log.segments) == 4  # five ~575-byte batches fit in 3000 bytes
    assert [s.base_offset for s in log.segments] == sorted(s.base_offset for s in log.segments)
    assert [r.value[0] for r in read_all(log)] == list(range(20))
    assert [r.value[0] for r in read_all(log, start=13)] == list(range(13, 20))


def test_only_the_active_segment_keeps_blocks_reserved_ahead_and_closing_gives_them_back(open_log):
    # storage.records_file reserves blocks ahead of large appends to the active segment.
    def past_end(segment) -> int:
        stat = os.stat(segment.records.path)
        return stat.st_blocks * 512 - stat.st_size

    log = open_log(LogConfig(segment_bytes=100_000))
    for _ in range(8):
        append(log, b"x" * 20_000)
    rolled, active = log.segments[0], log.segments[-1]

    assert len(log.segments) == 2
    assert past_end(rolled) <= 4096
    assert past_end(active) >= 100_000
    log.close()
    assert past_end(active) <= 4096


def test_roll_on_time_uses_record_timestamps(open_log):
    log = open_log(LogConfig(segment_ms=1000))
    append(log, b"a", timestamp=10_000)
    append(log, b"b", timestamp=10_500)
    assert len(log.segments) == 1
    append(log, b"c", timestamp=11_001)
    assert len(log.segments) == 2


def test_a_compacted_topic_rolls_at_max_compaction_lag_once_its_config_says_so(open_log):
    log = open_log(LogConfig(segment_ms=1000))
    append(log, b"a", timestamp=10_000)
    append(log, b"b", timestamp=10_500)
    assert len(log.segments) == 1
    log.update_config(LogConfig(segment_ms=1000, cleanup_policy="compact", max_compaction_lag_ms=400))
    append(log, b"c", key=b"k", timestamp=10_501)
    assert len(log.segments) == 2


class _IndexWritesAsked:  # a LogScheduler (InlineScheduler, compiled, takes no subclass)
    """Counts the index writes a log asks for, and does none: the entries stay in memory. The
    rest of its work it does at once, as InlineScheduler."""

    def __init__(self) -> None:
        self.index_writes_asked = 0
        self._inline = InlineScheduler()

    def write_index_entries_soon(self, log) -> None:
        self.index_writes_asked += 1

    def __getattr__(self, name: str):
        return getattr(self._inline, name)


def test_a_flush_finds_every_index_entry_in_the_files_it_fsyncs(open_log):
    log = open_log(LogConfig(index_interval_bytes=50))
    log.scheduler = _IndexWritesAsked()  # the entries stay in memory until the flush
    for i in range(10):  # an index entry each, fewer than the index keeps in memory
        append(log, b"x" * 80, timestamp=1_000 + i)
    segment = log.active_segment
    flushed = []

    class FilesReadAtFlush:  # a LogScheduler
        def flush(self, log, up_to_offset):
            flushed.extend((
                OffsetIndex(segment.offset_index.path, segment.base_offset, 0, writable=False).entries,
                TimeIndex(segment.time_index.path, segment.base_offset, 0, writable=False).entries,
            ))

    log.scheduler = FilesReadAtFlush()
    log.flush()

    assert flushed == [segment.offset_index.entries, segment.time_index.entries] and flushed[0] >= 9


def test_a_flush_finds_the_appends_a_connection_deferred_in_the_files_it_fsyncs(open_log):
    log = open_log(LogConfig())
    writes = log.deferred_writes = DeferredWrites(lambda path, exc: None)
    segment = log.active_segment
    sizes_at_fsync = []

    class FilesReadAtFlush:  # a LogScheduler
        def flush(self, log, up_to_offset):
            sizes_at_fsync.append(os.path.getsize(segment.records.path))

    log.scheduler = _IndexWritesAsked()  # which would write the appends too
    writes.start()
    append(log, b"deferred")
    assert os.path.getsize(segment.records.path) == 0
    log.scheduler = FilesReadAtFlush()
    log.flush()
    writes.finish()

    assert sizes_at_fsync == [segment.size] and segment.size > 0


class _HeldFlushes:  # a LogScheduler
    """Starts no fsync: records the offsets each flush is asked to cover up to, and gives a
    future the test ends (as the log manager's ends when its thread's fsync does)."""

    def __init__(self, loop) -> None:
        self.loop = loop
        self.asked: list[tuple[int, object]] = []
        self._inline = InlineScheduler()

    def flush(self, log, up_to_offset):
        future = self.loop.create_future()
        truncations = log.truncations

        def done(f):
            if not f.cancelled() and f.exception() is None:
                log.mark_flushed(up_to_offset, truncations)

        future.add_done_callback(done)  # first, as the log manager's: the log marked flushed
        self.asked.append((up_to_offset, future))
        return future

    def end(self, number: int, failure: OSError | None = None) -> None:
        future = self.asked[number][1]
        future.set_result(0.0) if failure is None else future.set_exception(failure)

    def __getattr__(self, name: str):
        return getattr(self._inline, name)


def _with_held_flushes(open_log, scenario) -> None:
    async def run_it():
        log = open_log(LogConfig(flush_messages=1))
        log.scheduler = flushes = _HeldFlushes(asyncio.get_running_loop())
        await scenario(log, flushes)

    asyncio.run(run_it())


def _settled():
    return asyncio.sleep(0)  # one turn of the loop: the futures' callbacks run


def test_appends_made_while_a_flush_is_under_way_share_the_next_fsync(open_log):
    async def scenario(log, flushes):
        first = append(log, b"a")
        second, third = append(log, b"b"), append(log, b"c")
        assert [offset for offset, _ in flushes.asked] == [1]  # one fsync at a time
        assert first.flush is flushes.asked[0][1]
        assert second.flush is third.flush and not second.flush.done()

        flushes.end(0)
        await _settled()
        assert [offset for offset, _ in flushes.asked] == [1, 3]  # the next covers both
        assert first.flush.done() and not third.flush.done()
        fourth = append(log, b"d")  # while the second runs: waits for a third
        flushes.end(1)
        await _settled()
        assert third.flush.done() and third.flush.exception() is None and log.recovery_point == 3
        assert not fourth.flush.done() and [offset for offset, _ in flushes.asked] == [1, 3, 4]

    _with_held_flushes(open_log, scenario)


def test_appends_waiting_for_the_next_fsync_fail_with_the_one_under_way(open_log):
    async def scenario(log, flushes):
        append(log, b"a")
        queued = append(log, b"b")
        flushes.end(0, OSError(5, "Input/output error"))
        await _settled()
        assert isinstance(queued.flush.exception(), OSError)
        assert len(flushes.asked) == 1 and log.recovery_point == 0  # no fsync after a failed one

    _with_held_flushes(open_log, scenario)


def test_a_flush_under_way_at_a_truncation_vouches_for_nothing_appended_after_it(open_log):
    # A follower cuts its log while the fsync of its old suffix runs, and takes new records in
    # its place: that fsync may have run before they were written.
    async def scenario(log, flushes):
        append(log, b"a")
        append(log, b"b", b"c")  # waits for the next fsync
        flushes.end(0)
        await _settled()
        assert [offset for offset, _ in flushes.asked] == [1, 3] and log.recovery_point == 1
        log.truncate_to(1)  # b and c go
        again = append(log, b"z")  # offset 1 again, below the flush under way's 3
        assert again.flush is not flushes.asked[1][1]
        flushes.end(1)
        await _settled()
        assert log.recovery_point == 1  # not 2: z may be only in the page cache
        assert [offset for offset, _ in flushes.asked] == [1, 3, 2] and not again.flush.done()
        flushes.end(2)
        await _settled()
        assert again.flush.done() and log.recovery_point == 2

    _with_held_flushes(open_log, scenario)


def test_an_append_below_flush_messages_does_not_wait_for_the_next_fsync(open_log):
    async def scenario(log, flushes):
        log.update_config(LogConfig(flush_messages=2))
        append(log, b"a", b"b")  # reaches the count: flushed up to 2
        append(log, b"c", b"d")  # reaches it again: waits for the next flush
        below = append(log, b"e")
        assert below.flush is None

    _with_held_flushes(open_log, scenario)


def test_appends_deferred_together_stay_in_memory_as_the_roll_checks_need_no_read_of_the_file(open_log):
    # The segment's first batch timestamp (segment.ms by timestamps) is taken at its append,
    # as Kafka's LogSegment.append does, not read back from the file by the next append.
    log = open_log(LogConfig())
    writes = log.deferred_writes = DeferredWrites(lambda path, exc: None)
    log.scheduler = _IndexWritesAsked()  # which would write the appends too
    writes.start()
    for n in range(3):
        append(log, b"v%d" % n, timestamp=1_000 + n)
    segment = log.active_segment

    assert os.path.getsize(segment.records.path) == 0
    assert segment.first_batch_timestamp() == 1_000
    writes.finish()
    assert [r.value for r in read_all(log)] == [b"v0", b"v1", b"v2"]


def test_appends_of_a_log_without_deferred_writes_are_written_at_once(open_log):
    log = open_log(LogConfig())
    append(log, b"at once")
    assert log.deferred_writes is None
    assert os.path.getsize(log.active_segment.records.path) == log.active_segment.size > 0


def test_a_rolled_segment_writes_the_appends_it_deferred_before_the_new_one_takes_appends(open_log):
    log = open_log(LogConfig(segment_bytes=200))
    writes = log.deferred_writes = DeferredWrites(lambda path, exc: None)
    log.scheduler = _IndexWritesAsked()  # which would write the appends too
    writes.start()
    for _ in range(3):
        append(log, b"x" * 120)  # a segment a batch
    first = log.segments[0]

    assert len(log.segments) == 3
    assert os.path.getsize(first.records.path) == first.size  # it wrote them when it rolled
    writes.finish()
    assert [os.path.getsize(s.records.path) for s in log.segments] == [s.size for s in log.segments]
    assert [r.value for r in read_all(log)] == [b"x" * 120] * 3


def test_appends_ask_once_for_an_index_write_until_it_is_done_and_it_reaches_the_files(open_log):
    log = open_log(LogConfig(index_interval_bytes=50))
    scheduler = log.scheduler = _IndexWritesAsked()
    for i in range(5):
        append(log, b"x" * 80, timestamp=1_000 + i)
    assert scheduler.index_writes_asked == 1
    segment = log.active_segment
    on_disk = OffsetIndex(segment.offset_index.path, segment.base_offset, 0, writable=False)
    assert on_disk.entries == 0  # fewer than go out together: in memory until the asked write

    log.write_pending_index_entries()  # the scheduler's call
    append(log, b"x" * 80, timestamp=2_000)

    on_disk = OffsetIndex(segment.offset_index.path, segment.base_offset, 0, writable=False)
    assert on_disk.entries == 4 and scheduler.index_writes_asked == 2


def test_lookup_by_timestamp(open_log):
    log = open_log(LogConfig(index_interval_bytes=50))
    for i in range(30):
        append(log, b"x" * 80, timestamp=1_000 + 10 * i)
    assert log.offset_for_timestamp(1_000) == (1_000, 0)
    assert log.offset_for_timestamp(1_105) == (1_110, 11)
    assert log.offset_for_timestamp(1_290) == (1_290, 29)
    assert log.offset_for_timestamp(5_000) is None
    assert log.max_timestamp_and_offset() == (1_290, 29)


def test_log_append_time_topics_stamp_batches(open_log):
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    result = append(log, b"a", timestamp=5)
    data = log.read(0, 1000, 1, True).read()
    header = BatchHeader.from_buffer(data)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == result.log_append_time_ms > 5
    assert crc_is_valid(data) and next(iter_records(data)).timestamp == header.max_timestamp


@pytest.mark.parametrize(
    "mutate, error",
    [
        (lambda b: b.__setitem__(70, b[70] ^ 1), CorruptRecordError),
        (lambda b: b.__setitem__(16, 1), UnsupportedMessageFormatError),
        (lambda b: b.extend(b[:20]), CorruptRecordError),
    ],
)
def test_invalid_batches_are_refused_and_nothing_is_appended(open_log, mutate, error):
    log = open_log()
    bad = batch(b"a" * 50)
    mutate(bad)
    with pytest.raises(error):
        log.append_as_leader(memoryview(bad), 0)
    assert log.log_end_offset == 0 and log.active_segment.size == 0


def test_two_batches_in_one_produce_and_oversized_batches_are_refused(open_log):
    log = open_log(LogConfig(max_message_bytes=200))
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(memoryview(batch(b"a") + batch(b"b")), 0)
    with pytest.raises(MessageTooLargeError):
        log.append_as_leader(memoryview(batch(b"a" * 300)), 0)


def test_a_config_update_changes_what_later_produced_batches_are_checked_against(open_log):
    now_ms = int(time.time() * 1000)
    log = open_log()
    append(log, b"a" * 300, key=None, timestamp=1_000)  # 300 bytes, keyless, from 1970
    log.update_config(
        LogConfig(cleanup_policy="compact", max_message_bytes=200, message_timestamp_before_max_ms=60_000)
    )
    with pytest.raises(MessageTooLargeError):
        append(log, b"a" * 300, timestamp=now_ms)
    with pytest.raises(InvalidRecordError):
        append(log, b"a", key=None, timestamp=now_ms)
    with pytest.raises(InvalidTimestampError):
        append(log, b"a", timestamp=1_000)
    assert append(log, b"a", timestamp=now_ms).first_offset == 1


def test_retention_by_size_deletes_oldest_segments_and_moves_the_log_start(open_log):
    # retention_ms=-1: the batches carry 1970 timestamps, which time retention would delete.
    log = open_log(LogConfig(segment_bytes=2000, retention_bytes=4500, retention_ms=-1))
    for i in range(20):
        append(log, bytes([i]) * 500)
    deleted = log.apply_retention()
    assert deleted > 0
    assert log.size_in_bytes - log.active_segment.size < 4500
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert read_all(log, log.log_start_offset)[-1].value[0] == 19
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100, log.high_watermark, True)
    assert not [n for n in os.listdir(log.directory) if n.endswith(".deleted")]


def test_retention_by_time_can_empty_the_log_and_keeps_offsets(open_log):
    log = open_log(LogConfig(segment_bytes=2000, retention_ms=1000))
    for i in range(10):
        append(log, b"x" * 500, timestamp=1_000)
    log.apply_retention(now_ms=100_000)
    assert log.log_start_offset == log.log_end_offset == 10
    assert len(log.segments) == 1 and log.active_segment.size == 0
    assert append(log, b"new").first_offset == 10


def test_delete_records_moves_the_log_start(open_log):
    log = open_log(LogConfig(segment_bytes=2000))
    for i in range(10):
        append(log, bytes([i]) * 500)
    assert log.delete_records_before(6) == 6
    assert log.segments[0].base_offset <= 6
    assert read_all(log, 6)[0].offset == 6
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(11)


def test_reopen_after_clean_close_keeps_everything(open_log):
    log = open_log(LogConfig(segment_bytes=3000, index_interval_bytes=100))
    for i in range(15):
        append(log, bytes([i]) * 400)
    log.close()
    reopened = open_log(LogConfig(segment_bytes=3000, index_interval_bytes=100))
    assert reopened.log_end_offset == 15
    assert [r.value[0] for r in read_all(reopened)] == list(range(15))
    assert append(reopened, b"next").first_offset == 15


def test_recovery_cuts_a_torn_tail(open_log):
    log = open_log()
    for i in range(5):
        append(log, bytes([i]) * 100)
    path = log.active_segment.records.path
    log.close()
    with open(path, "r+b") as f:  # a crash mid-write: half of a last batch
        f.seek(0, os.SEEK_END)
        f.write(bytes(batch(b"torn" * 50))[:90])
    recovered = open_log(had_clean_shutdown=False)
    assert recovered.log_end_offset == 5
    assert [r.value[0] for r in read_all(recovered)] == list(range(5))
    assert append(recovered, b"after").first_offset == 5


def test_recovery_cuts_at_a_corrupt_batch_and_drops_later_segments(open_log):
    log = open_log(LogConfig(segment_bytes=1500))
    for i in range(12):
        append(log, bytes([i]) * 400)
    bases = [s.base_offset for s in log.segments]
    second = log.segments[1].records.path
    log.close()
    with open(second, "r+b") as f:  # flip a byte inside the second segment's second batch
        f.seek(500)
        byte = f.read(1)
        f.seek(500)
        f.write(bytes([byte[0] ^ 0xFF]))
    recovered = open_log(LogConfig(segment_bytes=1500), had_clean_shutdown=False)
    assert [s.base_offset for s in recovered.segments] == bases[:2]
    assert recovered.log_end_offset == bases[1] + 1
    assert len(read_all(recovered)) == bases[1] + 1


def test_missing_index_is_rebuilt(open_log):
    log = open_log(LogConfig(segment_bytes=2000, index_interval_bytes=100))
    for i in range(10):
        append(log, bytes([i]) * 400)
    first_index = log.segments[0].offset_index.path
    log.close()
    os.unlink(first_index)
    reopened = open_log(LogConfig(segment_bytes=2000, index_interval_bytes=100))
    assert reopened.segments[0].offset_index.entries > 0
    assert [r.value[0] for r in read_all(reopened, 2)] == list(range(2, 10))


def test_indexes_are_read_whole_at_load_only_after_a_crash(open_log):
    config = LogConfig(segment_bytes=4000, index_interval_bytes=100)
    log = open_log(config)
    for i in range(20):
        append(log, bytes([i]) * 400)
    end = log.log_end_offset
    path = log.segments[0].offset_index.path
    log.close()
    entries = [path.read_bytes()[n : n + 8] for n in range(0, path.stat().st_size, 8)]
    assert len(entries) >= 4
    entries[1], entries[2] = entries[2], entries[1]  # out of order between sound ends
    path.write_bytes(b"".join(entries))

    open_log(config).close()  # a clean start checks the ends only (Kafka's check)
    assert path.read_bytes() == b"".join(entries)
    open_log(config, had_clean_shutdown=False, recovery_point=end).close()
    rebuilt = path.read_bytes()
    assert [rebuilt[n : n + 8] for n in range(0, len(rebuilt), 8)][1:3] == [entries[2], entries[1]]


@pytest.mark.parametrize(
    "topic_codec, produced, stored",
    [
        ("gzip", Compression.NONE, Compression.GZIP),
        ("uncompressed", Compression.LZ4, Compression.NONE),
        ("zstd", Compression.SNAPPY, Compression.ZSTD),
        ("producer", Compression.SNAPPY, Compression.SNAPPY),
    ],
)
def test_topic_compression_type_recompresses(open_log, topic_codec, produced, stored):
    log = open_log(LogConfig(compression_type=topic_codec))
    log.append_as_leader(memoryview(batch(b"a" * 100, b"b" * 100, compression=produced)), 0)
    log.high_watermark = log.log_end_offset
    data = log.read(0, 1 << 20, 2, True).read()
    assert BatchHeader.from_buffer(data).compression == stored
    assert [r.value for r in iter_records(data)] == [b"a" * 100, b"b" * 100]


# ------------------------------------------------------------------------ idempotent producers


NOW_MS = int(time.time() * 1000)  # producers with older timestamps expire on reload


def produce(log, seq, *values, epoch=0, pid=7, timestamp=NOW_MS, **kwargs):
    """Append a batch of producer `pid` starting at sequence `seq`."""
    return append(
        log, *values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp=timestamp, **kwargs
    )


def snapshot_offsets(log) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(log.directory) if n.endswith(".snapshot"))


def test_a_retried_idempotent_batch_gets_its_offsets_and_is_not_appended_again(open_log):
    log = open_log()
    append(log, b"plain")
    first = produce(log, 0, b"a", b"b", timestamp=5_000)
    produce(log, 2, b"c")
    size = log.size_in_bytes
    retried = produce(log, 0, b"a", b"b", timestamp=5_000)
    assert (retried.first_offset, retried.last_offset) == (first.first_offset, first.last_offset) == (1, 2)
    assert retried.log_append_time_ms == 5_001  # the batch's max timestamp, as Kafka answers
    assert (log.log_end_offset, log.size_in_bytes) == (4, size)
    assert produce(log, 3, b"d").first_offset == 4


def test_a_retry_on_a_log_append_time_topic_gets_the_original_append_time(open_log):
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    first = produce(log, 0, b"a")
    assert produce(log, 0, b"a").log_append_time_ms == first.log_append_time_ms > 0


@pytest.mark.parametrize(
    "seq, epoch, error",
    [(3, 1, OutOfOrderSequenceError), (1, 2, OutOfOrderSequenceError), (2, 0, InvalidProducerEpochError)],
)
def test_out_of_order_and_fenced_batches_are_refused_and_nothing_is_appended(open_log, seq, epoch, error):
    log = open_log()
    produce(log, 0, b"a", b"b", epoch=1)
    with pytest.raises(error):
        produce(log, seq, b"c", epoch=epoch)
    assert log.log_end_offset == 2
    assert produce(log, 2, b"c", epoch=1).first_offset == 2


def test_producer_state_survives_a_clean_reopen(open_log):
    config = LogConfig(segment_bytes=1000)
    log = open_log(config)
    for seq in range(0, 12, 2):
        produce(log, seq, b"x" * 100, b"y" * 100)
    assert snapshot_offsets(log) == [s.base_offset for s in log.segments[1:]]
    log.close()
    assert snapshot_offsets(log)[-1] == 12
    reopened = open_log(config)
    assert produce(reopened, 10, b"x" * 100, b"y" * 100).first_offset == 10
    with pytest.raises(OutOfOrderSequenceError):
        produce(reopened, 13, b"z")
    assert produce(reopened, 12, b"z").first_offset == 12


def test_producer_state_is_rebuilt_after_a_crash_from_snapshots_at_or_below_the_recovery_point(open_log):
    config = LogConfig(segment_bytes=1000)
    log = open_log(config)
    for seq in range(0, 12, 2):
        produce(log, seq, b"x" * 100, b"y" * 100)
        produce(log, seq // 2, b"other", pid=8)
    recovery_point = log.recovery_point  # the base of the active segment: flushed at the roll
    assert 0 < recovery_point < log.log_end_offset
    # A snapshot above the recovery point, that the crash could have left describing lost
    # records: here a producer that never wrote.
    bogus = os.path.join(log.directory, f"{log.log_end_offset:020d}.snapshot")
    with open(bogus, "wb") as f:
        f.write(_kafka_snapshot([(99, 0, 5, 0, 0, 0, -1, -1)]))
    recovered = open_log(config, had_clean_shutdown=False, recovery_point=recovery_point)
    assert sorted(recovered.producer_state.producers) == [7, 8]
    assert produce(recovered, 10, b"x" * 100, b"y" * 100).last_offset == log.log_end_offset - 2
    assert produce(recovered, 6, b"other", pid=8).first_offset == log.log_end_offset
    assert snapshot_offsets(recovered)[-1] == log.log_end_offset  # rewritten by the reload


def _kafka_snapshot(entries) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def test_a_log_without_snapshots_is_not_scanned_after_a_clean_shutdown(open_log):
    """Logs from before producer state was kept: as Kafka's upgrade path, empty snapshots."""
    config = LogConfig(segment_bytes=1000)
    log = open_log(config)
    for seq in range(0, 12, 2):
        produce(log, seq, b"x" * 100, b"y" * 100)
    log.close()
    for offset in snapshot_offsets(log):
        os.unlink(os.path.join(log.directory, f"{offset:020d}.snapshot"))
    reopened = open_log(config)
    assert reopened.producer_state.producers == {}
    assert snapshot_offsets(reopened) == [reopened.segments[-1].base_offset, 12]


def test_snapshots_go_with_their_segments_and_state_outlives_them(open_log):
    config = LogConfig(segment_bytes=1000, retention_ms=1000)
    log = open_log(config)
    for seq in range(0, 12, 2):
        produce(log, seq, b"x" * 100, b"y" * 100, timestamp=1_000)
    log.roll()
    log.apply_retention(now_ms=100_000)
    assert log.log_start_offset == log.log_end_offset == 12
    assert snapshot_offsets(log) == [12]
    # Kafka keeps a producer's state after its batches are gone, until it expires.
    assert produce(log, 10, b"x" * 100, b"y" * 100).first_offset == 10
    log.close()
    # A reload keeps no snapshot at or below the log start: the producer is unknown, and may go
    # on from any sequence.
    reopened = open_log(config)
    assert reopened.producer_state.producers == {}
    assert produce(reopened, 57, b"z").first_offset == 12


def test_rebuilding_producer_state_to_an_earlier_offset_drops_later_batches(open_log):
    """The hook a follower's log truncation calls."""
    log = open_log(LogConfig(segment_bytes=1000))
    for seq in range(0, 12, 2):
        produce(log, seq, b"x" * 100, b"y" * 100)
    log.rebuild_producer_state(6)
    assert snapshot_offsets(log)[-1] == 6
    assert log.producer_state.producers[7].last_seq == 5
    assert [b.first_offset for b in log.producer_state.producers[7].batches] == [4]  # from a snapshot

# ---------------------------------------------------------------------------- replication


def leader_bytes(log) -> bytes:
    """The whole log, as a follower fetches it."""
    return log.read(log.log_start_offset, 1 << 30, log.log_end_offset, True).read()


def test_a_follower_appends_the_leaders_batches_as_they_are(open_log, tmp_path):
    leader = Log.load(str(tmp_path / "leader" / TP.dir_name), TP, LogConfig(), scheduler=InlineScheduler())
    leader.append_as_leader(memoryview(batch(b"a", b"b")), leader_epoch=1)
    leader.append_as_leader(memoryview(batch(b"c")), leader_epoch=4)
    fetched = leader_bytes(leader)
    follower = open_log()
    partial = memoryview(fetched + fetched[:30])  # a response cut inside a batch
    assert follower.append_as_follower(partial) == len(fetched)
    assert follower.log_end_offset == 3
    assert leader_bytes(follower) == fetched
    assert follower.leader_epochs.entries == ((1, 0), (4, 2))
    leader.close()


def test_a_follower_refuses_batches_that_do_not_continue_its_log_or_fail_the_crc(open_log):
    follower = open_log()
    stray = batch(b"a")
    set_base_offset(stray, 0, 5)
    with pytest.raises(CorruptRecordError, match="continue"):
        follower.append_as_follower(memoryview(stray))
    broken = batch(b"a")
    broken[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        follower.append_as_follower(memoryview(broken))
    assert follower.log_end_offset == 0


def test_truncate_to_cuts_segments_indexes_epochs_and_the_high_watermark(open_log):
    config = LogConfig(segment_bytes=400, index_interval_bytes=50)
    log = open_log(config)
    for n in range(12):
        log.append_as_leader(memoryview(batch(b"v%02d" % n, b"w" * 40)), leader_epoch=n // 4)
    log.high_watermark = log.log_end_offset
    assert len(log.segments) > 3
    assert log.truncate_to(13)  # inside the batch of offsets 12-13: all of it goes
    assert log.log_end_offset == 12
    assert log.high_watermark == 12
    assert log.leader_epochs.entries == ((0, 0), (1, 8))
    assert log.active_segment.base_offset <= 12
    assert [r.offset for r in read_all(log)] == list(range(12))
    log.append_as_leader(memoryview(batch(b"x")), leader_epoch=5)
    assert log.leader_epochs.entries == ((0, 0), (1, 8), (5, 12))
    log.high_watermark = log.log_end_offset
    assert [r.value for r in read_all(log, 11)] == [b"w" * 40, b"x"]
    assert not log.truncate_to(50)
    log.close()
    reloaded = open_log(config, had_clean_shutdown=False)
    assert reloaded.log_end_offset == 13
    assert reloaded.leader_epochs.entries == ((0, 0), (1, 8), (5, 12))


def test_truncate_fully_restarts_the_log_at_an_offset(open_log):
    log = open_log()
    append(log, b"a", b"b")
    log.truncate_fully_and_start_at(40)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (40, 40, 40)
    assert log.leader_epochs.entries == ()
    batch_at_40 = batch(b"c")
    set_base_offset(batch_at_40, 0, 40)  # not covered by the CRC
    log.append_as_follower(memoryview(batch_at_40))
    assert log.log_end_offset == 41


def test_a_tiered_follower_restarted_at_a_remote_segments_end_takes_its_epochs_producers_and_the_leaders_log_start(open_log, tmp_path):
    # What the remote store holds of the segment [0, 4): its epochs and the producer snapshot.
    leader = Log.load(str(tmp_path / "leader" / TP.dir_name), TP, LogConfig(), scheduler=InlineScheduler())
    produce(leader, 0, b"a", b"b")
    leader.assign_epoch_start(3, 2)
    produce(leader, 2, b"c", b"d")
    leader.roll()
    with open(leader.producer_state.snapshot_path(4), "rb") as f:
        snapshot = f.read()
    epochs = list(leader.leader_epochs.entries)
    leader.close()
    log = open_log(LogConfig(remote_storage_enable=True))
    log.truncate_fully_and_start_at(4)
    log.take_remote_aux_state(0, epochs, snapshot)
    assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset) == (0, 4, 4)
    assert log.leader_epochs.entries == tuple(epochs)
    assert log.producer_state.producers[7].last_seq == 3
    assert snapshot_offsets(log) == [4]
    # As the leader it would become: the producer's next batch is in sequence.
    assert produce(log, 4, b"e").first_offset == 4


# ------------------------------------------------------------ producer state on a replica


def test_a_follower_records_producers_so_a_retry_is_recognised_once_it_leads(open_log, tmp_path):
    leader = Log.load(str(tmp_path / "leader" / TP.dir_name), TP, LogConfig(), scheduler=InlineScheduler())
    first = produce(leader, 0, b"a", b"b")
    produce(leader, 2, b"c")
    follower = open_log()
    follower.append_as_follower(memoryview(leader_bytes(leader)))
    assert follower.producer_state.producers[7].last_seq == 2
    retried = produce(follower, 0, b"a", b"b")  # the follower has become the leader
    assert (retried.first_offset, retried.last_offset) == (first.first_offset, first.last_offset)
    assert follower.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        produce(follower, 5, b"d")
    leader.close()


def test_truncation_rebuilds_the_producer_state_of_the_records_kept(open_log):
    log = open_log(LogConfig(segment_bytes=1000))
    for seq in range(0, 12, 2):
        produce(log, seq, b"x" * 100, b"y" * 100)
    assert log.truncate_to(6)
    assert log.producer_state.producers[7].last_seq == 5
    assert snapshot_offsets(log)[-1] == 6
    assert produce(log, 6, b"x" * 100, b"y" * 100).first_offset == 6
    log.truncate_fully_and_start_at(40)
    assert log.producer_state.producers == {}
    assert snapshot_offsets(log) == []


def test_a_truncation_keeps_the_batches_below_the_cut_the_replica_knew(open_log, tmp_path):
    """A snapshot keeps one batch per producer. Rebuilt from the one just below the cut, the
    state knew fewer batches than before, and a retry of an older one (up to five may be in
    flight) was refused as out of order: the client then moved to a new producer id and sent
    the records again, so they were stored twice."""
    config = LogConfig(segment_bytes=700)  # two batches a segment: a snapshot every two
    leader = Log.load(str(tmp_path / "leader" / TP.dir_name), TP, config, scheduler=InlineScheduler())
    written = [produce(leader, seq, b"x" * 100, b"y" * 100) for seq in range(0, 16, 2)]
    follower = open_log(config)
    while follower.log_end_offset < leader.log_end_offset:  # fetches, a segment at a time
        region = leader.read(follower.log_end_offset, 1 << 20, leader.log_end_offset, True)
        follower.append_as_follower(memoryview(region.read()))
    assert follower.truncate_to(written[7].first_offset)  # its last batch diverged
    assert snapshot_offsets(follower)[-2:] == [12, 14]
    for seq, original in zip(range(6, 14, 2), written[3:7]):  # its last five batches but the cut one
        retried = produce(follower, seq, b"x" * 100, b"y" * 100)
        assert (retried.first_offset, retried.last_offset) == (original.first_offset, original.last_offset)
    assert follower.log_end_offset == written[7].first_offset
    leader.close()


# ---------------------------------------------------------------------------- transactions


def txn_append(log, pid, seq, *values):
    # Stamped now, like the markers, so that segment.ms (by record timestamps) rolls no segment.
    now = int(time.time() * 1000)
    return append(log, *values, timestamp=now, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)


def marker(log, pid, commit):
    result = log.append_marker(pid, 0, 0, commit, leader_epoch=3)
    log.high_watermark = log.log_end_offset
    return result.first_offset


def test_open_transactions_hold_the_lso_and_markers_release_it(open_log):
    log = open_log()
    append(log, b"plain", timestamp=int(time.time() * 1000))
    txn_append(log, 7, 0, b"a")
    txn_append(log, 8, 0, b"b")
    txn_append(log, 7, 1, b"c")
    assert log.first_unstable_offset == 1
    assert marker(log, 7, commit=True) == 4
    assert log.first_unstable_offset == 2
    marker(log, 8, commit=False)
    assert log.first_unstable_offset is None
    assert [s.txn_index.entries for s in log.segments] == [[AbortedTxn(8, 2, 5, 6)]]
    assert log.collect_aborted(0, 6) == [AbortedTxn(8, 2, 5, 6)]
    assert log.collect_aborted(6, 10) == []


def test_an_abort_while_another_transaction_is_open_records_that_ones_start_as_lso(open_log):
    log = open_log()
    txn_append(log, 7, 0, b"a")
    txn_append(log, 8, 0, b"b")
    marker(log, 8, commit=False)
    assert log.segments[-1].txn_index.entries == [AbortedTxn(8, 1, 2, 0)]


def test_an_abort_marker_past_the_bound_in_a_later_segment_is_found(open_log):
    log = open_log()
    txn_append(log, 7, 0, b"a")
    log.roll()
    txn_append(log, 8, 0, b"b")  # open: the LSO stays at 1
    log.roll()
    abort = marker(log, 7, commit=False)
    assert log.first_unstable_offset == 1
    assert log.collect_aborted(0, 1) == [AbortedTxn(7, 0, abort, 1)]


def test_open_transactions_and_the_txn_index_survive_restarts_and_crashes(open_log):
    config = LogConfig(segment_bytes=300)
    log = open_log(config)
    for seq in range(6):
        txn_append(log, 7, seq, b"x" * 40)
        txn_append(log, 9, seq, b"y" * 40)
        marker(log, 7, commit=seq % 2 == 0)
        marker(log, 9, commit=False)
    txn_append(log, 7, 6, b"open")
    expected = [entry for segment in log.segments for entry in segment.txn_index.entries]
    assert len(expected) == 9 and len(log.segments) > 3
    log.close()
    reopened = open_log(config)
    assert reopened.first_unstable_offset == log.log_end_offset - 1
    assert [e for s in reopened.segments for e in s.txn_index.entries] == expected
    reopened.close()
    for path in os.listdir(log.directory):
        if path.endswith(".txnindex"):
            os.unlink(os.path.join(log.directory, path))
    recovered = open_log(config, had_clean_shutdown=False, recovery_point=0)
    assert recovered.first_unstable_offset == log.log_end_offset - 1
    assert [e for s in recovered.segments for e in s.txn_index.entries] == expected


def test_txn_indexes_go_with_their_segments(open_log):
    log = open_log()
    txn_append(log, 7, 0, b"x")
    marker(log, 7, commit=False)
    log.roll()
    txn_append(log, 7, 1, b"y")
    marker(log, 7, commit=False)
    first = log.segments[0].txn_index.path
    assert os.path.exists(first)
    log.delete_records_before(log.segments[1].base_offset)
    assert not os.path.exists(first)
    assert log.collect_aborted(0, log.log_end_offset) == [AbortedTxn(7, 2, 3, 4)]


def test_markers_from_fenced_epochs_or_coordinators_are_refused(open_log):
    log = open_log()
    txn_append(log, 7, 0, b"a")
    log.append_marker(7, 1, 5, False, leader_epoch=3)  # a fencing abort under a bumped epoch
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(7, 0, 5, True, leader_epoch=3)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_marker(7, 1, 4, True, leader_epoch=3)
    assert log.producer_state.producers[7].coordinator_epoch == 5


def test_a_follower_copying_markers_keeps_the_lso_and_the_txn_index_as_the_leader(open_log, tmp_path):
    leader = Log.load(str(tmp_path / "leader" / TP.dir_name), TP, LogConfig(), scheduler=InlineScheduler())
    txn_append(leader, 7, 0, b"a")
    txn_append(leader, 8, 0, b"b")
    marker(leader, 8, commit=False)
    txn_append(leader, 9, 0, b"c")
    marker(leader, 9, commit=True)
    follower = open_log()
    follower.append_as_follower(memoryview(leader_bytes(leader)))
    assert follower.first_unstable_offset == leader.first_unstable_offset == 0
    assert follower.producer_state.producers[8].coordinator_epoch == 0  # fences older coordinators
    assert follower.segments[-1].txn_index.entries == leader.segments[-1].txn_index.entries == [AbortedTxn(8, 1, 2, 0)]
    assert follower.truncate_to(2)  # the abort marker goes: transaction 8 is open again
    assert follower.segments[-1].txn_index.entries == []
    assert follower.first_unstable_offset == 0
    assert sorted(follower.producer_state.ongoing_txns) == [7, 8]
    leader.close()


def test_a_new_empty_partition_allocates_next_to_no_disk_at_the_default_index_size(open_log, tmp_path):
    log = open_log(LogConfig())  # segment.index.bytes 10 MiB, as Kafka's default
    log.assign_epoch_start(0, 0)
    names = os.listdir(log.directory)
    allocated = sum(os.stat(os.path.join(log.directory, name)).st_blocks * 512 for name in names)

    assert {f"{0:020d}.index", f"{0:020d}.timeindex", f"{0:020d}.log"} <= set(names)
    assert os.path.getsize(os.path.join(log.directory, f"{0:020d}.index")) == 10 * 1024 * 1024
    assert allocated <= 16 * 1024
