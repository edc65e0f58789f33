"""`logway-admin reassign`: kafka-reassign-partitions.sh.

    --generate --topics-to-move-json-file F --broker-list 0,1,2 [--disable-rack-aware]
    --execute --reassignment-json-file F [--throttle B/s] [--additional] [--wait]
    --verify --reassignment-json-file F [--preserve-throttles] [--wait]
    --cancel --reassignment-json-file F
    --list

--generate prints the current and a proposed assignment (replication.assignment, Kafka's
AdminUtils placement, rack-aware unless told not to) in Kafka's JSON
({"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..],"log_dirs":[..]}]}).
--execute prints the current assignment (to roll back with) and starts the reassignments with
AlterPartitionReassignments on the controller; --throttle first sets
leader/follower.replication.throttled.rate on the brokers involved and the topics'
leader/follower.replication.throttled.replicas, as Kafka's tool (IncrementalAlterConfigs).
--verify prints each partition's state and, once none is moving, clears those throttles and
replica.alter.log.dirs.io.max.bytes.per.second, as Kafka's tool (unless --preserve-throttles). --wait (logway's addition) polls ListPartitionReassignments
until the partitions are done, with a progress line on stderr, and fails after --timeout
seconds. Exit status 1 when a reassignment is refused or --verify finds one not done.
"""

import argparse
import asyncio
import datetime
import json
import time

from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)

from broker.admin import cluster
from broker.admin.configs import BROKER, DELETE, SET, TOPIC
from broker.admin.connection import Admin, AdminError, UsageError, check, failure
from broker.admin.output import Progress
from broker.admin.topics import list_reassignments
from protocol.errors import KafkaError
from replication import assignment

TIMEOUT = datetime.timedelta(seconds=30)
BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
# --verify clears the log dir move throttle too, as Kafka's tool (it is set with Kafka's
# --replica-alter-log-dirs-throttle, which logway-admin does not offer: it moves between brokers only).
CLEARED_BROKER_THROTTLES = (*BROKER_THROTTLES, "replica.alter.log.dirs.io.max.bytes.per.second")
TOPIC_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
VERIFY_PERIODICALLY = ("Warning: You must run --verify periodically, until the reassignment completes, to ensure "
                       "the throttle is removed.")


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    actions = parser.add_mutually_exclusive_group(required=True)
    for flag in ("--generate", "--execute", "--verify", "--cancel", "--list"):
        actions.add_argument(flag, action="store_true")
    parser.add_argument("--topics-to-move-json-file")
    parser.add_argument("--reassignment-json-file")
    parser.add_argument("--broker-list", help="0,1,2")
    parser.add_argument("--disable-rack-aware", action="store_true")
    parser.add_argument("--throttle", type=int, default=-1, help="inter-broker replication limit, B/s")
    parser.add_argument("--additional", action="store_true", help="execute while other reassignments run")
    parser.add_argument("--preserve-throttles", action="store_true")
    parser.add_argument("--wait", action="store_true", help="wait for the reassignments to finish (progress on stderr)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="with --wait: give up after this many seconds")


def _read_json(path: str | None, flag: str):
    if path is None:
        raise UsageError(f"Missing required argument {flag}")
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError) as exc:
        raise UsageError(f"Cannot read {path}: {exc}") from None


def parse_reassignment(data) -> dict[tuple[str, int], list[int]]:
    """Kafka's reassignment JSON: target replicas per partition (log_dirs must be "any")."""
    try:
        partitions = data["partitions"]
        targets = {}
        for entry in partitions:
            key = (entry["topic"], int(entry["partition"]))
            if key in targets:
                raise UsageError(f"the reassignment contains multiple entries for {key[0]}-{key[1]}")
            replicas = [int(r) for r in entry["replicas"]]
            if len(set(replicas)) != len(replicas):
                raise UsageError(f"Partition replica lists may not contain duplicate entries: {key[0]}-{key[1]}")
            if any(d != "any" for d in entry.get("log_dirs", ["any"] * len(replicas))):
                raise UsageError("log_dirs other than \"any\" are not supported: move replicas between log dirs "
                                 "with AlterReplicaLogDirs")
            targets[key] = replicas
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"Invalid reassignment JSON: {exc}") from None
    if not targets:
        raise UsageError("Partition reassignment list cannot be empty")
    return targets


def reassignment_json(parts: dict[tuple[str, int], list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(parts.items())
    ]}, separators=(",", ":"))


async def run(args: argparse.Namespace, admin: Admin) -> int:
    if args.list:
        current = await list_reassignments(admin)
        if not current:
            print("No partition reassignments found.")
        else:
            print("Current partition reassignments:")
            for (topic, partition), (replicas, adding, removing) in sorted(current.items()):
                line = f"{topic}-{partition}: replicas: {','.join(map(str, replicas))}."
                line += f" adding: {','.join(map(str, adding))}." if adding else ""
                line += f" removing: {','.join(map(str, removing))}." if removing else ""
                print(line)
        return 0
    if args.generate:
        return await generate(args, admin)
    targets = parse_reassignment(_read_json(args.reassignment_json_file, "--reassignment-json-file"))
    if args.execute:
        return await execute(args, admin, targets)
    if args.cancel:
        return await cancel(admin, targets)
    return await verify(args, admin, targets)


