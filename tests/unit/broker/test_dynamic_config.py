"""broker/dynamic_config.py through an in-process broker's dispatcher (IncrementalAlterConfigs,
AlterConfigs and DescribeConfigs on BROKER resources), its stores (the log dirs' file, and
ZooKeeper in Kafka's layout against a real ZooKeeper), and the effect of each change."""

import asyncio
import json

from broker.dynamic_config import DEFAULT, DynamicBrokerConfig, FileBrokerConfigStore, ZkBrokerConfigStore, reconfigurable
from broker.server import Broker
from protocol.api_keys import ApiKey
from protocol.config_types import ConfigSource
from protocol.errors import ErrorCode
from replication.zk import ZkClient
from storage.topic_partition import TopicPartition
from tests.in_process import broker_config as settings
from tests.unit.broker.test_admin_handlers import BROKER, DELETE, SET, APPEND, Admin, alter, describe, incremental

DYNAMIC = ConfigSource.DYNAMIC_BROKER_CONFIG
DYNAMIC_DEFAULT = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
STATIC = ConfigSource.STATIC_BROKER_CONFIG
DEFAULT_CONFIG = ConfigSource.DEFAULT_CONFIG


def run(tmp_path, scenario, extra: dict | None = None, restarts: int = 0):
    """Start a broker on tmp_path and run `scenario(admin)`; with restarts, run it again on
    the same log dir that many times (scenario gets the round)."""

    async def main():
        for round_ in range(restarts + 1):
            broker = Broker(settings(tmp_path, extra))
            await broker.start()
            try:
                await scenario(Admin(broker), round_) if restarts else await scenario(Admin(broker))
            finally:
                await broker.stop()

    asyncio.run(main())


async def change(admin, name, *operations, validate_only=False):
    request = incremental((BROKER, name, operations), validate_only=validate_only)
    response = await admin.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request)
    return response.responses[0].error_code, response.responses[0].error_message


async def described(admin, name, version=4):
    response = await admin.call(ApiKey.DESCRIBE_CONFIGS, version, describe((BROKER, name), synonyms=True))
    result = response.results[0]
    assert result.error_code == ErrorCode.none, result.error_message
    return {entry.name: entry for entry in result.configs}


def segment_bytes(admin, topic):
    return admin.broker.log_manager.get(TopicPartition(topic, 0)).config.segment_bytes


def test_a_topic_default_set_for_this_broker_reaches_the_logs_without_an_override(tmp_path):
    async def scenario(admin):
        await admin.create_topic("plain")
        await admin.create_topic("own", configs={"segment.bytes": "50000"})
        assert await change(admin, "0", ("log.segment.bytes", SET, "70000")) == (ErrorCode.none, None)
        assert (segment_bytes(admin, "plain"), segment_bytes(admin, "own")) == (70000, 50000)
        await admin.create_topic("later")
        assert segment_bytes(admin, "later") == 70000

        entry = (await described(admin, "0"))["log.segment.bytes"]
        assert (entry.value, entry.config_source, entry.read_only) == ("70000", DYNAMIC, False)
        assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
            ("log.segment.bytes", "70000", DYNAMIC),
            ("log.segment.bytes", "1073741824", DEFAULT_CONFIG),
        ]
        assert (await described(admin, "0"))["broker.id"].read_only

        assert await change(admin, "0", ("log.segment.bytes", DELETE, None)) == (ErrorCode.none, None)
        assert segment_bytes(admin, "plain") == 1073741824
        assert (await described(admin, "0"))["log.segment.bytes"].config_source == DEFAULT_CONFIG

    run(tmp_path, scenario)


