"""`logway-admin zk-offsets`: consumer offsets moved between ZooKeeper, where Kafka's old Scala
consumer kept them, and the broker's __consumer_offsets (the migration of Kafka's design notes).

    --zookeeper HOST:PORT[,HOST:PORT][/chroot]
    (--import | --export | --verify) (--group G ... | --all-groups) [--dry-run | --execute]

The old consumer (offsets.storage=zookeeper) wrote the next offset to read of each partition as
decimal text in `/consumers/<group>/offsets/<topic>/<partition>`, and registered its live members
as ephemeral `/consumers/<group>/ids/<consumer id>`.

--import commits the ZooKeeper offsets for the group with OffsetCommit at generation -1 and no
member id, as Kafka's Admin commits a reset. Like `groups --reset-offsets`, it refuses a group
that has members in the broker (a state other than Empty or Dead). An offset beyond the log end
or below the log start is moved to that end (Kafka's checkOffsetsRange, as --reset-offsets
does), with a warning and the ACTION column saying so: the consumer then resumes inside the log
instead of falling to its auto.offset.reset. Partitions of topics the cluster does not have, and
znodes whose value is not a decimal offset, are skipped with a warning.

--export writes the group's committed offsets (OffsetFetch) into those znodes, creating missing
ones; it refuses a group with old consumers registered under /consumers/<group>/ids, which would
overwrite what it writes. Offsets are written as they were committed.

--verify compares the two places for the migration's dual-commit window (docs/operations.md,
"Migrating offsets from ZooKeeper"): every partition either place has, STATUS "same",
"differ", "only in zookeeper" or "only in broker"; exit status 1 unless all are the same.

--import and --export print GROUP TOPIC PARTITION ZK-OFFSET BROKER-OFFSET ACTION, the offsets
before the change, in the column layout of kafka-consumer-groups.sh --reset-offsets; without
--execute nothing changes (a dry run, the default as in Kafka). --all-groups is every group
with offsets under /consumers for --import, every consumer group of the cluster for --export,
both for --verify. A group named with --group that has no offsets to move (or to compare) is
an error; a chroot of --zookeeper that does not exist is an error too, not created.
Failures exit with status 1 and Kafka's error name (OffsetCommit's, the
group coordinator's), or ZooKeeper's error.
"""

import argparse
import asyncio
import re
import sys
from dataclasses import dataclass

from broker.admin.connection import EARLIEST, LATEST, Admin, AdminError, UsageError, check
from broker.admin.groups import commit, committed_offsets, consumer_groups, describe_group
from protocol.errors import ErrorCode
from replication.zk import NoNodeError, ZkClient, ZkError, split_connect_string

CONSUMERS = "/consumers"
MISSING = "-"
_CONNECTION_TIMEOUT_MS = 15000
_ZOOKEEPER = re.compile(r"[^\s,/:]+:\d+(,[^\s,/:]+:\d+)*(/[^\s]*)?")

