"""The cluster controller, elected through ZooKeeper (Kafka's KafkaController in ZooKeeper mode).

Every broker runs one `Controller`; at most one is active. Election: create the ephemeral
/controller znode; the winner increments /controller_epoch by compare-and-set and becomes
active, the others watch /controller and try again when it goes (controller death, session
loss, deletion). A controller that loses the znode, or its session, resigns; one whose
check-and-set finds a newer /controller_epoch steps down at once rather than retry.

All work happens in one queue of events processed in order (Kafka's ControllerEventManager):
election, broker changes (/brokers/ids), topic changes (/brokers/topics and each topic's
znode), topic deletions (/admin/delete_topics), ISR change notifications
(/isr_change_notification), log dir failures (/log_dir_event_notification), answers to
LeaderAndIsr, reassignments (AlterPartitionReassignments, /admin/reassign_partitions),
controlled shutdowns, leader elections asked for (ElectLeaders), the periodic preferred-leader
check. Watches only enqueue events; handlers re-read ZooKeeper. A session expiry drops the
events queued before it and resigns first.

Topic deletion (Kafka's TopicDeletionManager): a topic listed in /admin/delete_topics leaves
every metadata cache (leader -2), then each broker holding replicas of it gets StopReplica with
delete; its znodes go once every replica broker has answered. A broker that is down holds the
deletion until it registers again; a new controller resumes what is listed.

Log dir failures (Kafka's onBrokerLogDirFailure): a broker whose log dir failed writes a
/log_dir_event_notification/log_dir_event_<seq> znode; the controller takes them (deleting
each) and sends LeaderAndIsr for every partition those brokers hold. Every LeaderAndIsr answer
is read: a partition answering KAFKA_STORAGE_ERROR has its replica on that broker offline until
the broker registers again (or answers without the error): it is not elected, its leaderships
go to other in-sync replicas (or the partition goes offline), it leaves the ISRs, its broker
gets StopReplica without delete, and metadata lists it among the offline replicas.

On becoming active: read brokers, topics and partition states, initialize partitions without a
state, elect leaders for partitions whose leader is gone, take dead brokers out of the ISRs, then
send UpdateMetadata (everything)
to every live broker and LeaderAndIsr to every replica. Decisions (replica assignment,
elections, reassignment steps) are the pure functions of replication/assignment.py. A partition
state is written by compare-and-set on its znode version, in one transaction with a check of
/controller_epoch's version, so a deposed controller cannot overwrite it. Requests go to the
brokers through replication/controller_channel.py and carry the controller epoch and the
receiver's broker epoch (the czxid of its /brokers/ids znode).
"""

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.legacy import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
    StopReplicaRequest,
    StopReplicaTopic,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from replication import assignment, znodes
from replication.broker_client import SaslClientFactory
from replication.controller_channel import ControllerChannel
from replication.znodes import BrokerRegistration, LeaderIsr, TopicAssignment
from replication.zk import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    Op,
    SessionExpiredError,
    WatchEvent,
    ZkClient,
    ZkError,
)
from storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

LEADER_AND_ISR_VERSION = 3
UPDATE_METADATA_VERSION = 5
STOP_REPLICA_VERSION = 1
LEADER_DURING_DELETE = -2
_SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
_CAS_ATTEMPTS = 10
_STOP_REPLICA_WAIT_S = 30
_STOP_WAIT_S = 5
# ZooKeeper operations of one event that are in flight at once: kazoo pipelines them on its one
# connection, so 10,000 partition states cost round trips / _ZK_IN_FLIGHT instead of one each
# (Kafka's controller does the same, bounded by zookeeper.max.in.flight.requests).
_ZK_IN_FLIGHT = 100
# Partitions written in one transaction: a ZooKeeper request costs this client far more than the
# bytes of a state (about 4,000 requests/s, against 80,000 states/s a hundred to a transaction,
# on the 2-core VM of benchmarks/RESULTS.md), so writes of many partitions go in batches.
_STATES_PER_TRANSACTION = 50

# Kafka's ControllerState of each event this controller queues: the ControllerStats timer
# (`<state>RateAndTimeMs`) its processing time goes to, as Kafka's ControllerEventManager times
# each event under its state. `sync` and `stop` are the tests' and the shutdown's own markers.
KAFKA_STATE_OF_EVENT = {
    "elect": "ControllerChange",
    "controller change": "ControllerChange",
    "session expired": "ControllerChange",
    "broker change": "BrokerChange",
    "topic change": "TopicChange",
    "delete topics": "TopicDeletion",
    "topic deletion answer": "TopicDeletion",
    "legacy reassignment": "PartitionReassignment",
    "reassignment": "PartitionReassignment",
    "preferred leader check": "AutoLeaderBalance",
    "elect leaders": "ManualLeaderBalance",
    "controlled shutdown": "ControlledShutdown",
    "isr change": "IsrChange",
    "LeaderAndIsr answer": "LeaderAndIsrResponseReceived",
    "log dir event": "LogDirChange",
}
_PARTITION_CHANGE = "partition change "  # + the topic: Kafka's PartitionModifications, a TopicChange


def kafka_state_of_event(name: str) -> str | None:
    """The ControllerState Kafka would process the event named `name` in; None for events Kafka
    has no timer of."""
    if name.startswith(_PARTITION_CHANGE):
        return "TopicChange"
    return KAFKA_STATE_OF_EVENT.get(name)


class ControllerMovedError(ZkError):
    """Another broker's controller epoch is in /controller_epoch: this one is deposed (Kafka's
    ControllerMovedException)."""


@dataclass(frozen=True)
class ControllerSettings:
    broker_id: int
    inter_broker_listener: str
    unclean_leader_election: bool = False
    auto_leader_rebalance: bool = True
    rebalance_interval_s: float = 300
    imbalance_percentage: int = 10
    request_timeout_s: float = 30
    ssl_context: ssl.SSLContext | None = None  # the inter-broker listener is SSL
    sasl: SaslClientFactory | None = None  # the inter-broker listener's SASL login


@dataclass
class _TopicDeletion:
    """A topic listed in /admin/delete_topics (Kafka's TopicDeletionManager): the brokers that
    deleted its replicas, and the StopReplica(delete) awaiting each broker's answer."""

    done: set[int] = field(default_factory=set)
    asked: dict[int, asyncio.Future] = field(default_factory=dict)


@dataclass
class _Context:
    """What the active controller knows (Kafka's ControllerContext)."""

    epoch: int = 0
    epoch_zk_version: int = 0
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    broker_epochs: dict[int, int] = field(default_factory=dict)
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    states: dict[TopicPartition, LeaderIsr] = field(default_factory=dict)
    reassigning: dict[TopicPartition, assignment.ReassignmentPlan] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    deleting: dict[str, _TopicDeletion] = field(default_factory=dict)
    # broker -> its replicas in a failed log dir (Kafka's replicasOnOfflineDirs)
    offline_replicas: dict[int, set[TopicPartition]] = field(default_factory=dict)

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        topic = self.topics.get(tp.topic)
        return topic.partitions.get(tp.partition, ()) if topic else ()

    def partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, a in self.topics.items() for p in sorted(a.partitions)]

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        a = self.topics.get(topic)
        return [TopicPartition(topic, p) for p in sorted(a.partitions)] if a else []

    @property
    def live(self) -> set[int]:
        return set(self.brokers) - self.shutting_down

    def live_for(self, tp: TopicPartition) -> set[int]:
        """The live brokers whose replica of `tp` is online (Kafka's isReplicaOnline)."""
        return {b for b in self.live if tp not in self.offline_replicas.get(b, ())}