def test_this_brokers_value_wins_over_the_cluster_default_which_wins_over_server_properties(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t")
        assert await change(admin, "", ("log.retention.ms", SET, "600000")) == (ErrorCode.none, None)
        assert admin.broker.log_manager.get(TopicPartition("t", 0)).config.retention_ms == 600000
        assert await change(admin, "0", ("log.retention.ms", SET, "300000")) == (ErrorCode.none, None)
        assert admin.broker.log_manager.get(TopicPartition("t", 0)).config.retention_ms == 300000

        entry = (await described(admin, "0"))["log.retention.ms"]
        assert [(s.value, s.source) for s in entry.synonyms][:2] == [("300000", DYNAMIC), ("600000", DYNAMIC_DEFAULT)]
        # log.retention.hours is set in server.properties, below both.
        hours = (await described(admin, "0"))["log.retention.hours"]
        assert (hours.value, hours.config_source) == ("100", STATIC)

        default = await described(admin, "")
        assert list(default) == ["log.retention.ms"]
        assert (default["log.retention.ms"].value, default["log.retention.ms"].config_source) == ("600000", DYNAMIC_DEFAULT)
        assert [s.source for s in default["log.retention.ms"].synonyms] == [DYNAMIC_DEFAULT]

        await change(admin, "0", ("log.retention.ms", DELETE, None))
        assert admin.broker.log_manager.get(TopicPartition("t", 0)).config.retention_ms == 600000

    run(tmp_path, scenario, {"log.retention.hours": "100"})


def test_dynamic_configs_are_in_effect_again_after_a_restart(tmp_path):
    async def scenario(admin, round_):
        if round_ == 0:
            await admin.create_topic("t")
            assert await change(admin, "", ("log.segment.bytes", SET, "80000")) == (ErrorCode.none, None)
            assert await change(admin, "0", ("max.connections.per.ip", SET, "7")) == (ErrorCode.none, None)
        else:
            assert segment_bytes(admin, "t") == 80000
            assert admin.broker.config.get("max.connections.per.ip") == 7
            assert (await described(admin, "0"))["max.connections.per.ip"].config_source == DYNAMIC
            assert (await described(admin, ""))["log.segment.bytes"].value == "80000"

    run(tmp_path, scenario, restarts=1)
    assert json.loads((tmp_path / "logway-broker-configs.json").read_text())["entities"] == {
        "<default>": {"log.segment.bytes": "80000"},
        "0": {"max.connections.per.ip": "7"},
    }


def test_connection_limits_apply_to_connections_accepted_afterwards(tmp_path):
    async def scenario(admin):
        quotas = admin.broker._quotas
        assert quotas.admit("PLAINTEXT", "10.0.0.1") is None
        assert await change(admin, "0", ("max.connections.per.ip", SET, "1")) == (ErrorCode.none, None)
        assert "max.connections.per.ip" in quotas.admit("PLAINTEXT", "10.0.0.1")
        assert await change(admin, "", ("max.connections.per.ip.overrides", SET, "10.0.0.1:5")) == (ErrorCode.none, None)
        assert quotas.admit("PLAINTEXT", "10.0.0.1") is None
        assert await change(admin, "", ("max.connections", SET, "2")) == (ErrorCode.none, None)
        assert "max.connections" in quotas.admit("PLAINTEXT", "10.0.0.2")

    run(tmp_path, scenario)


def test_the_cleaners_buffers_and_backoff_change_at_run_time_its_threads_do_not(tmp_path):
    async def scenario(admin):
        assert await change(admin, "", ("log.cleaner.backoff.ms", SET, "100"), ("log.cleaner.io.buffer.size", SET, "65536")) == (
            ErrorCode.none, None
        )
        cleaner = admin.broker.log_manager.cleaner.config
        assert (cleaner.backoff_ms, cleaner.io_buffer_size) == (100, 65536)
        code, message = await change(admin, "0", ("log.cleaner.threads", SET, "2"))
        assert code == ErrorCode.invalid_config and message.endswith("Set(log.cleaner.threads)")

    run(tmp_path, scenario)


def test_append_and_subtract_start_from_the_value_in_effect(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t")
        assert await change(admin, "0", ("log.cleanup.policy", APPEND, "compact")) == (ErrorCode.none, None)
        assert admin.broker.log_manager.get(TopicPartition("t", 0)).config.compact
        assert admin.broker.dynamic_config.own == {"log.cleanup.policy": "delete,compact"}
        code, message = await change(admin, "0", ("log.segment.bytes", APPEND, "1"))
        assert (code, message) == (ErrorCode.invalid_config, "Can't APPEND to key log.segment.bytes because its type is not LIST.")

    run(tmp_path, scenario)


def test_refused_changes_change_nothing(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t")
        code, message = await change(admin, "0", ("log.segment.bytes", SET, "5"), ("log.retention.ms", SET, "1000"))
        assert code == ErrorCode.invalid_config
        assert message.startswith("Invalid config value for resource ConfigResource(type=BROKER, name='0'): ")
        assert "log.segment.bytes" in message
        code, message = await change(admin, "0", ("listeners", SET, "PLAINTEXT://:1"))
        assert (code, message) == (
            ErrorCode.invalid_config,
            "Invalid config value for resource ConfigResource(type=BROKER, name='0'): "
            "Cannot update these configs dynamically: Set(listeners)",
        )
        assert await change(admin, "0", ("log.retention.ms", SET, "1000"), validate_only=True) == (ErrorCode.none, None)
        assert admin.broker.dynamic_config.own == {}
        assert admin.broker.log_manager.get(TopicPartition("t", 0)).config.retention_ms == 604800000
        assert not (tmp_path / "logway-broker-configs.json").exists()

    run(tmp_path, scenario)


def test_a_keystore_set_at_run_time_on_a_broker_without_tls_is_refused_as_at_start(tmp_path):
    async def scenario(admin):
        code, message = await change(
            admin, "0", ("ssl.keystore.type", SET, "PEM"), ("ssl.keystore.location", SET, "/etc/logway/server.pem")
        )
        assert code == ErrorCode.invalid_config
        assert "ssl.keystore.type, ssl.keystore.location are set but no listener uses SSL or SASL_SSL" in message
        assert "it would have no effect" in message
        assert admin.broker.dynamic_config.own == {}

    run(tmp_path, scenario)


def test_alter_configs_replaces_the_whole_level(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t")
        await change(admin, "0", ("log.retention.ms", SET, "1000"))
        response = await admin.call(ApiKey.ALTER_CONFIGS, 0, alter((BROKER, "0", [("log.segment.bytes", "90000")])))
        assert response.responses[0].error_code == ErrorCode.none
        assert admin.broker.dynamic_config.own == {"log.segment.bytes": "90000"}
        assert segment_bytes(admin, "t") == 90000
        assert admin.broker.log_manager.get(TopicPartition("t", 0)).config.retention_ms == 604800000

    run(tmp_path, scenario)


def test_describe_v0_reports_dynamic_values_as_not_default(tmp_path):
    async def scenario(admin):
        await change(admin, "0", ("message.max.bytes", SET, "2000000"))
        response = await admin.call(ApiKey.DESCRIBE_CONFIGS, 0, describe((BROKER, "0")))
        entry = {c.name: c for c in response.results[0].configs}["message.max.bytes"]
        assert (entry.value, entry.is_default) == ("2000000", False)

    run(tmp_path, scenario)


def test_only_keys_logway_applies_at_run_time_are_reconfigurable():
    assert reconfigurable("log.retention.ms") and reconfigurable("unclean.leader.election.enable")
    assert reconfigurable("listener.name.ssl.ssl.keystore.location")
    assert reconfigurable("log.cleaner.backoff.ms")
    assert not reconfigurable("num.io.threads") and not reconfigurable("log.cleaner.threads")
    assert not reconfigurable("no.such.key")


class RecordingBroker:
    def __init__(self):
        self.configs = []

    def reconfigure(self, config, validate_only):
        if not validate_only:
            self.configs.append(config)


def test_the_zookeeper_store_uses_kafkas_layout_and_announces_changes(zookeeper, tmp_path):
    async def scenario():
        client = ZkClient(zookeeper.connect_string + "/dynamic", 6000, connection_timeout_ms=30_000)
        await client.start()
        try:
            await client.ensure_path("/config/changes")
            await client.ensure_path("/config/brokers")
            broker = RecordingBroker()
            dynamic = DynamicBrokerConfig(settings(tmp_path), 0, broker, ZkBrokerConfigStore(client))
            await dynamic.alter(DEFAULT, lambda current: {**current, "log.retention.ms": "5000"}, "", False)
            found = await client.get("/config/brokers/<default>")
            assert json.loads(found[0]) == {"version": 1, "config": {"log.retention.ms": "5000"}}
            [notification] = await client.get_children("/config/changes")
            found = await client.get(f"/config/changes/{notification}")
            assert json.loads(found[0]) == {"version": 2, "entity_path": "brokers/<default>"}
            assert broker.configs[-1].get("log.retention.ms") == 5000

            # Another broker wrote this one's node: the notification makes it read it again.
            await client.create("/config/brokers/0", json.dumps({"version": 1, "config": {"log.retention.ms": "7000"}}).encode())
            await dynamic.reload("0")
            assert broker.configs[-1].get("log.retention.ms") == 7000
            await dynamic.reload("3")  # another broker's: nothing to do
            assert len(broker.configs) == 2

            restarted = DynamicBrokerConfig(settings(tmp_path), 0, broker, ZkBrokerConfigStore(client))
            await restarted.load()
            assert (restarted.default, restarted.own) == ({"log.retention.ms": "5000"}, {"log.retention.ms": "7000"})
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_the_file_store_keeps_every_entity(tmp_path):
    async def scenario():
        store = FileBrokerConfigStore([str(tmp_path / "a"), str(tmp_path / "b")])
        await store.write(DEFAULT, {"log.retention.ms": "1"})
        await store.write("0", {"max.connections": "5"})
        await store.write("0", {})
        store.close()
        reopened = FileBrokerConfigStore([str(tmp_path / "b")])
        assert await reopened.read_all() == {DEFAULT: {"log.retention.ms": "1"}}
        reopened.close()

    asyncio.run(scenario())


class SlowStore:
    """A store whose writes wait for `release`, so a notification can arrive during one."""

    def __init__(self):
        self.entities = {}
        self.release = asyncio.Event()

    async def read_all(self):
        return dict(self.entities)

    async def read(self, entity):
        return dict(self.entities.get(entity, {}))

    async def write(self, entity, config):
        self.entities[entity] = dict(config)
        await self.release.wait()

    def close(self):
        pass


def test_a_default_changed_elsewhere_during_a_write_of_this_brokers_level_is_kept(tmp_path):
    async def scenario():
        store, broker = SlowStore(), RecordingBroker()
        dynamic = DynamicBrokerConfig(settings(tmp_path), 0, broker, store)
        writing = asyncio.create_task(dynamic.alter("0", lambda current: {"message.max.bytes": "5000"}, "0", False))
        await asyncio.sleep(0)  # the write has begun
        store.entities[DEFAULT] = {"log.retention.ms": "9000"}
        await dynamic.reload(DEFAULT)  # another broker's change, announced meanwhile
        store.release.set()
        await writing
        assert (dynamic.default, dynamic.own) == ({"log.retention.ms": "9000"}, {"message.max.bytes": "5000"})
        assert broker.configs[-1].get("log.retention.ms") == 9000

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_topic_reports_a_dynamic_broker_default_with_its_source(tmp_path):
    from tests.unit.broker.test_admin_handlers import TOPIC

    async def scenario(admin):
        await admin.create_topic("t")
        await change(admin, "", ("log.retention.ms", SET, "600000"))
        await change(admin, "0", ("log.segment.bytes", SET, "70000"))
        response = await admin.call(ApiKey.DESCRIBE_CONFIGS, 4, describe((TOPIC, "t"), synonyms=True))
        configs = {c.name: c for c in response.results[0].configs}
        assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("600000", DYNAMIC_DEFAULT)
        assert (configs["segment.bytes"].value, configs["segment.bytes"].config_source) == ("70000", DYNAMIC)
        assert [(s.name, s.source) for s in configs["segment.bytes"].synonyms] == [
            ("log.segment.bytes", DYNAMIC), ("log.segment.bytes", DEFAULT_CONFIG),
        ]

    run(tmp_path, scenario)


def test_a_stored_value_the_broker_no_longer_accepts_is_left_out_and_the_broker_starts(tmp_path, caplog):
    (tmp_path / "logway-broker-configs.json").write_text(
        json.dumps({"version": 1, "generation": 1, "entities": {"0": {"log.segment.bytes": "5"}}})
    )

    async def scenario(admin):
        assert admin.broker.config.get("log.segment.bytes") == 1073741824
        assert admin.broker.dynamic_config.own == {}

    run(tmp_path, scenario)
    assert any("ignoring dynamic broker configs" in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
