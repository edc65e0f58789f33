"""The fault tests' checker and workload, proven on histories made by hand and on one real broker
process killed with SIGKILL under load (standalone: nothing acknowledged may be lost)."""

import shutil
import struct
import time

import pytest

from protocol.records import ControlRecordType, Record, build_batch, control_record
from tests.cluster.checker import (
    History,
    Transactions,
    aborted_entries,
    check,
    check_transactions,
    control_batch_offsets,
    last_sequences,
    offsets_acked_twice,
    offsets_going_backwards,
    partition_batches,
    producer_batches,
    producer_fields,
    replicas_agree,
    values_in,
)
from tests.cluster.workload import AIOKAFKA, CONFLUENT, KAFKA_PYTHON, KAFKAJS, ProducerWorkload, read_topic
from tests.harness import BrokerProcess, unique_topic


def history(*acked: tuple[bytes, int, int], failed=(), unacked=()) -> History:
    h = History()
    for value, partition, offset in acked:
        h.sent.append(value)
        h.acked[value] = (partition, offset)
    for value in failed:
        h.sent.append(value)
        h.failed[value] = "timed out"
    h.sent += unacked
    return h


def test_a_log_holding_every_acknowledged_write_at_its_offset_is_valid():
    h = history((b"a", 0, 0), (b"b", 0, 1), (b"c", 1, 0), failed=[b"d"], unacked=[b"e"])
    verdict = check(h, {0: [(0, b"a"), (1, b"b"), (2, b"d")], 1: [(0, b"c")]})
    assert verdict.valid, verdict
    assert h.unknown == {b"e"}


def test_an_acknowledged_write_missing_is_lost_and_one_found_elsewhere_misplaced():
    h = history((b"a", 0, 0), (b"b", 0, 1), (b"c", 0, 2))
    verdict = check(h, {0: [(0, b"a"), (1, b"c")]})
    assert not verdict.valid
    assert verdict.lost == {b"b": (0, 1)}
    assert verdict.misplaced == {b"c": ((0, 2), [(0, 1)])}


def test_an_acknowledgement_without_an_offset_is_reported_and_fails_only_when_the_value_is_missing():
    h = history((b"a", 0, 0), (b"b", 0, -1), (b"c", 1, -1001))
    verdict = check(h, {0: [(0, b"a"), (1, b"b")]})
    assert verdict.offsetless == {b"b": ((0, -1), [(0, 1)])}
    assert verdict.lost == {b"c": (1, -1001)} and not verdict.valid
    assert "offset-less acks 1" in str(verdict)
    assert check(history((b"b", 0, -1)), {0: [(1, b"b")]}).valid


def test_duplicates_are_reported_without_failing_and_strangers_fail():
    h = history((b"a", 0, 0), (b"b", 0, 2))
    verdict = check(h, {0: [(0, b"a"), (1, b"a"), (2, b"b"), (3, b"zz")]})
    assert verdict.duplicated == {b"a": [(0, 0), (0, 1)]}
    assert verdict.unexpected == [b"zz"]
    assert not verdict.valid


def test_duplicates_fail_exactly_once():
    h = history((b"a", 0, 0), (b"b", 0, 2))
    verdict = check(h, {0: [(0, b"a"), (1, b"a"), (2, b"b")]})
    assert verdict.valid and not verdict.exactly_once


def test_values_read_out_of_send_order_are_reordered():
    h = history((b"a", 0, 1), (b"b", 0, 0))
    verdict = check(h, {0: [(0, b"b"), (1, b"a")]})
    assert verdict.reordered == {0: (b"b", b"a")}
    assert "b'b'@[0] before b'a'@[1]" in str(verdict)


def test_offsets_acked_twice_or_going_backwards_are_found_offset_less_ones_aside():
    first = history((b"a", 0, 0), (b"b", 0, 1), (b"x", 0, -1), (b"y", 0, -1))
    second = history((b"c", 0, 1), (b"d", 1, 0), (b"e", 0, 1))
    assert offsets_acked_twice([first, second]) == {(0, 1): {b"b", b"c", b"e"}}
    assert offsets_going_backwards(first) == []
    assert offsets_going_backwards(second) == [(b"c", (0, 1), b"e", (0, 1))]


