import os
import struct

import crc32c
import pytest

from protocol.errors import InvalidRecordError
from protocol.record_batch import MAX_SEQUENCE, BatchHeader
from protocol.records import Record, build_batch
from storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from storage.producer_state import (
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    read_snapshot,
)
from storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)
PID = 42


def header(seq, count=1, epoch=0, pid=PID, base_offset=0, timestamp=1_000, **kwargs) -> BatchHeader:
    """The header of a batch of `count` records, as stored at `base_offset`."""
    records = [Record(base_offset + i, timestamp, None, b"v") for i in range(count)]
    return BatchHeader.from_buffer(
        build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kwargs)
    )


class Appender:
    """Drives a manager as the log does: check, then record at the next offset."""

    def __init__(self, state: ProducerStateManager) -> None:
        self.state = state
        self.next_offset = 0

    def append(self, seq, count=1, epoch=0, pid=PID, timestamp=1_000):
        batch = header(seq, count, epoch, pid, timestamp=timestamp)
        duplicate = self.state.check_append(batch)
        if duplicate is not None:
            return duplicate
        stored = batch._replace(base_offset=self.next_offset)
        self.state.record_batch(stored)
        self.next_offset += count
        return None


@pytest.fixture
def state(tmp_path):
    return ProducerStateManager(str(tmp_path), TP)


@pytest.fixture
def producer(state):
    return Appender(state)


def test_an_unknown_producer_may_start_at_any_sequence(producer):
    assert producer.append(17, count=3) is None
    assert producer.append(20) is None
    with pytest.raises(OutOfOrderSequenceError):
        producer.append(22)


def test_a_gap_or_a_repeat_that_is_not_a_cached_batch_is_out_of_order(producer):
    producer.append(0, count=5)
    producer.append(5, count=5)
    for seq, count in [(11, 1), (3, 4), (5, 2), (9, 1)]:
        with pytest.raises(OutOfOrderSequenceError):
            producer.append(seq, count=count)
    assert producer.append(10) is None


def test_each_of_the_last_five_batches_is_a_duplicate_with_its_original_offsets(producer):
    for i in range(7):
        producer.append(2 * i, count=2, timestamp=100 + i)
    for i in range(2, 7):  # batches 0 and 1 fell out of the cache
        duplicate = producer.append(2 * i, count=2)
        assert duplicate == BatchMetadata(2 * i + 1, 2 * i + 1, 1, 100 + i)
        assert (duplicate.first_seq, duplicate.first_offset) == (2 * i, 2 * i)
    with pytest.raises(OutOfOrderSequenceError):
        producer.append(2, count=2)
    assert producer.next_offset == 14


def test_sequences_wrap_at_int32_max(producer):
    producer.append(MAX_SEQUENCE - 2, count=3)
    assert producer.append(0, count=2) is None
    assert producer.append(MAX_SEQUENCE - 2, count=3).last_seq == MAX_SEQUENCE
    producer.append(2)
    with pytest.raises(OutOfOrderSequenceError):
        producer.append(MAX_SEQUENCE)


def test_a_batch_spanning_the_wrap_is_recognised_as_a_duplicate(producer):
    producer.append(MAX_SEQUENCE - 1, count=4)
    assert producer.append(MAX_SEQUENCE - 1, count=4).last_seq == 1
    assert producer.append(2) is None


def test_an_older_epoch_is_fenced(producer):
    producer.append(0, epoch=3)
    for seq in (0, 1, 5):
        with pytest.raises(InvalidProducerEpochError):
            producer.append(seq, epoch=2)


def test_a_new_epoch_starts_at_sequence_zero_and_forgets_the_old_batches(producer, state):
    producer.append(0, count=3, epoch=1)
    with pytest.raises(OutOfOrderSequenceError):
        producer.append(3, epoch=2)
    assert producer.append(0, count=2, epoch=2) is None
    assert state.producers[PID].epoch == 2
    assert [b.last_seq for b in state.producers[PID].batches] == [1]


def test_negative_sequences_are_invalid_records(producer):
    with pytest.raises(InvalidRecordError):
        producer.append(-5)


