"""REST Proxy v2 consumer instances: group members kept by the broker for HTTP clients.

An instance is a member of its consumer group like any Kafka consumer, through the broker's
group handlers: JoinGroup (protocol type "consumer", the "range" assignor; the leader's
assignment is computed here as the Java client's RangeAssignor would), SyncGroup, Heartbeat
every 3 s from a task of its own (a rebalance makes it rejoin at once, whether or not its
HTTP client is polling), OffsetFetch for its starting positions (ListOffsets with
auto.offset.reset where nothing is committed), Fetch for records (a long poll: max_wait is the
request's timeout, bounded by http.consumer.request.timeout.ms), OffsetCommit and LeaveGroup.
With auto.commit.enable (the default, as the Java consumer's) the positions handed out are
committed at the start of the next GET records and when the instance is deleted.

An instance not used for http.consumer.instance.timeout.ms (default 300000, the proxy's
consumer.instance.timeout.ms) leaves its group and is removed; its next request is answered
404 with error_code 40403. Instances live on the broker that created them (the proxy's own
behaviour: instances are not shared between proxy processes).

In a cluster (broker/http/routing.py) the group requests go to the group's coordinator, found
with FindCoordinator and found again when it answers NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS or not at all, for up to the consumer's request.timeout.ms; Fetch
and ListOffsets go to each partition's leader (one request per leader, a poll answered as soon
as one of them has records); Metadata is this broker's. Each instance has its own connections
to the other brokers, as each Java consumer of the proxy has.
"""

import asyncio
import contextlib
import datetime
import itertools
import logging
import time
import uuid
from dataclasses import dataclass, field

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment, TopicPartition as AssignedTopic
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment

from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.primitives import INT16
from protocol.record_batch import iter_batches
from protocol.records import Record, iter_records
from replication.broker_client import BrokerClients

from broker.http.errors import CONSUMER_INSTANCE_NOT_FOUND, RestError, kafka_error
from broker.http.routing import REQUEST_TIMEOUT, RETRIABLE, RETRY_BACKOFF_S, Router, Unanswered
from broker.session import KafkaPrincipal

log = logging.getLogger(__name__)

SESSION_TIMEOUT = datetime.timedelta(seconds=45)  # the Java consumer's session.timeout.ms
REBALANCE_TIMEOUT = datetime.timedelta(minutes=5)  # its max.poll.interval.ms
HEARTBEAT_S = 3.0  # its heartbeat.interval.ms
FETCH_GRACE_S = 1.0  # how long past its long poll a GET records waits for a leader's answer
ASSIGNOR = "range"
EARLIEST, LATEST = -2, -1


# Answers that send the request to the group's coordinator found again.
COORDINATOR_MOVED = frozenset({
    ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
})


def _coordinator_error(answer) -> ErrorCode:
    """The error of a group request's answer that says whether the coordinator served it:
    the top-level error (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), the group's
    (OffsetFetch v8), the first partition's (OffsetCommit, whose errors are per partition)."""
    if hasattr(answer, "error_code"):
        return ErrorCode(answer.error_code)
    if hasattr(answer, "groups"):
        return ErrorCode(answer.groups[0].error_code)
    for topic in answer.topics:
        for partition in topic.partitions:
            return ErrorCode(partition.error_code)
    return ErrorCode.none


def _has_records(answer) -> bool:
    return any(partition.records for topic in answer.topics for partition in topic.partitions)


