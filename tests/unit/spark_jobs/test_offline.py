"""Offline reads of segment files: ranges across segments, index seeks, the log start
checkpoint, torn and corrupt tails, control and transactional batches, an interrupted swap,
JBOD discovery, timestamps, and that nothing on disk changes."""

import os
from pathlib import Path

import pytest

from protocol.compression import Compression
from protocol.record_batch import TimestampType
from protocol.records import ControlRecordType, Header, Record, build_batch, control_record
from spark_jobs.offline import (
    OfflineLog,
    PartitionFiles,
    TransactionalDataError,
    _index_position,
    _open,
    find_partitions,
)
from spark_jobs.options import OptionError
from spark_jobs.planning import DataLossError, OffsetRange
from spark_jobs.offline import read_range
from storage.checkpoint import LOG_START_OFFSET_CHECKPOINT, OffsetCheckpointFile
from storage.log import InlineScheduler, Log
from storage.log_config import LogConfig
from storage.topic_partition import TopicPartition

T0 = 1_700_000_000_000
CODECS = list(Compression)


def record(offset: int) -> Record:
    headers = (Header("i", b"%d" % offset), Header("n", None)) if offset % 2 else ()
    key = None if offset % 7 == 0 else b"k%d" % (offset % 5)
    return Record(offset, T0 + offset, key, b"value-%d" % offset, headers)


def expected(start: int, end: int, timestamp_type: int = 0) -> list[tuple]:
    rows = []
    for offset in range(start, end):
        r = record(offset)
        rows.append((offset, r.timestamp, timestamp_type, r.key, r.value, [(h.key, h.value) for h in r.headers]))
    return rows


def write_log(log_dir: Path, topic: str, partition: int, batches: int, per_batch: int = 5, **config) -> Path:
    """A partition log written by storage.log.Log, as the broker writes it: `batches` batches of
    `per_batch` records, the codecs in turn."""
    tp = TopicPartition(topic, partition)
    settings = {"segment_bytes": 2000, "index_interval_bytes": 100, **config}
    log = Log.load(str(log_dir / tp.dir_name), tp, LogConfig(**settings), scheduler=InlineScheduler())
    for b in range(batches):
        records = [record(b * per_batch + i) for i in range(per_batch)]
        relative = [r.__class__(i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)]
        data = bytearray(build_batch(relative, compression=CODECS[b % len(CODECS)]))
        log.append_as_leader(memoryview(data), 0)
    log.close()
    return log_dir / tp.dir_name


def snapshot(root: Path) -> dict:
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()
    }


def test_ranges_across_segments_with_index_seeks(tmp_path):
    directory = write_log(tmp_path, "t", 0, batches=60)
    segments = sorted(directory.glob("*.log"))
    assert len(segments) > 3
    before = snapshot(tmp_path)
    files = PartitionFiles(str(directory))
    assert (files.log_start_offset, files.log_end_offset) == (0, 300)
    assert list(files.records(0, 300, False, True)) == expected(0, 300)
    assert list(files.records(123, 257, False, True)) == expected(123, 257)
    assert list(files.records(299, 300, False, True)) == expected(299, 300)
    assert list(files.records(40, 40, False, True)) == []
    # The index takes a read deep into a segment close to its batch.
    second = files.segments[1]
    records = _open(second.log_path)
    try:
        position = _index_position(second, records, second.base_offset + 20)
        assert position > 0
        assert next(records.batches(position)).header.base_offset <= second.base_offset + 20
    finally:
        records.close()
    assert snapshot(tmp_path) == before  # read-only: nothing written, nothing created


def test_a_bad_index_is_not_trusted(tmp_path):
    directory = write_log(tmp_path, "t", 0, batches=40)
    for index in directory.glob("*.index"):
        index.write_bytes(b"\x00\x00\x00\x03\x00\x00\x00\x07" * 3)  # positions in mid-batch
    assert list(PartitionFiles(str(directory)).records(0, 200, False, True)) == expected(0, 200)


