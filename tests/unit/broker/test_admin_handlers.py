"""The admin APIs through the dispatcher of an in-process broker: request frames in, responses
out, no sockets. Each API at its oldest and newest served version, and every error it answers."""

import asyncio
import datetime
import inspect
import logging
import os
import uuid

import pytest
from kio.schema.alter_configs.v2.request import AlterableConfig, AlterConfigsRequest, AlterConfigsResource
from kio.schema.create_partitions.v3.request import (
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kio.schema.delete_records.v2.request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kio.schema.delete_topics.v5.request import DeleteTopicsRequest as DeleteTopicsByNameRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig as IncrementalConfig,
    AlterConfigsResource as IncrementalResource,
    IncrementalAlterConfigsRequest,
)

from broker.server import Broker
from protocol.api_keys import ApiKey
from protocol.config_types import ConfigResourceType, ConfigSource, ConfigType
from protocol.errors import ErrorCode
from protocol.records import Record, build_batch
from storage.log_config import TOPIC_CONFIGS
from storage.topic_partition import TopicPartition
from tests.in_process import CLIENT_SESSION
from tests.in_process import broker_config as settings
from tests.kafka_wire import decode_response, encode_request

TIMEOUT = datetime.timedelta(seconds=5)
TOPIC = ConfigResourceType.TOPIC
BROKER = ConfigResourceType.BROKER
BROKER_LOGGER = ConfigResourceType.BROKER_LOGGER
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class Admin:
    """Sends requests straight to the broker's dispatcher, as a connection would."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def call(self, api_key: ApiKey, version: int, request):
        frame = encode_request(api_key, version, request)
        chunks = self.broker._dispatcher.dispatch(memoryview(frame)[4:], CLIENT_SESSION)
        if inspect.isawaitable(chunks):
            chunks = await chunks
        return decode_response(api_key, version, b"".join(bytes(chunk) for chunk in chunks))

    async def create_topic(self, name: str, partitions: int = 1, configs: dict | None = None) -> None:
        await self.broker.topics.create(name, partitions, configs or {})

    def overrides(self, name: str) -> dict[str, str]:
        return self.broker.topics.get(name).configs

    def produce(self, topic: str, partition: int, count: int) -> None:
        records = [Record(i, 1_000 + i, b"k", b"v%d" % i) for i in range(count)]
        batch = bytearray(build_batch(records))
        self.broker.replica_manager.append(TopicPartition(topic, partition), memoryview(batch))


def run(tmp_path, scenario, extra: dict | None = None):
    """Start a broker on tmp_path, run `scenario(admin)` against it, stop it."""

    async def main():
        broker = Broker(settings(tmp_path, extra))
        await broker.start()
        try:
            return await scenario(Admin(broker))
        finally:
            await broker.stop()

    return asyncio.run(main())


# --------------------------------------------------------------------------------------------
# DeleteTopics
# --------------------------------------------------------------------------------------------


def delete_by_name(*names: str) -> DeleteTopicsByNameRequest:
    return DeleteTopicsByNameRequest(topic_names=names, timeout=TIMEOUT)


def delete_v6(*topics: tuple[str | None, uuid.UUID | None]) -> DeleteTopicsRequest:
    return DeleteTopicsRequest(
        topics=tuple(DeleteTopicState(name=name, topic_id=topic_id) for name, topic_id in topics),
        timeout=TIMEOUT,
    )


def test_delete_topics_v0_deletes_the_topic_and_renames_its_partition_dirs(tmp_path):
    async def scenario(admin):
        await admin.create_topic("doomed", 2)
        response = await admin.call(ApiKey.DELETE_TOPICS, 0, delete_by_name("doomed", "never-was"))
        assert [(r.name, r.error_code) for r in response.responses] == [
            ("doomed", ErrorCode.none),
            ("never-was", ErrorCode.unknown_topic_or_partition),
        ]
        assert "doomed" not in admin.broker.topics.topics
        assert TopicPartition("doomed", 0) not in admin.broker.replica_manager.partitions
        assert not (tmp_path / "doomed-0").exists()
        assert [name for name in os.listdir(tmp_path) if name.startswith("doomed-")] != []

    run(tmp_path, scenario)


def test_delete_topics_v6_by_name_and_by_id(tmp_path):
    async def scenario(admin):
        await admin.create_topic("by-name")
        await admin.create_topic("by-id")
        topic_id = admin.broker.topics.get("by-id").topic_id
        unknown_id = uuid.uuid4()
        response = await admin.call(
            ApiKey.DELETE_TOPICS, 6, delete_v6(("by-name", None), (None, topic_id), (None, unknown_id), ("nope", None))
        )
        results = [(r.name, r.topic_id, r.error_code) for r in response.responses]
        assert results[0][0] == "by-name" and results[0][2] == ErrorCode.none
        assert results[1] == ("by-id", topic_id, ErrorCode.none)
        assert results[2] == (None, unknown_id, ErrorCode.unknown_topic_id)
        assert results[3][0] == "nope" and results[3][2] == ErrorCode.unknown_topic_or_partition
        assert response.responses[3].error_message
        assert admin.broker.topics.topics == {}

    run(tmp_path, scenario)


def test_delete_topics_refuses_duplicates_and_ambiguous_entries(tmp_path):
    async def scenario(admin):
        await admin.create_topic("twice")
        topic_id = admin.broker.topics.get("twice").topic_id
        response = await admin.call(
            ApiKey.DELETE_TOPICS,
            6,
            delete_v6(("twice", None), ("twice", None), ("twice", topic_id), (None, None)),
        )
        assert [(r.error_code, r.error_message) for r in response.responses] == [
            (ErrorCode.invalid_request, "Duplicate topic name."),
            (ErrorCode.invalid_request, "Duplicate topic name."),
            (ErrorCode.invalid_request, "You may not specify both topic name and topic id."),
            (ErrorCode.invalid_request, "Neither topic name nor id were specified."),
        ]
        response = await admin.call(ApiKey.DELETE_TOPICS, 6, delete_v6((None, topic_id), (None, topic_id)))
        assert [(r.error_code, r.error_message) for r in response.responses] == [
            (ErrorCode.invalid_request, "Duplicate topic id."),
        ] * 2
        response = await admin.call(ApiKey.DELETE_TOPICS, 5, delete_by_name("twice", "twice"))
        assert {(r.error_code, r.error_message) for r in response.responses} == {
            (ErrorCode.invalid_request, "Duplicate topic name.")
        }
        assert "twice" in admin.broker.topics.topics

    run(tmp_path, scenario)


def test_delete_topics_when_deletion_is_disabled(tmp_path):
    async def scenario(admin):
        await admin.create_topic("kept")
        response = await admin.call(ApiKey.DELETE_TOPICS, 6, delete_v6(("kept", None)))
        assert response.responses[0].error_code == ErrorCode.topic_deletion_disabled
        assert response.responses[0].error_message == "Topic deletion is disabled."
        response = await admin.call(ApiKey.DELETE_TOPICS, 0, delete_by_name("kept"))
        assert response.responses[0].error_code == ErrorCode.invalid_request
        assert "kept" in admin.broker.topics.topics

    run(tmp_path, scenario, {"delete.topic.enable": "false"})


def test_a_deleted_topic_can_be_created_again_empty(tmp_path):
    async def scenario(admin):
        await admin.create_topic("reborn")
        admin.produce("reborn", 0, 3)
        await admin.call(ApiKey.DELETE_TOPICS, 6, delete_v6(("reborn", None)))
        await admin.create_topic("reborn")
        partition = admin.broker.replica_manager.get_partition(TopicPartition("reborn", 0))
        assert partition.log.log_end_offset == 0

    run(tmp_path, scenario)


# --------------------------------------------------------------------------------------------
# CreatePartitions
# --------------------------------------------------------------------------------------------


def grow(*topics: tuple, validate_only: bool = False) -> CreatePartitionsRequest:
    def topic(name, count, assignments=None):
        if assignments is not None:
            assignments = tuple(CreatePartitionsAssignment(broker_ids=tuple(a)) for a in assignments)
        return CreatePartitionsTopic(name=name, count=count, assignments=assignments)

    return CreatePartitionsRequest(
        topics=tuple(topic(*t) for t in topics), timeout=TIMEOUT, validate_only=validate_only
    )


@pytest.mark.parametrize("version", [0, 3])
def test_create_partitions_adds_partitions(tmp_path, version):
    async def scenario(admin):
        await admin.create_topic("growing")
        response = await admin.call(ApiKey.CREATE_PARTITIONS, version, grow(("growing", 3)))
        assert [(r.name, r.error_code) for r in response.results] == [("growing", ErrorCode.none)]
        assert admin.broker.topics.get("growing").partitions == 3
        admin.broker.replica_manager.get_partition(TopicPartition("growing", 2))

    run(tmp_path, scenario)


def test_create_partitions_validate_only_and_assignments(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t")
        response = await admin.call(ApiKey.CREATE_PARTITIONS, 3, grow(("t", 4), validate_only=True))
        assert response.results[0].error_code == ErrorCode.none
        assert admin.broker.topics.get("t").partitions == 1
        response = await admin.call(ApiKey.CREATE_PARTITIONS, 3, grow(("t", 3, [[0], [0]])))
        assert response.results[0].error_code == ErrorCode.none
        assert admin.broker.topics.get("t").partitions == 3

    run(tmp_path, scenario)


def test_create_partitions_errors(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t", 2)
        await admin.create_topic("dup")
        response = await admin.call(
            ApiKey.CREATE_PARTITIONS,
            3,
            grow(
                ("t", 2),
                ("t", 1),
                ("missing", 3),
                ("dup", 2),
                ("dup", 3),
            ),
        )
        codes = [r.error_code for r in response.results]
        assert codes == [
            ErrorCode.invalid_request,  # "t" is named twice
            ErrorCode.invalid_request,
            ErrorCode.unknown_topic_or_partition,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
        ]
        response = await admin.call(
            ApiKey.CREATE_PARTITIONS,
            0,
            grow(("t", 2), ("dup", 1), ("missing", 3)),
        )
        assert [r.error_code for r in response.results] == [
            ErrorCode.invalid_partitions,
            ErrorCode.invalid_partitions,
            ErrorCode.unknown_topic_or_partition,
        ]
        assert "2" in response.results[0].error_message
        response = await admin.call(
            ApiKey.CREATE_PARTITIONS,
            3,
            grow(("t", 4, [[0]]), ("dup", 2, [[7]])),
        )
        assert [r.error_code for r in response.results] == [ErrorCode.invalid_replica_assignment] * 2
        assert admin.broker.topics.get("t").partitions == 2

    run(tmp_path, scenario)


# --------------------------------------------------------------------------------------------
# DescribeConfigs
# --------------------------------------------------------------------------------------------


def describe(*resources: tuple, synonyms: bool = False, documentation: bool = False) -> DescribeConfigsRequest:
    def resource(resource_type, name, keys=None):
        return DescribeConfigsResource(resource_type=resource_type, resource_name=name, configuration_keys=keys)

    return DescribeConfigsRequest(
        resources=tuple(resource(*r) for r in resources),
        include_synonyms=synonyms,
        include_documentation=documentation,
    )


def test_describe_configs_v0_topic_with_is_default(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t", configs={"retention.ms": "1000"})
        response = await admin.call(
            ApiKey.DESCRIBE_CONFIGS, 0, describe((TOPIC, "t", ("retention.ms", "cleanup.policy")))
        )
        (result,) = response.results
        assert result.error_code == ErrorCode.none
        configs = {c.name: (c.value, c.is_default, c.read_only) for c in result.configs}
        assert configs == {"retention.ms": ("1000", False, False), "cleanup.policy": ("delete", True, False)}

    run(tmp_path, scenario)


def test_describe_configs_v4_topic_sources_types_synonyms_documentation(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t", configs={"retention.ms": "1000"})
        response = await admin.call(ApiKey.DESCRIBE_CONFIGS, 4, describe((TOPIC, "t")))
        configs = {c.name: c for c in response.results[0].configs}
        assert set(configs) == set(TOPIC_CONFIGS)
        retention = configs["retention.ms"]
        assert (retention.value, retention.config_source, retention.config_type) == (
            "1000",
            ConfigSource.DYNAMIC_TOPIC_CONFIG,
            ConfigType.LONG,
        )
        assert retention.synonyms == () and retention.documentation is None
        segment = configs["segment.bytes"]
        assert (segment.value, segment.config_source) == ("1073741824", ConfigSource.DEFAULT_CONFIG)
        assert configs["max.message.bytes"].config_source == ConfigSource.STATIC_BROKER_CONFIG

        response = await admin.call(
            ApiKey.DESCRIBE_CONFIGS, 4, describe((TOPIC, "t", ("retention.ms",)), synonyms=True, documentation=True)
        )
        (retention,) = response.results[0].configs
        assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
            ("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
            ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
        ]
        assert retention.documentation

    run(tmp_path, scenario, {"message.max.bytes": "2000000"})


def test_describe_configs_topic_errors(tmp_path):
    async def scenario(admin):
        response = await admin.call(
            ApiKey.DESCRIBE_CONFIGS, 4, describe((TOPIC, "missing"), (TOPIC, "bad name!"), (99, "x"))
        )
        assert [(r.error_code, r.configs) for r in response.results] == [
            (ErrorCode.unknown_topic_or_partition, ()),
            (ErrorCode.invalid_topic_exception, ()),
            (ErrorCode.invalid_request, ()),
        ]
        response = await admin.call(ApiKey.DESCRIBE_CONFIGS, 0, describe((TOPIC, "missing")))
        assert response.results[0].error_code == ErrorCode.unknown_topic_or_partition

    run(tmp_path, scenario)


def test_describe_configs_broker(tmp_path):
    async def scenario(admin):
        response = await admin.call(
            ApiKey.DESCRIBE_CONFIGS,
            4,
            describe((BROKER, "0"), (BROKER, ""), (BROKER, "7"), (BROKER, "zero"), synonyms=True),
        )
        own, defaults, other, not_a_number = response.results
        configs = {c.name: c for c in own.configs}
        assert configs["log.dirs"].value == str(tmp_path)
        assert configs["log.dirs"].config_source == ConfigSource.STATIC_BROKER_CONFIG
        assert configs["log.retention.hours"].value == "168"
        assert configs["log.retention.hours"].config_source == ConfigSource.DEFAULT_CONFIG
        assert configs["log.retention.hours"].config_type == ConfigType.INT
        assert configs["log.retention.ms"].value is None
        assert configs["broker.id"].read_only
        assert (defaults.error_code, defaults.configs) == (ErrorCode.none, ())
        assert other.error_code == ErrorCode.invalid_request
        assert other.error_message == "Unexpected broker id, expected 0 or empty string, but received 7"
        assert not_a_number.error_code == ErrorCode.invalid_request

        response = await admin.call(ApiKey.DESCRIBE_CONFIGS, 0, describe((BROKER, "0", ("log.dirs",))))
        (config,) = response.results[0].configs
        assert (config.name, config.value, config.is_default) == ("log.dirs", str(tmp_path), False)

    run(tmp_path, scenario)


def test_describe_configs_broker_logger(tmp_path):
    logging.getLogger("logway.test.admin").setLevel(logging.WARNING)

    async def scenario(admin):
        response = await admin.call(
            ApiKey.DESCRIBE_CONFIGS, 4, describe((BROKER_LOGGER, "0"), (BROKER_LOGGER, ""), (BROKER_LOGGER, "3"))
        )
        own, empty, other = response.results
        assert own.error_code == ErrorCode.none
        assert own.configs[0].name == "root"
        levels = {c.name: c for c in own.configs}
        assert levels["logway.test.admin"].value == "WARN"
        assert not levels["logway.test.admin"].read_only
        assert levels["logway.test.admin"].config_source == ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG
        assert (empty.error_code, empty.error_message) == (ErrorCode.invalid_request, "Broker id must not be empty")
        assert other.error_code == ErrorCode.invalid_request

    run(tmp_path, scenario)


# --------------------------------------------------------------------------------------------
# AlterConfigs
# --------------------------------------------------------------------------------------------


def alter(*resources: tuple, validate_only: bool = False) -> AlterConfigsRequest:
    def resource(resource_type, name, configs):
        return AlterConfigsResource(
            resource_type=resource_type,
            resource_name=name,
            configs=tuple(AlterableConfig(name=k, value=v) for k, v in configs),
        )

    return AlterConfigsRequest(resources=tuple(resource(*r) for r in resources), validate_only=validate_only)


@pytest.mark.parametrize("version", [0, 2])
def test_alter_configs_replaces_the_topic_overrides(tmp_path, version):
    async def scenario(admin):
        await admin.create_topic("t", configs={"retention.ms": "1000", "segment.ms": "5000"})
        response = await admin.call(
            ApiKey.ALTER_CONFIGS,
            version,
            alter((TOPIC, "t", [("retention.ms", "2000"), ("cleanup.policy", None)])),
        )
        assert [(r.resource_name, r.error_code) for r in response.responses] == [("t", ErrorCode.none)]
        assert admin.overrides("t") == {"retention.ms": "2000"}
        log = admin.broker.log_manager.get(TopicPartition("t", 0))
        assert (log.config.retention_ms, log.config.segment_ms) == (2000, 604_800_000)

    run(tmp_path, scenario)


def test_alter_configs_validate_only_and_invalid_configs(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t", configs={"retention.ms": "1000"})
        response = await admin.call(
            ApiKey.ALTER_CONFIGS, 2, alter((TOPIC, "t", [("retention.ms", "2000")]), validate_only=True)
        )
        assert response.responses[0].error_code == ErrorCode.none
        assert admin.overrides("t") == {"retention.ms": "1000"}
        response = await admin.call(
            ApiKey.ALTER_CONFIGS,
            2,
            alter(
                (TOPIC, "t", [("no.such.config", "1")]),
                (TOPIC, "missing", [("retention.ms", "1")]),
            ),
        )
        assert [(r.error_code, r.error_message) for r in response.responses] == [
            (ErrorCode.invalid_config, "Unknown topic config name: no.such.config"),
            (ErrorCode.unknown_topic_or_partition, "This server does not host this topic: missing"),
        ]
        response = await admin.call(ApiKey.ALTER_CONFIGS, 0, alter((TOPIC, "t", [("retention.ms", "soon")])))
        assert (response.responses[0].error_code, response.responses[0].error_message) == (
            ErrorCode.invalid_config,
            "Invalid value soon for configuration retention.ms: Not a number of type LONG",
        )
        response = await admin.call(ApiKey.ALTER_CONFIGS, 2, alter((TOPIC, "t", [("min.compaction.lag.ms", "5000")])))
        assert response.responses[0].error_code == ErrorCode.invalid_config
        assert admin.overrides("t") == {"retention.ms": "1000"}

    run(tmp_path, scenario, {"log.cleaner.max.compaction.lag.ms": "1000"})


def test_alter_configs_refuses_static_broker_configs_and_malformed_requests(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t")
        response = await admin.call(
            ApiKey.ALTER_CONFIGS,
            2,
            alter(
                (BROKER, "0", [("log.retention.hours", "1"), ("num.io.threads", "4"), ("broker.rack", "r")]),
                (BROKER, "", [("ssl.keystore.location", "/k.p12")]),
                (BROKER, "4", [("log.retention.hours", "1")]),
                (BROKER_LOGGER, "0", [("root", "DEBUG")]),
                (TOPIC, "t", [("retention.ms", "1"), ("retention.ms", "2")]),
                (TOPIC, "twice", []),
                (TOPIC, "twice", []),
            ),
        )
        results = [(r.error_code, r.error_message) for r in response.responses]
        assert results[0] == (
            ErrorCode.invalid_config,
            "Invalid config value for resource ConfigResource(type=BROKER, name='0'): "
            "Cannot update these configs dynamically: Set(broker.rack, num.io.threads)",
        )
        assert results[1] == (
            ErrorCode.invalid_config,
            "Invalid config value for resource ConfigResource(type=BROKER, name=''): Cannot update these "
            "configs at default cluster level, broker id must be specified: Set(ssl.keystore.location)",
        )
        assert {code for code, _ in results[2:]} == {ErrorCode.invalid_request}
        assert results[2][1] == "Unexpected broker id, expected 0, but received 4"
        assert results[4][1] == "Error due to duplicate config keys"
        assert results[5][1] == results[6][1] == "Each resource must appear at most once."
        assert admin.overrides("t") == {}
        assert admin.broker.config.get("log.retention.hours") == 168

    run(tmp_path, scenario)


# --------------------------------------------------------------------------------------------
# IncrementalAlterConfigs
# --------------------------------------------------------------------------------------------


def incremental(*resources: tuple, validate_only: bool = False) -> IncrementalAlterConfigsRequest:
    def resource(resource_type, name, operations):
        return IncrementalResource(
            resource_type=resource_type,
            resource_name=name,
            configs=tuple(IncrementalConfig(name=k, config_operation=op, value=v) for k, op, v in operations),
        )

    return IncrementalAlterConfigsRequest(
        resources=tuple(resource(*r) for r in resources), validate_only=validate_only
    )


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs_set_and_delete(tmp_path, version):
    async def scenario(admin):
        await admin.create_topic("t", configs={"retention.ms": "1000", "segment.ms": "5000"})
        response = await admin.call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            version,
            incremental((TOPIC, "t", [("retention.ms", SET, "2000"), ("segment.ms", DELETE, None)])),
        )
        assert [(r.resource_name, r.error_code) for r in response.responses] == [("t", ErrorCode.none)]
        assert admin.overrides("t") == {"retention.ms": "2000"}
        assert admin.broker.log_manager.get(TopicPartition("t", 0)).config.retention_ms == 2000

    run(tmp_path, scenario)


def test_incremental_alter_configs_append_and_subtract_lists(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t")
        await admin.create_topic("u", configs={"cleanup.policy": "delete"})

        async def change(topic, *operations):
            response = await admin.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, incremental((TOPIC, topic, operations)))
            return response.responses[0]

        # No override: APPEND starts from the broker's log.cleanup.policy.
        assert (await change("t", ("cleanup.policy", APPEND, "delete"))).error_code == ErrorCode.none
        assert admin.overrides("t") == {"cleanup.policy": "compact,delete"}
        assert (await change("t", ("cleanup.policy", SUBTRACT, "compact"))).error_code == ErrorCode.none
        assert admin.overrides("t") == {"cleanup.policy": "delete"}
        await change("u", ("cleanup.policy", APPEND, "compact,delete"))
        assert admin.overrides("u") == {"cleanup.policy": "delete,compact"}
        assert admin.broker.log_manager.get(TopicPartition("u", 0)).config.compact

        refused = await change("u", ("retention.ms", APPEND, "5"))
        assert (refused.error_code, refused.error_message) == (
            ErrorCode.invalid_config,
            "Can't APPEND to key retention.ms because its type is not LIST.",
        )
        refused = await change("u", ("cleanup.policy", APPEND, "shred"))
        assert refused.error_code == ErrorCode.invalid_config
        assert admin.overrides("u") == {"cleanup.policy": "delete,compact"}

    run(tmp_path, scenario, {"log.cleanup.policy": "compact"})


def test_incremental_alter_configs_is_all_or_nothing_and_validate_only(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t", configs={"retention.ms": "1000"})
        response = await admin.call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            incremental(
                (TOPIC, "t", [("segment.ms", SET, "5000"), ("retention.ms", SET, "-7")]),
            ),
        )
        assert response.responses[0].error_code == ErrorCode.invalid_config
        assert admin.overrides("t") == {"retention.ms": "1000"}
        response = await admin.call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            incremental((TOPIC, "t", [("segment.ms", SET, "5000")]), validate_only=True),
        )
        assert response.responses[0].error_code == ErrorCode.none
        assert admin.overrides("t") == {"retention.ms": "1000"}

    run(tmp_path, scenario)


def test_incremental_alter_configs_errors(tmp_path):
    async def scenario(admin):
        await admin.create_topic("t")
        await admin.create_topic("u")
        response = await admin.call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            incremental(
                (TOPIC, "missing", [("retention.ms", SET, "1")]),
                (TOPIC, "t", [("retention.ms", SET, None)]),
                (TOPIC, "u", [("retention.ms", 7, "1")]),
                (BROKER, "7", [("log.retention.hours", SET, "1")]),
                (BROKER_LOGGER, "0", [("root", APPEND, "DEBUG")]),
                (TOPIC, "dup", []),
                (TOPIC, "dup", []),
                (99, "x", []),
            ),
        )
        codes = [r.error_code for r in response.responses]
        assert codes == [ErrorCode.unknown_topic_or_partition] + [ErrorCode.invalid_request] * 7
        messages = [r.error_message for r in response.responses]
        assert messages[1] == "Null value not supported for : retention.ms"
        assert messages[2] == "Unknown operation type 7"
        assert messages[0] == "This server does not host this topic: missing"
        assert messages[3] == "Unexpected broker id, expected 0, but received 7"
        response = await admin.call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            0,
            incremental(
                (TOPIC, "t", [("no.such.config", DELETE, None)]),
                (TOPIC, "t2", [("a", SET, "1"), ("a", SET, "2")]),
            ),
        )
        assert [(r.error_code, r.error_message) for r in response.responses] == [
            (ErrorCode.invalid_config, "Unknown topic config name: no.such.config"),
            (ErrorCode.invalid_request, "Error due to duplicate config keys"),
        ]

    run(tmp_path, scenario)


def test_incremental_alter_configs_changes_log_levels_at_run_time(tmp_path):
    logger = logging.getLogger("logway.test.admin.levels")

    async def scenario(admin):
        async def change(name, *operations, validate_only=False):
            request = incremental((BROKER_LOGGER, name, operations), validate_only=validate_only)
            response = await admin.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request)
            return response.responses[0].error_code, response.responses[0].error_message

        assert await change("0", (logger.name, SET, "DEBUG"), validate_only=True) == (ErrorCode.none, None)
        assert logger.level == logging.NOTSET
        assert await change("0", (logger.name, SET, "DEBUG")) == (ErrorCode.none, None)
        assert logger.level == logging.DEBUG
        described = await admin.call(ApiKey.DESCRIBE_CONFIGS, 4, describe((BROKER_LOGGER, "0")))
        assert {c.name: c.value for c in described.results[0].configs}[logger.name] == "DEBUG"
        assert await change("0", (logger.name, DELETE, None)) == (ErrorCode.none, None)
        assert logger.level == logging.NOTSET
        assert await change("1", (logger.name, SET, "DEBUG")) == (
            ErrorCode.invalid_request, "Unexpected broker id, expected 0, but received 1"
        )
        assert (await change("0", (logger.name, SET, "NOISY")))[0] == ErrorCode.invalid_config
        assert logger.level == logging.NOTSET

    try:
        run(tmp_path, scenario)
    finally:
        logger.setLevel(logging.NOTSET)


# --------------------------------------------------------------------------------------------
# DeleteRecords
# --------------------------------------------------------------------------------------------


def delete_records(topic: str, *offsets: tuple[int, int]) -> DeleteRecordsRequest:
    return DeleteRecordsRequest(
        topics=(
            DeleteRecordsTopic(
                name=topic,
                partitions=tuple(DeleteRecordsPartition(partition_index=p, offset=o) for p, o in offsets),
            ),
        ),
        timeout=TIMEOUT,
    )


@pytest.mark.parametrize("version", [0, 2])
def test_delete_records_raises_the_log_start_offset(tmp_path, version):
    async def scenario(admin):
        await admin.create_topic("t", 3)
        admin.produce("t", 0, 5)
        admin.produce("t", 1, 4)
        response = await admin.call(
            ApiKey.DELETE_RECORDS, version, delete_records("t", (0, 2), (1, -1), (2, 1), (3, 0))
        )
        (topic,) = response.topics
        assert [(p.partition_index, p.low_watermark, p.error_code) for p in topic.partitions] == [
            (0, 2, ErrorCode.none),
            (1, 4, ErrorCode.none),
            (2, -1, ErrorCode.offset_out_of_range),
            (3, -1, ErrorCode.unknown_topic_or_partition),
        ]
        log = admin.broker.replica_manager.get_partition(TopicPartition("t", 0)).log
        assert log.log_start_offset == 2
        # An offset below the log start changes nothing.
        response = await admin.call(ApiKey.DELETE_RECORDS, version, delete_records("t", (0, 1), (0, 6), (0, -2)))
        assert [(p.low_watermark, p.error_code) for p in response.topics[0].partitions] == [
            (2, ErrorCode.none),
            (-1, ErrorCode.offset_out_of_range),
            (-1, ErrorCode.offset_out_of_range),
        ]
        response = await admin.call(ApiKey.DELETE_RECORDS, version, delete_records("missing", (0, 0)))
        assert response.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition

    run(tmp_path, scenario)


def test_deleted_records_stay_deleted_after_a_crash_right_after_the_answer(tmp_path):
    """The answer comes once the new log start offset is checkpointed: a kill -9 after it (no
    shutdown, no periodic checkpoint: log.flush.offset.checkpoint.interval.ms is a minute) must
    not bring the records back."""

    async def crashed():
        broker = Broker(settings(tmp_path))
        await broker.start()
        admin = Admin(broker)
        await admin.create_topic("t")
        admin.produce("t", 0, 5)
        response = await admin.call(ApiKey.DELETE_RECORDS, 2, delete_records("t", (0, 3)))
        assert response.topics[0].partitions[0].error_code == ErrorCode.none
        broker.log_manager._stop_threads()  # killed: nothing more reaches the disk

    async def restarted(admin):
        log = admin.broker.replica_manager.get_partition(TopicPartition("t", 0)).log
        assert (log.log_start_offset, log.log_end_offset) == (3, 5)

    asyncio.run(crashed())
    run(tmp_path, restarted)


@pytest.mark.pure_python
def test_delete_records_io_error_takes_the_log_dir_offline(tmp_path, monkeypatch):
    async def scenario(admin):
        await admin.create_topic("t")
        admin.produce("t", 0, 3)
        log = admin.broker.replica_manager.get_partition(TopicPartition("t", 0)).log

        def failing(offset):
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(log, "delete_records_before", failing)
        for _ in range(2):  # the failure, then the offline partition
            response = await admin.call(ApiKey.DELETE_RECORDS, 2, delete_records("t", (0, 1)))
            assert response.topics[0].partitions[0].error_code == ErrorCode.kafka_storage_error

    run(tmp_path, scenario)


# --------------------------------------------------------------------------------------------
# DescribeCluster
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster(tmp_path, version):
    async def scenario(admin):
        broker = admin.broker
        request = DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1)
        response = await admin.call(ApiKey.DESCRIBE_CLUSTER, version, request)
        assert response.error_code == ErrorCode.none
        assert (response.cluster_id, response.controller_id) == (broker.cluster_id, 0)
        assert [(b.broker_id, b.host, b.port, b.rack) for b in response.brokers] == [
            (0, "127.0.0.1", broker.port, None)
        ]

    run(tmp_path, scenario)


def test_describe_cluster_v1_endpoint_types(tmp_path):
    async def scenario(admin):
        def request(endpoint_type):
            return DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=endpoint_type)

        response = await admin.call(ApiKey.DESCRIBE_CLUSTER, 1, request(2))
        assert (response.error_code, response.endpoint_type, len(response.brokers)) == (ErrorCode.none, 2, 1)
        response = await admin.call(ApiKey.DESCRIBE_CLUSTER, 1, request(3))
        assert (response.error_code, response.endpoint_type) == (ErrorCode.unsupported_endpoint_type, 3)

    run(tmp_path, scenario)


# --------------------------------------------------------------------------------------------
# Persistence
# --------------------------------------------------------------------------------------------


def test_config_changes_partition_counts_and_deletions_survive_a_restart(tmp_path):
    async def change(admin):
        await admin.create_topic("kept", configs={"segment.ms": "5000"})
        await admin.create_topic("gone")
        await admin.call(ApiKey.ALTER_CONFIGS, 2, alter((TOPIC, "kept", [("retention.ms", "1234")])))
        await admin.call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, incremental((TOPIC, "kept", [("cleanup.policy", SET, "compact")]))
        )
        await admin.call(ApiKey.CREATE_PARTITIONS, 3, grow(("kept", 4)))
        await admin.call(ApiKey.DELETE_TOPICS, 6, delete_v6(("gone", None)))

    async def check(admin):
        assert set(admin.broker.topics.topics) == {"kept"}
        assert admin.overrides("kept") == {"retention.ms": "1234", "cleanup.policy": "compact"}
        assert admin.broker.topics.get("kept").partitions == 4
        log = admin.broker.replica_manager.get_partition(TopicPartition("kept", 3)).log
        assert (log.config.retention_ms, log.config.compact) == (1234, True)
        response = await admin.call(ApiKey.DESCRIBE_CONFIGS, 4, describe((TOPIC, "kept", ("retention.ms",))))
        assert response.results[0].configs[0].value == "1234"

    run(tmp_path, change)
    run(tmp_path, check)
