import asyncio
import os
import threading

import pytest

from protocol.compression import Compression
from protocol.errors import InvalidRecordError, RecordsTooLargeError
from protocol.record_batch import BatchHeader, TimestampType, crc_is_valid, iter_batches
from protocol.records import ControlRecordType, Record, build_batch, control_record, iter_records
from storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from storage.cleaner import (
    Cleaner,
    CleanerConfig,
    LogCleaner,
    OffsetMap,
    SegmentToClean,
    _Retention,
    group_segments_by_size,
    plan_cleaning,
)
from storage.log import InlineScheduler, Log
from storage.log_config import LogConfig
from storage.log_manager import LogManager, LogManagerSettings
from storage.segment import LOG_SUFFIX, segment_path
from storage.topic_partition import TopicPartition
from storage.txn_index import AbortedTxn
from tests.unit.storage.conftest import TP

NOW = 1_700_000_000_000
COMPACT = LogConfig(cleanup_policy="compact", segment_bytes=600, file_delete_delay_ms=0)
DAY_MS = 86_400_000


def read_all(log: Log, start: int | None = None, markers: bool = True) -> list[Record]:
    """Every record from `start` (the log start) to the high watermark, as a consumer reads a
    compacted log: from one batch to the next, whatever gaps or empty batches lie between;
    without the transaction markers' unless `markers`."""
    offset = log.log_start_offset if start is None else start
    records = []
    while offset < log.high_watermark:
        region = log.read(offset, 1 << 20, log.high_watermark, min_one_batch=True)
        if region is None:
            break
        data = region.read()
        for position, header in iter_batches(data):
            batch = data[position : position + header.size]
            if markers or not header.is_control:
                records += [r for r in iter_records(batch) if r.offset >= offset]
            offset = header.last_offset + 1
    return records


def produced(*records: tuple[bytes | None, bytes | None], timestamp=1_000, **kwargs) -> bytearray:
    """A produced batch of (key, value) records."""
    batch = [Record(i, timestamp + i, key, value) for i, (key, value) in enumerate(records)]
    return bytearray(build_batch(batch, **kwargs))


def append(log: Log, *records: tuple[bytes | None, bytes | None], **kwargs) -> None:
    log.append_as_leader(memoryview(produced(*records, **kwargs)), leader_epoch=0)
    log.high_watermark = log.log_end_offset


def fill(log: Log, updates: int, keys: int = 3) -> dict[bytes, bytes]:
    """`updates` one-record batches over `keys` keys, then a roll; the latest value per key."""
    latest = {}
    for i in range(updates):
        key, value = b"k%d" % (i % keys), b"v%d" % i
        append(log, (key, value))
        latest[key] = value
    log.roll()
    return latest


def clean(log: Log, now_ms: int = NOW, first_dirty: int | None = None, **config):
    """Clean `log` as the LogCleaner does, on this thread; the result."""
    job = plan_cleaning(log, first_dirty, now_ms)
    result = Cleaner(CleanerConfig(**config)).clean(job, threading.Event())
    for replaced, cleaned in result.swaps:
        log.replace_segments(cleaned, [s.segment for s in replaced])
    return result


def as_map(records) -> dict:
    """What a consumer of a compacted topic makes of records: the latest value per key."""
    latest = {}
    for record in records:
        if record.value is None:
            latest.pop(record.key, None)
        else:
            latest[record.key] = record.value
    return latest


def offsets(records) -> list[int]:
    return [r.offset for r in records]


def stored_batches(log: Log) -> list[bytes]:
    data = b"".join(s.records.read(0, s.size) for s in log.segments)
    return [data[p : p + h.size] for p, h in iter_batches(data)]


def write_segments(directory, segments: list[list[bytes]]) -> None:
    """Segment files holding `segments`' batches (whose offsets are already set), for logs no
    produce request could make: control batches, gaps."""
    os.makedirs(directory, exist_ok=True)
    for batches in segments:
        base = BatchHeader.from_buffer(batches[0]).base_offset
        with open(segment_path(str(directory), base, LOG_SUFFIX), "wb") as f:
            f.write(b"".join(batches))


def load(directory, config: LogConfig = COMPACT) -> Log:
    """Open a log as a start after a crash does, its high watermark at its end."""
    scheduler = InlineScheduler()
    log = Log.load(str(directory), TP, config, scheduler=scheduler, had_clean_shutdown=False)
    log.high_watermark = log.log_end_offset
    return log


def leftovers(directory) -> list[str]:
    return [n for n in os.listdir(directory) if n.endswith((".swap", ".cleaned", ".deleted"))]


# ---------------------------------------------------------------------------- what it keeps


def test_keeps_the_latest_value_per_key_and_leaves_offsets_as_they_are(open_log):
    log = open_log(COMPACT)
    latest = fill(log, 40)
    before = read_all(log)
    result = clean(log)
    after = read_all(log)
    assert as_map(after) == latest
    assert len(after) == 3
    assert offsets(after) == [37, 38, 39]  # the gaps stay
    assert {r.offset: r for r in before}[37] == after[0]
    assert result.end_offset == log.active_segment.base_offset == 40
    assert all(crc_is_valid(b) for b in stored_batches(log))


def test_offsets_only_increase_across_cleanings_and_new_appends(open_log):
    log = open_log(COMPACT)
    latest = fill(log, 30, keys=5)
    clean(log)
    latest.update(fill(log, 17, keys=7))
    result = clean(log, first_dirty=30)
    records = read_all(log)
    assert result.end_offset == 47
    assert as_map(records) == latest
    assert offsets(records) == sorted(set(offsets(records)))
    assert log.log_end_offset == 47
    append(log, (b"k0", b"new"))
    assert read_all(log)[-1].offset == 47


