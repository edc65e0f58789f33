"""`logway-admin topics`: kafka-topics.sh's flags and output.

    --create --topic T [--partitions N] [--replication-factor R | --replica-assignment 0:1,1:2]
             [--config k=v ...] [--if-not-exists]                      Created topic T.
    --alter --topic T --partitions N [--replica-assignment ...] [--if-exists]
    --delete --topic T [--if-exists]
    --list [--topic REGEX] [--exclude-internal]
    --describe [--topic REGEX] [--under-replicated-partitions | --unavailable-partitions |
               --under-min-isr-partitions | --at-min-isr-partitions | --topics-with-overrides]

--topic is a regular expression matched against the whole name (except for --create), as in
Kafka. --describe prints a topic line (Topic, TopicId, PartitionCount, ReplicationFactor,
Configs: the entries whose source is not the default) and a line per partition (Leader,
Replicas, Isr, the adding/removing replicas of an ongoing reassignment, Elr and LastKnownElr:
N/A, as Kafka's tool prints them when the partitions come from Metadata). The partition
filters print only the partitions that match, without the topic lines. CreateTopics,
CreatePartitions and DeleteTopics go to the controller. Kafka 3.9's tool refuses --config with
--alter (topic configs are changed with `configs`); so does this one.
"""

import argparse
import base64
import datetime
import re
import uuid

from kio.schema.create_partitions.v3.request import (
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kio.schema.create_topics.v7.request import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.list_partition_reassignments.v0.request import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsTopics,
)

from broker.admin import cluster
from broker.admin.configs import TOPIC, describe_configs
from broker.admin.connection import Admin, AdminError, UsageError, check, failure
from broker.admin.output import ids
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

TIMEOUT = datetime.timedelta(seconds=30)
DEFAULT_CONFIG_SOURCE = 5
NO_LEADER = -1


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    actions = parser.add_mutually_exclusive_group(required=True)
    for action, text in (
        ("--create", "Create a new topic."),
        ("--alter", "Alter the number of partitions and replica assignment."),
        ("--delete", "Delete a topic."),
        ("--describe", "List details for the given topics."),
        ("--list", "List all available topics."),
    ):
        actions.add_argument(action, action="store_true", help=text)
    parser.add_argument("--topic", help="the topic (a regular expression, except with --create)")
    parser.add_argument("--partitions", type=int, help="partitions of the topic created or altered")
    parser.add_argument("--replication-factor", type=int, help="replication factor of the topic created")
    parser.add_argument("--replica-assignment", help="broker_id_for_part1_replica1:broker_id_for_part1_replica2,...")
    parser.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                        help="a topic config override for the topic created (repeatable)")
    parser.add_argument("--delete-config", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--if-exists", action="store_true", help="with --alter, --delete, --describe: only if the topic exists")
    parser.add_argument("--if-not-exists", action="store_true", help="with --create: only if the topic does not exist")
    parser.add_argument("--exclude-internal", action="store_true", help="leave internal topics out of --list and --describe")
    for flag, text in (
        ("--under-replicated-partitions", "only partitions whose ISR is smaller than their replicas"),
        ("--unavailable-partitions", "only partitions without a live leader"),
        ("--under-min-isr-partitions", "only partitions whose ISR is smaller than min.insync.replicas"),
        ("--at-min-isr-partitions", "only partitions whose ISR is min.insync.replicas"),
        ("--topics-with-overrides", "only topics with config overrides, without their partitions"),
    ):
        parser.add_argument(flag, action="store_true", help=text)


async def run(args: argparse.Namespace, admin: Admin) -> int:
    if args.config and not args.create:
        raise UsageError("Option --config can only be used with --create (change configs with `logway-admin configs`)")
    if args.delete_config:
        raise UsageError("Option --delete-config is not supported by kafka-topics: use `logway-admin configs --alter --delete-config`")
    if args.create:
        return await create(args, admin)
    if args.list:
        for topic in await matching_topics(admin, args.topic, args.exclude_internal):
            print(topic)
        return 0
    if args.describe:
        return await describe(args, admin)
    if args.alter:
        return await alter(args, admin)
    return await delete(args, admin)


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """Kafka's --replica-assignment: partitions by comma, their brokers by colon."""
    assignment = {}
    for partition, replicas in enumerate(text.split(",")):
        try:
            brokers = [int(b) for b in replicas.split(":")]
        except ValueError:
            raise UsageError(f"Invalid replica assignment {text!r}: broker ids must be integers") from None
        if len(set(brokers)) != len(brokers):
            raise UsageError(f"Partition replica lists may not contain duplicate entries: {replicas}")
        assignment[partition] = brokers
    if len({len(r) for r in assignment.values()}) > 1:
        raise UsageError(f"Partition {max(assignment)} has different replication factor: {text}")
    return assignment


def parse_configs(items: list[str]) -> dict[str, str]:
    configs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"Invalid config {item!r}: expected name=value")
        configs[name.strip()] = value.strip()
    return configs