def test_transactions_committed_once_aborted_never_and_unknown_all_or_nothing():
    txns = Transactions(history=history((b"t-0", 0, 0), (b"t-1", 1, 0), (b"t-2", 0, 2), (b"t-3", 1, 2),
                                        (b"t-4", 0, 4), (b"t-5", 1, 4)),
                        committed=[[b"t-0", b"t-1"]], aborted=[[b"t-2", b"t-3"]], unknown=[[b"t-4", b"t-5"]])
    good = {0: [(0, b"t-0"), (4, b"t-4")], 1: [(0, b"t-1"), (4, b"t-5")]}
    assert check_transactions(txns, good).valid
    assert check_transactions(txns, {0: [(0, b"t-0")], 1: [(0, b"t-1")]}).valid  # unknown: none of it
    bad = check_transactions(txns, {0: [(0, b"t-0"), (2, b"t-2"), (4, b"t-4")], 1: [(0, b"t-1"), (1, b"t-1")]})
    assert not bad.valid
    assert bad.aborted_read == {b"t-2": [(0, 2)]}
    assert bad.partial == [(1, 2, [(0, 4)])]
    assert bad.values.duplicated == {b"t-1": [(1, 0), (1, 1)]}


def test_a_contradicted_commit_is_only_checked_for_duplicates():
    txns = Transactions(history=history((b"t-0", 0, 0), failed=[b"t-1"]), contradicted=[[b"t-0", b"t-1"]])
    assert check_transactions(txns, {0: []}).valid
    assert check_transactions(txns, {0: [(0, b"t-0"), (1, b"t-1")]}).valid
    assert not check_transactions(txns, {0: [(0, b"t-0"), (1, b"t-1"), (2, b"t-1")]}).valid


def test_producer_fields_name_the_session_and_sequence_of_each_record(tmp_path):
    partition = tmp_path / "t-0"
    batch = build_batch([Record(5, 1000, None, b"x"), Record(6, 1000, None, b"y")], producer_id=7,
                        producer_epoch=2, base_sequence=40)
    _write_partition(partition, [_batch(4, b"w"), batch])
    assert producer_fields(str(partition), [6, 4]) == {6: (7, 2, 41), 4: (-1, -1, -1)}


def test_last_sequences_say_where_each_producer_session_stopped(tmp_path):
    partition = tmp_path / "t-0"
    session = {"producer_id": 7, "producer_epoch": 0}
    _write_partition(partition, [
        build_batch([Record(0, 1000, None, b"a"), Record(1, 1000, None, b"b")], base_sequence=0, **session),
        _batch(2, b"no producer"),
        build_batch([Record(3, 1000, None, b"c")], base_sequence=2, **session),
        build_batch([Record(4, 1000, None, b"d")], producer_id=7, producer_epoch=1, base_sequence=0),
    ])
    assert last_sequences(str(partition)) == {(7, 0): 2, (7, 1): 0}


def _write_partition(directory, batches) -> None:
    directory.mkdir(parents=True)
    (directory / "00000000000000000000.log").write_bytes(b"".join(batches))


def _batch(offset: int, value: bytes, epoch: int = 0) -> bytes:
    return build_batch([Record(offset, 1000, None, value)], partition_leader_epoch=epoch)


def test_replicas_agree_below_the_shorter_log_and_a_differing_batch_is_named(tmp_path):
    a, b, c = tmp_path / "a" / "t-0", tmp_path / "b" / "t-0", tmp_path / "c" / "t-0"
    _write_partition(a, [_batch(0, b"x"), _batch(1, b"y"), _batch(2, b"z")])
    _write_partition(b, [_batch(0, b"x"), _batch(1, b"y")])
    _write_partition(c, [_batch(0, b"x"), _batch(1, b"y", epoch=1)])
    assert replicas_agree([str(a), str(b)]) is None
    assert "base offsets 1 and 1" in replicas_agree([str(a), str(c)])
    assert values_in(str(a)) == [(0, b"x"), (1, b"y"), (2, b"z")]