def test_a_batch_keeps_its_offsets_timestamps_and_producer_fields(open_log):
    log = open_log(COMPACT)
    append(
        log,
        (b"a", b"1"),
        (b"b", b"1"),
        (b"c", b"1"),
        timestamp=5_000,
        producer_id=42,
        producer_epoch=3,
        base_sequence=100,
    )
    append(log, (b"a", b"2"), (b"c", b"2"), timestamp=9_000)
    log.roll()
    clean(log)
    first = BatchHeader.from_buffer(stored_batches(log)[0])
    # Only b's record is left, at offset 1: the batch still spans 0..2 with its sequence numbers.
    assert (first.base_offset, first.last_offset, first.record_count) == (0, 2, 1)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (42, 3, 100)
    assert first.partition_leader_epoch == 0
    assert [(r.offset, r.timestamp, r.key) for r in read_all(log)] == [
        (1, 5_001, b"b"),
        (3, 9_000, b"a"),
        (4, 9_001, b"c"),
    ]
    assert first.max_timestamp == 5_001


def test_log_append_time_batches_keep_their_timestamp(open_log):
    log = open_log(LogConfig(cleanup_policy="compact", message_timestamp_type="LogAppendTime"))
    append(log, (b"a", b"1"), (b"b", b"1"))
    append(log, (b"a", b"2"))
    log.roll()
    stamped = BatchHeader.from_buffer(stored_batches(log)[0]).max_timestamp
    clean(log)
    first = BatchHeader.from_buffer(stored_batches(log)[0])
    assert first.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert first.max_timestamp == stamped
    assert read_all(log)[0].timestamp == stamped


@pytest.mark.parametrize("codec", list(Compression))
def test_the_compression_codec_survives(open_log, codec):
    log = open_log(COMPACT)
    append(log, (b"a", b"x" * 100), (b"b", b"y" * 100), (b"c", b"z" * 100), compression=codec)
    append(log, (b"b", b"new"))
    log.roll()
    clean(log)
    batches = stored_batches(log)
    assert [BatchHeader.from_buffer(b).compression for b in batches] == [codec, Compression.NONE]
    assert as_map(read_all(log)) == {b"a": b"x" * 100, b"b": b"new", b"c": b"z" * 100}


def test_records_without_a_key_go(open_log):
    # Compacted topics refuse them at produce; these come from before the topic was compacted.
    plain = open_log(LogConfig())
    append(plain, (None, b"no key"), (b"k", b"v"))
    plain.roll()
    plain.close()
    log = open_log(COMPACT)
    clean(log)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"k", b"v")]


def test_committed_transactions_compact_open_ones_stay_and_markers_stay(tmp_path):
    directory = tmp_path / TP.dir_name
    txn = dict(is_transactional=True, producer_id=7, producer_epoch=1)
    marker = control_record(ControlRecordType.COMMIT, 0, offset=2, timestamp=1_002)

    def records(*offsets_keys_values):
        return [Record(o, 1_000 + o, k, v) for o, k, v in offsets_keys_values]

    write_segments(
        directory,
        [
            [
                build_batch(records((0, b"a", b"txn-1"), (1, b"b", b"txn-1")), **txn),
                build_batch([marker], is_control=True, **txn),
                build_batch(records((3, b"c", b"plain-1"))),
            ],
            [
                build_batch(records((4, b"a", b"plain-2"), (5, b"c", b"plain-2"))),
                build_batch(records((6, b"b", b"txn-2")), **txn),
            ],
            [build_batch(records((7, b"d", b"active")))],
        ],
    )
    log = load(directory)
    assert log.first_unstable_offset == 6
    result = clean(log)
    assert result.end_offset == 6  # the LSO: the open transaction is not cleaned
    # a's committed txn-1 is superseded like any record; b's open txn-2 supersedes nothing.
    assert [(r.offset, r.value) for r in read_all(log)] == [
        (1, b"txn-1"),
        (2, marker.value),
        (4, b"plain-2"),
        (5, b"plain-2"),
        (6, b"txn-2"),
        (7, b"active"),
    ]
    headers = [BatchHeader.from_buffer(b) for b in stored_batches(log)]
    assert [h.is_control for h in headers] == [False, True, False, False, False]
    log.close()


def test_aborted_transactions_are_removed_and_supersede_nothing(tmp_path):
    directory = tmp_path / TP.dir_name
    txn = dict(is_transactional=True, producer_id=7, producer_epoch=1)
    abort = control_record(ControlRecordType.ABORT, 0, offset=3, timestamp=1_003)

    def records(*offsets_keys_values):
        return [Record(o, 1_000 + o, k, v) for o, k, v in offsets_keys_values]

    write_segments(
        directory,
        [
            [
                build_batch(records((0, b"a", b"plain-1"))),
                build_batch(records((1, b"a", b"aborted")), base_sequence=0, **txn),
                build_batch(records((2, b"b", b"aborted")), base_sequence=1, **txn),
                build_batch([abort], is_control=True, **txn),
            ],
            [build_batch(records((4, b"d", b"active")))],
        ],
    )
    log = load(directory)  # a crash recovery: the transaction index is rebuilt
    assert [e for s in log.segments for e in s.txn_index.entries] == [AbortedTxn(7, 1, 3, 4)]
    clean(log)
    # The aborted a does not supersede plain-1. The producer's last data batch stays, empty (its
    # sequence), and so do its transaction's marker and index entry.
    assert [(r.offset, r.value) for r in read_all(log)] == [(0, b"plain-1"), (3, abort.value), (4, b"active")]
    headers = [BatchHeader.from_buffer(b) for b in stored_batches(log)]
    assert [(h.base_offset, h.record_count) for h in headers] == [(0, 1), (2, 0), (3, 1), (4, 1)]
    assert [e for s in log.segments for e in s.txn_index.entries] == [AbortedTxn(7, 1, 3, 4)]
    log.close()
    # Rebuilt after a crash, the index lists what is left: the empty batch.
    reloaded = load(directory)
    assert [e for s in reloaded.segments for e in s.txn_index.entries] == [AbortedTxn(7, 2, 3, 4)]
    assert reloaded.first_unstable_offset is None
    reloaded.close()