# ACTION values
NONE, IMPORT, EXPORT = "none", "import", "export"
SKIP_UNKNOWN_TOPIC, SKIP_BAD_VALUE = "skip: unknown topic", "skip: not an offset"
# STATUS values of --verify
SAME, DIFFER, ONLY_ZOOKEEPER, ONLY_BROKER = "same", "differ", "only in zookeeper", "only in broker"


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--zookeeper", required=True, metavar="HOST:PORT[,HOST:PORT][/chroot]",
                        help="REQUIRED: the ZooKeeper the old consumers kept their offsets in")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--import", dest="import_", action="store_true",
                         help="commit the offsets kept in ZooKeeper to the broker")
    actions.add_argument("--export", action="store_true", help="write the broker's committed offsets into ZooKeeper")
    actions.add_argument("--verify", action="store_true",
                         help="compare both places; exit status 1 when they differ")
    parser.add_argument("--group", action="append", default=[], help="the consumer group (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="every consumer group")
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument("--dry-run", action="store_true", help="only show what would change (the default)")
    runs.add_argument("--execute", action="store_true", help="apply the change")


# ------------------------------------------------------------------------------ pure parts


def check_zookeeper(connect: str) -> str:
    """--zookeeper as ZooKeeper's connect string: host:port[,host:port...][/chroot]."""
    if not _ZOOKEEPER.fullmatch(connect):
        raise UsageError(f"Invalid --zookeeper '{connect}': expected HOST:PORT[,HOST:PORT...][/chroot]")
    return connect


def parse_offset(data: bytes) -> int | None:
    """The offset in a znode as the old consumer wrote it (Long.toString: decimal text); None
    when it is not one (empty, not a number, negative)."""
    text = data.decode("utf-8", "replace").strip()
    if not re.fullmatch(r"\d{1,19}", text) or int(text) >= 2**63:
        return None
    return int(text)


def offset_path(group: str, topic: str, partition: int | str = "") -> str:
    path = f"{CONSUMERS}/{group}/offsets/{topic}"
    return f"{path}/{partition}" if partition != "" else path


@dataclass(frozen=True)
class Row:
    group: str
    topic: str
    partition: int | str
    zk_offset: int | None
    broker_offset: int | None
    action: str
    new_offset: int | None = None  # what --execute writes; None: nothing for this partition

    def cells(self) -> tuple:
        return (self.group, self.topic, self.partition, self.zk_offset, self.broker_offset, self.action)


def plan_import(group: str, zk: dict, bad: dict, broker: dict, ranges: dict) -> list[Row]:
    """The rows of importing a group's ZooKeeper offsets `zk` ((topic, partition) -> offset;
    `bad`: (topic, znode name) -> raw value that is not an offset) over its broker offsets
    `broker`; `ranges` has (log start, log end) of each partition the cluster has."""
    rows = []
    for (topic, partition), offset in sorted(zk.items()):
        committed = broker.get((topic, partition))
        if (topic, partition) not in ranges:
            rows.append(Row(group, topic, partition, offset, committed, SKIP_UNKNOWN_TOPIC))
            continue
        start, end = ranges[(topic, partition)]
        target = min(max(offset, start), end)
        if target > offset:
            action = f"import log start {target}"
        elif target < offset:
            action = f"import log end {target}"
        else:
            action = NONE if committed == target else IMPORT
        rows.append(Row(group, topic, partition, offset, committed, action, None if action == NONE else target))
    rows += [Row(group, topic, name, None, None, SKIP_BAD_VALUE) for topic, name in sorted(bad)]
    return sorted(rows, key=_order)


def plan_export(group: str, broker: dict, zk: dict) -> list[Row]:
    """The rows of exporting a group's broker offsets into ZooKeeper, where it has `zk` (a znode
    that holds no offset is overwritten when the broker has that partition)."""
    rows = []
    for (topic, partition), committed in sorted(broker.items()):
        current = zk.get((topic, partition))
        action = NONE if current == committed else EXPORT
        rows.append(Row(group, topic, partition, current, committed, action, None if action == NONE else committed))
    return sorted(rows, key=_order)


def compare(group: str, zk: dict, bad: dict, broker: dict) -> list[Row]:
    rows = []
    for tp in sorted(set(zk) | set(broker)):
        z, b = zk.get(tp), broker.get(tp)
        status = SAME if z == b else ONLY_BROKER if z is None else ONLY_ZOOKEEPER if b is None else DIFFER
        rows.append(Row(group, *tp, z, b, status))
    rows += [Row(group, topic, name, None, None, SKIP_BAD_VALUE) for topic, name in sorted(bad)]
    return sorted(rows, key=_order)


def _order(row: Row) -> tuple:
    return (row.group, row.topic, isinstance(row.partition, str), str(row.partition).zfill(10))


def format_rows(rows: list[Row], last: str = "ACTION") -> str:
    """kafka-consumer-groups.sh --reset-offsets' table (%-30s columns, PARTITION %-10s, offsets
    %-15s), "-" where a place has no offset; a leading blank line as Kafka prints it."""
    line = "%-30s %-30s %-10s %-15s %-15s %s"
    header = ("GROUP", "TOPIC", "PARTITION", "ZK-OFFSET", "BROKER-OFFSET", last)
    cells = [tuple(MISSING if v is None else str(v) for v in row.cells()) for row in rows]
    return "\n" + "\n".join((line % r).rstrip() for r in [header, *cells])


def warnings(rows: list[Row]) -> list[str]:
    """A line for each partition skipped or moved into the log."""
    found = []
    for row in rows:
        where = f"{row.topic}-{row.partition} of group {row.group}"
        if row.action == SKIP_UNKNOWN_TOPIC:
            found.append(f"Warn: skipping {where}: the topic or partition does not exist: UNKNOWN_TOPIC_OR_PARTITION")
        elif row.action == SKIP_BAD_VALUE:
            found.append(f"Warn: skipping {where}: its znode does not hold a decimal offset")
        elif row.action.startswith("import log end"):
            found.append(f"Warn: ZooKeeper offset ({row.zk_offset}) of {where} is higher than the log end offset; "
                         f"importing {row.new_offset}")
        elif row.action.startswith("import log start"):
            found.append(f"Warn: ZooKeeper offset ({row.zk_offset}) of {where} is lower than the log start offset; "
                         f"importing {row.new_offset}")
    return found


# ------------------------------------------------------------------------------ running


async def run(args: argparse.Namespace, admin: Admin) -> int:
    if not args.group and not args.all_groups:
        raise UsageError("Option --group or --all-groups is required")
    connect = check_zookeeper(args.zookeeper)
    hosts, chroot = split_connect_string(connect)
    try:
        if chroot:
            await _check_chroot(hosts, chroot)
        zk = ZkClient(connect, connection_timeout_ms=_CONNECTION_TIMEOUT_MS)
        await zk.start()
    except ZkError as exc:
        raise AdminError(str(exc)) from None
    try:
        return await _run(args, admin, zk)
    except ZkError as exc:
        raise AdminError(f"ZooKeeper: {exc}") from None
    finally:
        await zk.close()


async def _check_chroot(hosts: str, chroot: str) -> None:
    """An AdminError when the chroot does not exist: ZkClient would create it (as a broker
    creates its own), which here would only hide a mistyped --zookeeper."""
    zk = ZkClient(hosts, connection_timeout_ms=_CONNECTION_TIMEOUT_MS)
    await zk.start()
    try:
        if await zk.exists(chroot) is None:
            raise AdminError(f"ZooKeeper at {hosts} has no {chroot}: check the chroot of --zookeeper")
    finally:
        await zk.close()


async def _run(args: argparse.Namespace, admin: Admin, zk: ZkClient) -> int:
    groups = list(dict.fromkeys(args.group))
    if args.all_groups:
        in_zookeeper = await zookeeper_groups(zk) if not args.export else []
        in_broker = list(await consumer_groups(admin)) if not args.import_ else []
        groups = sorted(set(in_zookeeper) | set(in_broker))
    if args.verify:
        return await verify(admin, zk, groups, named=not args.all_groups)
    rows: list[Row] = []
    refused = False
    for group in groups:
        if args.import_:
            group_rows = await import_group(admin, zk, group, args.execute)
        else:
            group_rows = await export_group(admin, zk, group, args.execute)
        if group_rows == [] and not args.all_groups:
            # a group named on the command line with nothing to move: most likely a typo
            where = "in ZooKeeper" if args.import_ else "committed in the broker"
            print(f"\nError: Consumer group '{group}' has no offsets {where}.")
            group_rows = None
        refused = refused or group_rows is None
        rows += group_rows or []
    for line in warnings(rows):
        print(line, file=sys.stderr)
    if rows:
        print(format_rows(rows))
    if not args.execute and rows:
        print("\nNothing was changed (a dry run): add --execute to apply.", file=sys.stderr)
    return 1 if refused else 0


async def zookeeper_groups(zk: ZkClient) -> list[str]:
    """The groups with an offsets znode under /consumers."""
    groups = await zk.children_or_empty(CONSUMERS)
    found = await asyncio.gather(*(zk.exists(f"{CONSUMERS}/{g}/offsets") for g in groups))
    return sorted(g for g, stat in zip(groups, found) if stat is not None)


async def read_zookeeper(zk: ZkClient, group: str) -> tuple[dict, dict]:
    """((topic, partition) -> offset, (topic, znode name) -> raw value for the znodes that are
    not a partition's offset) of a group."""
    offsets, bad = {}, {}
    for topic in await zk.children_or_empty(f"{CONSUMERS}/{group}/offsets"):
        names = await zk.children_or_empty(offset_path(group, topic))
        values = await asyncio.gather(*(zk.get_or_none(offset_path(group, topic, n)) for n in names))
        for name, value in zip(names, values):
            if value is None:
                continue  # deleted between the listing and the read
            offset = parse_offset(value[0])
            if name.isdigit() and offset is not None:
                offsets[(topic, int(name))] = offset
            else:
                bad[(topic, name)] = value[0]
    return offsets, bad


async def log_ranges(admin: Admin, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    """(log start, log end) of each of `partitions` the cluster has."""
    if not partitions:
        return {}
    metadata = await admin.metadata(sorted({t for t, _ in partitions}))
    known = set()
    for topic in metadata.topics:
        if topic.error_code == ErrorCode.unknown_topic_or_partition:
            continue
        check(topic.error_code, f"Metadata of topic {topic.name}")
        known |= {(topic.name, p.partition_index) for p in topic.partitions}
    present = [tp for tp in partitions if tp in known]
    if not present:
        return {}
    earliest = await admin.list_offsets(present, EARLIEST)
    latest = await admin.list_offsets(present, LATEST)
    return {tp: (earliest[tp], latest[tp]) for tp in present}


async def import_group(admin: Admin, zk: ZkClient, group: str, execute: bool) -> list[Row] | None:
    """The group's rows, committed with `execute`; None when the group is active."""
    coordinator, described = await describe_group(admin, group)
    if described.group_state not in ("Empty", "Dead"):
        print(f"\nError: Offsets can only be imported if the group '{group}' is inactive, but the current state is "
              f"{described.group_state}.")
        return None
    live = await zk.children_or_empty(f"{CONSUMERS}/{group}/ids")
    if live:
        print(f"Warn: group '{group}' has {len(live)} consumer(s) registered in ZooKeeper: their later commits to "
              f"ZooKeeper are not imported (see the dual-commit window)", file=sys.stderr)
    zk_offsets, bad = await read_zookeeper(zk, group)
    broker = await committed_offsets(admin, group, coordinator)
    rows = plan_import(group, zk_offsets, bad, broker, await log_ranges(admin, sorted(zk_offsets)))
    plan = {(r.topic, r.partition): r.new_offset for r in rows if r.new_offset is not None}
    if execute and plan:
        await commit(admin, group, coordinator, plan)
    return rows


async def export_group(admin: Admin, zk: ZkClient, group: str, execute: bool) -> list[Row] | None:
    """The group's rows, written with `execute`; None when old consumers of the group are live."""
    live = await zk.children_or_empty(f"{CONSUMERS}/{group}/ids")
    if live:
        print(f"\nError: Offsets can only be exported if the group '{group}' has no consumers registered in "
              f"ZooKeeper, but it has {len(live)}.")
        return None
    coordinator = await admin.coordinator(group)
    broker = await committed_offsets(admin, group, coordinator)
    zk_offsets, _ = await read_zookeeper(zk, group)
    rows = plan_export(group, broker, zk_offsets)
    if execute:
        for row in rows:
            if row.new_offset is not None:
                await write_offset(zk, group, row.topic, row.partition, row.new_offset)
    return rows


async def write_offset(zk: ZkClient, group: str, topic: str, partition: int, offset: int) -> None:
    path = offset_path(group, topic, partition)
    data = str(offset).encode()
    try:
        await zk.set(path, data)
    except NoNodeError:
        await zk.create(path, data, makepath=True)


async def verify(admin: Admin, zk: ZkClient, groups: list[str], named: bool) -> int:
    """Exit status 1 when the places differ, or a `named` group has offsets in neither."""
    rows: list[Row] = []
    empty = False
    for group in groups:
        coordinator = await admin.coordinator(group)
        broker = await committed_offsets(admin, group, coordinator)
        zk_offsets, bad = await read_zookeeper(zk, group)
        group_rows = compare(group, zk_offsets, bad, broker)
        if named and not group_rows:
            print(f"\nError: Consumer group '{group}' has no offsets in ZooKeeper or in the broker.")
            empty = True
        rows += group_rows
    if rows:
        print(format_rows(rows, "STATUS"))
    differing = [r for r in rows if r.action != SAME]
    print(f"\n{len(differing)} of {len(rows)} partitions differ." if differing
          else f"\nZooKeeper and the broker agree on all {len(rows)} partitions.")
    return 1 if differing or empty else 0