class Controller:
    def __init__(
        self,
        zk: ZkClient,
        settings: ControllerSettings,
        topic_unclean_election: Callable[[str], Awaitable[bool | None]] | None = None,
    ) -> None:
        self._zk = zk
        self.settings = settings
        self.broker_id = settings.broker_id
        self._topic_unclean_election = topic_unclean_election
        self.active = False
        self.epoch = 0
        self._ctx = _Context()
        self._channel: ControllerChannel | None = None
        # (name, handler, the answer awaited, when it was queued)
        self._events: asyncio.Queue[tuple[str, Callable[[], Awaitable[Any]], asyncio.Future | None, float]] = asyncio.Queue()
        # Kafka's ControllerStats and ControllerEventManager metrics: unclean elections written
        # since start (UncleanLeaderElectionsPerSec), and `on_event(name, queued_s, processed_s)`
        # called after each event (EventQueueTimeMs, the <state>RateAndTimeMs timers).
        self.unclean_leader_elections = 0
        self.on_event: Callable[[str, float, float], None] | None = None
        self._worker: asyncio.Task | None = None
        self._rebalance_timer: asyncio.Task | None = None
        self._watched_topics: set[str] = set()
        self._watches: dict[str, Callable[[WatchEvent], None]] = {}
        self._stopped = False

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._process_events())
        self.enqueue("elect", self._elect)

    async def stop(self) -> None:
        self._stopped = True
        if self._worker is not None:
            self._worker.cancel()
            # Python 3.11's wait_for can lose a cancellation: an event ends the loop anyway.
            self._events.put_nowait(("stop", _nothing, None, time.monotonic()))
            await asyncio.wait({self._worker}, timeout=_STOP_WAIT_S)
        await self._resign()

    def partition_counts(self) -> tuple[int, int, int]:
        """(topics, partitions, partitions without a live leader) as this controller knows
        them: Kafka's GlobalTopicCount, GlobalPartitionCount and OfflinePartitionsCount; zeros
        when it is not the active controller, as Kafka reports them."""
        if not self.active:
            return 0, 0, 0
        ctx = self._ctx
        live = ctx.brokers
        offline = sum(1 for state in ctx.states.values() if state.leader not in live)
        return len(ctx.topics), len(ctx.states), offline

    def on_session_expired(self) -> None:
        """The session and /controller with it are gone: stop acting as controller, before
        anything queued meanwhile (Kafka's clearAndPut of its Expire event). Those events would
        only try writes that the next controller's epoch fences; a request handler waiting on
        one is answered as when ZooKeeper failed."""
        while not self._events.empty():
            _name, _handler, answer, _queued = self._events.get_nowait()
            if answer is not None and not answer.done():
                answer.set_exception(SessionExpiredError("the controller's ZooKeeper session expired"))
        self.enqueue("session expired", self._resign)

    def on_new_session(self) -> None:
        self.enqueue("elect", self._elect)

    def enqueue(self, name: str, handler: Callable[[], Awaitable[Any]], with_result: bool = False) -> asyncio.Future | None:
        answer = asyncio.get_running_loop().create_future() if with_result else None
        self._events.put_nowait((name, handler, answer, time.monotonic()))
        return answer

    def queued_events(self) -> int:
        """Events waiting (Kafka's EventQueueSize)."""
        return self._events.qsize()

    async def _process_events(self) -> None:
        while not self._stopped:
            name, handler, answer, queued = await self._events.get()
            started = time.monotonic()
            try:
                result = await handler()
            except ZkError as exc:
                log.warning("controller event %s failed: %s", name, exc)
                if answer is not None and not answer.done():
                    answer.set_exception(exc)
                if self.active:
                    await self._step_down()
            except Exception as exc:
                log.exception("controller event %s failed", name)
                if answer is not None and not answer.done():
                    answer.set_exception(exc)
            else:
                if answer is not None and not answer.done():
                    answer.set_result(result)
            if self.on_event is not None:
                self.on_event(name, started - queued, time.monotonic() - started)

    async def run(self, name: str, handler: Callable[[], Awaitable[Any]], if_failed: Any) -> Any:
        """Queue an event and wait for its result (for the request handlers); `if_failed` when
        ZooKeeper failed on the way (this broker is then no longer the controller)."""
        try:
            return await self.enqueue(name, handler, with_result=True)
        except ZkError:
            return if_failed

    # ------------------------------------------------------------------ election

    def _watch(self, event_name: str, handler: Callable[[], Awaitable[Any]]) -> Callable[[WatchEvent], None]:
        """The watch that queues `event_name`: one function per event name, so re-arming a
        watch on a znode does not add watchers (kazoo keeps one of each function per path)."""
        watch = self._watches.get(event_name)
        if watch is None:

            def watch(event: WatchEvent) -> None:
                if not self._stopped:
                    self.enqueue(event_name, handler)

            self._watches[event_name] = watch
        return watch

    async def _elect(self) -> None:
        if self.active:
            return
        try:
            await self._zk.create(znodes.CONTROLLER, znodes.encode_controller(self.broker_id), ephemeral=True)
        except NodeExistsError:
            await self._follow_controller()
            return
        try:
            await self._increment_epoch()
        except ZkError as exc:
            log.warning("lost the controller election while incrementing the epoch: %s", exc)
            await self._delete_own_controller_znode()
            await self._follow_controller()
            return
        await self._zk.exists(znodes.CONTROLLER, self._watch("controller change", self._on_controller_change))
        await self._become_active()

    async def _follow_controller(self) -> None:
        found = await self._zk.exists(znodes.CONTROLLER, self._watch("controller change", self._on_controller_change))
        if found is None:
            self.enqueue("elect", self._elect)

    async def _on_controller_change(self) -> None:
        found = await self._zk.get_or_none(znodes.CONTROLLER, self._watch("controller change", self._on_controller_change))
        current = znodes.decode_controller(found[0]) if found else -1
        if self.active and current != self.broker_id:
            await self._resign()
        if found is None:
            await self._elect()

    async def _increment_epoch(self) -> None:
        found = await self._zk.get_or_none(znodes.CONTROLLER_EPOCH)
        if found is None:
            try:
                stat = await self._zk.create_with_stat(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(1))
            except NodeExistsError:
                raise BadVersionError("/controller_epoch appeared meanwhile") from None
            epoch, version = 1, stat.version
        else:
            epoch = znodes.decode_controller_epoch(found[0]) + 1
            stat = await self._zk.set(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(epoch), found[1].version)
            version = stat.version
        self._ctx = _Context(epoch=epoch, epoch_zk_version=version)
        self.epoch = epoch

    async def _delete_own_controller_znode(self) -> None:
        found = await self._zk.get_or_none(znodes.CONTROLLER)
        if found and znodes.decode_controller(found[0]) == self.broker_id:
            try:
                await self._zk.delete(znodes.CONTROLLER, found[1].version)
            except ZkError:
                pass

    async def _step_down(self) -> None:
        """After a failed ZooKeeper step the controller's view may be behind: resign and leave
        /controller, so a fresh election (maybe this broker again) re-reads everything."""
        await self._resign()
        try:
            await self._delete_own_controller_znode()
        except ZkError:
            pass  # the session is gone: so is the znode, and the session events follow

    async def _resign(self) -> None:
        if not self.active:
            return
        log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.epoch)
        self.active = False
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
        self._watched_topics.clear()

    async def _become_active(self) -> None:
        log.info("broker %d is the controller, epoch %d", self.broker_id, self._ctx.epoch)
        started = time.monotonic()
        self.active = True
        self._channel = ControllerChannel(
            f"controller-{self.broker_id}", self.settings.request_timeout_s,
            ssl_context=self.settings.ssl_context, sasl=self.settings.sasl,
        )
        ctx = self._ctx
        await self._read_brokers()
        for broker_id in ctx.brokers:
            self._connect(broker_id)
        await _pipelined(self._load_topic, await self._zk.get_children(
            znodes.BROKER_TOPICS, self._watch("topic change", self._on_topic_change)))
        await self._read_deletions()  # before anything is sent: no LeaderAndIsr for those topics
        await self._read_states(ctx.partitions())
        await self._initialize_new_partitions(ctx.partitions())
        elected = await self._elect_offline(ctx.partitions())
        # Kafka's replica state machine start: replicas on dead brokers leave the ISRs.
        dead = {r for state in ctx.states.values() for r in state.isr if r not in ctx.brokers}
        shrunk = await self._remove_from_isr(ctx.partitions(), dead) if dead else []
        self._send_update_metadata(ctx.partitions(), ctx.brokers)
        self._send_leader_and_isr(ctx.partitions())
        # How long partitions waited for this controller after a failover: reading ZooKeeper,
        # the elections and ISR changes, until the requests left (benchmarks/RESULTS.md).
        log.info("controller: %d partition(s) of %d topic(s) loaded, %d leader(s) elected, %d ISR(s) shrunk; "
                 "requests sent %.1f s after becoming controller",
                 len(ctx.states), len(ctx.topics), len(elected), len(shrunk), time.monotonic() - started)
        for tp, plan in self._plans_from_topics().items():
            ctx.reassigning[tp] = plan
        await self._zk.children_or_empty(znodes.ISR_CHANGE_NOTIFICATION, self._watch("isr change", self._on_isr_change))
        await self._on_isr_change()
        await self._on_log_dir_event()
        await self._resume_deletions()
        await self._on_legacy_reassignment()
        for tp in list(ctx.reassigning):
            await self._maybe_finish_reassignment(tp)
        if self.settings.auto_leader_rebalance:
            self._rebalance_timer = asyncio.get_running_loop().create_task(self._rebalance_periodically())

    # ------------------------------------------------------------------ reading ZooKeeper

    async def _read_brokers(self) -> set[int]:
        """Refresh the live brokers; returns the ids whose registration is new (joined, or
        re-registered with a new epoch)."""
        ids = await self._zk.get_children(znodes.BROKER_IDS, self._watch("broker change", self._on_broker_change))
        ctx = self._ctx
        fresh: dict[int, BrokerRegistration] = {}
        epochs: dict[int, int] = {}
        for name in ids:
            found = await self._zk.get_or_none(f"{znodes.BROKER_IDS}/{name}")
            if found is None:
                continue
            broker_id = int(name)
            fresh[broker_id] = znodes.decode_broker(broker_id, found[0])
            epochs[broker_id] = found[1].czxid
        new = {b for b in fresh if ctx.broker_epochs.get(b) != epochs[b]}
        ctx.brokers, ctx.broker_epochs = fresh, epochs
        ctx.shutting_down &= set(fresh)
        return new

    async def _load_topic(self, topic: str) -> TopicAssignment | None:
        watch = None
        if topic not in self._watched_topics:
            watch = self._watch(f"partition change {topic}", lambda: self._on_partition_change(topic))
        found = await self._zk.get_or_none(znodes.topic_path(topic), watch)
        if found is None:
            self._ctx.topics.pop(topic, None)
            self._forget_topic_watch(topic)
            return None
        self._watched_topics.add(topic)
        topic_assignment = znodes.decode_topic(found[0])
        self._ctx.topics[topic] = topic_assignment
        return topic_assignment

    def _forget_topic_watch(self, topic: str) -> None:
        """The topic is gone: so is its watch function (one per topic ever seen otherwise)."""
        self._watched_topics.discard(topic)
        self._watches.pop(f"partition change {topic}", None)

    async def _read_states(self, partitions: Iterable[TopicPartition]) -> None:
        async def read(tp: TopicPartition) -> None:
            found = await self._zk.get_or_none(znodes.partition_state_path(tp))
            if found is None:
                self._ctx.states.pop(tp, None)
            else:
                self._ctx.states[tp] = znodes.decode_partition_state(found[0], found[1].version)

        await _pipelined(read, partitions)

    def _plans_from_topics(self) -> dict[TopicPartition, assignment.ReassignmentPlan]:
        plans = {}
        for topic, a in self._ctx.topics.items():
            for partition in set(a.adding_replicas) | set(a.removing_replicas):
                plans[TopicPartition(topic, partition)] = assignment.ReassignmentPlan(
                    a.partitions[partition], a.adding_replicas.get(partition, ()), a.removing_replicas.get(partition, ())
                )
        return plans

    # ------------------------------------------------------------------ partition states

    async def _write_state(self, tp: TopicPartition, decide: Callable[[LeaderIsr], LeaderIsr | None]) -> bool:
        """Compare-and-set the partition's state with what `decide` makes of the current one
        (None: no change); re-read and decide again when a leader changed it meanwhile."""
        ctx = self._ctx
        for _ in range(_CAS_ATTEMPTS):
            current = ctx.states.get(tp)
            if current is None:
                return False
            new = decide(current)
            if new is None:
                return False
            new = replace(new, controller_epoch=ctx.epoch)
            try:
                await self._zk.multi([
                    Op("check", znodes.CONTROLLER_EPOCH, version=ctx.epoch_zk_version),
                    Op("set", znodes.partition_state_path(tp), znodes.encode_partition_state(new), current.zk_version),
                ])
            except BadVersionError:
                await self._fail_if_deposed(ctx)
                await self._read_states([tp])
                continue
            ctx.states[tp] = replace(new, zk_version=current.zk_version + 1)
            return True
        log.warning("gave up updating the state of %s after %d attempts", tp, _CAS_ATTEMPTS)
        return False

    async def _fail_if_deposed(self, ctx: _Context) -> None:
        """After a failed check-and-set: ControllerMovedError when /controller_epoch is no longer
        the one this controller wrote (a newer controller's epoch fences every write of this
        one, so retrying is useless), as Kafka's ControllerMovedException makes it resign."""
        found = await self._zk.get_or_none(znodes.CONTROLLER_EPOCH)
        if found is None or found[1].version != ctx.epoch_zk_version:
            raise ControllerMovedError(f"/controller_epoch moved on from epoch {ctx.epoch}")

    async def _write_states(self, decisions: Mapping[TopicPartition, Callable[[LeaderIsr], LeaderIsr | None]]) -> list[TopicPartition]:
        """`_write_state` for each partition, in transactions of many partitions (pipelined),
        each with the /controller_epoch check; returns the partitions changed, in order. A
        transaction that fails (a leader changed one of its states meanwhile, or this controller
        was deposed) is done again one partition at a time, which re-reads what lost."""
        ctx = self._ctx

        async def write(batch: list[TopicPartition]) -> list[TopicPartition]:
            planned: dict[TopicPartition, tuple[LeaderIsr, LeaderIsr]] = {}
            for tp in batch:
                current = ctx.states.get(tp)
                new = decisions[tp](current) if current is not None else None
                if new is not None:
                    planned[tp] = (current, replace(new, controller_epoch=ctx.epoch))
            if not planned:
                return []
            try:
                await self._zk.multi([
                    Op("check", znodes.CONTROLLER_EPOCH, version=ctx.epoch_zk_version),
                    *(Op("set", znodes.partition_state_path(tp), znodes.encode_partition_state(new), current.zk_version)
                      for tp, (current, new) in planned.items()),
                ])
            except BadVersionError:
                await self._fail_if_deposed(ctx)
                written = await _pipelined(lambda tp: self._write_state(tp, decisions[tp]), planned)
                return [tp for tp, done in zip(planned, written) if done]
            for tp, (current, new) in planned.items():
                ctx.states[tp] = replace(new, zk_version=current.zk_version + 1)
            return list(planned)

        return [tp for changed in await _pipelined(write, _batches(list(decisions))) for tp in changed]

    async def _initialize_new_partitions(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Write the first state of partitions that have none, when a replica is alive: leader
        the first live replica, ISR the live replicas, leader epoch 0."""
        ctx = self._ctx
        first: dict[TopicPartition, LeaderIsr] = {}
        for tp in partitions:
            if tp in ctx.states or tp.topic in ctx.deleting:
                continue
            live = [r for r in ctx.replicas(tp) if r in ctx.live]
            if live:
                first[tp] = LeaderIsr(leader=live[0], leader_epoch=0, isr=tuple(live), controller_epoch=ctx.epoch)
        # The topics' /partitions znodes first, so that the partitions' znodes and states can
        # go in transactions of many partitions.
        for topic in sorted({tp.topic for tp in first}):
            try:
                await self._zk.create(znodes.partitions_path(topic), makepath=True)
            except NodeExistsError:
                pass

        async def create(tp: TopicPartition) -> bool:
            path, data = znodes.partition_state_path(tp), znodes.encode_partition_state(first[tp])
            try:
                try:
                    await self._zk.multi([Op("create", path.rsplit("/", 1)[0]), Op("create", path, data)])
                except NodeExistsError:
                    await self._zk.create(path, data)  # the partition's znode was there
            except NodeExistsError:
                await self._read_states([tp])
                return False
            ctx.states[tp] = first[tp]
            return True

        async def create_batch(batch: list[TopicPartition]) -> list[TopicPartition]:
            """The partitions' znodes and states in one transaction; when one of them exists
            already (another controller's half-done work), one partition at a time."""
            ops = []
            for tp in batch:
                path = znodes.partition_state_path(tp)
                ops += [Op("create", path.rsplit("/", 1)[0]), Op("create", path, znodes.encode_partition_state(first[tp]))]
            try:
                await self._zk.multi(ops)
            except NodeExistsError:
                created = await _pipelined(create, batch)
                return [tp for tp, done in zip(batch, created) if done]
            for tp in batch:
                ctx.states[tp] = first[tp]
            return batch

        return [tp for created in await _pipelined(create_batch, _batches(list(first))) for tp in created]

    async def _unclean_allowed(self, topic: str) -> bool:
        if self._topic_unclean_election is not None:
            topic_setting = await self._topic_unclean_election(topic)
            if topic_setting is not None:
                return topic_setting
        return self.settings.unclean_leader_election

    async def _elect_offline(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Elect leaders for partitions whose leader is not alive; returns those changed."""
        ctx = self._ctx
        decisions = {}
        unclean_by_topic: dict[str, bool] = {}
        elected_unclean: dict[TopicPartition, bool] = {}
        for tp in partitions:
            state = ctx.states.get(tp)
            if state is None or state.leader in ctx.live_for(tp):
                continue
            if tp.topic in ctx.deleting:
                continue
            unclean = False
            if not any(r in ctx.live_for(tp) for r in state.isr):
                if tp.topic not in unclean_by_topic:
                    unclean_by_topic[tp.topic] = await self._unclean_allowed(tp.topic)
                unclean = unclean_by_topic[tp.topic]

            def decide(current: LeaderIsr, tp=tp, unclean=unclean) -> LeaderIsr | None:
                live = ctx.live_for(tp)
                if current.leader in live:
                    return None
                election = assignment.elect_leader(ctx.replicas(tp), current.isr, live, unclean)
                if election.leader == current.leader and election.isr == current.isr:
                    return None
                elected_unclean[tp] = _is_unclean(election, current.isr)  # the last decision is the one written
                return LeaderIsr(election.leader, current.leader_epoch + 1, election.isr, ctx.epoch)

            decisions[tp] = decide
        changed = await self._write_states(decisions)
        self.unclean_leader_elections += sum(1 for tp in changed if elected_unclean.get(tp))
        offline = [tp for tp in changed if ctx.states[tp].leader == assignment.NO_LEADER]
        if offline:
            log.warning("%d partition(s) offline, no in-sync replica alive: %s", len(offline), _some(offline))
        if len(changed) > len(offline):
            log.info("controller: elected leaders of %d partition(s)", len(changed) - len(offline))
        return changed

    async def _remove_from_isr(self, partitions: Iterable[TopicPartition], brokers: Collection[int]) -> list[TopicPartition]:
        """Take `brokers` out of the ISR of partitions they follow (Kafka's controller does it
        for dead and stopping brokers), bumping the leader epoch. Callers read the states just
        before; a leader's change since then fails the compare-and-set, which reads again."""
        partitions = [tp for tp in partitions if tp.topic not in self._ctx.deleting]

        def decide(current: LeaderIsr) -> LeaderIsr | None:
            if current.leader in brokers or not any(r in brokers for r in current.isr):
                return None
            isr = tuple(r for r in current.isr if r not in brokers)
            if not isr:  # as Kafka: the last in-sync replica stays, to lead cleanly when back
                return None
            return LeaderIsr(current.leader, current.leader_epoch + 1, isr, self._ctx.epoch)

        return await self._write_states(dict.fromkeys(partitions, decide))

    # ------------------------------------------------------------------ requests to brokers

    def _connect(self, broker_id: int) -> None:
        registration = self._ctx.brokers[broker_id]
        endpoint = registration.endpoint(self.settings.inter_broker_listener) or registration.endpoints[0]
        self._channel.add_broker(broker_id, endpoint.host, endpoint.port)

    def _send(self, broker_id: int, api_key: int, version: int, request: Any) -> asyncio.Future:
        return self._channel.send(broker_id, api_key, version, request)

    def _send_leader_and_isr(self, partitions: Iterable[TopicPartition], only_to: Collection[int] | None = None) -> None:
        ctx = self._ctx
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            if tp not in ctx.states or tp.topic in ctx.deleting:
                continue
            for replica in ctx.replicas(tp):
                if replica in ctx.brokers and (only_to is None or replica in only_to):
                    by_broker.setdefault(replica, []).append(tp)
        for broker_id, tps in by_broker.items():
            answer = self._send(broker_id, ApiKey.LEADER_AND_ISR, LEADER_AND_ISR_VERSION, self._leader_and_isr(broker_id, tps))
            answer.add_done_callback(functools.partial(self._leader_and_isr_answered, self._ctx, broker_id))

    def _leader_and_isr_answered(self, ctx: "_Context", broker_id: int, answer: asyncio.Future) -> None:
        response = None if answer.cancelled() or answer.exception() is not None else answer.result()
        if response is not None and not self._stopped:
            self.enqueue("LeaderAndIsr answer", lambda: self._on_leader_and_isr_answer(ctx, broker_id, response))

    def _leader_and_isr(self, broker_id: int, partitions: list[TopicPartition]) -> LeaderAndIsrRequest:
        ctx = self._ctx
        by_topic: dict[str, list[LeaderAndIsrPartitionState]] = {}
        leaders = set()
        for tp in partitions:
            state = ctx.states[tp]
            plan = ctx.reassigning.get(tp)
            by_topic.setdefault(tp.topic, []).append(
                LeaderAndIsrPartitionState(
                    partition_index=tp.partition,
                    controller_epoch=state.controller_epoch,
                    leader=state.leader,
                    leader_epoch=state.leader_epoch,
                    isr=tuple(state.isr),
                    zk_version=state.zk_version,
                    replicas=ctx.replicas(tp),
                    adding_replicas=plan.adding if plan else (),
                    removing_replicas=plan.removing if plan else (),
                    is_new=False,
                )
            )
            if state.leader in ctx.brokers:
                leaders.add(state.leader)
        live_leaders = []
        for leader in sorted(leaders):
            registration = ctx.brokers[leader]
            endpoint = registration.endpoint(self.settings.inter_broker_listener) or registration.endpoints[0]
            live_leaders.append(LeaderAndIsrLiveLeader(broker_id=leader, host_name=endpoint.host, port=endpoint.port))
        return LeaderAndIsrRequest(
            controller_id=self.broker_id,
            controller_epoch=ctx.epoch,
            broker_epoch=ctx.broker_epochs.get(broker_id, -1),
            topic_states=tuple(LeaderAndIsrTopicState(topic_name=t, partition_states=tuple(s)) for t, s in by_topic.items()),
            live_leaders=tuple(live_leaders),
        )

    def _send_update_metadata(self, partitions: Iterable[TopicPartition], to_brokers: Iterable[int]) -> None:
        """Partitions of topics being deleted go with leader -2 (Kafka's LeaderDuringDelete):
        every metadata cache leaves them out, so clients stop producing to them."""
        ctx = self._ctx
        by_topic: dict[str, list[UpdateMetadataPartitionState]] = {}
        for tp in partitions:
            state = ctx.states.get(tp)
            if tp.topic in ctx.deleting:
                by_topic.setdefault(tp.topic, []).append(UpdateMetadataPartitionState(
                    partition_index=tp.partition, controller_epoch=ctx.epoch, leader=LEADER_DURING_DELETE,
                    leader_epoch=0, isr=(), zk_version=0, replicas=(), offline_replicas=(),
                ))
            elif state is not None:
                replicas = ctx.replicas(tp)
                by_topic.setdefault(tp.topic, []).append(UpdateMetadataPartitionState(
                    partition_index=tp.partition,
                    controller_epoch=state.controller_epoch,
                    leader=state.leader,
                    leader_epoch=state.leader_epoch,
                    isr=tuple(state.isr),
                    zk_version=state.zk_version,
                    replicas=replicas,
                    offline_replicas=tuple(
                        r for r in replicas if r not in ctx.brokers or tp in ctx.offline_replicas.get(r, ())
                    ),
                ))
        topic_states = tuple(UpdateMetadataTopicState(topic_name=t, partition_states=tuple(s)) for t, s in by_topic.items())
        live_brokers = tuple(
            UpdateMetadataBroker(
                id=broker_id,
                endpoints=tuple(
                    UpdateMetadataEndpoint(
                        port=e.port, host=e.host, listener=e.listener,
                        security_protocol=_SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0),
                    )
                    for e in registration.endpoints
                ),
                rack=registration.rack,
            )
            for broker_id, registration in sorted(ctx.brokers.items())
        )
        for broker_id in to_brokers:
            if broker_id in ctx.brokers:
                self._send(broker_id, ApiKey.UPDATE_METADATA, UPDATE_METADATA_VERSION, UpdateMetadataRequest(
                    controller_id=self.broker_id,
                    controller_epoch=ctx.epoch,
                    broker_epoch=ctx.broker_epochs.get(broker_id, -1),
                    topic_states=topic_states,
                    live_brokers=live_brokers,
                ))

    def _send_stop_replica(self, broker_id: int, partitions: Iterable[TopicPartition], delete: bool) -> asyncio.Future:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return self._send(broker_id, ApiKey.STOP_REPLICA, STOP_REPLICA_VERSION, StopReplicaRequest(
            controller_id=self.broker_id,
            controller_epoch=self._ctx.epoch,
            broker_epoch=self._ctx.broker_epochs.get(broker_id, -1),
            delete_partitions=delete,
            topics=tuple(StopReplicaTopic(name=t, partition_indexes=tuple(p)) for t, p in by_topic.items()),
        ))

    def _propagate(self, partitions: list[TopicPartition]) -> None:
        """Tell the replicas of changed partitions, and every broker's metadata cache."""
        if partitions:
            self._send_leader_and_isr(partitions)
            self._send_update_metadata(partitions, self._ctx.brokers)

    # ------------------------------------------------------------------ events

    async def _on_broker_change(self) -> None:
        if not self.active:
            return
        ctx = self._ctx
        before = set(ctx.brokers)
        new = await self._read_brokers()
        dead = before - set(ctx.brokers)
        bounced = new & before
        for broker_id in dead | bounced:
            await self._channel.remove_broker(broker_id)
            for deletion in ctx.deleting.values():
                deletion.asked.pop(broker_id, None)
        if dead:
            log.info("controller: brokers %s left", sorted(dead))
            await self._on_brokers_failed(dead)
        if bounced:
            # Registered again before the controller saw them go (a restart within the
            # ZooKeeper session): they fail, then start, as in Kafka's processBrokerChange. A
            # restarted broker may have lost its log (a replaced disk, or its unflushed tail),
            # so it must not keep the leaderships or the ISR places it had: followers would
            # truncate to its log.
            log.info("controller: brokers %s restarted", sorted(bounced))
            returning = {broker_id: ctx.brokers.pop(broker_id) for broker_id in bounced}
            try:
                await self._on_brokers_failed(bounced)
            finally:
                ctx.brokers.update(returning)
        if new:
            log.info("controller: brokers %s joined", sorted(new))
            await self._on_brokers_started(new)

    async def _on_brokers_failed(self, dead: set[int]) -> None:
        ctx = self._ctx
        ctx.shutting_down -= dead  # a restarted broker's controlled shutdown is over
        for broker_id in dead:
            ctx.offline_replicas.pop(broker_id, None)
        affected = [tp for tp in ctx.partitions() if any(r in dead for r in ctx.replicas(tp))]
        await self._read_states(affected)
        changed = await self._elect_offline(affected)
        elected = set(changed)
        changed += await self._remove_from_isr([tp for tp in affected if tp not in elected], dead)
        self._send_leader_and_isr(changed)
        self._send_update_metadata(ctx.partitions(), ctx.brokers)

    async def _on_brokers_started(self, new: set[int]) -> None:
        ctx = self._ctx
        for broker_id in new:  # a restarted broker's log dirs are whole again, or it says so
            ctx.offline_replicas.pop(broker_id, None)
        for broker_id in new:
            self._connect(broker_id)
        self._send_update_metadata(ctx.partitions(), ctx.brokers)
        initialized = await self._initialize_new_partitions(ctx.partitions())
        first = set(initialized)
        elected = await self._elect_offline([tp for tp in ctx.partitions() if tp not in first])
        hosted = [tp for tp in ctx.partitions() if any(r in new for r in ctx.replicas(tp))]
        self._send_leader_and_isr(hosted, only_to=new)
        self._propagate(initialized + elected)
        for tp in list(ctx.reassigning):
            await self._maybe_finish_reassignment(tp)
        await self._resume_deletions()  # Kafka's onBrokerStartup: replicas of deleted topics go

    async def _on_topic_change(self) -> None:
        if not self.active:
            return
        ctx = self._ctx
        names = set(await self._zk.get_children(znodes.BROKER_TOPICS, self._watch("topic change", self._on_topic_change)))
        for gone in set(ctx.topics) - names:
            for tp in ctx.partitions_of(gone):
                ctx.states.pop(tp, None)
                ctx.reassigning.pop(tp, None)
            ctx.topics.pop(gone, None)
            self._forget_topic_watch(gone)
        # All the new topics in one step: one LeaderAndIsr and one UpdateMetadata per broker for
        # a CreateTopics of many topics, as Kafka's onNewPartitionCreation.
        new_topics = sorted(names - set(ctx.topics))
        await _pipelined(self._load_topic, new_topics)
        created = [tp for topic in new_topics for tp in ctx.partitions_of(topic)]
        if created:
            await self._on_new_partitions(created)

    async def _on_partition_change(self, topic: str) -> None:
        """A topic's znode changed: partitions added (CreatePartitions)."""
        self._watched_topics.discard(topic)
        if not self.active:
            return
        if topic in self._ctx.deleting:
            await self._load_topic(topic)  # re-arms the watch; the topic is going anyway
            return
        before = set(self._ctx.partitions_of(topic))
        if await self._load_topic(topic) is None:
            return
        await self._on_new_partitions([tp for tp in self._ctx.partitions_of(topic) if tp not in before])

    async def _on_new_partitions(self, partitions: list[TopicPartition]) -> None:
        await self._read_states(partitions)
        created = await self._initialize_new_partitions(partitions)
        self._propagate([tp for tp in partitions if tp in self._ctx.states])
        if created:
            log.info("controller: created %d partition(s) of %s", len(created), sorted({tp.topic for tp in created}))

    async def _on_delete_topics(self) -> None:
        if not self.active:
            return
        await self._read_deletions()
        await self._resume_deletions()

    async def _read_deletions(self) -> None:
        """Start deleting the topics newly listed in /admin/delete_topics: they leave every
        metadata cache at once (leader -2); a listed topic that does not exist leaves the list."""
        ctx = self._ctx
        names = await self._zk.children_or_empty(znodes.DELETE_TOPICS, self._watch("delete topics", self._on_delete_topics))
        started = []
        for topic in sorted(names):
            if topic not in ctx.topics:
                await self._delete_quietly(znodes.delete_topic_path(topic))
            elif topic not in ctx.deleting:
                ctx.deleting[topic] = _TopicDeletion()
                started.extend(ctx.partitions_of(topic))
                log.info("controller: deleting topic %s", topic)
        if started:
            self._send_update_metadata(started, ctx.brokers)

    async def _resume_deletions(self) -> None:
        """StopReplica(delete) to each live broker holding replicas of a topic being deleted that
        has not deleted them yet; a topic whose replicas are all deleted leaves ZooKeeper. A
        replica on a dead broker holds its topic's deletion (Kafka's "ineligible for
        deletion") until the broker is back."""
        ctx = self._ctx
        for topic, deletion in list(ctx.deleting.items()):
            waiting = self._replica_brokers(topic) - deletion.done
            if not waiting:
                await self._complete_deletion(topic)
                continue
            for broker_id in sorted(waiting & set(ctx.brokers) - set(deletion.asked)):
                self._ask_to_delete(topic, deletion, broker_id)

    def _replica_brokers(self, topic: str) -> set[int]:
        return {r for tp in self._ctx.partitions_of(topic) for r in self._ctx.replicas(tp)}

    def _ask_to_delete(self, topic: str, deletion: _TopicDeletion, broker_id: int) -> None:
        ctx = self._ctx
        hosted = [tp for tp in ctx.partitions_of(topic) if broker_id in ctx.replicas(tp)]
        answer = deletion.asked[broker_id] = self._send_stop_replica(broker_id, hosted, True)

        def answered(future: asyncio.Future) -> None:
            response = None if future.cancelled() else future.result()
            if not self._stopped:
                self.enqueue("topic deletion answer", lambda: self._on_deletion_answer(ctx, topic, broker_id, future, response))

        answer.add_done_callback(answered)

    async def _on_deletion_answer(self, ctx: _Context, topic: str, broker_id: int, answer: asyncio.Future, response: Any) -> None:
        deletion = ctx.deleting.get(topic)
        if ctx is not self._ctx or not self.active or deletion is None or deletion.asked.get(broker_id) is not answer:
            return  # an earlier controllership's, or a request to an earlier registration
        del deletion.asked[broker_id]
        if response is None or response.error_code != ErrorCode.none or any(
            p.error_code != ErrorCode.none for p in response.partition_errors
        ):
            # Asked again on the next broker change, deletion or controller failover.
            log.warning("controller: broker %d did not delete the replicas of %s", broker_id, topic)
            return
        deletion.done.add(broker_id)
        await self._resume_deletions()

    async def _complete_deletion(self, topic: str) -> None:
        """Every replica is deleted: the topic's znodes go, /admin/delete_topics/<topic> last
        (as Kafka), so a new controller resumes a deletion cut halfway."""
        ctx = self._ctx
        self._forget_topic_watch(topic)
        await self._delete_quietly(znodes.topic_path(topic), recursive=True)
        await self._delete_quietly(znodes.topic_config_path(topic))
        await self._delete_quietly(znodes.delete_topic_path(topic))
        for tp in ctx.partitions_of(topic):
            ctx.states.pop(tp, None)
            ctx.reassigning.pop(tp, None)
        ctx.topics.pop(topic, None)
        del ctx.deleting[topic]
        log.info("controller: deleted topic %s", topic)

    def marked_for_deletion(self, topic: str) -> bool:
        return self.active and topic in self._ctx.deleting

    async def _delete_quietly(self, path: str, recursive: bool = False) -> None:
        try:
            await self._zk.delete(path, recursive=recursive)
        except NoNodeError:
            pass

    async def _on_isr_change(self) -> None:
        if not self.active:
            return
        names = await self._zk.children_or_empty(znodes.ISR_CHANGE_NOTIFICATION, self._watch("isr change", self._on_isr_change))
        changed: set[TopicPartition] = set()

        async def take(name: str) -> None:
            path = f"{znodes.ISR_CHANGE_NOTIFICATION}/{name}"
            found = await self._zk.get_or_none(path)
            if found is not None:
                changed.update(
                    tp for tp in znodes.decode_isr_change(found[0])
                    if tp.topic in self._ctx.topics and tp.topic not in self._ctx.deleting
                )
            await self._delete_quietly(path)

        await _pipelined(take, sorted(names))
        if not changed:
            return
        await self._read_states(changed)
        self._send_update_metadata(sorted(changed), self._ctx.brokers)
        for tp in sorted(changed & set(self._ctx.reassigning)):
            await self._maybe_finish_reassignment(tp)

    # ------------------------------------------------------------------ log dir failures

    async def _on_log_dir_event(self) -> None:
        """Take the log dir event notifications: ask their brokers about every replica they
        hold (Kafka's processLogDirEventNotification and onBrokerLogDirFailure)."""
        if not self.active:
            return
        names = await self._zk.children_or_empty(
            znodes.LOG_DIR_EVENT_NOTIFICATION, self._watch("log dir event", self._on_log_dir_event)
        )
        brokers: set[int] = set()

        async def take(name: str) -> None:
            path = f"{znodes.LOG_DIR_EVENT_NOTIFICATION}/{name}"
            found = await self._zk.get_or_none(path)
            if found is not None:
                brokers.add(znodes.decode_log_dir_event(found[0]))
            await self._delete_quietly(path)

        await _pipelined(take, sorted(n for n in names if n.startswith(znodes.LOG_DIR_EVENT_PREFIX)))
        ctx = self._ctx
        brokers &= set(ctx.brokers)
        if not brokers:
            return
        log.info("controller: handling log directory failure of brokers %s", sorted(brokers))
        hosted = [tp for tp in ctx.partitions() if any(r in brokers for r in ctx.replicas(tp))]
        await self._read_states(hosted)
        self._send_leader_and_isr(hosted, only_to=brokers)

    async def _on_leader_and_isr_answer(self, ctx: "_Context", broker_id: int, response: Any) -> None:
        """Replicas answering KAFKA_STORAGE_ERROR are in a failed log dir: newly offline ones
        lose their leaderships and ISR places (Kafka's onReplicasBecomeOffline)."""
        if ctx is not self._ctx or not self.active or broker_id not in ctx.brokers or response.error_code != ErrorCode.none:
            return
        offline = {TopicPartition(e.topic_name, e.partition_index) for e in response.partition_errors if e.error_code == ErrorCode.kafka_storage_error}
        online = {TopicPartition(e.topic_name, e.partition_index) for e in response.partition_errors if e.error_code == ErrorCode.none}
        before = ctx.offline_replicas.get(broker_id, set())
        now = (before - online) | offline
        if now:
            ctx.offline_replicas[broker_id] = now
        else:
            ctx.offline_replicas.pop(broker_id, None)
        newly = sorted(tp for tp in now - before if tp.topic in ctx.topics and tp.topic not in ctx.deleting)
        if not newly:
            return
        log.warning("controller: replicas of %d partition(s) on broker %d are offline (failed log dir): %s",
                    len(newly), broker_id, _some(newly))
        await self._read_states(newly)
        changed = await self._elect_offline(newly)
        elected = set(changed)
        changed += await self._remove_from_isr([tp for tp in newly if tp not in elected], {broker_id})
        self._send_leader_and_isr(changed, only_to=set(ctx.brokers) - {broker_id})
        self._send_update_metadata(ctx.partitions(), ctx.brokers)
        self._send_stop_replica(broker_id, newly, False)

    # ------------------------------------------------------------------ controlled shutdown

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[ErrorCode, list[TopicPartition]]:
        """Move leaderships off a stopping broker, take it out of ISRs and stop its other
        replicas (StopReplica without delete); answers the partitions it still leads (no other
        in-sync replica)."""
        return await self.run(
            "controlled shutdown", lambda: self._controlled_shutdown(broker_id, broker_epoch), (ErrorCode.not_controller, [])
        )

    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[ErrorCode, list[TopicPartition]]:
        ctx = self._ctx
        if not self.active:
            return ErrorCode.not_controller, []
        if broker_id not in ctx.brokers:
            return ErrorCode.broker_not_available, []
        if broker_epoch != -1 and broker_epoch < ctx.broker_epochs.get(broker_id, -1):
            return ErrorCode.stale_broker_epoch, []
        ctx.shutting_down.add(broker_id)
        await self._read_states([tp for tp in ctx.partitions() if broker_id in ctx.replicas(tp)])  # leaders change ISRs too
        hosted = [tp for tp in ctx.partitions() if broker_id in ctx.replicas(tp) and tp in ctx.states]
        decisions = {}
        for tp in hosted:
            if ctx.states[tp].leader != broker_id or len(ctx.replicas(tp)) == 1:
                continue

            def decide(current: LeaderIsr, tp=tp) -> LeaderIsr | None:
                if current.leader != broker_id:
                    return None
                election = assignment.elect_for_shutdown(ctx.replicas(tp), current.isr, ctx.brokers, ctx.shutting_down)
                if election is None:
                    return None
                return LeaderIsr(election.leader, current.leader_epoch + 1, election.isr, ctx.epoch)

            decisions[tp] = decide
        moved = await self._write_states(decisions)
        moved_set = set(moved)
        followed = await self._remove_from_isr([tp for tp in hosted if tp not in moved_set], {broker_id})
        self._propagate(moved + followed)
        # Kafka's OfflineReplica step: the stopping broker stops fetching, so its leaders do not
        # take it back into their ISRs while it goes.
        stopped = [tp for tp in hosted if ctx.states[tp].leader != broker_id]
        if stopped:
            self._send_stop_replica(broker_id, stopped, False)
        remaining = [tp for tp in hosted if ctx.states[tp].leader == broker_id]
        log.info("controller: broker %d shutting down; %d leadership(s) moved, %d remain",
                 broker_id, len(moved), len(remaining))
        return ErrorCode.none, remaining

    # ------------------------------------------------------------------ leader elections

    def known_partitions(self) -> list[TopicPartition]:
        return [tp for tp in self._ctx.partitions() if tp in self._ctx.states]

    async def elect_leaders(self, partitions: Iterable[TopicPartition], unclean: bool) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        wanted = list(partitions)
        return await self.run(
            "elect leaders", lambda: self._elect_leaders(wanted, unclean), {tp: (ErrorCode.not_controller, None) for tp in wanted}
        )

    async def _elect_leaders(self, partitions: list[TopicPartition], unclean: bool) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        ctx = self._ctx
        results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        electing = []
        for tp in partitions:
            if not self.active:
                results[tp] = (ErrorCode.not_controller, None)
            elif tp not in ctx.states or tp.topic in ctx.deleting:
                results[tp] = (ErrorCode.unknown_topic_or_partition, "The partition does not exist.")
            else:
                electing.append(tp)
        for tp, error in zip(electing, await _pipelined(lambda tp: self._elect_one(tp, unclean), electing)):
            results[tp] = error
        self._propagate([tp for tp in electing if results[tp][0] is ErrorCode.none])
        return {tp: results[tp] for tp in partitions}

    async def _elect_one(self, tp: TopicPartition, unclean: bool) -> tuple[ErrorCode, str | None]:
        ctx = self._ctx
        replicas = ctx.replicas(tp)
        state = ctx.states[tp]
        if unclean:
            if state.leader in ctx.live:
                return ErrorCode.election_not_needed, "Leader is alive: no election needed."
            election = assignment.elect_leader(replicas, state.isr, ctx.live, True)
            if election.leader == assignment.NO_LEADER:
                return ErrorCode.eligible_leaders_not_available, "No live replica can lead."
        else:
            if replicas and state.leader == replicas[0]:
                return ErrorCode.election_not_needed, "The preferred replica is the leader already."
            preferred = assignment.preferred_leader(replicas, state.isr, ctx.live)
            if preferred is None:
                return ErrorCode.preferred_leader_not_available, "The preferred replica is not alive or not in sync."
            election = assignment.Election(preferred, state.isr)

        def decide(current: LeaderIsr) -> LeaderIsr | None:
            return LeaderIsr(election.leader, current.leader_epoch + 1, election.isr, ctx.epoch)

        if not await self._write_state(tp, decide):
            return ErrorCode.unknown_server_error, "The partition state changed meanwhile."
        if _is_unclean(election, state.isr):
            self.unclean_leader_elections += 1
        return ErrorCode.none, None

    async def _rebalance_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.rebalance_interval_s)
            self.enqueue("preferred leader check", self._check_preferred_leaders)

    async def _check_preferred_leaders(self) -> None:
        if not self.active:
            return
        ctx = self._ctx
        leaders = {
            tp: (ctx.states[tp].leader, ctx.replicas(tp))
            for tp in ctx.partitions()
            if tp in ctx.states and tp not in ctx.reassigning and tp.topic not in ctx.deleting
        }
        candidates = assignment.imbalanced_partitions(leaders, self.settings.imbalance_percentage)
        eligible = [tp for tp in candidates if assignment.preferred_leader(ctx.replicas(tp), ctx.states[tp].isr, ctx.live) is not None]
        if eligible:
            log.info("controller: moving %d partition(s) back to their preferred leader", len(eligible))
            await self._elect_leaders(eligible, unclean=False)

    # ------------------------------------------------------------------ reassignment

    async def alter_reassignments(self, targets: Mapping[TopicPartition, tuple[int, ...] | None]) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        wanted = dict(targets)
        return await self.run(
            "reassignment", lambda: self._alter_reassignments(wanted), {tp: (ErrorCode.not_controller, None) for tp in wanted}
        )

    def list_reassignments(self, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, assignment.ReassignmentPlan]:
        plans = self._ctx.reassigning
        if partitions is None:
            return dict(plans)
        return {tp: plans[tp] for tp in partitions if tp in plans}

    async def _alter_reassignments(self, targets: dict[TopicPartition, tuple[int, ...] | None]) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        results = {}
        for tp, target in targets.items():
            results[tp] = await self._reassign(tp, target)
        return results

    async def _reassign(self, tp: TopicPartition, target: tuple[int, ...] | None) -> tuple[ErrorCode, str | None]:
        ctx = self._ctx
        if not self.active:
            return ErrorCode.not_controller, None
        if tp not in ctx.states or tp.topic in ctx.deleting:
            return ErrorCode.unknown_topic_or_partition, "The partition does not exist."
        plan = ctx.reassigning.get(tp)
        if target is None:
            if plan is None:
                return ErrorCode.no_reassignment_in_progress, "No reassignment in progress."
            target = tuple(r for r in plan.replicas if r not in plan.adding)
        else:
            if not target or len(set(target)) != len(target):
                return ErrorCode.invalid_replica_assignment, "Replicas must be distinct and not empty."
            unknown = [r for r in target if r not in ctx.brokers]
            if unknown:
                return ErrorCode.invalid_replica_assignment, f"Unknown or dead broker(s) {unknown}."
        original = tuple(r for r in plan.replicas if r not in plan.adding) if plan else ctx.replicas(tp)
        new_plan = assignment.plan_reassignment(original, target)
        if not new_plan.adding and not new_plan.removing:
            ctx.reassigning.pop(tp, None)
            await self._write_assignment(tp, target, None)
            return ErrorCode.none, None
        ctx.reassigning[tp] = new_plan
        await self._write_assignment(tp, new_plan.replicas, new_plan)
        self._propagate([tp])
        await self._maybe_finish_reassignment(tp)
        return ErrorCode.none, None

    async def _write_assignment(self, tp: TopicPartition, replicas: tuple[int, ...], plan: assignment.ReassignmentPlan | None) -> None:
        ctx = self._ctx
        current = ctx.topics[tp.topic]
        adding = {p: r for p, r in current.adding_replicas.items() if p != tp.partition}
        removing = {p: r for p, r in current.removing_replicas.items() if p != tp.partition}
        if plan is not None:
            if plan.adding:
                adding[tp.partition] = plan.adding
            if plan.removing:
                removing[tp.partition] = plan.removing
        updated = TopicAssignment(current.topic_id, {**current.partitions, tp.partition: replicas}, adding, removing)
        # The controller's own write: the partition-change watch then finds nothing new.
        await self._zk.set(znodes.topic_path(tp.topic), znodes.encode_topic(updated))
        ctx.topics[tp.topic] = updated

    async def _maybe_finish_reassignment(self, tp: TopicPartition) -> None:
        ctx = self._ctx
        plan = ctx.reassigning.get(tp)
        state = ctx.states.get(tp)
        if plan is None or state is None or tp.topic in ctx.deleting or not assignment.reassignment_caught_up(plan, state.isr):
            return
        election = assignment.finish_reassignment(plan, state.leader, state.isr, ctx.live)

        def decide(current: LeaderIsr) -> LeaderIsr | None:
            return LeaderIsr(election.leader, current.leader_epoch + 1, election.isr, ctx.epoch)

        if not await self._write_state(tp, decide):
            return
        del ctx.reassigning[tp]
        await self._write_assignment(tp, plan.target, None)
        self._send_leader_and_isr([tp])
        for broker_id in plan.removing:
            if broker_id in ctx.brokers:
                self._send_stop_replica(broker_id, [tp], True)
        self._send_update_metadata([tp], ctx.brokers)
        await self._update_legacy_reassignment()
        log.info("controller: reassignment of %s done, replicas %s", tp, list(plan.target))

    async def _on_legacy_reassignment(self) -> None:
        """/admin/reassign_partitions (kafka-reassign-partitions.sh of ZooKeeper days): start
        what it lists; the znode goes once those reassignments are done."""
        if not self.active:
            return
        found = await self._zk.get_or_none(znodes.REASSIGN_PARTITIONS)
        await self._zk.exists(znodes.REASSIGN_PARTITIONS, self._watch("legacy reassignment", self._on_legacy_reassignment))
        if found is None:
            return
        for tp, target in znodes.decode_reassignment(found[0]).items():
            error, message = await self._reassign(tp, target)
            if error is not ErrorCode.none:
                log.warning("reassignment of %s in %s refused: %s %s", tp, znodes.REASSIGN_PARTITIONS, error.name, message or "")
        await self._update_legacy_reassignment()

    async def _update_legacy_reassignment(self) -> None:
        found = await self._zk.get_or_none(znodes.REASSIGN_PARTITIONS)
        if found is None:
            return
        pending = {tp: r for tp, r in znodes.decode_reassignment(found[0]).items() if tp in self._ctx.reassigning}
        if not pending:
            await self._delete_quietly(znodes.REASSIGN_PARTITIONS)


async def _nothing() -> None:
    return None


async def _pipelined(operation: Callable[[Any], Awaitable[Any]], items: Iterable[Any]) -> list[Any]:
    """`operation` on every item, up to _ZK_IN_FLIGHT at once; the results in the items'
    order. The first failure cancels the rest and is raised (the event then fails as a whole,
    as it did one operation at a time)."""
    items = list(items)
    results: list[Any] = [None] * len(items)
    pending = iter(enumerate(items))

    async def work() -> None:
        for index, item in pending:
            results[index] = await operation(item)

    workers = [asyncio.ensure_future(work()) for _ in range(min(_ZK_IN_FLIGHT, len(items)))]
    try:
        await asyncio.gather(*workers)
    except BaseException:
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    return results


def _batches(items: list[Any]) -> list[list[Any]]:
    return [items[i:i + _STATES_PER_TRANSACTION] for i in range(0, len(items), _STATES_PER_TRANSACTION)]


def _is_unclean(election: assignment.Election, isr: Collection[int]) -> bool:
    """A leader elected from outside the ISR: what Kafka counts in UncleanLeaderElectionsPerSec."""
    return election.leader != assignment.NO_LEADER and election.leader not in isr


def _some(partitions: list[TopicPartition], shown: int = 10) -> str:
    """The first few partitions for a log line (10,000 would flood it)."""
    text = ", ".join(str(tp) for tp in partitions[:shown])
    return text + (f" and {len(partitions) - shown} more" if len(partitions) > shown else "")
