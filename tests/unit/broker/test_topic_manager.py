"""TopicManager on an in-process broker: Kafka's checks, and changes that never stay half done."""

import asyncio

import pytest

from broker.config import BrokerConfig
from broker.server import Broker
from broker.topic_manager import validate_topic_name
from protocol.errors import ErrorCode, KafkaError
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