# ------------------------------------------------------------------- transaction markers

MARKERS = LogConfig(cleanup_policy="compact", delete_retention_ms=DAY_MS, file_delete_delay_ms=0)


def in_transaction(log: Log, *records, sequence: int, producer_id: int = 7, epoch: int = 1):
    append(
        log,
        *records,
        is_transactional=True,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


def end_transaction(log: Log, commit: bool, producer_id: int = 7, epoch: int = 1) -> int:
    offset = log.append_marker(producer_id, epoch, 0, commit, leader_epoch=0).first_offset
    log.high_watermark = log.log_end_offset
    return offset


def markers(log: Log) -> list[tuple[int, int | None]]:
    """(offset, delete horizon or None) of the control batches stored."""
    headers = [BatchHeader.from_buffer(b) for b in stored_batches(log)]
    return [
        (h.base_offset, h.base_timestamp if h.has_delete_horizon else None)
        for h in headers
        if h.is_control
    ]


def aborted_entries(log: Log) -> list[AbortedTxn]:
    return [e for s in log.segments for e in s.txn_index.entries]


def test_a_commit_marker_goes_after_its_horizon_once_its_records_are_superseded(open_log):
    log = open_log(MARKERS)
    in_transaction(log, (b"a", b"1"), (b"b", b"1"), sequence=0)
    first_marker = end_transaction(log, commit=True)
    append(log, (b"a", b"2"), (b"b", b"2"))  # supersedes the whole transaction
    in_transaction(log, (b"c", b"1"), sequence=2)
    last_marker = end_transaction(log, commit=True)
    log.roll()

    first = clean(log, now_ms=NOW)
    # The first transaction's records are gone: its marker gets a delete horizon. The second
    # transaction keeps its record, so its marker stays as it is.
    assert markers(log) == [(first_marker, NOW + DAY_MS), (last_marker, None)]
    assert first.next_delete_horizon_ms == NOW + DAY_MS
    clean(log, now_ms=NOW + DAY_MS - 1, first_dirty=first.end_offset)
    assert markers(log) == [(first_marker, NOW + DAY_MS), (last_marker, None)]
    last = clean(log, now_ms=NOW + DAY_MS, first_dirty=first.end_offset)
    assert markers(log) == [(last_marker, None)]
    assert last.next_delete_horizon_ms is None
    assert as_map(read_all(log, markers=False)) == {
        b"a": b"2",
        b"b": b"2",
        b"c": b"1",
    }


def test_an_aborted_transaction_goes_then_its_index_entry_and_marker(open_log):
    log = open_log(MARKERS)
    append(log, (b"a", b"1"))
    in_transaction(log, (b"a", b"aborted"), sequence=0)
    abort_marker = end_transaction(log, commit=False)
    in_transaction(log, (b"b", b"1"), sequence=1)
    commit_marker = end_transaction(log, commit=True)
    log.roll()
    assert aborted_entries(log) == [AbortedTxn(7, 1, abort_marker, abort_marker + 1)]

    first = clean(log, now_ms=NOW)
    # Its record is gone at once, and with it the index entry: nothing is left to filter out.
    assert [(r.offset, r.value) for r in read_all(log, markers=False)] == [
        (0, b"1"),
        (3, b"1"),
    ]
    assert aborted_entries(log) == []
    assert log.collect_aborted(0, log.log_end_offset) == []
    assert markers(log) == [(abort_marker, NOW + DAY_MS), (commit_marker, None)]
    clean(log, now_ms=NOW + DAY_MS, first_dirty=first.end_offset)
    assert markers(log) == [(commit_marker, None)]
    log.close()
    reloaded = load(log.directory, MARKERS)  # rebuilt from the log alone, after a crash
    assert aborted_entries(reloaded) == []
    assert reloaded.first_unstable_offset is None
    reloaded.close()


def test_an_open_transaction_is_not_cleaned_beyond_the_lso(open_log):
    log = open_log(MARKERS)
    append(log, (b"a", b"1"))
    in_transaction(log, (b"a", b"open"), (b"b", b"open"), sequence=0)
    append(log, (b"a", b"2"), (b"b", b"2"))
    log.roll()
    append(log, (b"c", b"1"))
    log.roll()
    assert log.first_unstable_offset == 1
    before = [(r.offset, r.value) for r in read_all(log)]

    for now_ms in (NOW, NOW + 2 * DAY_MS):
        result = clean(log, now_ms=now_ms)
        assert result.end_offset == 1  # the LSO: the open transaction is not looked at
        assert [(r.offset, r.value) for r in read_all(log)] == before
    marker = end_transaction(log, commit=True)
    log.roll()
    clean(log, now_ms=NOW + 2 * DAY_MS)
    # Committed and superseded, its records go; its batch stays empty, the producer's last
    # data batch, and so its marker stays.
    assert [(r.offset, r.value) for r in read_all(log, markers=False)] == [
        (3, b"2"),
        (4, b"2"),
        (5, b"1"),
    ]
    assert markers(log) == [(marker, None)]


def test_a_marker_stays_while_its_transaction_keeps_a_record(open_log):
    log = open_log(MARKERS)
    in_transaction(log, (b"a", b"1"), (b"b", b"1"), sequence=0)
    first_marker = end_transaction(log, commit=True)
    append(log, (b"a", b"2"))  # b of the transaction stays
    in_transaction(log, (b"c", b"1"), sequence=2)
    end_transaction(log, commit=True)
    log.roll()
    for now_ms in (NOW, NOW + 2 * DAY_MS, NOW + 4 * DAY_MS):
        clean(log, now_ms=now_ms)
        assert markers(log)[0] == (first_marker, None)
    assert [(r.offset, r.value) for r in read_all(log, markers=False)][:1] == [(1, b"1")]


def test_markers_stay_in_segments_not_flushed_yet(open_log):
    """A marker goes only where the producer snapshots a restart after a crash starts from lie
    beyond it: a replay from before it would reopen its transaction for good."""
    log = open_log(MARKERS)
    in_transaction(log, (b"a", b"1"), sequence=0)
    marker = end_transaction(log, commit=True)
    append(log, (b"a", b"2"))
    in_transaction(log, (b"b", b"1"), sequence=1)
    end_transaction(log, commit=True)
    log.roll()
    log.recovery_point = marker  # the roll's flush has not happened yet
    clean(log, now_ms=NOW)
    assert markers(log)[0] == (marker, None)
    log.mark_flushed(log.log_end_offset, log.truncations)
    clean(log, now_ms=NOW)
    assert markers(log)[0] == (marker, NOW + DAY_MS)


def test_the_producer_state_rebuilt_from_a_cleaned_log_is_the_live_one(open_log):
    """The last data batch of a producer (its sequence) stays, and so does what follows it of
    its transaction (a marker written under an epoch the coordinator bumped)."""
    log = open_log(MARKERS)
    in_transaction(log, (b"a", b"1"), sequence=0)
    end_transaction(log, commit=True)
    in_transaction(log, (b"a", b"2"), (b"b", b"2"), sequence=1)
    end_transaction(log, commit=False, epoch=2)  # aborted on a timeout: the epoch is bumped
    append(log, (b"a", b"3"), (b"b", b"3"))
    log.roll()
    live = log.producer_state.producers[7]
    live_state = (live.epoch, live.last_seq, live.current_txn_first_offset)

    first = clean(log, now_ms=NOW)
    clean(log, now_ms=NOW + DAY_MS, first_dirty=first.end_offset)
    headers = [BatchHeader.from_buffer(b) for b in stored_batches(log)]
    # The first transaction and its marker are gone; the aborted batch stays empty.
    assert [(h.base_offset, h.record_count, h.is_control) for h in headers] == [
        (2, 0, False),
        (4, 1, True),
        (5, 2, False),
    ]
    log.close()
    reloaded = load(log.directory, MARKERS)  # no usable snapshot: replayed from the log start
    rebuilt = reloaded.producer_state.producers[7]
    assert (rebuilt.epoch, rebuilt.last_seq, rebuilt.current_txn_first_offset) == live_state
    assert reloaded.first_unstable_offset is None
    reloaded.close()


def test_the_last_batch_of_a_producer_keeps_its_header(open_log):
    log = open_log(COMPACT)
    idempotent = dict(producer_id=9, producer_epoch=2)
    append(log, (b"a", b"1"), base_sequence=0, **idempotent)
    append(log, (b"b", b"1"), base_sequence=1, **idempotent)
    append(log, (b"a", b"2"), (b"b", b"2"))  # supersedes both, from another (plain) producer
    log.roll()
    clean(log)
    headers = [BatchHeader.from_buffer(b) for b in stored_batches(log)]
    # The producer's first batch goes; its last one stays, empty, with its sequence and epoch.
    assert [(h.base_offset, h.record_count) for h in headers] == [(1, 0), (2, 2)]
    last = headers[0]
    assert (last.producer_id, last.producer_epoch, last.base_sequence) == (9, 2, 1)
    assert as_map(read_all(log)) == {b"a": b"2", b"b": b"2"}
    # Once the producer has a later batch, the empty one goes.
    append(log, (b"c", b"1"), base_sequence=2, **idempotent)
    log.roll()
    clean(log, first_dirty=3)
    headers = [BatchHeader.from_buffer(b) for b in stored_batches(log)]
    assert [(h.base_offset, h.record_count) for h in headers] == [(2, 2), (4, 1)]


def test_a_producer_s_last_batch_is_its_latest_one_across_the_clean_and_dirty_parts(open_log):
    log = open_log(COMPACT)
    idempotent = dict(producer_id=9, producer_epoch=2)
    append(log, (b"a", b"1"), base_sequence=0, **idempotent)
    log.roll()
    first = clean(log)  # [0, 1) is the clean part now
    append(log, (b"b", b"1"), base_sequence=1, **idempotent)
    append(log, (b"b", b"2"))
    log.roll()
    clean(log, first_dirty=first.end_offset)
    headers = [BatchHeader.from_buffer(b) for b in stored_batches(log)]
    assert [(h.base_offset, h.record_count) for h in headers] == [(0, 1), (1, 0), (2, 1)]


# ---------------------------------------------------------------------------- tombstones


def test_tombstones_stay_until_their_delete_horizon_then_go(open_log):
    log = open_log(LogConfig(cleanup_policy="compact", delete_retention_ms=DAY_MS))
    append(log, (b"a", b"1"), (b"b", b"1"))
    append(log, (b"a", None))
    log.roll()
    first = clean(log, now_ms=NOW)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"b", b"1"), (b"a", None)]
    tombstone = BatchHeader.from_buffer(stored_batches(log)[1])
    assert tombstone.has_delete_horizon and tombstone.base_timestamp == NOW + DAY_MS
    assert read_all(log)[1].timestamp == 1_000  # the record's own timestamp is unchanged
    assert first.next_delete_horizon_ms == NOW + DAY_MS

    clean(log, now_ms=NOW + DAY_MS - 1, first_dirty=first.end_offset)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"b", b"1"), (b"a", None)]
    assert BatchHeader.from_buffer(stored_batches(log)[1]).base_timestamp == NOW + DAY_MS

    last = clean(log, now_ms=NOW + DAY_MS, first_dirty=first.end_offset)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"b", b"1")]
    assert last.next_delete_horizon_ms is None