def test_producers_are_independent(producer):
    producer.append(0, pid=1)
    producer.append(0, pid=2)
    assert producer.append(1, pid=1) is None
    assert producer.append(0, pid=2).last_offset == 1


def test_batches_without_a_producer_id_change_nothing(state):
    state.record_batch(header(-1, pid=-1))
    assert state.producers == {}


def test_transactional_batches_open_a_transaction_and_markers_end_it(state):
    state.record_batch(header(0, base_offset=5, is_transactional=True))
    state.record_batch(header(1, base_offset=6, is_transactional=True))
    assert state.producers[PID].current_txn_first_offset == 5
    state.record_batch(header(-1, base_offset=7, is_control=True, is_transactional=True))
    assert state.producers[PID].current_txn_first_offset == -1


def test_a_marker_under_a_bumped_epoch_fences_the_old_epoch(producer):
    producer.append(0)
    producer.state.record_batch(header(-1, epoch=1, base_offset=1, is_control=True, is_transactional=True))
    with pytest.raises(InvalidProducerEpochError):
        producer.append(1)


def test_expiry_drops_producers_idle_for_the_expiration_time(tmp_path):
    state = ProducerStateManager(str(tmp_path), TP, producer_id_expiration_ms=1_000)
    producer = Appender(state)
    producer.append(0, pid=1, timestamp=10_000)
    producer.append(0, pid=2, timestamp=10_500)
    assert state.remove_expired_producers(10_999) == 0
    assert state.remove_expired_producers(11_000) == 1
    assert list(state.producers) == [2]
    state.producers[2].current_txn_first_offset = 7  # an open transaction keeps its producer
    assert state.remove_expired_producers(99_000) == 0


# ----------------------------------------------------------------------------------- snapshots


def kafka_snapshot(entries) -> bytes:
    """A snapshot as Kafka's ProducerStateManager lays it out, built independently of the code."""
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def test_snapshot_bytes_are_kafkas_layout(tmp_path, state, producer):
    producer.append(0, count=3, epoch=2, pid=7, timestamp=5_000)
    producer.append(3, count=2, epoch=2, pid=7, timestamp=6_000)
    state.take_snapshot(5)
    path = tmp_path / "00000000000000000005.snapshot"
    #                       pid epoch last seq last offset delta timestamp coordinator epoch txn
    assert path.read_bytes() == kafka_snapshot([(7, 2, 4, 4, 1, 6_000, -1, -1)])


def test_snapshot_round_trip_keeps_each_producers_last_batch(tmp_path, state, producer):
    producer.append(0, count=2, pid=1, timestamp=100)
    producer.append(2, count=3, pid=1, timestamp=200)
    producer.append(MAX_SEQUENCE, count=2, epoch=4, pid=2, timestamp=300)
    state.take_snapshot(producer.next_offset)
    reloaded = ProducerStateManager(str(tmp_path), TP)
    assert reloaded.truncate_and_reload(0, producer.next_offset, now_ms=1_000) == 7
    assert {pid: (e.epoch, list(e.batches), e.last_timestamp) for pid, e in reloaded.producers.items()} == {
        1: (0, [BatchMetadata(4, 4, 2, 200)], 200),
        2: (4, [BatchMetadata(0, 6, 1, 300)], 300),
    }
    again = Appender(reloaded)
    assert again.append(2, count=3, pid=1) is not None  # a retry of the last batch is still known
    with pytest.raises(OutOfOrderSequenceError):
        again.append(0, count=2, pid=1)  # the batch before it is not: as in Kafka