async def current_assignment(admin: Admin, topics) -> dict[tuple[str, int], list[int]]:
    metadata = await admin.metadata(sorted(set(topics)))
    parts = {}
    for topic in metadata.topics:
        check(topic.error_code, f"Metadata of topic {topic.name}")
        for partition in topic.partitions:
            parts[(topic.name, partition.partition_index)] = list(partition.replica_nodes)
    return parts


async def generate(args: argparse.Namespace, admin: Admin) -> int:
    data = _read_json(args.topics_to_move_json_file, "--topics-to-move-json-file")
    if not args.broker_list:
        raise UsageError("Missing required argument --broker-list")
    try:
        topics = [t["topic"] for t in data["topics"]]
        brokers = [int(b) for b in args.broker_list.split(",")]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"Invalid --topics-to-move-json-file or --broker-list: {exc}") from None
    if len(set(brokers)) != len(brokers):
        raise UsageError(f"Broker list contains duplicate entries: {args.broker_list}")
    _, _, live = await cluster.describe(admin)
    racks = {b[0]: (None if args.disable_rack_aware else b[3]) for b in live if b[0] in brokers}
    unknown = sorted(set(brokers) - set(racks))
    if unknown:
        raise AdminError(f"The broker(s) {','.join(map(str, unknown))} are not live: BROKER_NOT_AVAILABLE")
    current = await current_assignment(admin, topics)
    proposed = {}
    for topic in sorted(set(topics)):
        partitions = sorted(p for t, p in current if t == topic)
        factor = len(current[(topic, partitions[0])])
        try:
            placed = assignment.assign_replicas(len(partitions), factor, racks)
        except KafkaError as exc:
            raise AdminError(f"{exc}: {exc.error_code.name.upper()}") from None
        proposed.update({(topic, p): list(r) for p, r in placed.items()})
    print(f"Current partition replica assignment\n{reassignment_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{reassignment_json(proposed)}")
    return 0


def throttles(current: dict, targets: dict) -> tuple[dict[str, str], dict[str, str], set[int]]:
    """Kafka's leader and follower throttled replicas per topic ("partition:broker", the
    leader's for the replicas moving from, the follower's for those moving to) and the brokers
    involved."""
    leaders: dict[str, set[str]] = {}
    followers: dict[str, set[str]] = {}
    brokers: set[int] = set()
    for (topic, partition), target in targets.items():
        sources = set(current.get((topic, partition), []))
        destinations = set(target) - sources
        leaders.setdefault(topic, set()).update(f"{partition}:{b}" for b in sources)
        followers.setdefault(topic, set()).update(f"{partition}:{b}" for b in destinations)
        brokers |= sources | destinations
    return ({t: ",".join(sorted(v)) for t, v in leaders.items()},
            {t: ",".join(sorted(v)) for t, v in followers.items()}, brokers)


async def _alter_configs(admin: Admin, resource_type: int, name: str, operations, node: int | None = None) -> None:
    response = await admin.send(IncrementalAlterConfigsRequest(
        resources=(AlterConfigsResource(resource_type=resource_type, resource_name=name, configs=tuple(operations)),),
        validate_only=False,
    ), node=node)
    for result in response.responses:
        check(result.error_code, f"cannot set the throttle of {name}", result.error_message)


async def execute(args: argparse.Namespace, admin: Admin, targets: dict) -> int:
    ongoing = await list_reassignments(admin)
    if ongoing and not args.additional:
        raise AdminError("Cannot execute because there is an existing partition assignment. Use --additional to "
                         "override this and create a new partition assignment in addition to the existing one.")
    _, _, live = await cluster.describe(admin)
    missing = sorted({b for r in targets.values() for b in r} - {b[0] for b in live})
    if missing:
        raise AdminError(f"Unknown broker id(s) {','.join(map(str, missing))}: BROKER_NOT_AVAILABLE")
    current = await current_assignment(admin, {t for t, _ in targets})
    for key in targets:
        if key not in current:
            raise AdminError(f"Topic partition {key[0]}-{key[1]} does not exist: UNKNOWN_TOPIC_OR_PARTITION")
    print("Current partition replica assignment\n\n"
          f"{reassignment_json({k: current[k] for k in targets})}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback")
    if args.throttle >= 0:
        print(VERIFY_PERIODICALLY)
        leaders, followers, brokers = throttles(current, targets)
        for topic in sorted(leaders):
            await _alter_configs(admin, TOPIC, topic, [
                AlterableConfig(name=TOPIC_THROTTLES[0], config_operation=SET, value=leaders[topic]),
                AlterableConfig(name=TOPIC_THROTTLES[1], config_operation=SET, value=followers[topic]),
            ])
        for broker in sorted(brokers):
            await _alter_configs(admin, BROKER, str(broker), [
                AlterableConfig(name=name, config_operation=SET, value=str(args.throttle)) for name in BROKER_THROTTLES
            ], node=broker)
        print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
    await _alter_reassignments(admin, {k: v for k, v in targets.items()})
    names = ",".join(f"{t}-{p}" for t, p in sorted(targets))
    print(f"Successfully started partition reassignment{'' if len(targets) == 1 else 's'} for {names}")
    if args.wait:
        await wait(admin, targets, args.timeout)
    return 0