def test_a_tombstone_superseded_by_a_value_goes_at_once(open_log):
    log = open_log(COMPACT)
    append(log, (b"a", None))
    append(log, (b"a", b"back"))
    log.roll()
    clean(log)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"a", b"back")]


# ---------------------------------------------------------------------- what it never touches


def test_the_active_segment_is_untouched(open_log):
    log = open_log(COMPACT)
    fill(log, 12)
    for i in range(6):
        append(log, (b"k0", b"active-%d" % i))
    active = log.active_segment
    size, path = active.size, active.records.path
    clean(log)
    assert log.active_segment is active and active.size == size and active.records.path == path
    active_records = [r.value for r in read_all(log) if r.offset >= 12]
    assert active_records == [b"active-%d" % i for i in range(6)]


def test_min_compaction_lag_keeps_young_segments_dirty(open_log):
    config = LogConfig(cleanup_policy="compact", min_compaction_lag_ms=60_000, segment_bytes=600)
    log = open_log(config)
    for i in range(10):
        append(log, (b"k", b"old-%d" % i), timestamp=NOW - 120_000)
    log.roll()
    for i in range(10):
        append(log, (b"k", b"young-%d" % i), timestamp=NOW - 10_000)
    log.roll()
    job = plan_cleaning(log, None, NOW)
    assert job.first_uncleanable_offset == 10  # where the young records start
    clean(log, now_ms=NOW)
    values = [r.value for r in read_all(log)]
    assert values == [b"old-9"] + [b"young-%d" % i for i in range(10)]
    later = clean(log, now_ms=NOW + 60_000, first_dirty=job.first_uncleanable_offset)
    assert later.end_offset == 20
    assert [r.value for r in read_all(log)] == [b"young-9"]


