"""The group coordinator: the consumer groups of the __consumer_offsets partitions this broker
leads (standalone: all of them), their committed offsets, and their records in that topic.

Each group belongs to one partition, chosen as Kafka chooses it (coordinator.internal_topic).
__consumer_offsets is created on first use (FindCoordinator or any group request) with
offsets.topic.num.partitions partitions, compacted, segments of offsets.topic.segment.bytes.

State machines and the event loop: each group is a coordinator.group.Group, which knows nothing
of asyncio. Requests that must wait (JoinGroup, SyncGroup) hand it a callback that settles a
future the handler awaits; its deadlines become one loop timer per group, re-armed after every
change (a heartbeat only moves its member's deadline later, so an armed timer stays early
enough and is left alone); storing its metadata goes through `store_group`, whose append completes the
group's callback from the loop.

Persistence: every record goes through ReplicaManager.append_committed, which returns once the
record is committed. Group metadata is written when a rebalance completes (the leader's
assignment, before any SyncGroup is answered) and when a group empties; OffsetCommit is answered
once its records are in the log; DeleteGroups, OffsetDelete and offset expiry (checked every
offsets.retention.check.interval.ms) write tombstones. Committed offsets are served from memory.

Transactional offsets (TxnOffsetCommit) are written as a transactional batch of the producer
and held pending, per producer id, until the transaction's marker reaches the partition
(`complete_transaction`): COMMIT makes them the group's offsets, ABORT drops them. Loading does
the same with the markers it replays; offsets of a transaction still open stay pending.

Loading (coordinator.internal_topic): a partition that exists when the broker starts, or (cluster
mode) whose leadership this broker takes (`on_become_leader`, a ReplicaManager leadership
listener), is replayed from its log up to the log end in a worker thread, then its groups and
offsets are installed on the loop; until then requests for its groups get
COORDINATOR_LOAD_IN_PROGRESS (except Heartbeat, answered NONE, and SyncGroup, answered
REBALANCE_IN_PROGRESS, as Kafka answers clients that predate that code). A load that fails is
logged and tried again. Resigning leadership (`on_resign`) unloads the partition's groups: their
waiting members and later requests get NOT_COORDINATOR.
"""

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from protocol.errors import ErrorCode, ProtocolError
from protocol.records import ControlRecordType, Record, control_batch_type, iter_records
from storage.log_slice import LogSlice
from storage.topic_partition import TopicPartition

