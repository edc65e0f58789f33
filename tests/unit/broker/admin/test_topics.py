import argparse
import uuid

import pytest
from kio.schema.describe_configs.v4.response import DescribeConfigsResourceResult
from kio.schema.metadata.v12.response import MetadataResponsePartition, MetadataResponseTopic

from broker.admin.configs import TOPIC
from broker.admin.connection import UsageError
from broker.admin.topics import describe_lines, parse_configs, parse_replica_assignment

TOPIC_ID = uuid.UUID("a8c66e60-5de1-4b8b-9e79-6e2a62e15e1d")


def _partition(index, leader, replicas, isr):
    return MetadataResponsePartition(
        error_code=0, partition_index=index, leader_id=leader, leader_epoch=0,
        replica_nodes=tuple(replicas), isr_nodes=tuple(isr), offline_replicas=(),
    )


def _topic(name, partitions):
    return MetadataResponseTopic(error_code=0, name=name, topic_id=TOPIC_ID, is_internal=False,
                                 partitions=tuple(partitions), topic_authorized_operations=0)


def _config(name, value, source):
    return DescribeConfigsResourceResult(name=name, value=value, read_only=False, config_source=source,
                                         is_sensitive=False, synonyms=(), config_type=0, documentation=None)


def _args(**flags):
    names = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
             "at_min_isr_partitions", "topics_with_overrides")
    return argparse.Namespace(**{name: flags.get(name, False) for name in names})


TOPICS = [_topic("orders", [_partition(1, -1, [2, 3], []), _partition(0, 1, [1, 2], [1])])]
CONFIGS = {(TOPIC, "orders"): [_config("retention.ms", "1000", 1), _config("min.insync.replicas", "1", 5)]}


def test_describe_prints_kafkas_topic_line_then_partitions_in_order():
    assert describe_lines(_args(), TOPICS, CONFIGS, {1, 2}, {}) == [
        "Topic: orders\tTopicId: qMZuYF3hS4ueeW4qYuFeHQ\tPartitionCount: 2"
        "\tReplicationFactor: 2\tConfigs: retention.ms=1000",
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1\tElr: N/A\tLastKnownElr: N/A",
        "\tTopic: orders\tPartition: 1\tLeader: none\tReplicas: 2,3\tIsr: \tElr: N/A\tLastKnownElr: N/A",
    ]


def test_partition_filters_print_only_matching_partitions_without_the_topic_line():
    under_replicated = describe_lines(_args(under_replicated_partitions=True), TOPICS, CONFIGS, {1, 2}, {})
    assert [line.split("\t")[2] for line in under_replicated] == ["Partition: 0", "Partition: 1"]
    unavailable = describe_lines(_args(unavailable_partitions=True), TOPICS, CONFIGS, {1, 2}, {})
    assert [line.split("\t")[2] for line in unavailable] == ["Partition: 1"]


def test_an_ongoing_reassignment_shows_its_replicas_and_leaves_the_replication_factor():
    reassignments = {("orders", 0): ([1, 2], [2], [])}
    lines = describe_lines(_args(), TOPICS, CONFIGS, {1, 2}, reassignments)
    assert "\tReplicationFactor: 1\t" in lines[0]
    assert "\tAdding Replicas: 2\tRemoving Replicas: \t" in lines[1]


def test_topics_with_overrides_lists_only_topic_lines_of_topics_with_overrides():
    defaults_only = {(TOPIC, "orders"): [_config("retention.ms", "604800000", 5)]}
    assert describe_lines(_args(topics_with_overrides=True), TOPICS, defaults_only, {1}, {}) == []
    assert len(describe_lines(_args(topics_with_overrides=True), TOPICS, CONFIGS, {1}, {})) == 1


def test_replica_assignment_is_partitions_by_comma_and_brokers_by_colon():
    assert parse_replica_assignment("0:1,1:2,2:0") == {0: [0, 1], 1: [1, 2], 2: [2, 0]}
    with pytest.raises(UsageError, match="duplicate"):
        parse_replica_assignment("0:0")
    with pytest.raises(UsageError, match="different replication factor"):
        parse_replica_assignment("0:1,2")


def test_configs_are_name_value_pairs():
    assert parse_configs(["retention.ms=1000", "cleanup.policy = compact"]) == {
        "retention.ms": "1000", "cleanup.policy": "compact"}
    with pytest.raises(UsageError):
        parse_configs(["retention.ms"])