async def create(args: argparse.Namespace, admin: Admin) -> int:
    if not args.topic:
        raise UsageError("Missing required argument \"[topic]\"")
    if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        raise UsageError("The replication factor must be between 1 and 32767 inclusive")
    if args.partitions is not None and args.partitions < 1:
        raise UsageError("The partitions must be greater than 0")
    assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else {}
    if assignment and (args.partitions is not None or args.replication_factor is not None):
        raise UsageError("Option --replica-assignment can't be used with --partitions or --replication-factor")
    if "." in args.topic or "_" in args.topic:  # Kafka's Topic.hasCollisionChars
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
              "collide. To avoid issues it is best to use either, but not both.")
    topic = CreatableTopic(
        name=args.topic,
        num_partitions=-1 if assignment or args.partitions is None else args.partitions,
        replication_factor=-1 if assignment or args.replication_factor is None else args.replication_factor,
        assignments=tuple(CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(b)) for p, b in assignment.items()),
        configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in parse_configs(args.config).items()),
    )
    response = await admin.send_to_controller(
        CreateTopicsRequest(topics=(topic,), timeout=TIMEOUT, validate_only=False)
    )
    result = response.topics[0]
    if result.error_code == ErrorCode.topic_already_exists and args.if_not_exists:
        return 0
    check(result.error_code, f"Error while executing topic command: cannot create topic {args.topic}", result.error_message)
    print(f"Created topic {args.topic}.")
    return 0


async def matching_topics(admin: Admin, pattern: str | None, exclude_internal: bool) -> list[str]:
    """The names of the topics matching `pattern` (all without one), sorted."""
    metadata = await admin.metadata(None)
    names = sorted(t.name for t in metadata.topics if not (exclude_internal and t.is_internal))
    if pattern is None:
        return names
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"--topic {pattern!r} is not a regular expression: {exc}") from None
    return [name for name in names if regex.fullmatch(name)]


def _ensure_exists(topics: list[str], pattern: str | None, if_exists: bool) -> None:
    if not topics and pattern is not None and not if_exists:
        raise AdminError(f"Topic '{pattern}' does not exist as expected: UNKNOWN_TOPIC_OR_PARTITION")


async def alter(args: argparse.Namespace, admin: Admin) -> int:
    if not args.topic:
        raise UsageError("Missing required argument \"[topic]\"")
    if args.partitions is None:
        raise UsageError("--partitions is required with --alter")
    topics = await matching_topics(admin, args.topic, args.exclude_internal)
    _ensure_exists(topics, args.topic, args.if_exists)
    if not topics:
        return 0
    assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else {}
    metadata = await admin.metadata(topics)
    current = {t.name: len(t.partitions) for t in metadata.topics}
    requests = []
    for name in topics:
        added = [b for p, b in sorted(assignment.items()) if p >= current.get(name, 0)]
        requests.append(CreatePartitionsTopic(
            name=name, count=args.partitions,
            assignments=tuple(CreatePartitionsAssignment(broker_ids=tuple(b)) for b in added) if assignment else None,
        ))
    response = await admin.send_to_controller(
        CreatePartitionsRequest(topics=tuple(requests), timeout=TIMEOUT, validate_only=False)
    )
    for result in response.results:
        check(result.error_code, f"Error while executing topic command: cannot alter topic {result.name}", result.error_message)
    return 0


async def delete(args: argparse.Namespace, admin: Admin) -> int:
    if not args.topic:
        raise UsageError("Missing required argument \"[topic]\"")
    topics = await matching_topics(admin, args.topic, args.exclude_internal)
    _ensure_exists(topics, args.topic, args.if_exists)
    if not topics:
        return 0
    response = await admin.send_to_controller(
        DeleteTopicsRequest(topics=tuple(DeleteTopicState(name=t, topic_id=uuid.UUID(int=0)) for t in topics),
                            timeout=TIMEOUT),
    )
    for result in response.responses:
        check(result.error_code, f"Error while executing topic command: cannot delete topic {result.name}", result.error_message)
    return 0