def test_nothing_beyond_the_high_watermark_is_cleaned(open_log):
    log = open_log(COMPACT)
    fill(log, 10, keys=1)
    fill(log, 10, keys=1)
    log.high_watermark = 5  # as under replication: the rest is not committed yet
    job = plan_cleaning(log, None, NOW)
    assert job.first_uncleanable_offset == 5
    result = clean(log)
    assert result.end_offset == 5
    assert offsets(read_all(log)) == [4]
    log.high_watermark = log.log_end_offset
    assert offsets(read_all(log)) == list(range(4, 20))


# ------------------------------------------------------------------------------- grouping


def test_small_segments_are_merged_within_segment_bytes(open_log):
    config = LogConfig(cleanup_policy="compact", segment_bytes=300, file_delete_delay_ms=0)
    log = open_log(config)
    for round_ in range(3):
        for key in range(8):
            append(log, (b"key-%d" % key, b"value-%d-%d" % (round_, key)))
    log.roll()
    before = len(log.segments)
    clean(log)
    clean(log, first_dirty=log.active_segment.base_offset)  # merges what the first left small
    assert len(log.segments) < before
    assert all(s.size <= 300 for s in log.segments[:-1])
    assert as_map(read_all(log)) == {b"key-%d" % k: b"value-2-%d" % k for k in range(8)}