def test_log_start_from_the_checkpoint(tmp_path):
    write_log(tmp_path, "t", 0, batches=20)
    OffsetCheckpointFile(str(tmp_path / LOG_START_OFFSET_CHECKPOINT)).write({TopicPartition("t", 0): 42})
    log = OfflineLog([str(tmp_path)])
    assert log.earliest([("t", 0)]) == {("t", 0): 42}
    assert log.latest([("t", 0)]) == {("t", 0): 100}
    with pytest.raises(DataLossError, match="starts at 42"):
        list(read_range([str(tmp_path)], OffsetRange("t", 0, 10, 60), False, True))
    got = list(read_range([str(tmp_path)], OffsetRange("t", 0, 10, 60), False, False))
    assert got == expected(42, 60)


@pytest.mark.parametrize(
    "tail",
    [
        lambda: build_batch([record(100)])[:40],  # a batch cut short
        lambda: bytes(64),  # zeroes: a length of 0 cannot be a batch
        lambda: build_batch([record(100)])[:-3] + b"\xff\xff\xff",  # whole length, bad CRC
    ],
)
def test_a_torn_tail_ends_the_log(tmp_path, tail):
    directory = write_log(tmp_path, "t", 0, batches=20)
    last = sorted(directory.glob("*.log"))[-1]
    with open(last, "ab") as f:
        f.write(tail())
    files = PartitionFiles(str(directory))
    assert files.log_end_offset == 100
    assert list(files.records(0, 100, False, True)) == expected(0, 100)


