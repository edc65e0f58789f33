"""`logway-admin groups`: kafka-consumer-groups.sh's flags and output.

    --list [--state [STATES]]
    --describe (--group G ... | --all-groups) [--members [--verbose] | --state | --offsets]
    --reset-offsets (--group G ... | --all-groups) (--topic T[:P,P] ... | --all-topics)
        (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N |
         --to-datetime YYYY-MM-DDTHH:mm:SS.sss[zone] | --by-duration PnDTnHnMnS)
        [--dry-run | --execute]
    --delete (--group G ... | --all-groups)
    --delete-offsets --group G --topic T[:P,P] ...

Groups are listed with ListGroups on every broker (consumer groups: protocol type "consumer"
or empty, as Kafka's Admin lists them); a group is described by its coordinator
(FindCoordinator, DescribeGroups, OffsetFetch), log-end offsets by the partitions' leaders
(ListOffsets). --describe prints GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
CONSUMER-ID HOST CLIENT-ID: the partitions assigned to members (the consumer protocol's
assignment, members with more partitions first), then the committed partitions no member owns,
with "-" for what is unknown. Offsets are reset only for groups that are Empty (or Dead), with
OffsetCommit at generation -1 as Kafka's Admin commits them; without --execute the plan is
only printed (a dry run), as in Kafka. New offsets are kept within the log's earliest and latest
offsets, with Kafka's warnings. A progress line on stderr counts the partitions looked up when
there are many.
"""

import argparse
import asyncio
import datetime
import re
import sys
import time

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest

from broker.admin.connection import EARLIEST, LATEST, RETRIABLE, Admin, AdminError, UsageError, check, error_name
from broker.admin.output import Progress
from protocol import schemas
from protocol.errors import ErrorCode, ProtocolError