def test_a_snapshot_of_a_producer_without_batches_round_trips(tmp_path):
    (tmp_path / "00000000000000000009.snapshot").write_bytes(kafka_snapshot([(3, 1, -1, -1, 0, 50, 4, -1)]))
    [entry] = read_snapshot(str(tmp_path / "00000000000000000009.snapshot"))
    assert (entry.producer_id, entry.epoch, list(entry.batches), entry.coordinator_epoch) == (3, 1, [], 4)
    state = ProducerStateManager(str(tmp_path), TP)
    state.truncate_and_reload(0, 9, now_ms=100)
    assert Appender(state).append(0, epoch=1, pid=3) is None
    assert Appender(state).append(0, epoch=1, pid=3) is not None


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-3],
        lambda data: data[:4],
        lambda data: data[:20] + bytes([data[20] ^ 1]) + data[21:],
        lambda data: b"\x00\x02" + data[2:],
        lambda data: b"",
    ],
)
def test_a_damaged_snapshot_is_deleted_and_the_one_before_used(tmp_path, state, producer, damage):
    producer.append(0, count=2)
    state.take_snapshot(2)
    producer.append(2, count=2)
    state.take_snapshot(4)
    newest = tmp_path / "00000000000000000004.snapshot"
    newest.write_bytes(damage(newest.read_bytes()))
    reloaded = ProducerStateManager(str(tmp_path), TP)
    assert reloaded.truncate_and_reload(0, 4, now_ms=0) == 2
    assert reloaded.producers[PID].last_seq == 1
    assert not newest.exists() and reloaded.snapshot_offsets == [2]


def test_reload_deletes_snapshots_outside_the_log_and_skips_expired_producers(tmp_path):
    state = ProducerStateManager(str(tmp_path), TP, producer_id_expiration_ms=1_000)
    producer = Appender(state)
    producer.append(0, pid=1, timestamp=100)
    producer.append(0, pid=2, timestamp=900)
    for offset in (1, 2, 3):
        state.take_snapshot(offset)
    assert state.truncate_and_reload(1, 2, now_ms=1_500) == 2
    assert state.snapshot_offsets == [2]
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000002.snapshot"]
    assert list(state.producers) == [2]
    assert state.truncate_and_reload(2, 5, now_ms=0) == 2  # nothing left: replay from the start
    assert state.producers == {} and state.snapshot_offsets == []


def test_a_snapshot_is_taken_once_per_new_offset_and_flushed_once(state, producer):
    producer.append(0)
    state.take_snapshot(1)
    state.take_snapshot(1)
    state.take_snapshot(0)
    assert state.snapshot_offsets == [1]
    state.take_snapshot(5)
    assert [s.offset for s in state.pop_unflushed(3)] == [1]
    assert [s.offset for s in state.pop_unflushed(10)] == [5]
    assert state.pop_unflushed(10) == []


def test_stray_snapshots_go_except_the_newest_beyond_every_segment(tmp_path):
    for offset in (0, 5, 7, 10, 12, 15):
        (tmp_path / f"{offset:020d}.snapshot").write_bytes(kafka_snapshot([]))
    (tmp_path / "00000000000000000005.log").write_bytes(b"")
    state = ProducerStateManager(str(tmp_path), TP)
    state.remove_stray_snapshots([0, 10])
    assert state.snapshot_offsets == [0, 10, 15]
    state.remove_stray_snapshots([0, 20])
    assert state.snapshot_offsets == [0]
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".snapshot")) == [f"{0:020d}.snapshot"]


def test_deleting_snapshots(tmp_path, state):
    for offset in (3, 6, 9):
        state.take_snapshot(offset)
    state.delete_snapshot(4)  # none there: nothing happens
    state.delete_snapshot(3)
    state.delete_snapshots_above(6)
    assert state.snapshot_offsets == [6]
    assert os.listdir(tmp_path) == ["00000000000000000006.snapshot"]


def test_after_a_truncation_the_batches_known_below_the_cut_are_kept_for_the_same_epoch(state):
    appender = Appender(state)
    for seq in range(5):
        appender.append(seq)  # offsets 0-4
    known = dict(state.producers)
    state.producers = {PID: ProducerStateEntry(PID)}  # rebuilt from a snapshot: one batch
    state.record_batch(header(2, base_offset=2))
    state.keep_known_batches(known, end_offset=3)
    assert [batch.last_offset for batch in state.producers[PID].batches] == [0, 1, 2]
    # A producer whose epoch before the cut differs keeps what was rebuilt.
    state.producers = {PID: ProducerStateEntry(PID)}
    state.record_batch(header(0, epoch=1, base_offset=0))
    state.keep_known_batches(known, end_offset=3)
    assert [batch.last_offset for batch in state.producers[PID].batches] == [0]