def test_corruption_before_the_range_end_is_data_loss(tmp_path):
    directory = write_log(tmp_path, "t", 0, batches=20, segment_bytes=100_000)
    segment = sorted(directory.glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    files = PartitionFiles(str(directory))
    records = _open(str(segment))
    locations = list(records.batches())
    records.close()
    middle = locations[10]  # offsets 50..54
    data[middle.position + 70] ^= 0xFF
    segment.write_bytes(bytes(data))
    with pytest.raises(DataLossError, match="after offset 49"):
        list(files.records(0, 100, False, True))
    assert list(files.records(0, 100, False, False)) == expected(0, 50)
    assert list(files.records(0, 50, False, True)) == expected(0, 50)  # before it: fine


def raw_log(directory: Path, batches: list[bytes]) -> None:
    directory.mkdir(parents=True)
    (directory / ("0" * 20 + ".log")).write_bytes(b"".join(batches))


def transactional(*offsets: int, producer_id: int = 7) -> bytes:
    return build_batch(
        [record(o) for o in offsets], producer_id=producer_id, producer_epoch=0, base_sequence=0, is_transactional=True
    )


def marker(offset: int, commit: bool, producer_id: int = 7) -> bytes:
    record_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    return build_batch(
        [control_record(record_type, 0, offset, T0 + offset)],
        producer_id=producer_id, producer_epoch=0, is_transactional=True, is_control=True,
    )


def test_control_batches_are_skipped_and_aborted_transactions_read_committed(tmp_path):
    directory = tmp_path / "t-0"
    raw_log(
        directory,
        [
            build_batch([record(0), record(1), record(2)]),
            transactional(3, 4),
            transactional(5, producer_id=8),
            marker(6, commit=True),
            build_batch([record(7), record(8)], compression=Compression.ZSTD),
            marker(9, commit=False, producer_id=8),
        ],
    )
    files = PartitionFiles(str(directory))
    assert files.log_end_offset == 10
    assert [r[0] for r in files.records(0, 10, False, True)] == [0, 1, 2, 3, 4, 5, 7, 8]
    assert [r[0] for r in files.records(0, 10, True, True)] == [0, 1, 2, 3, 4, 7, 8]
    assert [r[0] for r in files.records(4, 6, True, True)] == [4]


def test_read_committed_offline_uses_the_transaction_index_and_stops_at_open_transactions(tmp_path):
    """A log written by storage.log.Log: its .txnindex lists the aborted transaction."""
    tp = TopicPartition("t", 0)
    log = Log.load(str(tmp_path / tp.dir_name), tp, LogConfig(), scheduler=InlineScheduler())
    for sequence, offsets, commit in ((0, (0, 1), False), (2, (3,), True)):
        relative = [Record(i, T0, None, b"v%d" % o) for i, o in enumerate(offsets)]
        log.append_as_leader(
            memoryview(bytearray(build_batch(relative, producer_id=7, producer_epoch=0, base_sequence=sequence, is_transactional=True))), 0
        )
        log.append_marker(7, 0, 0, commit, 0)
    log.append_as_leader(
        memoryview(bytearray(build_batch([Record(0, T0, None, b"open")], producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True))), 0
    )
    log.close()
    files = OfflineLog([str(tmp_path)]).partition(("t", 0))
    assert files.records(0, 5, True, True).__next__()[4] == b"v3"
    with pytest.raises(TransactionalDataError, match="still open at offsets 5..5"):
        list(files.records(0, 6, True, True))
    assert [r[4] for r in files.records(0, 6, False, True)] == [b"v0", b"v1", b"v3", b"open"]


def test_log_append_time(tmp_path):
    raw_log(tmp_path / "t-0", [build_batch([record(0), record(1)], timestamp_type=TimestampType.LOG_APPEND_TIME)])
    rows = list(PartitionFiles(str(tmp_path / "t-0")).records(0, 2, False, True))
    assert [(r[1], r[2]) for r in rows] == [(T0 + 1, 1), (T0 + 1, 1)]  # the batch's max timestamp


def test_an_interrupted_swap_stands_for_the_segments_it_spans(tmp_path):
    directory = write_log(tmp_path, "t", 0, batches=12, segment_bytes=700)
    bases = sorted(int(p.name[:20]) for p in directory.glob("*.log"))
    assert len(bases) >= 3
    end = bases[2]
    # The cleaner kept every other record of the first two segments, and crashed mid-swap.
    kept = [record(o) for o in range(1, end, 2)]
    (directory / ("0" * 20 + ".log.swap")).write_bytes(build_batch(kept))
    (directory / ("0" * 20 + ".log.cleaned")).write_bytes(b"junk")
    got = list(PartitionFiles(str(directory)).records(0, 60, False, True))
    assert [r[0] for r in got] == list(range(1, end, 2)) + list(range(end, 60))


def test_offset_for_timestamp(tmp_path):
    directory = write_log(tmp_path, "t", 0, batches=20)
    files = PartitionFiles(str(directory))
    assert files.offset_for_timestamp(T0 + 37) == 37
    assert files.offset_for_timestamp(0) == 0
    assert files.offset_for_timestamp(T0 + 1000) is None


def test_jbod_discovery(tmp_path):
    disk1, disk2 = tmp_path / "d1", tmp_path / "d2"
    write_log(disk1, "a-b", 0, batches=2)
    write_log(disk2, "a-b", 1, batches=3)
    write_log(disk2, "c", 0, batches=1)
    (disk1 / "a-b-2.0123abcd-delete").mkdir()
    (disk1 / "stray-file-3").write_text("not a dir")
    log = OfflineLog([str(disk1), str(disk2)])
    assert log.topics() == {"a-b": 2, "c": 1}
    assert log.latest([("a-b", 0), ("a-b", 1)]) == {("a-b", 0): 10, ("a-b", 1): 15}
    assert find_partitions([str(disk1)]) == {("a-b", 0): str(disk1 / "a-b-0")}
    write_log(disk1, "c", 0, batches=1)
    with pytest.raises(OptionError, match="in two log dirs"):
        OfflineLog([str(disk1), str(disk2)])
    with pytest.raises(OptionError, match="does not exist"):
        OfflineLog([str(tmp_path / "nope")])
    with pytest.raises(OptionError, match="in none of the log dirs"):
        OfflineLog([str(disk2)]).partition(("a-b", 0))
    assert os.path.isdir(disk1 / "a-b-2.0123abcd-delete")