def _forget(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()


async def _first_with_records(fetches: list, timeout_s: float) -> list:
    """The answers of the fetches (one per leader, each a long poll of `timeout_s`) done once one
    of them has records, all are done, or FETCH_GRACE_S after the long poll (a leader that does
    not answer does not hold the HTTP client up): the HTTP client is answered as soon as a leader
    has records, not after the others' waits. The fetches still waiting finish on their own and
    are dropped (the positions they read from are read again at the next poll)."""
    if not fetches:  # no partition has a leader now
        await asyncio.sleep(timeout_s)
        return []
    deadline = time.monotonic() + timeout_s + FETCH_GRACE_S
    pending = {asyncio.ensure_future(fetch) for fetch in fetches}
    answers = []
    while pending and time.monotonic() < deadline:
        done, pending = await asyncio.wait(
            pending, timeout=deadline - time.monotonic(), return_when=asyncio.FIRST_COMPLETED)
        answers += [answer for task in done if (answer := task.result()) is not None]
        if any(_has_records(answer) for answer in answers):
            break
    for task in pending:
        task.add_done_callback(_forget)
    return answers


@dataclass(slots=True)
class FetchedRecord:
    topic: str
    partition: int
    record: Record


@dataclass
class ConsumerInstance:
    group: str
    name: str
    format: str  # "binary" or "json"
    auto_offset_reset: str  # "latest" or "earliest"
    auto_commit: bool
    principal: KafkaPrincipal
    router: Router
    last_used: float = field(default_factory=time.monotonic)
    topics: tuple[str, ...] = ()
    member_id: str = ""
    generation: int = -1
    assignment: dict[tuple[str, int], int | None] = field(default_factory=dict)  # position; None: to find
    uncommitted: dict[tuple[str, int], int] = field(default_factory=dict)
    needs_join: bool = False
    _membership: asyncio.Task | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _joined: asyncio.Event = field(default_factory=asyncio.Event)
    _coordinator: int | None = None
    _clients: BrokerClients | None = None

    def __post_init__(self) -> None:
        self._clients = self.router.clients("consumer", REBALANCE_TIMEOUT.total_seconds() + 5)

    async def _local(self, api_key: int, version: int, request):
        return await self.router.loopback.send(api_key, version, request, self.principal)

    async def _send(self, api_key: int, version: int, request):
        """`request` answered by the group's coordinator, found again (FindCoordinator) when it
        moved or gave no answer, for up to the consumer's request.timeout.ms."""
        deadline = time.monotonic() + REQUEST_TIMEOUT.total_seconds()
        while True:
            if self._coordinator is None:
                error, coordinator = await self.router.coordinator(self.group, self.principal)
                if error == ErrorCode.none:
                    self._coordinator = coordinator
                elif error not in RETRIABLE:
                    raise kafka_error(error)
            if self._coordinator is not None:
                try:
                    answer = await self.router.send(
                        self._coordinator, api_key, version, request, self.principal, self._clients)
                except Unanswered as exc:
                    error = exc.error
                else:
                    error = _coordinator_error(answer)
                    if error not in COORDINATOR_MOVED:
                        return answer
                self._coordinator = None
            if time.monotonic() + RETRY_BACKOFF_S >= deadline:
                raise kafka_error(error)
            await asyncio.sleep(RETRY_BACKOFF_S)

    def _by_leader(self, partitions) -> dict[int, dict[str, list[int]]]:
        """`partitions` by leader, then topic; those without a live leader are left out (the
        next poll looks for them again, as a consumer waits for metadata)."""
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in partitions:
            leader = self.router.leader(topic, partition)
            if leader is not None:
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
        return by_leader

    async def _to_leader(self, leader: int, api_key: int, version: int, request):
        """The leader's answer, or None when it gave none (the partitions' next poll asks again)."""
        try:
            return await self.router.send(leader, api_key, version, request, self.principal, self._clients)
        except Unanswered as exc:
            log.info("consumer instance %s of group %s: %s", self.name, self.group, exc)
            return None

    # --- membership

    def subscribe(self, topics: tuple[str, ...]) -> None:
        self.topics = topics
        self._joined.clear()
        if self._membership is None:
            self._membership = asyncio.get_running_loop().create_task(self._keep_membership())
        else:
            self.needs_join = True

    async def _keep_membership(self) -> None:
        """Join, then heartbeat; rejoin whenever the group rebalances."""
        while True:
            try:
                await self._join()
                self.needs_join = False
                self._joined.set()
                while not self.needs_join:
                    await asyncio.sleep(HEARTBEAT_S)
                    answer = await self._send(ApiKey.HEARTBEAT, 4, HeartbeatRequest(
                        group_id=self.group, generation_id=self.generation, member_id=self.member_id,
                        group_instance_id=None))
                    if answer.error_code in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
                        self.member_id = ""
                    if answer.error_code != ErrorCode.none:
                        self.needs_join = True
            except asyncio.CancelledError:
                raise
            except RestError as exc:  # e.g. no coordinator for request.timeout.ms: try again
                log.warning("consumer instance %s of group %s: membership failed: %s", self.name, self.group,
                            exc.message)
                await asyncio.sleep(HEARTBEAT_S)
            except Exception:  # a bug or the broker stopping: try again, not too fast
                log.exception("consumer instance %s of group %s: membership failed", self.name, self.group)
                await asyncio.sleep(HEARTBEAT_S)

    async def _join(self) -> None:
        metadata = INT16.pack(0) + schemas.encode(ConsumerProtocolSubscription(topics=self.topics, user_data=None))
        while True:
            answer = await self._send(ApiKey.JOIN_GROUP, 9, JoinGroupRequest(
                group_id=self.group, session_timeout=SESSION_TIMEOUT, rebalance_timeout=REBALANCE_TIMEOUT,
                member_id=self.member_id, group_instance_id=None, protocol_type="consumer",
                protocols=(JoinGroupRequestProtocol(name=ASSIGNOR, metadata=metadata),), reason=None))
            if answer.error_code == ErrorCode.member_id_required:
                self.member_id = answer.member_id
                continue
            if answer.error_code == ErrorCode.unknown_member_id:
                self.member_id = ""
                continue
            if answer.error_code != ErrorCode.none:
                raise kafka_error(answer.error_code)
            self.member_id, self.generation = answer.member_id, answer.generation_id
            assignments = ()
            if answer.leader == answer.member_id:
                assignments = await self._assign(answer.members)
            synced = await self._send(ApiKey.SYNC_GROUP, 5, SyncGroupRequest(
                group_id=self.group, generation_id=self.generation, member_id=self.member_id,
                group_instance_id=None, protocol_type="consumer", protocol_name=ASSIGNOR, assignments=assignments))
            if synced.error_code == ErrorCode.rebalance_in_progress:
                continue
            if synced.error_code != ErrorCode.none:
                raise kafka_error(synced.error_code)
            self._take(synced.assignment)
            return

    async def _assign(self, members) -> tuple:
        """The RangeAssignor's plan: per topic, members sorted by id take consecutive ranges."""
        subscriptions = {
            m.member_id: schemas.decode(ConsumerProtocolSubscription, memoryview(m.metadata), INT16.size).topics
            for m in members
        }
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        counts = await self._partition_counts(topics)
        plan: dict[str, dict[str, list[int]]] = {member: {} for member in subscriptions}
        for topic in topics:
            takers = sorted(m for m, ts in subscriptions.items() if topic in ts)
            count = counts.get(topic, 0)
            share, extra = divmod(count, len(takers))
            start = 0
            for i, member in enumerate(takers):
                size = share + (1 if i < extra else 0)
                if size:
                    plan[member][topic] = list(range(start, start + size))
                start += size
        return tuple(
            SyncGroupRequestAssignment(member_id=member, assignment=INT16.pack(0) + schemas.encode(ConsumerProtocolAssignment(
                assigned_partitions=tuple(AssignedTopic(topic=t, partitions=tuple(p)) for t, p in sorted(parts.items())),
                user_data=None)))
            for member, parts in plan.items()
        )

    async def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        if not topics:
            return {}
        answer = await self._local(ApiKey.METADATA, 12, MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        return {t.name: len(t.partitions) for t in answer.topics if t.error_code == ErrorCode.none}

    def _take(self, assignment: bytes) -> None:
        partitions = set()
        if assignment:
            decoded = schemas.decode(ConsumerProtocolAssignment, memoryview(assignment), INT16.size)
            partitions = {(t.topic, p) for t in decoded.assigned_partitions for p in t.partitions}
        self.assignment = {tp: self.assignment.get(tp) for tp in sorted(partitions)}
        self.uncommitted = {tp: o for tp, o in self.uncommitted.items() if tp in partitions}

    async def wait_joined(self, timeout_s: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._joined.wait(), timeout_s)
        return self._joined.is_set()

    # --- positions and records

    async def _find_positions(self) -> None:
        missing = [tp for tp, position in self.assignment.items() if position is None]
        if not missing:
            return
        committed = await self.committed(missing)
        reset = []
        for tp in missing:
            offset = committed.get(tp, (-1, None))[0]
            if offset >= 0:
                self.assignment[tp] = offset
            else:
                reset.append(tp)
        if reset:
            timestamp = EARLIEST if self.auto_offset_reset == "earliest" else LATEST
            answers = await asyncio.gather(*(
                self._to_leader(leader, ApiKey.LIST_OFFSETS, 7, ListOffsetsRequest(
                    replica_id=-1, isolation_level=0,
                    topics=tuple(ListOffsetsTopic(name=t, partitions=tuple(ListOffsetsPartition(
                        partition_index=p, current_leader_epoch=-1, timestamp=timestamp) for p in ps))
                        for t, ps in by_topic.items())))
                for leader, by_topic in self._by_leader(reset).items()
            ))
            for answer in answers:
                for topic in answer.topics if answer is not None else ():
                    for partition in topic.partitions:
                        tp = (topic.name, partition.partition_index)
                        if partition.error_code == ErrorCode.none and tp in self.assignment:
                            self.assignment[tp] = partition.offset

    async def poll(self, timeout_ms: int, max_bytes: int) -> list[FetchedRecord]:
        async with self._lock:
            if self.auto_commit and self.uncommitted:
                await self.commit(dict(self.uncommitted))
            if not await self.wait_joined(timeout_ms / 1000):
                return []
            await self._find_positions()
            positions = {tp: o for tp, o in self.assignment.items() if o is not None}
            if not positions:
                await asyncio.sleep(timeout_ms / 1000)
                return []
            fetches = [
                self._to_leader(leader, ApiKey.FETCH, 12, FetchRequest(
                    cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=timeout_ms), min_bytes=1,
                    max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                    topics=tuple(FetchTopic(topic=t, partitions=tuple(FetchPartition(
                        partition=p, current_leader_epoch=-1, fetch_offset=positions[(t, p)], last_fetched_epoch=-1,
                        log_start_offset=-1, partition_max_bytes=max_bytes) for p in ps)) for t, ps in by_topic.items()),
                    forgotten_topics_data=(), rack_id=""))
                for leader, by_topic in self._by_leader(positions).items()
            ]
            answers = await _first_with_records(fetches, timeout_ms / 1000)
            fetched: list[FetchedRecord] = []
            size = 0
            for topic in (topic for answer in answers for topic in answer.topics):
                for partition in topic.partitions:
                    tp = (topic.topic, partition.partition_index)
                    if tp not in self.assignment:
                        continue
                    if partition.error_code == ErrorCode.offset_out_of_range:
                        self.assignment[tp] = None
                        continue
                    if partition.error_code != ErrorCode.none or not partition.records:
                        continue
                    position = positions[tp]
                    data = bytes(partition.records)
                    for start, header in iter_batches(data):
                        if header.is_control:
                            position = max(position, header.base_offset + header.last_offset_delta + 1)
                            continue
                        batch = data[start : start + header.batch_length + 12]
                        for record in iter_records(batch):
                            if record.offset < position:
                                continue
                            if fetched and size + len(record.value or b"") + len(record.key or b"") > max_bytes:
                                break
                            fetched.append(FetchedRecord(topic.topic, partition.partition_index, record))
                            size += len(record.value or b"") + len(record.key or b"")
                            position = record.offset + 1
                    self.assignment[tp] = position
                    self.uncommitted[tp] = position
            return fetched

    async def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""))
        answer = await self._send(ApiKey.OFFSET_COMMIT, 8, OffsetCommitRequest(
            group_id=self.group, generation_id_or_member_epoch=self.generation if self.member_id else -1,
            member_id=self.member_id, group_instance_id=None,
            topics=tuple(OffsetCommitRequestTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
        for topic in answer.topics:
            for partition in topic.partitions:
                if partition.error_code != ErrorCode.none:
                    raise kafka_error(partition.error_code)
        for tp, offset in offsets.items():
            if self.uncommitted.get(tp) == offset:
                del self.uncommitted[tp]

    async def committed(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, str | None]]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        answer = await self._send(ApiKey.OFFSET_FETCH, 8, OffsetFetchRequest(
            groups=(OffsetFetchRequestGroup(group_id=self.group, topics=tuple(
                OffsetFetchRequestTopics(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())),),
            require_stable=False))
        group = answer.groups[0]
        if group.error_code != ErrorCode.none:
            raise kafka_error(group.error_code)
        return {
            (t.name, p.partition_index): (p.committed_offset, p.metadata)
            for t in group.topics for p in t.partitions
        }

    async def close(self) -> None:
        if self._membership is not None:
            self._membership.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._membership
        async with self._lock:
            if self.auto_commit and self.uncommitted:
                with contextlib.suppress(RestError):
                    await self.commit(dict(self.uncommitted))
        try:
            if self.member_id:
                await self._send(ApiKey.LEAVE_GROUP, 5, LeaveGroupRequest(
                    group_id=self.group, members=(MemberIdentity(member_id=self.member_id, group_instance_id=None,
                                                                 reason="consumer instance deleted"),)))
        finally:
            if self._clients is not None:
                await self._clients.close()


class ConsumerInstances:
    def __init__(self, router: Router, idle_timeout_s: float, request_timeout_ms: int) -> None:
        self._router = router
        self.idle_timeout_s = idle_timeout_s
        self.request_timeout_ms = request_timeout_ms
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._names = itertools.count(1)
        self._reaper: asyncio.Task | None = None

    def start(self) -> None:
        self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for instance in list(self._instances.values()):
            await self._remove(instance)

    def create(self, group: str, name: str | None, principal: KafkaPrincipal, format: str, reset: str,
               auto_commit: bool) -> ConsumerInstance:
        name = name or f"rest-consumer-{uuid.uuid4()}"
        if (group, name) in self._instances:
            raise RestError(409, 40902, "Consumer with specified consumer ID already exists in the specified "
                            "consumer group.")
        instance = ConsumerInstance(group, name, format, reset, auto_commit, principal, self._router)
        self._instances[(group, name)] = instance
        return instance

    def get(self, group: str, name: str, principal: KafkaPrincipal) -> ConsumerInstance:
        instance = self._instances.get((group, name))
        if instance is None or instance.principal != principal:
            raise RestError(404, CONSUMER_INSTANCE_NOT_FOUND, "Consumer instance not found.")
        instance.last_used = time.monotonic()
        return instance

    async def delete(self, group: str, name: str, principal: KafkaPrincipal) -> None:
        await self._remove(self.get(group, name, principal))

    async def _remove(self, instance: ConsumerInstance) -> None:
        self._instances.pop((instance.group, instance.name), None)
        try:
            await instance.close()
        except Exception:  # noqa: BLE001 - the broker stopping: the group's session expires it
            log.warning("consumer instance %s of group %s did not leave cleanly", instance.name, instance.group)

    async def _reap(self) -> None:
        interval = min(self.idle_timeout_s / 2, 1.0)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for instance in list(self._instances.values()):
                if now - instance.last_used > self.idle_timeout_s and not instance._lock.locked():  # noqa: SLF001
                    log.info("consumer instance %s of group %s expired", instance.name, instance.group)
                    await self._remove(instance)