def test_control_batches_are_found_by_offset_and_left_out_of_the_values(tmp_path):
    partition = tmp_path / "t-0"
    marker = build_batch([control_record(ControlRecordType.COMMIT, 0, 1, 1000)], is_transactional=True,
                         is_control=True, producer_id=7, producer_epoch=0)
    _write_partition(partition, [_batch(0, b"x"), marker, _batch(2, b"y")])
    assert control_batch_offsets(str(partition)) == [1]
    assert values_in(str(partition)) == [(0, b"x"), (2, b"y")]


def test_a_producers_batches_and_aborted_entries_show_what_its_transactions_left(tmp_path):
    partition = tmp_path / "t-0"
    session = {"producer_id": 7, "is_transactional": True}
    _write_partition(partition, [
        build_batch([Record(0, 1000, None, b"a")], producer_epoch=0, base_sequence=0, **session),
        build_batch([control_record(ControlRecordType.COMMIT, 3, 1, 1000)], is_control=True, producer_epoch=0,
                    **session),
        _batch(2, b"no producer"),
        build_batch([Record(3, 1000, None, b"b")], producer_epoch=0, base_sequence=1, **session),
        build_batch([control_record(ControlRecordType.ABORT, 4, 4, 1000)], is_control=True, producer_epoch=1,
                    **session),
    ])
    (partition / "00000000000000000000.txnindex").write_bytes(
        b"".join(struct.pack(">hqqqq", 0, producer_id, 3, 4, 5) for producer_id in (7, 8)))
    assert producer_batches(str(partition), 7, 1) == ["1 COMMIT e0 c3", "3 data e0", "4 ABORT e1 c4"]
    assert aborted_entries(str(partition), 7) == [(7, 3, 4, 5)]


def test_no_acknowledged_write_is_lost_when_a_standalone_broker_is_killed_under_load(tmp_path):
    broker = BrokerProcess(tmp_path / "data", {"num.partitions": "3"}).start()
    topic = unique_topic("checked")
    try:
        workload = ProducerWorkload(broker.bootstrap, topic, 3, count=3000, duration_s=20).start()
        _wait_for_acks(workload, 300)
        broker.kill()
        broker.start()
        history = workload.join()
        verdict = check(history, read_topic(broker.bootstrap, topic, 3))
    finally:
        broker.stop()
    assert verdict.valid, verdict
    assert len(history.acked) >= 300
    assert "Traceback" not in broker.log()
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "data" / f"{topic}-0", copy)
    assert replicas_agree([str(tmp_path / "data" / f"{topic}-0"), str(copy)]) is None
    assert len(partition_batches(str(copy))) > 0


@pytest.mark.parametrize("client, config", [
    (CONFLUENT, {"enable.idempotence": True}),
    (KAFKA_PYTHON, {"enable_idempotence": True}),
    (AIOKAFKA, {"enable_idempotence": True}),
    (KAFKAJS, {"producer": {"idempotent": True}}),
])
def test_each_idempotent_client_of_the_workloads_writes_every_value_once_across_a_kill(tmp_path, client, config):
    broker = BrokerProcess(tmp_path / "data", {"num.partitions": "3"}).start()
    topic = unique_topic(f"idempotent-{client}")
    try:
        workload = ProducerWorkload(broker.bootstrap, topic, 3, count=1500, duration_s=20, rate_per_s=150,
                                    client=client, config=config).start()
        _wait_for_acks(workload, 200)
        broker.kill()
        broker.start()
        history = workload.join()
        verdict = check(history, read_topic(broker.bootstrap, topic, 3))
    finally:
        broker.stop()
    assert verdict.exactly_once, verdict
    assert len(history.acked) >= 200 and not history.failed, history.failed


def _wait_for_acks(workload: ProducerWorkload, count: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while workload.acked_count < count:
        assert time.monotonic() < deadline, f"only {workload.acked_count} acknowledged"
        time.sleep(0.05)