async def _alter_reassignments(admin: Admin, targets: dict[tuple[str, int], list[int] | None]) -> None:
    topics: dict[str, list] = {}
    for (topic, partition), replicas in sorted(targets.items()):
        topics.setdefault(topic, []).append(
            ReassignablePartition(partition_index=partition, replicas=None if replicas is None else tuple(replicas))
        )
    response = await admin.send_to_controller(AlterPartitionReassignmentsRequest(
        timeout=TIMEOUT, topics=tuple(ReassignableTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()),
    ))
    check(response.error_code, "AlterPartitionReassignments", response.error_message)
    errors = [
        f"{t.name}-{p.partition_index}: {failure(p.error_code, 'refused', p.error_message)}"
        for t in response.responses for p in t.partitions if p.error_code
    ]
    if errors:
        raise AdminError("Error reassigning partition(s):\n" + "\n".join(errors))


async def cancel(admin: Admin, targets: dict) -> int:
    ongoing = await list_reassignments(admin)
    active = {k: None for k in targets if k in ongoing}
    if not active:
        print("None of the specified partition reassignments are active.")
        return 0
    await _alter_reassignments(admin, active)
    print("Successfully cancelled partition reassignment(s) for " + ",".join(f"{t}-{p}" for t, p in sorted(active)))
    return 0


async def states(admin: Admin, targets: dict) -> tuple[dict[tuple[str, int], tuple[bool, list[int]]], bool]:
    """Per partition (done, current replicas), and whether no reassignment at all is running."""
    ongoing = await list_reassignments(admin)
    current = await current_assignment(admin, {t for t, _ in targets})
    found = {key: (key not in ongoing, current.get(key, [])) for key in targets}
    return found, not ongoing


def state_lines(targets: dict, found: dict) -> list[str]:
    lines = ["Status of partition reassignment:"]
    for key in sorted(targets):
        done, replicas = found[key]
        name = f"{key[0]}-{key[1]}"
        if not done:
            lines.append(f"Reassignment of partition {name} is still in progress.")
        elif replicas == targets[key]:
            lines.append(f"Reassignment of partition {name} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {name}, but replica set is "
                         f"{','.join(map(str, replicas))} rather than {','.join(map(str, targets[key]))}.")
    return lines


async def verify(args: argparse.Namespace, admin: Admin, targets: dict) -> int:
    if args.wait:
        await wait(admin, targets, args.timeout)
    found, none_running = await states(admin, targets)
    print("\n".join(state_lines(targets, found)))
    if none_running and not args.preserve_throttles:
        _, _, live = await cluster.describe(admin)
        brokers = sorted(b[0] for b in live)
        print(f"\nClearing broker-level throttles on brokers {','.join(map(str, brokers))}")
        for broker in brokers:
            await _clear(admin, BROKER, str(broker), CLEARED_BROKER_THROTTLES, node=broker)
        for topic in sorted({t for t, _ in targets}):
            print(f"Clearing topic-level throttles on topic {topic}")
            await _clear(admin, TOPIC, topic, TOPIC_THROTTLES)
    not_done = [k for k, (done, replicas) in found.items() if not done or replicas != targets[k]]
    return 1 if not_done else 0


async def _clear(admin: Admin, resource_type: int, name: str, keys, node: int | None = None) -> None:
    """Deletes throttle keys; a broker that refuses them (one without replication quotas, or
    without dynamic broker configs) has none to clear."""
    try:
        await _alter_configs(admin, resource_type, name,
                             [AlterableConfig(name=k, config_operation=DELETE, value=None) for k in keys], node=node)
    except AdminError as exc:
        if "INVALID_REQUEST" not in str(exc) and "INVALID_CONFIG" not in str(exc):
            raise


async def wait(admin: Admin, targets: dict, timeout_s: float) -> None:
    """Polls until every partition of `targets` is no longer being reassigned."""
    progress = Progress("Reassigning partitions", len(targets))
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            found, _ = await states(admin, targets)
            done = sum(1 for is_done, _ in found.values() if is_done)
            progress.update(done, "done")
            if done == len(targets):
                return
            if time.monotonic() > deadline:
                raise AdminError(f"{len(targets) - done} reassignment(s) still running after {timeout_s:g}s: REQUEST_TIMED_OUT")
            await asyncio.sleep(1.0)
    finally:
        progress.finish()