async def describe(args: argparse.Namespace, admin: Admin) -> int:
    topics = await matching_topics(admin, args.topic, args.exclude_internal)
    _ensure_exists(topics, args.topic, args.if_exists)
    if not topics:
        return 0
    metadata = await admin.metadata(topics)
    for topic in metadata.topics:
        check(topic.error_code, f"Metadata of {topic.name}")
    configs = await describe_configs(admin, [(TOPIC, t) for t in topics])
    _, _, brokers = await cluster.describe(admin)
    live = {b[0] for b in brokers}
    reassignments = await list_reassignments(admin)
    for line in describe_lines(args, metadata.topics, configs, live, reassignments):
        print(line)
    return 0


async def list_reassignments(admin: Admin, topics: dict[str, list[int]] | None = None) -> dict[tuple[str, int], tuple]:
    """(topic, partition) -> (replicas, adding, removing) of ongoing reassignments; empty where
    the broker does not serve ListPartitionReassignments or refuses it (as Kafka's tool), and
    where it answers NOT_CONTROLLER though it is the controller: a standalone logway broker,
    which has no reassignments."""
    if ApiKey.LIST_PARTITION_REASSIGNMENTS not in await admin.api_versions():
        return {}
    request = ListPartitionReassignmentsRequest(
        timeout=TIMEOUT,
        topics=None if topics is None else tuple(
            ListPartitionReassignmentsTopics(name=t, partition_indexes=tuple(p)) for t, p in topics.items()
        ),
    )
    response = await admin.send_to_controller(request)
    if response.error_code in (
        ErrorCode.cluster_authorization_failed, ErrorCode.unsupported_version, ErrorCode.not_controller,
    ):
        return {}
    check(response.error_code, "ListPartitionReassignments", response.error_message)
    return {
        (t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
        for t in response.topics for p in t.partitions
    }


def describe_lines(args, topics, configs, live: set[int], reassignments) -> list[str]:
    """kafka-topics.sh --describe's lines for Metadata topics and their DescribeConfigs."""
    report_partitions = any((
        args.under_replicated_partitions, args.unavailable_partitions,
        args.under_min_isr_partitions, args.at_min_isr_partitions,
    ))
    lines = []
    for topic in sorted(topics, key=lambda t: t.name):
        entries = configs.get((TOPIC, topic.name), [])
        overrides = [e for e in entries if e.config_source != DEFAULT_CONFIG_SOURCE]
        partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
        if not report_partitions and (not args.topics_with_overrides or overrides) and partitions:
            first = partitions[0]
            line = f"Topic: {topic.name}"
            if topic.topic_id is not None and topic.topic_id.int != 0:
                line += f"\tTopicId: {_kafka_uuid(topic.topic_id)}"
            line += f"\tPartitionCount: {len(partitions)}"
            line += f"\tReplicationFactor: {_replication_factor(topic.name, first, reassignments)}"
            line += "\tConfigs: " + ",".join(f"{e.name}={e.value}" for e in overrides)
            lines.append(line)
        if args.topics_with_overrides:
            continue
        min_isr = int(next((e.value for e in entries if e.name == "min.insync.replicas"), "1") or 1)
        for partition in partitions:
            if report_partitions and not _reported(args, topic.name, partition, live, min_isr, reassignments):
                continue
            lines.append(_partition_line(topic.name, partition, reassignments.get((topic.name, partition.partition_index))))
    return lines


def _replication_factor(topic: str, partition, reassignments) -> int:
    reassignment = reassignments.get((topic, partition.partition_index))
    if reassignment is None:
        return len(partition.replica_nodes)
    return len(partition.replica_nodes) - len(reassignment[1])


def _reported(args, topic: str, partition, live: set[int], min_isr: int, reassignments) -> bool:
    has_leader = partition.leader_id != NO_LEADER
    isr = len(partition.isr_nodes)
    return (
        (args.under_replicated_partitions and _replication_factor(topic, partition, reassignments) - isr > 0)
        or (args.unavailable_partitions and (not has_leader or partition.leader_id not in live))
        or (args.under_min_isr_partitions and (not has_leader or isr < min_isr))
        or (args.at_min_isr_partitions and isr == min_isr)
    )


def _partition_line(topic: str, partition, reassignment) -> str:
    leader = partition.leader_id if partition.leader_id != NO_LEADER else "none"
    line = (
        f"\tTopic: {topic}\tPartition: {partition.partition_index}\tLeader: {leader}"
        f"\tReplicas: {ids(partition.replica_nodes)}\tIsr: {ids(partition.isr_nodes)}"
    )
    if reassignment is not None:
        line += f"\tAdding Replicas: {ids(reassignment[1])}\tRemoving Replicas: {ids(reassignment[2])}"
    return line + "\tElr: N/A\tLastKnownElr: N/A"


def _kafka_uuid(value: uuid.UUID) -> str:
    """A topic id as Kafka prints its Uuid: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