def snapshot(base: int, end: int, size: int = 100, index_bytes: int = 8) -> SegmentToClean:
    class Fake:
        base_offset = base

    return SegmentToClean(Fake(), size, end, index_bytes, index_bytes * 3 // 2)


def test_grouping_respects_size_index_and_offset_limits():
    segments = [snapshot(0, 10), snapshot(10, 20), snapshot(20, 30), snapshot(30, 40)]
    assert [len(g) for g in group_segments_by_size(segments, 250, 1000)] == [2, 2]
    # Two offset indexes fit 20 bytes, two time indexes do not.
    assert [len(g) for g in group_segments_by_size(segments, 1000, 20)] == [1, 1, 1, 1]
    assert [len(g) for g in group_segments_by_size(segments, 1000, 1000)] == [4]
    far = [snapshot(0, 10), snapshot(10, 2**31), snapshot(2**31, 2**31 + 5)]
    assert [len(g) for g in group_segments_by_size(far, 1000, 1000)] == [2, 1]
    big = [snapshot(0, 10, size=500), snapshot(10, 20)]
    assert [len(g) for g in group_segments_by_size(big, 300, 1000)] == [1, 1]


# ---------------------------------------------------------------------------- the key map


def test_the_offset_map_holds_at_most_its_capacity():
    offset_map = OffsetMap(2)
    assert offset_map.put(b"a", 1) and offset_map.put(b"b", 2)
    assert not offset_map.put(b"c", 3)
    assert offset_map.put(b"a", 4)  # a key it has may move on
    assert (offset_map.latest(b"a"), offset_map.latest(b"c"), len(offset_map)) == (4, -1, 2)
    config = CleanerConfig(dedupe_buffer_size=10 * OffsetMap.BYTES_PER_ENTRY, threads=2)
    assert config.offset_map_capacity == 5


def test_a_full_key_map_cleans_part_of_the_log_and_the_next_run_goes_on(open_log):
    log = open_log(COMPACT)
    latest = fill(log, 30, keys=10)
    tiny = {"dedupe_buffer_size": 4 * OffsetMap.BYTES_PER_ENTRY}
    first = clean(log, **tiny)
    # Four keys fit: the map stopped at the fifth distinct key, offset 4.
    assert first.end_offset == 4
    assert as_map(read_all(log)) == latest
    ends = [first.end_offset]
    while ends[-1] < 30:
        ends.append(clean(log, first_dirty=ends[-1], **tiny).end_offset)
        assert as_map(read_all(log)) == latest
    assert ends == [4, 8, 12, 16, 20, 24, 28, 30]
    assert offsets(read_all(log)) == list(range(20, 30))


# ---------------------------------------------------------------------------- crash safety


class Crash(Exception):
    pass


def crash_at_file_operation(monkeypatch, step: int) -> dict:
    """Make the `step`-th rename or unlink raise, as if the process died right there (none for
    step 0); returns the count of those operations, as it goes."""
    count = {"n": 0}

    def counted(real):
        def operation(*args, **kwargs):
            count["n"] += 1
            if count["n"] == step:
                raise Crash()
            return real(*args, **kwargs)

        return operation

    for name in ("rename", "replace", "unlink"):
        monkeypatch.setattr(os, name, counted(getattr(os, name)))
    return count


def crashable_log(directory) -> tuple[Log, list, object]:
    """A log of small segments, about to swap in a cleaning that merges them by threes."""
    log = Log.load(str(directory), TP, COMPACT, scheduler=InlineScheduler())
    fill(log, 40, keys=4)
    original = read_all(log)
    log.update_config(
        LogConfig(cleanup_policy="compact", segment_bytes=1800, file_delete_delay_ms=0)
    )
    job = plan_cleaning(log, None, NOW)
    result = Cleaner(CleanerConfig()).clean(job, threading.Event())
    assert len(result.swaps) >= 2 and max(len(replaced) for replaced, _ in result.swaps) >= 2
    return log, original, result


def assert_well_formed(log: Log) -> None:
    """Each segment holds only its own offsets, and a consumer seeking anywhere reads on from
    there."""
    ends = [s.base_offset for s in log.segments[1:]] + [log.log_end_offset]
    for segment, end in zip(log.segments, ends):
        data = segment.records.read(0, segment.size)
        for _, header in iter_batches(data):
            assert segment.base_offset <= header.base_offset <= header.last_offset < end
    records = read_all(log)
    for position, record in enumerate(records):
        assert read_all(log, record.offset) == records[position:]


def check_recovered(directory, original, cleaned) -> None:
    """After a restart the log holds what the cleaning kept (nothing it had to keep is lost),
    within what it had before (nothing is made up), and is whole."""
    log = load(directory)
    records = {(r.offset, r.key, r.value) for r in read_all(log)}
    assert {(r.offset, r.key, r.value) for r in cleaned} <= records
    assert records <= {(r.offset, r.key, r.value) for r in original}
    assert as_map(read_all(log)) == as_map(original)
    assert log.log_end_offset == 40
    assert_well_formed(log)
    assert not leftovers(directory)
    log.close()


def test_a_crash_before_the_swap_leaves_the_old_segments(tmp_path):
    directory = tmp_path / TP.dir_name
    _, original, _ = crashable_log(directory)
    assert leftovers(directory)  # the .cleaned files
    check_recovered(directory, original, original)


def test_a_crash_at_any_step_of_the_swap_loses_nothing(tmp_path, monkeypatch):
    reference_dir = tmp_path / "reference" / TP.dir_name
    log, original, result = crashable_log(reference_dir)
    for replaced, cleaned in result.swaps:
        log.replace_segments(cleaned, [s.segment for s in replaced])
    cleaned_records = read_all(log)
    # Per group: .cleaned to .swap, the replaced to .deleted, .swap to final, then deleting them.
    steps = sum(3 + 3 * len(replaced) + 3 + 3 * len(replaced) for replaced, _ in result.swaps)
    for step in range(1, steps + 1):
        directory = tmp_path / f"crash-{step}" / TP.dir_name
        log, _, result = crashable_log(directory)
        with monkeypatch.context() as patch:
            crash_at_file_operation(patch, step)
            with pytest.raises(Crash):
                for replaced, cleaned in result.swaps:
                    log.replace_segments(cleaned, [s.segment for s in replaced])
        check_recovered(directory, original, cleaned_records)


def interrupted_swap(directory, monkeypatch) -> list:
    """A log whose first swap stopped after its .swap files and one .deleted file; the records
    it had."""
    log, original, result = crashable_log(directory)
    with monkeypatch.context() as patch:
        crash_at_file_operation(patch, 5)
        with pytest.raises(Crash):
            replaced, cleaned = result.swaps[0]
            log.replace_segments(cleaned, [s.segment for s in replaced])
    return original


def test_a_crash_while_recovering_a_swap_is_recovered_by_the_next_start(tmp_path, monkeypatch):
    interrupted_swap(tmp_path / "count" / TP.dir_name, monkeypatch)
    with monkeypatch.context() as patch:
        operations = crash_at_file_operation(patch, step=0)
        load(tmp_path / "count" / TP.dir_name)
    assert operations["n"] > 5
    for step in range(1, operations["n"] + 1):
        directory = tmp_path / f"crash-{step}" / TP.dir_name
        original = interrupted_swap(directory, monkeypatch)
        with monkeypatch.context() as patch:
            crash_at_file_operation(patch, step)
            with pytest.raises(Crash):
                load(directory)
        check_recovered(directory, original, [])


# ------------------------------------------------------------------- the cleaner on the loop


def compact_manager(tmp_path, clock=lambda: NOW, **cleaner) -> LogManager:
    settings = LogManagerSettings(cleaner=CleanerConfig(**{"enable": False, **cleaner}))
    manager = LogManager([str(tmp_path)], lambda topic: COMPACT, settings)
    manager.cleaner = LogCleaner(manager, settings.cleaner, clock)
    return manager


def test_a_result_is_discarded_when_the_log_changed_meanwhile(tmp_path, monkeypatch):
    release = threading.Event()
    cleaned_files = []
    real_clean = Cleaner.clean

    def slow_clean(self, job, abort):
        result = real_clean(self, job, abort)
        cleaned_files.extend(n for n in os.listdir(job.directory) if n.endswith(".cleaned"))
        release.wait(10)
        return result

    monkeypatch.setattr(Cleaner, "clean", slow_clean)

    async def scenario():
        manager = compact_manager(tmp_path)
        await manager.startup()
        log = manager.create(TP, COMPACT)
        latest = fill(log, 40)
        segments = list(log.segments)
        cleaning = asyncio.ensure_future(manager.cleaner.clean_once())
        await asyncio.sleep(0.2)
        log.delete_records_before(20)  # DeleteRecords removes segments being cleaned
        release.set()
        assert await cleaning == TP
        assert all(s in segments for s in log.segments)
        assert not [n for n in os.listdir(log.directory) if n.endswith(".cleaned")]
        assert manager.cleaner.checkpoint_offsets({TP}) == {}
        assert as_map(read_all(log, log.log_start_offset)).keys() == latest.keys()
        await manager.shutdown()

    asyncio.run(scenario())
    assert cleaned_files


def test_the_dirty_ratio_decides_and_the_dirtiest_goes_first(tmp_path):
    async def scenario():
        manager = compact_manager(tmp_path)
        await manager.startup()
        calm, busy = TopicPartition("calm", 0), TopicPartition("busy", 0)
        for tp in (calm, busy):
            fill(manager.create(tp, COMPACT), 30)
        assert manager.cleaner.grab_filthiest_log().cleanable_ratio == 1.0
        assert await manager.cleaner.clean_once() in (calm, busy)
        assert await manager.cleaner.clean_once() in (calm, busy)
        assert manager.cleaner.grab_filthiest_log() is None  # both clean now
        fill(manager.get(calm), 2)
        fill(manager.get(busy), 12)
        job = manager.cleaner.grab_filthiest_log()
        assert job.topic_partition == busy
        assert 0 < job.cleanable_ratio < 1
        manager.get(busy).update_config(
            LogConfig(cleanup_policy="compact", segment_bytes=600, min_cleanable_dirty_ratio=1.0)
        )
        manager.get(calm).update_config(
            LogConfig(cleanup_policy="compact", segment_bytes=600, min_cleanable_dirty_ratio=1.0)
        )
        assert manager.cleaner.grab_filthiest_log() is None
        await manager.shutdown()

    asyncio.run(scenario())


def test_max_compaction_lag_cleans_whatever_the_ratio(tmp_path):
    async def scenario():
        manager = compact_manager(tmp_path)
        await manager.startup()
        config = LogConfig(
            cleanup_policy="compact", min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=DAY_MS
        )
        log = manager.create(TP, config)
        fill(log, 30)
        await manager.cleaner.clean_once()
        append(log, (b"k0", b"late"), timestamp=NOW - 2 * DAY_MS)
        log.roll()
        job = manager.cleaner.grab_filthiest_log()
        assert job is not None and job.needs_compaction_now and job.cleanable_ratio < 1.0
        await manager.shutdown()

    asyncio.run(scenario())


def test_max_compaction_lag_rolls_the_active_segment():
    config = LogConfig(cleanup_policy="compact", segment_ms=DAY_MS, max_compaction_lag_ms=60_000)
    assert config.max_segment_ms == 60_000
    assert LogConfig(segment_ms=DAY_MS, max_compaction_lag_ms=60_000).max_segment_ms == DAY_MS


def test_tombstones_past_their_horizon_are_cleaned_without_new_writes(tmp_path):
    now = [NOW]

    async def scenario():
        manager = compact_manager(tmp_path, clock=lambda: now[0])
        await manager.startup()
        log = manager.create(TP, LogConfig(cleanup_policy="compact", delete_retention_ms=1000))
        append(log, (b"a", b"1"))
        append(log, (b"a", None))
        log.roll()
        assert await manager.cleaner.clean_once() == TP
        assert [r.value for r in read_all(log)] == [None]
        assert manager.cleaner.grab_filthiest_log() is None
        now[0] += 1000
        assert await manager.cleaner.clean_once() == TP
        assert read_all(log) == []
        assert manager.cleaner.grab_filthiest_log() is None
        await manager.shutdown()

    asyncio.run(scenario())


def test_the_cleaner_checkpoint_round_trips_through_a_restart(tmp_path):
    async def first_run():
        manager = compact_manager(tmp_path)
        await manager.startup()
        fill(manager.create(TP, COMPACT), 30)
        assert await manager.cleaner.clean_once() == TP
        await manager.shutdown()

    async def second_run():
        manager = compact_manager(tmp_path)
        await manager.startup()
        assert manager.cleaner.checkpoint_offsets({TP}) == {TP: 30}
        assert manager.cleaner.grab_filthiest_log() is None  # nothing dirty since
        await manager.shutdown()

    asyncio.run(first_run())
    checkpoint = OffsetCheckpointFile(str(tmp_path / CLEANER_OFFSET_CHECKPOINT))
    assert checkpoint.read() == {TP: 30}
    text = (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text()
    assert text == f"0\n1\n{TP.topic} {TP.partition} 30\n"
    asyncio.run(second_run())


def test_a_corrupt_cleaner_checkpoint_only_means_starting_over(tmp_path):
    (tmp_path / CLEANER_OFFSET_CHECKPOINT).write_text("garbage")

    async def scenario():
        manager = compact_manager(tmp_path)
        await manager.startup()
        assert manager.has_online_dirs and manager.cleaner.checkpoint_offsets({TP}) == {}
        await manager.shutdown()

    asyncio.run(scenario())


def test_the_cleaner_threads_clean_in_the_background(tmp_path):
    async def scenario():
        manager = compact_manager(tmp_path, enable=True, backoff_ms=10)
        await manager.startup()
        log = manager.create(TP, COMPACT)
        latest = fill(log, 60)
        for _ in range(500):
            if len(read_all(log)) == 3:
                break
            await asyncio.sleep(0.01)
        assert as_map(read_all(log)) == latest and len(read_all(log)) == 3
        await manager.shutdown()

    asyncio.run(scenario())


def test_shutdown_calls_off_a_cleaning_under_way(tmp_path, monkeypatch):
    started, aborts = threading.Event(), []
    real_clean, real_clean_batch = Cleaner.clean, _Retention.clean_batch

    def clean_(self, job, abort):
        aborts.append(abort)
        return real_clean(self, job, abort)

    def stalled_clean_batch(self, header, batch):
        started.set()
        aborts[0].wait(10)
        return real_clean_batch(self, header, batch)

    monkeypatch.setattr(Cleaner, "clean", clean_)
    monkeypatch.setattr(_Retention, "clean_batch", stalled_clean_batch)

    async def scenario():
        manager = compact_manager(tmp_path)
        await manager.startup()
        log = manager.create(TP, COMPACT)
        fill(log, 30)
        cleaning = asyncio.ensure_future(manager.cleaner.clean_once())
        while not started.is_set():
            await asyncio.sleep(0.01)
        await manager.shutdown()
        assert await cleaning == TP
        return log

    log = asyncio.run(scenario())
    assert not [n for n in os.listdir(log.directory) if n.endswith(".cleaned")]
    assert len(log.segments) == 5  # untouched


# ------------------------------------------------------------------- produce, and retention


def test_compacted_topics_refuse_records_without_a_key(open_log):
    log = open_log(COMPACT)
    with pytest.raises(InvalidRecordError, match="key"):
        append(log, (b"k", b"v"), (None, b"no key"))
    for codec in (Compression.NONE, Compression.ZSTD):
        with pytest.raises(InvalidRecordError):
            append(log, (None, b"v"), compression=codec)
    append(log, (b"k", b"v"), compression=Compression.GZIP)
    assert log.log_end_offset == 1


def test_keyless_records_are_fine_elsewhere(open_log):
    log = open_log(LogConfig())
    append(log, (None, b"v"))
    assert log.log_end_offset == 1


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_the_key_check_decompresses_at_most_max_message_bytes(open_log, codec):
    log = open_log(LogConfig(cleanup_policy="compact", max_message_bytes=100_000))
    bomb = [(b"k", bytes(10_000)) for _ in range(50)]  # 500 kB of zeros in a small batch
    batch = produced(*bomb, compression=codec)
    assert len(batch) < 100_000
    with pytest.raises(RecordsTooLargeError):
        log.append_as_leader(memoryview(batch), 0)
    assert log.log_end_offset == 0


def test_compact_only_topics_are_not_subject_to_time_or_size_retention(open_log):
    retention = dict(retention_ms=1000, retention_bytes=10, segment_bytes=600)
    log = open_log(LogConfig(cleanup_policy="compact", **retention))
    fill(log, 30)
    assert log.apply_retention(now_ms=NOW) == 0
    log.update_config(LogConfig(cleanup_policy="compact,delete", **retention))
    assert log.apply_retention(now_ms=NOW) > 0


def test_reconfigure_gives_the_next_cleanings_new_buffers_and_keeps_threads_and_enable(tmp_path, monkeypatch):
    used = []
    real_clean = Cleaner.clean

    def recording_clean(self, job, abort):
        used.append((self._map_capacity, self._buffer_bytes))
        return real_clean(self, job, abort)

    monkeypatch.setattr(Cleaner, "clean", recording_clean)

    async def scenario():
        manager = compact_manager(tmp_path, threads=2)
        await manager.startup()
        fill(manager.create(TP, COMPACT), 30)
        new = CleanerConfig(enable=True, threads=5, dedupe_buffer_size=24_000, io_buffer_size=8_000, backoff_ms=10)
        manager.cleaner.reconfigure(new)
        assert manager.cleaner.config == CleanerConfig(
            enable=False, threads=2, dedupe_buffer_size=24_000, io_buffer_size=8_000, backoff_ms=10
        )
        assert await manager.cleaner.clean_once() == TP
        await manager.shutdown()
        return manager.cleaner.config

    config = asyncio.run(scenario())
    # Shares of the two threads started with, not of the five asked for.
    assert used == [(config.offset_map_capacity, config.io_buffer_bytes)] == [(24_000 // 2 // 176, 2_000)]
