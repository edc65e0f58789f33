"""TopicManager on an in-process broker: Kafka's checks, and changes that never stay half done."""

import asyncio
import os
import threading

import pytest

from broker.config import BrokerConfig
from broker.server import Broker
from broker.topic_manager import validate_topic_name
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import iter_batches
from protocol.records import Record, build_batch, iter_records
from storage.topic_partition import TopicPartition


def broker_in(tmp_path) -> Broker:
    return Broker(
        BrokerConfig().with_overrides(
            {
                "log.dirs": str(tmp_path),
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "advertised.listeners": "PLAINTEXT://127.0.0.1:0",
            }
        )
    )


def run_with_broker(tmp_path, scenario):
    async def main():
        broker = broker_in(tmp_path)
        await broker.start()
        try:
            await scenario(broker)
        finally:
            await broker.stop()

    asyncio.run(main())


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "x" * 250, "tab\t", "ünï"])
def test_illegal_names(name):
    with pytest.raises(KafkaError) as raised:
        validate_topic_name(name)
    assert raised.value.error_code == ErrorCode.invalid_topic_exception


def check(broker, name, partitions=-1, replication=-1, assignments=None, configs=None):
    return broker.topics.check_new_topic(
        name, partitions, replication, assignments or {}, configs or {}, default_partitions=3, default_replication_factor=1
    )


def test_checks_defaults_and_errors(tmp_path):
    async def scenario(broker):
        assert check(broker, "fresh") == (3, 1)
        await broker.topics.create("a.b", 1, {})
        cases = [
            (dict(name="a.b"), ErrorCode.topic_already_exists),
            (dict(name="a_b"), ErrorCode.invalid_topic_exception),
            (dict(name="t", partitions=0), ErrorCode.invalid_partitions),
            (dict(name="t", replication=2), ErrorCode.invalid_replication_factor),
            (dict(name="t", configs={"retention.ms": "soon"}), ErrorCode.invalid_config),
            (dict(name="t", assignments={0: [0], 2: [0]}), ErrorCode.invalid_replica_assignment),
            (dict(name="t", assignments={0: [7]}), ErrorCode.invalid_replica_assignment),
            (dict(name="t", partitions=1, assignments={0: [0]}), ErrorCode.invalid_request),
        ]
        for arguments, error in cases:
            with pytest.raises(KafkaError) as raised:
                check(broker, **arguments)
            assert raised.value.error_code == error, arguments
        assert check(broker, "t", assignments={0: [0], 1: [0]}) == (2, 1)

    run_with_broker(tmp_path, scenario)


def test_no_online_dir_refuses_creation_without_registering(tmp_path):
    async def scenario(broker):
        log_manager = broker.log_manager
        for log_dir in log_manager.dirs.values():
            log_manager._take_offline(log_dir, OSError("disk gone"))
        with pytest.raises(KafkaError) as raised:
            await broker.topics.create("t", 1, {})
        assert raised.value.error_code == ErrorCode.kafka_storage_error
        assert "t" not in broker.topics.topics

    run_with_broker(tmp_path, scenario)


def test_a_cancelled_create_still_completes(tmp_path):
    async def scenario(broker):
        task = asyncio.ensure_future(broker.topics.create("t", 2, {}))
        await asyncio.sleep(0)  # the save is under way
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):
            if TopicPartition("t", 1) in broker.replica_manager.partitions:
                break
            await asyncio.sleep(0.01)
        assert broker.replica_manager.get_partition(TopicPartition("t", 1))

    run_with_broker(tmp_path, scenario)


def test_changes_persist_across_restart(tmp_path):
    async def first(broker):
        await broker.topics.create("t", 1, {"retention.ms": "1000"})
        await broker.topics.create_partitions("t", 3)
        await broker.topics.set_configs("t", {"retention.ms": "2000"})
        await broker.topics.create("gone", 1, {})
        await broker.topics.delete("gone")

    async def second(broker):
        info = broker.topics.get("t")
        assert (info.partitions, info.configs) == (3, {"retention.ms": "2000"})
        assert broker.topics.log_config("t").retention_ms == 2000
        assert "gone" not in broker.topics.topics
        assert broker.replica_manager.get_partition(TopicPartition("t", 2))

    run_with_broker(tmp_path, first)
    run_with_broker(tmp_path, second)


# ------------------------------------------------------- a kill at any point of a deletion


class _Killed(Exception):
    pass