MISSING = "-"
STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
_PROGRESS_FROM = 100  # partitions: fewer are looked up too fast to need a progress line


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help="List all consumer groups.")
    actions.add_argument("--describe", action="store_true", help="Describe consumer group(s).")
    actions.add_argument("--reset-offsets", action="store_true", help="Reset offsets of consumer group(s).")
    actions.add_argument("--delete", action="store_true", help="Delete consumer group(s).")
    actions.add_argument("--delete-offsets", action="store_true", help="Delete offsets of a consumer group.")
    parser.add_argument("--group", action="append", default=[], help="the consumer group (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="every consumer group")
    parser.add_argument("--topic", action="append", default=[], help="T or T:0,1 (repeatable)")
    parser.add_argument("--all-topics", action="store_true", help="every topic the group committed offsets for")
    parser.add_argument("--members", action="store_true", help="with --describe: the members")
    parser.add_argument("--verbose", action="store_true", help="with --describe --members: their assignment")
    parser.add_argument("--offsets", action="store_true", help="with --describe: the offsets (the default)")
    parser.add_argument("--state", nargs="?", const="", default=None,
                        help="with --describe: the group's state; with --list: the states, or only those given (comma separated)")
    scenarios = parser.add_mutually_exclusive_group()
    scenarios.add_argument("--to-earliest", action="store_true")
    scenarios.add_argument("--to-latest", action="store_true")
    scenarios.add_argument("--to-current", action="store_true")
    scenarios.add_argument("--to-offset", type=int)
    scenarios.add_argument("--shift-by", type=int)
    scenarios.add_argument("--to-datetime", help="YYYY-MM-DDTHH:mm:SS.sss, optionally with a zone (Z, +hh:mm)")
    scenarios.add_argument("--by-duration", help="PnDTnHnMnS: that long ago")
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    runs.add_argument("--execute", action="store_true", help="commit the new offsets")


async def run(args: argparse.Namespace, admin: Admin) -> int:
    if args.list:
        return await list_groups(admin, args.state)
    if not args.group and not args.all_groups:
        raise UsageError("Option --group or --all-groups is required")
    groups = sorted(await consumer_groups(admin)) if args.all_groups else args.group
    if args.describe:
        return await describe(admin, groups, args)
    if args.reset_offsets:
        return await reset_offsets(admin, groups, args)
    if args.delete_offsets:
        return await delete_offsets(admin, groups, args.topic)
    return await delete(admin, groups)


async def consumer_groups(admin: Admin, states: tuple[str, ...] = ()) -> dict[str, str]:
    """group id -> state of the consumer groups of every broker."""
    found = {}
    await admin.metadata([])
    for node in sorted(admin.broker_addresses):
        response = await admin.send(ListGroupsRequest(states_filter=states), node=node)
        check(response.error_code, f"ListGroups on broker {node}")
        for group in response.groups:
            # the filter again here: a broker below ListGroups v4 does not take one
            if group.protocol_type in ("consumer", "") and (not states or group.group_state in states):
                found[group.group_id] = group.group_state
    return found


async def list_groups(admin: Admin, state: str | None) -> int:
    if state is None:
        for group in sorted(await consumer_groups(admin)):
            print(group)
        return 0
    wanted = tuple(s.strip() for s in state.split(",") if s.strip())
    by_lower = {s.lower(): s for s in STATES}
    unknown = [s for s in wanted if s.lower() not in by_lower]
    if unknown:
        raise UsageError(f"Invalid state list '{state}'. Valid states are: {', '.join(STATES)}")
    groups = await consumer_groups(admin, tuple(by_lower[s.lower()] for s in wanted))
    width = max([15, *map(len, groups)]) + 10
    print(f"{'GROUP':<{width}} {'STATE':<20}")
    for group, group_state in sorted(groups.items()):
        print(f"{group:<{width}} {group_state:<20}")
    return 0


async def describe_group(admin: Admin, group: str):
    """(coordinator node id, DescribedGroup), retrying while the coordinator loads or moves."""
    deadline = time.monotonic() + admin.settings.request_timeout_s
    while True:
        coordinator = await admin.coordinator(group)
        response = await admin.send(DescribeGroupsRequest(groups=(group,), include_authorized_operations=False), node=coordinator)
        described = response.groups[0]
        if described.error_code in RETRIABLE and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            continue
        check(described.error_code, f"DescribeGroups of {group}")
        return coordinator, described


async def committed_offsets(admin: Admin, group: str, coordinator: int) -> dict[tuple[str, int], int]:
    response = await admin.send(OffsetFetchRequest(group_id=group, topics=None, require_stable=False), node=coordinator)
    check(response.error_code, f"OffsetFetch of {group}")
    offsets = {}
    for topic in response.topics:
        for partition in topic.partitions:
            check(partition.error_code, f"OffsetFetch of {group} for {topic.name}-{partition.partition_index}")
            if partition.committed_offset >= 0:
                offsets[(topic.name, partition.partition_index)] = partition.committed_offset
    return offsets


def member_assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions of a consumer protocol assignment (version, then v0's fields, which every
    later version starts with); none when it is not one."""
    if len(data) < 2:
        return []
    try:
        assignment = schemas.decode(ConsumerProtocolAssignment, memoryview(data), 2)
    except ProtocolError:
        return []
    return [(t.topic, p) for t in assignment.assigned_partitions for p in t.partitions]


def _state_ok(group: str, state: str, rows: int) -> bool:
    """Kafka's shouldPrintMemberState: notes on Dead, Empty and rebalancing groups."""
    if state == "Dead":
        print(f"\nError: Consumer group '{group}' does not exist.")
        return False
    if state == "Empty":
        print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
    elif state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
    return rows > 0


async def describe(admin: Admin, groups: list[str], args: argparse.Namespace) -> int:
    """Exit status 1 when a group does not exist (Kafka's tool prints the error and exits 0)."""
    missing = False
    for group in sorted(groups):
        coordinator, described = await describe_group(admin, group)
        missing = missing or described.group_state == "Dead"
        if args.members:
            _print_members(group, described, args.verbose)
        elif args.state is not None:
            _print_state(admin, group, coordinator, described)
        else:
            rows = await offset_rows(admin, group, coordinator, described)
            if _state_ok(group, described.group_state, len(rows)):
                print(offsets_table(rows))
    return 1 if missing else 0


async def offset_rows(admin: Admin, group: str, coordinator: int, described) -> list[tuple]:
    """(group, topic, partition, current, log end, lag, consumer id, host, client id) rows."""
    committed = await committed_offsets(admin, group, coordinator)
    members = [(m, sorted(member_assignment(m.member_assignment))) for m in described.members]
    members = sorted((m for m in members if m[1]), key=lambda m: -len(m[1]))
    assigned = {tp for _, tps in members for tp in tps}
    unassigned = sorted(tp for tp in committed if tp not in assigned)
    partitions = sorted(assigned | set(unassigned))
    ends = await _log_end_offsets(admin, partitions)
    rows = []

    def row(tp, consumer, host, client):
        current, end = committed.get(tp), ends.get(tp)
        lag = end - current if current is not None and end is not None else None
        return (group, tp[0], tp[1], current, end, lag, consumer, host, client)

    for member, tps in members:
        for tp in sorted(tps, key=lambda tp: tp[1]):
            rows.append(row(tp, member.member_id, member.client_host, member.client_id))
    for tp in sorted(unassigned, key=lambda tp: tp[1]):
        rows.append(row(tp, MISSING, MISSING, MISSING))
    return rows


async def _log_end_offsets(admin: Admin, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
    """LATEST offsets; None for partitions that have gone (a deleted topic) or lack a leader."""
    if not partitions:
        return {}
    try:
        return await admin.list_offsets(partitions, LATEST)
    except AdminError:
        ends: dict[tuple[str, int], int | None] = {}
        for partition in partitions:
            try:
                ends.update(await admin.list_offsets([partition], LATEST))
            except AdminError:
                ends[partition] = None
        return ends


def offsets_table(rows: list[tuple]) -> str:
    """Kafka's describe format: widths of at least 15 for group, topic, consumer id and host."""
    def width(index):
        return max([15, *(len(_cell(r[index])) for r in rows)])

    group_w, topic_w, consumer_w, host_w = width(0), width(1), width(6), width(7)
    line = f"%-{group_w}s %-{topic_w}s %-10s %-15s %-15s %-15s %-{consumer_w}s %-{host_w}s %s"
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")
    return "\n" + "\n".join(line % tuple(_cell(v) for v in r) for r in [header, *rows])


def _cell(value) -> str:
    return MISSING if value is None else str(value)


def _print_members(group: str, described, verbose: bool) -> None:
    if not _state_ok(group, described.group_state, len(described.members) or 1):
        return
    members = [(m, member_assignment(m.member_assignment)) for m in described.members]
    with_instance = any(m.group_instance_id for m, _ in members)

    def width(values, minimum):
        return max([minimum, *map(len, values)])

    group_w = width([group], 15)
    consumer_w = width([m.member_id for m, _ in members], 15)
    instance_w = width([m.group_instance_id or "" for m, _ in members], 17)
    host_w = width([m.client_host for m, _ in members], 15)
    client_w = width([m.client_id for m, _ in members], 15)
    columns = [(group_w, "GROUP"), (consumer_w, "CONSUMER-ID")]
    if with_instance:
        columns.append((instance_w, "GROUP-INSTANCE-ID"))
    columns += [(host_w, "HOST"), (client_w, "CLIENT-ID"), (15, "#PARTITIONS")]
    header = " ".join(f"{name:<{w}}" for w, name in columns) + " " + ("ASSIGNMENT" if verbose else "")
    print("\n" + header.rstrip())
    for member, partitions in members:
        values = [group, member.member_id] + ([member.group_instance_id or ""] if with_instance else [])
        values += [member.client_host, member.client_id, str(len(partitions))]
        line = " ".join(f"{v:<{w}}" for (w, _), v in zip(columns, values)) + " "
        if verbose:
            line += format_assignment(partitions)
        print(line.rstrip())


def format_assignment(partitions: list[tuple[str, int]]) -> str:
    """Kafka's verbose ASSIGNMENT: topic(partitions) per topic, "-" when none."""
    if not partitions:
        return MISSING
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    return ", ".join(sorted(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in topics.items()))


def _print_state(admin: Admin, group: str, coordinator: int, described) -> None:
    if not _state_ok(group, described.group_state, 1):
        return
    host, port = admin.broker_addresses.get(coordinator, ("?", 0))
    where = f"{host}:{port}  ({coordinator})"
    width = max(25, len(where))
    line = f"%-{width}s %-25s %-20s %-15s %s"
    print("\n" + line % ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"))
    print(line % (group, where, described.protocol_data, described.group_state, len(described.members)))


# ------------------------------------------------------------------------------ reset


def parse_topic_partitions(arg: str) -> tuple[str, list[int] | None]:
    """T or T:0,1,2 (Kafka's --topic of --reset-offsets)."""
    if ":" not in arg:
        return arg, None
    topic, _, partitions = arg.partition(":")
    try:
        return topic, [int(p) for p in partitions.split(",")]
    except ValueError:
        raise UsageError(f"Invalid topic arg '{arg}', expected topic name and partitions") from None


def parse_datetime(text: str) -> int:
    """Kafka's --to-datetime (YYYY-MM-DDTHH:mm:SS.sss, optional zone; local time without one)
    as milliseconds since the epoch."""
    match = re.fullmatch(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{1,3})?(Z|[+-]\d{2}:?\d{2})?", text)
    if match is None:
        raise UsageError(f"Error parsing timestamp '{text}': expected yyyy-MM-ddTHH:mm:SS.sss with an optional zone")
    moment = datetime.datetime.fromisoformat(match[1] + (match[2] or "") + (match[3] or "").replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def parse_duration(text: str) -> int:
    """ISO-8601 PnDTnHnMnS as milliseconds."""
    match = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", text)
    if match is None or text in ("P", "PT"):
        raise UsageError(f"Error parsing duration '{text}': expected PnDTnHnMnS")
    days, hours, minutes, seconds = (float(v) if v else 0.0 for v in match.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


async def reset_offsets(admin: Admin, groups: list[str], args: argparse.Namespace) -> int:
    scenarios = (args.to_earliest, args.to_latest, args.to_current, args.to_offset is not None,
                 args.shift_by is not None, args.to_datetime is not None, args.by_duration is not None)
    if not any(scenarios):
        raise UsageError("Option --reset-offsets requires one of the following scenarios: --to-datetime, --by-duration, "
                         "--to-earliest, --to-latest, --shift-by, --to-current, --to-offset")
    if not args.topic and not args.all_topics:
        raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
    plans = {}
    inactive_refused = False
    for group in groups:
        coordinator, described = await describe_group(admin, group)
        if described.group_state not in ("Empty", "Dead"):
            print(f"\nError: Assignments can only be reset if the group '{group}' is inactive, but the current state is "
                  f"{described.group_state}.")
            plans[group] = {}
            inactive_refused = True
            continue
        committed = await committed_offsets(admin, group, coordinator)
        partitions = sorted(committed) if args.all_topics else await _scope(admin, args.topic)
        plan = await prepare(admin, args, partitions, committed)
        if args.execute:
            await commit(admin, group, coordinator, plan)
        plans[group] = plan
    line = "%-30s %-30s %-10s %-15s"
    if any(plans.values()):
        print("\n" + line % ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"))
    for group, plan in plans.items():
        for (topic, partition), offset in sorted(plan.items()):
            print(line % (group, topic, partition, offset))
    return 1 if inactive_refused else 0


async def _scope(admin: Admin, topic_args: list[str]) -> list[tuple[str, int]]:
    partitions = []
    whole_topics = []
    for arg in topic_args:
        topic, chosen = parse_topic_partitions(arg)
        if chosen is None:
            whole_topics.append(topic)
        else:
            partitions += [(topic, p) for p in chosen]
    if whole_topics:
        metadata = await admin.metadata(whole_topics)
        for topic in metadata.topics:
            check(topic.error_code, f"Metadata of topic {topic.name}")
            partitions += [(topic.name, p.partition_index) for p in topic.partitions]
    return sorted(set(partitions))


async def prepare(admin: Admin, args, partitions: list[tuple[str, int]], committed: dict) -> dict[tuple[str, int], int]:
    """The new offset of each partition for the scenario the flags name."""
    progress = Progress("Looking up offsets", len(partitions)) if len(partitions) >= _PROGRESS_FROM else None
    if progress:
        progress.update(0)
    earliest = await admin.list_offsets(partitions, EARLIEST)
    latest = await admin.list_offsets(partitions, LATEST)
    if progress:
        progress.update(len(partitions), "earliest and latest")
    if args.to_earliest:
        plan = dict(earliest)
    elif args.to_latest:
        plan = dict(latest)
    elif args.to_current:
        plan = {tp: committed.get(tp, latest[tp]) for tp in partitions}
    elif args.to_offset is not None:
        plan = _within_range({tp: args.to_offset for tp in partitions}, earliest, latest)
    elif args.shift_by is not None:
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            raise AdminError(f"Partition {missing[0][0]}-{missing[0][1]} has no committed offset to shift: "
                             f"{error_name(ErrorCode.unknown_topic_or_partition)}")
        plan = _within_range({tp: committed[tp] + args.shift_by for tp in partitions}, earliest, latest)
    else:
        if args.to_datetime is not None:
            timestamp = parse_datetime(args.to_datetime)
        else:
            timestamp = int(time.time() * 1000) - parse_duration(args.by_duration)
        found = await admin.list_offsets(partitions, timestamp)
        plan = {}
        for tp in partitions:
            if found.get(tp, -1) < 0:
                print(f"\nWarn: Partition {tp[1]} from topic {tp[0]} is empty. Falling back to latest known offset.")
                plan[tp] = latest[tp]
            else:
                plan[tp] = found[tp]
    if progress:
        progress.finish()
    return plan


def _within_range(plan: dict, earliest: dict, latest: dict) -> dict:
    """Kafka's checkOffsetsRange: an offset outside the log is moved to its nearest end."""
    checked = {}
    for tp, offset in plan.items():
        if offset > latest[tp]:
            print(f"New offset ({offset}) is higher than latest offset for topic partition {tp[0]}-{tp[1]}. "
                  f"Value will be set to {latest[tp]}")
            offset = latest[tp]
        elif offset < earliest[tp]:
            print(f"New offset ({offset}) is lower than earliest offset for topic partition {tp[0]}-{tp[1]}. "
                  f"Value will be set to {earliest[tp]}")
            offset = earliest[tp]
        checked[tp] = offset
    return checked


async def commit(admin: Admin, group: str, coordinator: int, plan: dict[tuple[str, int], int]) -> None:
    topics: dict[str, list] = {}
    for (topic, partition), offset in sorted(plan.items()):
        topics.setdefault(topic, []).append(OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""
        ))
    request = OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=tuple(OffsetCommitRequestTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()),
    )
    response = await admin.send(request, node=coordinator)
    for topic in response.topics:
        for partition in topic.partitions:
            check(partition.error_code, f"OffsetCommit of {group} for {topic.name}-{partition.partition_index}")


# ------------------------------------------------------------------------------ delete


async def delete(admin: Admin, groups: list[str]) -> int:
    results = {}
    for group in groups:
        coordinator = await admin.coordinator(group)
        response = await admin.send(DeleteGroupsRequest(groups_names=(group,)), node=coordinator)
        results[group] = response.results[0].error_code
    succeeded = [g for g, code in results.items() if code == ErrorCode.none]
    failed = {g: code for g, code in results.items() if code != ErrorCode.none}
    if not failed:
        print(f"Deletion of requested consumer groups ('{', '.join(succeeded)}') was successful.")
        return 0
    print("Deletion of some consumer groups failed:")
    for group, code in failed.items():
        print(f"* Group '{group}' could not be deleted due to: {error_name(code)}")
    if succeeded:
        print(f"\nThese consumer groups were deleted successfully: '{', '.join(succeeded)}'")
    return 1


async def delete_offsets(admin: Admin, groups: list[str], topic_args: list[str]) -> int:
    if len(groups) != 1 or not topic_args:
        raise UsageError("Option --delete-offsets takes one --group and at least one --topic")
    group = groups[0]
    partitions = await _scope(admin, topic_args)
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    coordinator = await admin.coordinator(group)
    response = await admin.send(OffsetDeleteRequest(group_id=group, topics=tuple(
        OffsetDeleteRequestTopic(name=t, partitions=tuple(OffsetDeleteRequestPartition(partition_index=p) for p in ps))
        for t, ps in topics.items()
    )), node=coordinator)
    check(response.error_code, f"OffsetDelete of {group}")
    failed = False
    line = "%-30s %-15s %-15s"
    print("\n" + line % ("TOPIC", "PARTITION", "STATUS"))
    for topic in response.topics:
        for partition in topic.partitions:
            status = "Successful" if partition.error_code == 0 else f"Error: {error_name(partition.error_code)}"
            failed = failed or partition.error_code != 0
            print(line % (topic.name, partition.partition_index, status))
    return 1 if failed else 0