from coordinator import records
from coordinator.internal_topic import (
    BrokerSettings,
    CoordinatorReplicas,
    CoordinatorTopics,
    Entry,
    InternalTopic,
    LoadState,
    append_entries,
    coordinator_store_error,
)
from coordinator.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from coordinator.group import (
    UNKNOWN_MEMBER_ID,
    CommittedOffset,
    Group,
    GroupConfig,
    GroupDescription,
    GroupState,
    JoinRequest,
    JoinResult,
    Member,
    SyncResult,
)

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
_NEVER_MS = 2**31  # intervals this long (Kafka's "never", Long.MAX_VALUE) are not scheduled
_DEAD_GROUP = GroupDescription(GroupState.DEAD.value, "", "", ())
_NO_GROUP = GroupDescription("", "", "", ())


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _java_length(text: str) -> int:
    """String.length() in Java: UTF-16 code units."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


class GroupOverview(NamedTuple):
    group_id: str
    protocol_type: str
    state: str


OffsetsByGroup = dict[str, dict[TopicPartition, records.OffsetCommitValue]]


@dataclass
class PartitionContents:
    """What replaying an offsets partition leaves: the last metadata of each group and the last
    offset of each (group, partition), tombstoned ones removed; the offsets of transactions
    still open, per producer id."""

    groups: dict[str, records.GroupMetadataValue] = field(default_factory=dict)
    offsets: OffsetsByGroup = field(default_factory=lambda: defaultdict(dict))
    pending: dict[int, OffsetsByGroup] = field(default_factory=dict)

    def apply(self, record: Record, producer_id: int | None = None) -> None:
        """A record; `producer_id` for one of a transactional batch."""
        if record.key is None:
            return
        key = records.decode_key(record.key)
        if isinstance(key, records.OffsetCommitKey):
            tp = TopicPartition(key.topic, key.partition)
            offsets = self.offsets if producer_id is None else self.pending.setdefault(producer_id, defaultdict(dict))
            if record.value is None:
                offsets[key.group].pop(tp, None)
            else:
                offsets[key.group][tp] = records.decode_offset_commit_value(record.value)
        elif isinstance(key, records.GroupMetadataKey):
            if record.value is None:
                self.groups.pop(key.group, None)
            else:
                self.groups[key.group] = records.decode_group_metadata_value(record.value)


def read_offsets_partition(log_slice: LogSlice, buffer_bytes: int) -> PartitionContents:
    """Replay a slice of an offsets partition's log (from its start to its end, taken when the
    load began). Blocking: runs in a worker thread. A record that does not decode is logged and
    skipped."""
    contents = PartitionContents()
    for header, batch in log_slice.batches(buffer_bytes):
        if header.is_control:
            committed = contents.pending.pop(header.producer_id, {})
            if control_batch_type(batch) is ControlRecordType.COMMIT:
                for group_id, offsets in committed.items():
                    contents.offsets[group_id].update(offsets)
            continue
        for record in iter_records(batch):
            try:
                contents.apply(record, header.producer_id if header.is_transactional else None)
            except (ProtocolError, ValueError) as exc:
                log.warning("%s: skipping record at offset %d: %s", log_slice.topic_partition, record.offset, exc)
    return contents


def _offset_store_error(error: ErrorCode) -> ErrorCode:
    """What OffsetCommit answers when appending the offsets failed (Kafka's mapping)."""
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.invalid_commit_offset_size
    return coordinator_store_error(error)


class GroupCoordinator:
    def __init__(
        self,
        config: BrokerSettings,
        topics: CoordinatorTopics,
        replica_manager: CoordinatorReplicas,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self.clock = clock
        self._config = config
        self._replica_manager = replica_manager
        self._group_config = GroupConfig(
            min_session_timeout_ms=config.get("group.min.session.timeout.ms"),
            max_session_timeout_ms=config.get("group.max.session.timeout.ms"),
            initial_rebalance_delay_ms=config.get("group.initial.rebalance.delay.ms"),
            max_size=config.get("group.max.size"),
        )
        self._groups: dict[str, Group] = {}
        # producer id -> group id -> offsets of its open transaction
        self._pending_txn_offsets: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        self._completions_while_loading: dict[int, list[tuple[int, bool]]] = defaultdict(list)
        self.offsets_topic = InternalTopic(
            OFFSETS_TOPIC,
            topics,
            replica_manager,
            config.get("offsets.topic.num.partitions"),
            config.get("offsets.topic.replication.factor"),
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(config.get("offsets.topic.segment.bytes")),
                "compression.type": "producer",
            },
            config.get("offsets.load.buffer.size"),
            read_offsets_partition,
            self._install,
        )
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._background: set[asyncio.Task] = set()  # the expiry loop
        self._writes: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.active = False

    # ------------------------------------------------------------------------- life cycle

    def start(self) -> None:
        """Serve groups: load the offsets partitions, if the topic exists, and start expiring
        offsets. Call once the logs and partitions are up."""
        self._loop = asyncio.get_running_loop()
        self.active = True
        self.offsets_topic.start()
        if self._config.get("offsets.retention.check.interval.ms") < _NEVER_MS:
            self._spawn(self._expire_offsets_periodically())

    async def shutdown(self) -> None:
        """Stop serving: waiting JoinGroup and SyncGroup requests are answered NOT_COORDINATOR,
        writes under way finish. Call before the log manager shuts down."""
        self.active = False
        loads = self.offsets_topic.stop()
        for task in self._background:
            task.cancel()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for group in self._groups.values():
            group.unload()
        self._groups.clear()
        await asyncio.gather(*loads, *self._background, *self._writes, return_exceptions=True)

    def _spawn(self, coroutine) -> asyncio.Task:
        task = self._loop.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _now(self) -> int:
        return self.clock()

    # ------------------------------------------------------------------- the offsets topic

    def partition_for(self, group_id: str) -> int:
        return self.offsets_topic.partition_for(group_id)

    # ------------------------------------------------------------------- leadership moves

    def on_become_leader(self, tp: TopicPartition, leader_epoch: int) -> None:
        """This broker now leads `tp`: for an offsets partition, load its groups."""
        if self.active:
            self.offsets_topic.on_become_leader(tp)

    def on_resign(self, tp: TopicPartition, leader_epoch: int) -> None:
        """This broker no longer leads `tp`: drop the groups of that offsets partition."""
        if not self.offsets_topic.on_resign(tp):
            return
        self._completions_while_loading.pop(tp.partition, None)
        for group in [g for g in self._groups.values() if self.partition_for(g.group_id) == tp.partition]:
            group.unload()
            self._forget(group)
        for pending in self._pending_txn_offsets.values():
            for group_id in [g for g in pending if self.partition_for(g) == tp.partition]:
                del pending[group_id]

    # ---------------------------------------------------------------------------- loading

    def _install(self, partition: int, contents: PartitionContents) -> None:
        log.info(
            "%s-%d: %d group(s), the offsets of %d group(s)",
            OFFSETS_TOPIC,
            partition,
            len(contents.groups),
            len(contents.offsets),
        )
        for group_id, value in contents.groups.items():
            self._groups[group_id] = Group.restore(
                group_id,
                self._group_config,
                self._now,
                self,
                generation_id=value.generation,
                protocol_type=value.protocol_type or None,
                protocol_name=value.protocol,
                leader_id=value.leader,
                state_timestamp=(
                    None if value.current_state_timestamp == records.NO_TIMESTAMP else value.current_state_timestamp
                ),
                members=[_restored_member(m, value.protocol) for m in value.members],
            )
        for group_id, offsets in contents.offsets.items():
            if not offsets:
                continue
            group = self._groups.get(group_id) or self._add_group(group_id)
            group.offsets.update({tp: _committed(value) for tp, value in offsets.items()})
        for producer_id, by_group in contents.pending.items():
            pending = self._pending_txn_offsets.setdefault(producer_id, {})
            for group_id, offsets in by_group.items():
                pending.setdefault(group_id, {}).update({tp: _committed(value) for tp, value in offsets.items()})
        for producer_id, commit in self._completions_while_loading.pop(partition, ()):
            self._apply_completion(partition, producer_id, commit)
        for group_id in contents.groups:
            self._reschedule(self._groups[group_id])

    # ------------------------------------------------------------------- request checks

    async def _check(self, group_id: str, empty_id_allowed: bool) -> ErrorCode:
        """Whether this broker can serve the group now. The empty group id is allowed by the
        offset APIs, DescribeGroups and DeleteGroups, for clients of old."""
        if not group_id and not empty_id_allowed:
            return ErrorCode.invalid_group_id
        if not self.active or not await self.offsets_topic.ensure() or not self.active:
            return ErrorCode.coordinator_not_available
        return self.offsets_topic.state_of(group_id)

    def _add_group(self, group_id: str) -> Group:
        group = self._groups[group_id] = Group(group_id, self._group_config, self._now, self)
        return group

    def _forget(self, group: Group) -> None:
        self._groups.pop(group.group_id, None)
        timer = self._timers.pop(group.group_id, None)
        if timer is not None:
            timer.cancel()

    # ------------------------------------------------------------------------- timers

    def _reschedule(self, group: Group) -> None:
        timer = self._timers.pop(group.group_id, None)
        if timer is not None:
            timer.cancel()
        if self._groups.get(group.group_id) is not group:
            return
        deadline = group.next_deadline()
        if deadline is not None:
            delay_s = max(deadline - self.clock(), 0) / 1000
            self._timers[group.group_id] = self._loop.call_later(delay_s, self._on_timer, group)

    def _arm(self, group: Group) -> None:
        """After a change that only moves a member's session deadline later (a heartbeat, a
        commit), an armed timer is still early enough: arm one only if there is none."""
        if group.group_id not in self._timers:
            self._reschedule(group)

    def _on_timer(self, group: Group) -> None:
        self._timers.pop(group.group_id, None)
        group.on_time(self.clock())
        self._reschedule(group)

    async def _wait(self, group: Group, start: Callable[[Callable], None]):
        """Start a request that answers through a callback, and wait for the answer."""
        answer = self._loop.create_future()

        def settle(result) -> None:
            if not answer.done():
                answer.set_result(result)

        start(settle)
        self._reschedule(group)
        return await answer

    # ------------------------------------------------------------------------- the APIs

    async def find_coordinator(self) -> ErrorCode:
        """Whether this broker coordinates groups (standalone it leads every offsets
        partition, so every group's)."""
        if not self.active or not await self.offsets_topic.ensure():
            return ErrorCode.coordinator_not_available
        return ErrorCode.none

    async def join_group(self, group_id: str, request: JoinRequest) -> JoinResult:
        error = await self._check(group_id, empty_id_allowed=False)
        if error is not ErrorCode.none:
            return JoinResult(error, request.member_id)
        group = self._groups.get(group_id)
        if group is None:
            if request.member_id != UNKNOWN_MEMBER_ID:
                return JoinResult(ErrorCode.unknown_member_id, request.member_id)
            group = self._add_group(group_id)
        return await self._wait(group, lambda respond: group.join(request, respond))

    async def sync_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult:
        error = await self._check(group_id, empty_id_allowed=False)
        if error is ErrorCode.coordinator_load_in_progress:
            # The rebalance's state is lost with the old coordinator: start over from JoinGroup.
            return SyncResult(ErrorCode.rebalance_in_progress)
        if error is not ErrorCode.none:
            return SyncResult(error)
        group = self._groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        return await self._wait(
            group,
            lambda respond: group.sync(
                member_id, group_instance_id, generation_id, protocol_type, protocol_name, assignments, respond
            ),
        )

    async def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        error = await self._check(group_id, empty_id_allowed=False)
        if error is ErrorCode.coordinator_load_in_progress:
            return ErrorCode.none  # the member cannot be judged yet; its session starts once loaded
        if error is not ErrorCode.none:
            return error
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error = group.heartbeat(member_id, group_instance_id, generation_id)
        self._arm(group)
        return error

    async def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        error = await self._check(group_id, empty_id_allowed=False)
        if error is not ErrorCode.none:
            return error, []
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(members)
        result = group.leave(members)
        self._reschedule(group)
        return result

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, CommittedOffset],
    ) -> dict[TopicPartition, ErrorCode]:
        """Store the offsets; answers once they are in the log."""
        error = await self._check(group_id, empty_id_allowed=True)
        if error is not ErrorCode.none:
            return dict.fromkeys(offsets, error)
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation this coordinator does not know.
                return dict.fromkeys(offsets, ErrorCode.illegal_generation)
            group = self._add_group(group_id)  # a simple consumer's group: offsets only
        error = group.check_offset_commit(member_id, group_instance_id, generation_id)
        self._arm(group)
        if error is not ErrorCode.none:
            return dict.fromkeys(offsets, error)
        limit = self._config.get("offset.metadata.max.bytes")
        results = {tp: ErrorCode.offset_metadata_too_large for tp, c in offsets.items() if _java_length(c.metadata) > limit}
        accepted = {tp: c for tp, c in offsets.items() if tp not in results}
        if accepted:
            stored = await asyncio.shield(self._store_offsets(group, accepted))
            results.update(dict.fromkeys(accepted, _offset_store_error(stored)))
        return {tp: results[tp] for tp in offsets}

    async def commit_transactional_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, CommittedOffset],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: write the offsets in the producer's transaction; they stay pending
        until its marker comes (`complete_transaction`)."""
        error = await self._check(group_id, empty_id_allowed=False)
        if error is not ErrorCode.none:
            return dict.fromkeys(offsets, error)
        group = self._groups.get(group_id) or self._add_group(group_id)
        if generation_id >= 0:
            error = group.check_offset_commit(member_id, group_instance_id, generation_id)
            if error is not ErrorCode.none:
                return dict.fromkeys(offsets, error)
        tp = TopicPartition(OFFSETS_TOPIC, self.partition_for(group_id))
        write = append_entries(
            self._replica_manager,
            tp,
            _offset_entries(group_id, offsets),
            self.clock(),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=True,
        )
        task = self._loop.create_task(write)

        def installed(task: asyncio.Task) -> None:
            # A callback, not code after the await: the request is cancelled if its connection
            # closes, and offsets written to the log must still wait for their marker.
            if not task.cancelled() and task.result() is ErrorCode.none:
                self._pending_txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)

        task.add_done_callback(installed)
        stored = await asyncio.shield(task)
        return dict.fromkeys(offsets, _offset_store_error(stored))

    def unstable_partitions(self, group_id: str) -> set[TopicPartition]:
        """The partitions with offsets of the group in transactions not yet ended."""
        return {tp for pending in self._pending_txn_offsets.values() for tp in pending.get(group_id, ())}

    def complete_transaction(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker reached an offsets partition: the producer's pending offsets of
        the groups in that partition become committed (COMMIT) or are dropped (ABORT). While the
        partition loads, this waits for the load, whose replay may not reach the marker."""
        if self.offsets_topic.partitions.get(offsets_partition) is LoadState.LOADING:
            self._completions_while_loading[offsets_partition].append((producer_id, commit))
        else:
            self._apply_completion(offsets_partition, producer_id, commit)

    def _apply_completion(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        pending = self._pending_txn_offsets.get(producer_id, {})
        for group_id in [g for g in pending if self.partition_for(g) == offsets_partition]:
            offsets = pending.pop(group_id)
            if commit:
                group = self._groups.get(group_id)
                if group is None or group.state is GroupState.DEAD:
                    group = self._add_group(group_id)  # offsets only, as a simple consumer's
                group.offsets.update(offsets)
        if not pending:
            self._pending_txn_offsets.pop(producer_id, None)

    def _store_offsets(self, group: Group, offsets: Mapping[TopicPartition, CommittedOffset]) -> asyncio.Task:
        group.prepare_offset_commit(offsets)
        write = self._write(self.partition_for(group.group_id), _offset_entries(group.group_id, offsets))

        def installed(task: asyncio.Task) -> None:
            if not task.cancelled():
                group.complete_offset_commit(offsets, task.result() is ErrorCode.none)

        write.add_done_callback(installed)
        return write

    async def fetch_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, CommittedOffset | None]]:
        """The committed offsets of `partitions` (None: every partition the group has one
        for); None for a partition without one."""
        error = await self._check(group_id, empty_id_allowed=True)
        if error is not ErrorCode.none:
            return error, {}
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.none, dict.fromkeys(partitions or ())
        if partitions is None:
            partitions = sorted(group.offsets)
        return ErrorCode.none, {tp: group.offsets.get(tp) for tp in partitions}

    async def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupDescription]:
        error = await self._check(group_id, empty_id_allowed=True)
        if error is not ErrorCode.none:
            return error, _NO_GROUP
        group = self._groups.get(group_id)
        return ErrorCode.none, _DEAD_GROUP if group is None else group.describe()

    def list_groups(self, states: Collection[str]) -> tuple[ErrorCode, list[GroupOverview]]:
        """Every group, or those in `states` (matched ignoring case); COORDINATOR_LOAD_IN_PROGRESS
        with the groups known so far while partitions are loading."""
        if not self.active:
            return ErrorCode.coordinator_not_available, []
        loading = self.offsets_topic.loading
        wanted = {state.lower() for state in states}
        return (
            ErrorCode.coordinator_load_in_progress if loading else ErrorCode.none,
            [
                GroupOverview(group.group_id, group.protocol_type or "", group.state.value)
                for group in self._groups.values()
                if not wanted or group.state.value.lower() in wanted
            ],
        )

    def committed_offsets(self) -> Iterator[tuple[str, TopicPartition, int]]:
        """(group, partition, committed offset) of every group this broker coordinates (the
        broker's consumer lag metrics)."""
        for group in self._groups.values():
            for tp, committed in group.offsets.items():
                yield group.group_id, tp, committed.offset

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        """Delete Empty groups with their offsets: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP."""
        errors = {group_id: await self._check(group_id, empty_id_allowed=True) for group_id in group_ids}
        writes: dict[str, asyncio.Task] = {}
        for group_id in group_ids:
            if errors[group_id] is not ErrorCode.none:
                continue
            group = self._groups.get(group_id)
            if group is None:
                errors[group_id] = ErrorCode.group_id_not_found
            elif group.state is not GroupState.EMPTY:
                errors[group_id] = ErrorCode.non_empty_group
            else:
                group.mark_dead()
                tombstones = self._clean_up(group, list(group.offset_partitions))
                if tombstones:
                    writes[group_id] = self._write(self.partition_for(group_id), tombstones)
        for group_id, write in writes.items():
            errors[group_id] = coordinator_store_error(await asyncio.shield(write))
        return errors

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: any offsets of an Empty group; of a consumer group, those of topics it
        does not subscribe to (GROUP_SUBSCRIBED_TO_TOPIC for the others)."""
        error = await self._check(group_id, empty_id_allowed=False)
        if error is not ErrorCode.none:
            return error, {}
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, {}
        if group.state is GroupState.EMPTY:
            results = {}
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            results = {tp: ErrorCode.group_subscribed_to_topic for tp in partitions if group.is_subscribed_to(tp.topic)}
        else:
            return ErrorCode.non_empty_group, {}
        eligible = [tp for tp in partitions if tp not in results]
        tombstones = self._clean_up(group, eligible)
        stored = ErrorCode.none
        if tombstones:
            stored = coordinator_store_error(await asyncio.shield(self._write(self.partition_for(group_id), tombstones)))
        results.update(dict.fromkeys(eligible, stored))
        return ErrorCode.none, {tp: results[tp] for tp in partitions}

    # -------------------------------------------------------------------------- expiry

    async def _expire_offsets_periodically(self) -> None:
        interval_s = self._config.get("offsets.retention.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval_s)
            await self.expire_offsets()

    async def expire_offsets(self) -> None:
        """Remove the offsets past offsets.retention.minutes, and the Empty groups left with
        none, writing their tombstones."""
        now = self.clock()
        retention_ms = self._config.get("offsets.retention.minutes") * 60_000
        tombstones: dict[int, list[Entry]] = defaultdict(list)
        expired = 0
        for group in list(self._groups.values()):
            partitions = group.expired_offsets(now, retention_ms)
            expired += len(partitions)
            tombstones[self.partition_for(group.group_id)] += self._clean_up(group, partitions)
        if expired:
            log.info("removed %d expired offset(s)", expired)
        writes = [self._write(partition, entries) for partition, entries in tombstones.items() if entries]
        await asyncio.gather(*writes)

    def on_partitions_deleted(self, partitions: Collection[TopicPartition]) -> None:
        """Deleted partitions' offsets leave every group coordinated here, pending transactional
        ones included, with their tombstones (Kafka's GroupCoordinator.onPartitionsDeleted): a
        topic created again under the name starts with no committed offsets, instead of its
        groups resuming at the old topic's positions."""
        deleted = set(partitions)
        for pending in self._pending_txn_offsets.values():
            for offsets in pending.values():
                for tp in deleted & offsets.keys():
                    del offsets[tp]
        tombstones: dict[int, list[Entry]] = defaultdict(list)
        removed = 0
        for group in list(self._groups.values()):
            gone = sorted(deleted & group.offset_partitions)
            if gone:
                removed += len(gone)
                tombstones[self.partition_for(group.group_id)] += self._clean_up(group, gone)
        if removed:
            log.info("removed %d committed offset(s) of deleted partitions", removed)
        for partition, entries in tombstones.items():
            if entries:
                self._write(partition, entries)

    def _clean_up(self, group: Group, partitions: list[TopicPartition]) -> list[Entry]:
        """Remove these offsets of the group; an Empty group left without offsets dies. Returns
        the tombstones to write (the group's own only if it ever stored metadata)."""
        entries: list[Entry] = [
            (records.encode_offset_commit_key(records.OffsetCommitKey(group.group_id, tp.topic, tp.partition)), None)
            for tp in group.remove_offsets(partitions)
        ]
        if group.state is GroupState.EMPTY and not group.offset_partitions:
            group.mark_dead()
        if group.state is GroupState.DEAD:
            self._forget(group)
            if group.generation_id > 0:
                entries.append((records.encode_group_metadata_key(records.GroupMetadataKey(group.group_id)), None))
        return entries

    # -------------------------------------------------------------------------- writing

    def store_group(
        self, group: Group, assignment: Mapping[str, bytes], on_stored: Callable[[ErrorCode], None]
    ) -> None:
        """GroupStore: write the group's metadata with this assignment."""
        value = records.GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=records.NO_TIMESTAMP if group.state_timestamp is None else group.state_timestamp,
            members=tuple(
                records.MemberMetadata(
                    member.member_id,
                    member.group_instance_id,
                    member.client_id,
                    member.client_host,
                    member.rebalance_timeout_ms,
                    member.session_timeout_ms,
                    member.metadata(group.protocol_name),
                    assignment.get(member.member_id, b""),
                )
                for member in group.members.values()
            ),
        )
        entry = (
            records.encode_group_metadata_key(records.GroupMetadataKey(group.group_id)),
            records.encode_group_metadata_value(value),
        )
        write = self._write(self.partition_for(group.group_id), [entry])

        def stored(task: asyncio.Task) -> None:
            if not task.cancelled():
                on_stored(coordinator_store_error(task.result()))
                self._reschedule(group)

        write.add_done_callback(stored)

    def _write(self, partition: int, entries: Sequence[Entry]) -> asyncio.Task:
        """Append the entries as one batch; the task gives NONE once they are committed, or
        the error of the append. Writes reach the log in the order they were asked for."""
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        task = self._loop.create_task(append_entries(self._replica_manager, tp, entries, self.clock()))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        return task


def _offset_entries(group_id: str, offsets: Mapping[TopicPartition, CommittedOffset]) -> list[Entry]:
    return [
        (
            records.encode_offset_commit_key(records.OffsetCommitKey(group_id, tp.topic, tp.partition)),
            records.encode_offset_commit_value(
                records.OffsetCommitValue(
                    committed.offset,
                    committed.metadata,
                    committed.commit_timestamp,
                    committed.leader_epoch,
                    records.NO_TIMESTAMP if committed.expire_timestamp is None else committed.expire_timestamp,
                )
            ),
        )
        for tp, committed in offsets.items()
    ]


def _committed(value: records.OffsetCommitValue) -> CommittedOffset:
    return CommittedOffset(
        value.offset,
        value.leader_epoch,
        value.metadata,
        value.commit_timestamp,
        None if value.expire_timestamp == records.NO_TIMESTAMP else value.expire_timestamp,
    )


def _restored_member(stored: records.MemberMetadata, protocol: str | None) -> Member:
    return Member(
        stored.member_id,
        stored.group_instance_id,
        stored.client_id,
        stored.client_host,
        stored.session_timeout,
        stored.rebalance_timeout,
        ((protocol, stored.subscription),) if protocol is not None else (),
        stored.assignment,
    )