class _KillAt:
    """Every file change from the `at`-th on (creating, writing, renaming, truncating, removing),
    in any thread, fails: the process as killed there, nothing after it reaching the disk."""

    _CHANGES = ("rename", "replace", "unlink", "rmdir", "mkdir", "ftruncate", "truncate", "pwrite", "write")

    def __init__(self, monkeypatch, at: int) -> None:
        self.at, self.changes, self._lock = at, 0, threading.Lock()
        for name in self._CHANGES:
            monkeypatch.setattr(os, name, self._counted(getattr(os, name)))
        real_open, real_builtin_open = os.open, open

        def os_open(path, flags, *args, **kwargs):
            if flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR | os.O_TRUNC):
                self._change()
            return real_open(path, flags, *args, **kwargs)

        def builtin_open(file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wax+"):
                self._change()
            return real_builtin_open(file, mode, *args, **kwargs)

        monkeypatch.setattr(os, "open", os_open)
        monkeypatch.setattr("builtins.open", builtin_open)

    def _counted(self, real):
        def change(*args, **kwargs):
            self._change()
            return real(*args, **kwargs)

        return change

    def _change(self) -> None:
        with self._lock:
            self.changes += 1
            if self.changes >= self.at:
                raise _Killed(f"killed at file change {self.changes}")


def _produce(broker, tp: TopicPartition, value: bytes) -> None:
    broker.replica_manager.append(tp, memoryview(bytearray(build_batch([Record(0, 1_000, b"k", value)]))), -1)


def _values(broker, tp: TopicPartition) -> list[bytes]:
    """The values of the committed records, read a segment at a time as fetches do."""
    log = broker.replica_manager.get_partition(tp).log
    values, offset = [], log.log_start_offset
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 24, log.high_watermark, True).read()
        for position, header in iter_batches(data):
            values += [r.value for r in iter_records(data[position : position + header.size])]
            offset = header.next_offset
    return values


def test_a_kill_at_any_file_change_of_a_deletion_and_recreation_keeps_what_was_acknowledged(tmp_path, monkeypatch):
    """A kill at each file change in turn of: deleting topic `t` (some of its segments pending
    deletion), creating `t` again, producing to it and to the untouched `u` (rolling segments),
    checkpoints and the delayed deletions. After a restart `u` holds every record acknowledged,
    and `t` is either gone or the new topic, holding every record acknowledged to it and nothing
    of the old one."""
    t, u = TopicPartition("t", 0), TopicPartition("u", 0)
    quick = {"file.delete.delay.ms": "5", "segment.bytes": "100"}  # a segment a record

    old_topic_id = []

    async def before(broker):
        old_topic_id[:] = [(await broker.topics.create("t", 1, quick)).topic_id]
        await broker.topics.create("u", 1, quick)
        for i in range(3):
            _produce(broker, t, b"old-%d" % i)
            _produce(broker, u, b"u-%d" % i)
        broker.replica_manager.delete_records_before(t, 1)
        broker.log_manager.checkpoint()
        await asyncio.sleep(0.05)

    async def steps(broker, acknowledged):
        await broker.topics.delete("t")
        await broker.topics.create("t", 1, quick)
        acknowledged[t] = []
        for i in range(3):
            _produce(broker, t, b"new-%d" % i)
            acknowledged[t].append(b"new-%d" % i)
            _produce(broker, u, b"u-after-%d" % i)
            acknowledged[u].append(b"u-after-%d" % i)
        broker.log_manager.checkpoint()
        broker.log_manager.checkpoint_high_watermarks()
        await asyncio.sleep(0.1)  # the delayed deletions run

    kills = 0
    for at in range(1, 500):
        directory = tmp_path / f"kill-{at}"
        acknowledged = {t: None, u: [b"u-0", b"u-1", b"u-2"]}

        async def killed_run():
            broker = broker_in(directory)
            await broker.start()
            await before(broker)
            with monkeypatch.context() as patch:
                kill = _KillAt(patch, at)
                try:
                    await steps(broker, acknowledged)
                except _Killed:
                    pass
                # nothing of the killed process runs on
                broker.log_manager._stop_threads()
                broker.log_manager.cleaner._executor.shutdown(wait=True)
            return kill.changes >= at

        async def restarted(broker):
            assert _values(broker, u) == acknowledged[u], at
            if "t" not in broker.topics.topics:
                assert not acknowledged[t], at  # the deletion was saved, the creation not
                assert broker.log_manager.get(t) is None, at
            elif broker.topics.get("t").topic_id == old_topic_id[0]:  # the deletion was not saved
                assert acknowledged[t] is None, at
                assert _values(broker, t) == [b"old-1", b"old-2"], at
            else:
                assert _values(broker, t) == (acknowledged[t] or []), at
            assert not broker.log_manager.has_offline_dirs, at

        killed = asyncio.run(killed_run())
        run_with_broker(directory, restarted)
        if not killed:
            break
        kills += 1
    assert 30 < kills < 499, kills
