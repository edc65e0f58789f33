"""replication.controller against a real ZooKeeper, its requests recorded instead of sent: each
event sends one request per broker and kind, covering every partition, never one per partition."""

import ast
import asyncio
import contextlib
import inspect
import uuid
from collections import Counter

import pytest
from kazoo.client import KazooClient

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.legacy import LeaderAndIsrPartitionError, LeaderAndIsrResponse
from replication import controller as controller_module
from replication import znodes
from replication.controller import Controller, ControllerSettings, kafka_state_of_event
from replication.znodes import LeaderIsr
from replication.zk import ZkClient
from storage.topic_partition import TopicPartition

BROKERS = (1, 2, 3)
TOPICS = 10
PER_TOPIC = 20
_WAIT_S = 20


class RecordingChannel:
    """The ControllerChannel's interface; requests are kept, answered with None (as for a
    broker that went away)."""

    def __init__(self, client_id: str, request_timeout_s: float, ssl_context=None, sasl=None) -> None:
        self.brokers: set[int] = set()
        self.sent: list[tuple[int, int, object]] = []
        CHANNELS.append(self)

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        self.brokers.add(broker_id)

    async def remove_broker(self, broker_id: int) -> None:
        self.brokers.discard(broker_id)

    def has_broker(self, broker_id: int) -> bool:
        return broker_id in self.brokers

    def send(self, broker_id: int, api_key: int, version: int, request: object) -> asyncio.Future:
        self.sent.append((broker_id, api_key, request))
        answer = asyncio.get_running_loop().create_future()
        answer.set_result(None)
        return answer

    async def close(self) -> None:
        pass


CHANNELS: list[RecordingChannel] = []


def _registration(broker_id: int) -> bytes:
    return znodes.encode_broker(znodes.BrokerRegistration(
        broker_id, (znodes.EndPoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),)))


def _topic(replicas: tuple[int, ...] = BROKERS) -> bytes:
    return znodes.encode_topic(znodes.TopicAssignment(uuid.uuid4(), {p: replicas for p in range(PER_TOPIC)}))


def _partitions_in(request: object) -> int:
    return sum(len(t.partition_states) for t in request.topic_states)


class Recorder:
    """The requests sent from a mark on, by broker and kind."""

    def __init__(self, channel: RecordingChannel) -> None:
        self.channel = channel
        self.mark = 0

    def start(self) -> None:
        self.mark = len(self.channel.sent)

    def since(self) -> list[tuple[int, int, object]]:
        return self.channel.sent[self.mark:]

    def counts(self) -> Counter:
        return Counter((broker_id, ApiKey(api_key).name) for broker_id, api_key, _ in self.since())

    async def settle(self, controller: Controller, until) -> Counter:
        """Wait until `until(requests)` holds, then until the controller's queue is idle."""
        for _ in range(int(_WAIT_S / 0.05)):
            if until(self.since()):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"not within {_WAIT_S} s; sent: {self.counts()}")
        await asyncio.sleep(0.3)  # watch events still on their way from kazoo's thread
        await controller.run("sync", _nothing, None)
        return self.counts()


async def _nothing() -> None:
    return None


def _each_broker_once(counts: Counter, kind: str, brokers=BROKERS) -> None:
    assert {b: counts[(b, kind)] for b in brokers} == dict.fromkeys(brokers, 1), counts


@pytest.fixture
def chroot(zookeeper, monkeypatch):
    monkeypatch.setattr(controller_module, "ControllerChannel", RecordingChannel)
    CHANNELS.clear()
    path = f"/controller-test-{uuid.uuid4().hex[:8]}"
    client = KazooClient(hosts=zookeeper.connect_string)
    client.start(15)
    client.ensure_path(path)
    client.chroot = path
    for persistent in (znodes.BROKER_IDS, znodes.BROKER_TOPICS, znodes.ISR_CHANGE_NOTIFICATION):
        client.ensure_path(persistent)
    for broker_id in BROKERS:
        client.create(znodes.broker_path(broker_id), _registration(broker_id))
    for n in range(TOPICS):
        client.create(znodes.topic_path(f"t{n}"), _topic())
    yield zookeeper.connect_string + path, client
    client.stop()
    client.close()


async def _start_controller(connect: str, broker_id: int) -> tuple[Controller, ZkClient]:
    zk = ZkClient(connect, 6000)
    await zk.start()
    controller = Controller(zk, ControllerSettings(broker_id=broker_id, inter_broker_listener="PLAINTEXT",
                                                   auto_leader_rebalance=False))
    controller.start()
    return controller, zk


def test_requests_are_batched_per_broker_for_every_event(chroot):
    connect, client = chroot
    total = TOPICS * PER_TOPIC

    async def scenario():
        first, first_zk = await _start_controller(connect, 1)
        second = second_zk = None
        try:
            # Becoming active: every partition initialized, one request of each kind per broker.
            recorder = Recorder(await _channel_of(first))
            counts = await recorder.settle(first, lambda sent: len(sent) >= 2 * len(BROKERS))
            _each_broker_once(counts, "LEADER_AND_ISR")
            _each_broker_once(counts, "UPDATE_METADATA")
            assert all(_partitions_in(r) == total for _, _, r in recorder.since())

            # Failover: the first controller's session ends; the second loads what it wrote.
            second, second_zk = await _start_controller(connect, 2)
            await first.stop()
            await first_zk.close()
            recorder = Recorder(await _channel_of(second))
            counts = await recorder.settle(second, lambda sent: len(sent) >= 2 * len(BROKERS))
            _each_broker_once(counts, "LEADER_AND_ISR")
            _each_broker_once(counts, "UPDATE_METADATA")
            assert all(_partitions_in(r) == total for _, _, r in recorder.since())

            # Broker 1 dies: the partitions it led get leaders; 1 leaves every ISR.
            recorder.start()
            client.delete(znodes.broker_path(1))
            counts = await recorder.settle(second, lambda sent: any(api == ApiKey.UPDATE_METADATA for _, api, _ in sent))
            _each_broker_once(counts, "LEADER_AND_ISR", (2, 3))
            _each_broker_once(counts, "UPDATE_METADATA", (2, 3))
            states = second._ctx.states
            assert all(s.leader in (2, 3) and 1 not in s.isr for s in states.values())

            # Broker 1 comes back: its metadata and its replicas, in a request each.
            recorder.start()
            client.create(znodes.broker_path(1), _registration(1))
            counts = await recorder.settle(second, lambda sent: any(b == 1 and api == ApiKey.LEADER_AND_ISR for b, api, _ in sent))
            assert counts[(1, "LEADER_AND_ISR")] == 1
            assert all(counts[(b, "UPDATE_METADATA")] == 1 for b in BROKERS), counts
            assert sum(counts.values()) == 1 + len(BROKERS), counts

            # The leaders report ISR changes of every partition in two notifications.
            recorder.start()
            everything = sorted(states)
            for half in (everything[: total // 2], everything[total // 2:]):
                client.create(f"{znodes.ISR_CHANGE_NOTIFICATION}/{znodes.ISR_CHANGE_PREFIX}",
                              znodes.encode_isr_change(half), sequence=True)
            counts = await recorder.settle(second, lambda sent: not client.get_children(znodes.ISR_CHANGE_NOTIFICATION))
            assert sum(counts.values()) <= 2 * len(BROKERS), counts
            assert all(counts[(b, "UPDATE_METADATA")] >= 1 for b in BROKERS), counts

            # Five topics created at once (one CreateTopics).
            recorder.start()
            transaction = client.transaction()
            for n in range(5):
                transaction.create(znodes.topic_path(f"new{n}"), _topic())
            transaction.commit()
            counts = await recorder.settle(second, lambda sent: len(sent) >= 2 * len(BROKERS))
            _each_broker_once(counts, "LEADER_AND_ISR")
            _each_broker_once(counts, "UPDATE_METADATA")
            assert all(_partitions_in(r) == 5 * PER_TOPIC for _, _, r in recorder.since())

            # Controlled shutdown of broker 3, while a leader changes one state behind the
            # controller's back: that partition's transaction fails and is done again one
            # partition at a time.
            recorder.start()
            multi = second_zk.multi
            raced = []

            async def racing_multi(ops):
                if not raced and len(ops) > 2:
                    raced.append(ops[1].path)
                    client.set(ops[1].path, client.get(ops[1].path)[0])
                return await multi(ops)

            second_zk.multi = racing_multi
            error, remaining = await second.controlled_shutdown(3, -1)
            assert raced
            assert (error, remaining) == (ErrorCode.none, [])
            counts = recorder.counts()
            assert counts[(3, "STOP_REPLICA")] == 1
            assert all(counts[(b, "LEADER_AND_ISR")] <= 1 and counts[(b, "UPDATE_METADATA")] == 1 for b in BROKERS), counts
            assert all(s.leader != 3 and 3 not in s.isr for s in second._ctx.states.values())
        finally:
            for controller, zk in ((first, first_zk), (second, second_zk)):
                if controller is not None:
                    await controller.stop()
                    await zk.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))


async def _channel_of(controller: Controller) -> RecordingChannel:
    for _ in range(int(_WAIT_S / 0.05)):
        if controller.active and controller._channel is not None:
            return controller._channel
        await asyncio.sleep(0.05)
    raise AssertionError("the controller did not become active")


@contextlib.asynccontextmanager
async def _active_controller(connect: str, broker_id: int):
    """Broker `broker_id`'s controller, active and done sending its first requests: it, its
    ZooKeeper client and a Recorder of its channel; stopped on the way out."""
    controller, zk = await _start_controller(connect, broker_id)
    try:
        recorder = Recorder(await _channel_of(controller))
        await recorder.settle(controller, lambda sent: len(sent) >= 2 * len(BROKERS))
        yield controller, zk, recorder
    finally:
        await controller.stop()
        await zk.close()


class FailedDirChannel(RecordingChannel):
    """Broker 1's LeaderAndIsr answers KAFKA_STORAGE_ERROR for the partitions in `failed` (its
    failed log dir) and NONE for the others; every other request is answered with None."""

    failed: set = set()

    def send(self, broker_id: int, api_key: int, version: int, request: object) -> asyncio.Future:
        answer = super().send(broker_id, api_key, version, request)
        if broker_id != 1 or api_key != ApiKey.LEADER_AND_ISR:
            return answer
        errors = tuple(
            LeaderAndIsrPartitionError(
                topic_name=topic.topic_name,
                partition_index=state.partition_index,
                error_code=ErrorCode.kafka_storage_error
                if (topic.topic_name, state.partition_index) in self.failed
                else ErrorCode.none,
            )
            for topic in request.topic_states
            for state in topic.partition_states
        )
        answered = asyncio.get_running_loop().create_future()
        answered.set_result(LeaderAndIsrResponse(error_code=ErrorCode.none, partition_errors=errors))
        return answered


def test_a_log_dir_failure_moves_leaderships_and_isr_places_off_the_failed_replicas(chroot, monkeypatch):
    connect, client = chroot
    monkeypatch.setattr(controller_module, "ControllerChannel", FailedDirChannel)
    client.ensure_path(znodes.LOG_DIR_EVENT_NOTIFICATION)
    failed = {TopicPartition("t0", p) for p in range(PER_TOPIC)}

    async def scenario():
        async with _active_controller(connect, 2) as (controller, _zk, recorder):
            states = controller._ctx.states
            assert all(states[tp].leader == 1 for tp in failed)  # the first replica leads
            FailedDirChannel.failed = failed
            recorder.start()
            client.create(f"{znodes.LOG_DIR_EVENT_NOTIFICATION}/{znodes.LOG_DIR_EVENT_PREFIX}",
                          znodes.encode_log_dir_event(1), sequence=True)
            counts = await recorder.settle(controller, lambda sent: any(api == ApiKey.STOP_REPLICA for _, api, _ in sent))
            assert client.get_children(znodes.LOG_DIR_EVENT_NOTIFICATION) == []
            assert all(states[tp].leader in (2, 3) and 1 not in states[tp].isr for tp in failed)
            assert all(s.leader == 1 for tp, s in states.items() if tp not in failed)
            [stop] = [r for b, api, r in recorder.since() if api == ApiKey.STOP_REPLICA]
            assert counts[(1, "STOP_REPLICA")] == 1 and not stop.delete_partitions
            assert {(t.name, p) for t in stop.topics for p in t.partition_indexes} == failed
            metadata = [r for b, api, r in recorder.since() if api == ApiKey.UPDATE_METADATA][-1]
            offline = {(t.topic_name, s.partition_index): s.offline_replicas for t in metadata.topic_states for s in t.partition_states}
            assert {tp for tp, replicas in offline.items() if replicas == (1,)} == failed

            # Broker 1 restarted with its dir replaced: its replicas may lead again.
            FailedDirChannel.failed = set()
            recorder.start()
            client.delete(znodes.broker_path(1))
            await recorder.settle(controller, lambda sent: any(api == ApiKey.UPDATE_METADATA for _, api, _ in sent))
            client.create(znodes.broker_path(1), _registration(1))
            await recorder.settle(controller, lambda sent: any(b == 1 and api == ApiKey.LEADER_AND_ISR for b, api, _ in sent))
            assert controller._ctx.offline_replicas == {}
            assert 1 in controller._ctx.live_for(next(iter(failed)))

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_a_broker_registered_again_within_its_session_loses_its_leaderships_and_isr_places(chroot):
    """A broker restarted before the controller saw it go (its /brokers/ids znode replaced, a
    new epoch) may have come back without its log: it fails, then starts, as in Kafka. Kept as
    leader with its old epoch, it had led with an empty log and its followers truncated to it
    (tiered storage's metadata topic lost that way, its remote segments then deleted)."""
    connect, client = chroot

    async def scenario():
        async with _active_controller(connect, 2) as (controller, _zk, recorder):
            states = controller._ctx.states
            led = {tp: states[tp].leader_epoch for tp in states if states[tp].leader == 1}
            assert led and all(states[tp].isr == BROKERS for tp in led)  # the first replica leads

            recorder.start()
            replaced = client.transaction()  # one watch event: the id stays, its epoch changes
            replaced.delete(znodes.broker_path(1))
            replaced.create(znodes.broker_path(1), _registration(1))
            replaced.commit()
            counts = await recorder.settle(controller, lambda sent: any(b == 1 and api == ApiKey.LEADER_AND_ISR for b, api, _ in sent))
            assert all(s.leader in (2, 3) and 1 not in s.isr for s in states.values())
            assert all(states[tp].leader_epoch > epoch for tp, epoch in led.items())
            assert counts[(1, "LEADER_AND_ISR")] == 1
            [to_1] = [r for b, api, r in recorder.since() if b == 1 and api == ApiKey.LEADER_AND_ISR]
            assert {s.leader for t in to_1.topic_states for s in t.partition_states} <= {2, 3}

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_a_controller_whose_epoch_moved_on_steps_down_at_its_first_fenced_write(chroot):
    """A newer controller's epoch fences every write of this one: retrying each partition's
    state ten times kept a deposed controller acting for seconds, and active on its old epoch
    while its /controller znode stayed. It steps down, leaving /controller, and the election
    that follows (won by this broker again, the only one running) re-reads everything."""
    connect, client = chroot

    async def scenario():
        async with _active_controller(connect, 1) as (controller, zk, recorder):
            epoch = znodes.decode_controller_epoch(client.get(znodes.CONTROLLER_EPOCH)[0])
            client.set(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(epoch + 1))
            writes = []
            multi = zk.multi

            async def counted_multi(ops):
                writes.append(ops)
                return await multi(ops)

            zk.multi = counted_multi
            client.delete(znodes.broker_path(2))  # its ISR places: state writes
            for _ in range(int(_WAIT_S / 0.05)):
                if controller.epoch != epoch:
                    break
                await asyncio.sleep(0.05)
            assert controller.epoch == epoch + 2
            fenced = [ops for ops in writes if ops[0].version != controller._ctx.epoch_zk_version]
            assert len(fenced) <= TOPICS * PER_TOPIC  # each transaction once, not ten tries a partition

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_a_session_expiry_resigns_before_the_events_queued_meanwhile(chroot):
    connect, _client = chroot

    async def scenario():
        controller, zk = await _start_controller(connect, 1)
        try:
            await _channel_of(controller)
            release = asyncio.Event()
            ran = []

            async def blocking() -> None:
                await release.wait()

            async def queued() -> str:
                ran.append("queued")
                return "done"

            controller.enqueue("blocking", blocking)
            controller.enqueue("queued", queued)
            waiting = asyncio.ensure_future(controller.run("asked", queued, if_failed="failed"))
            await asyncio.sleep(0.1)
            controller.on_session_expired()
            release.set()
            assert await asyncio.wait_for(waiting, _WAIT_S) == "failed"
            await controller.run("sync", _nothing, None)
            assert ran == [] and not controller.active
        finally:
            await controller.stop()
            await zk.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_every_event_the_controller_queues_is_timed_under_a_kafka_controller_state():
    """The names given to enqueue, run and _watch in the controller's source: each has the
    ControllerState whose <state>RateAndTimeMs timer its processing time goes to."""
    names = []
    for node in ast.walk(ast.parse(inspect.getsource(controller_module))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("enqueue", "run", "_watch"):
                name = node.args[0]
                if isinstance(name, ast.JoinedStr):  # an f-string: its constant start
                    name = name.values[0]
                if isinstance(name, ast.Constant):  # not the helpers passing a name on
                    names.append(name.value)
    assert len(names) > 15
    assert [name for name in names if kafka_state_of_event(name) is None] == []
    assert kafka_state_of_event("broker change") == "BrokerChange"  # LeaderElectionRateAndTimeMs
    assert kafka_state_of_event("partition change orders") == "TopicChange"
    assert kafka_state_of_event("sync") is None


def test_leaders_elected_from_outside_the_isr_are_counted_and_each_event_reports_its_times(chroot):
    """Kafka's UncleanLeaderElectionsPerSec and the times of ControllerStats and
    ControllerEventManager: topic t0's ISR is broker 1 alone when it dies, and unclean
    elections are allowed, so t0's partitions get leaders from outside their ISR; the other
    topics' leaders come from their ISRs and are not counted."""
    connect, client = chroot
    t0 = [TopicPartition("t0", p) for p in range(PER_TOPIC)]
    for tp in t0:
        client.create(znodes.partition_state_path(tp), znodes.encode_partition_state(LeaderIsr(1, 0, (1,), 1)),
                      makepath=True)

    async def scenario():
        zk = ZkClient(connect, 6000)
        await zk.start()
        controller = Controller(zk, ControllerSettings(broker_id=2, inter_broker_listener="PLAINTEXT",
                                                       auto_leader_rebalance=False, unclean_leader_election=True))
        events = []
        controller.on_event = lambda name, queued_s, processed_s: events.append((name, queued_s, processed_s))
        controller.start()
        try:
            recorder = Recorder(await _channel_of(controller))
            await recorder.settle(controller, lambda sent: len(sent) >= 2 * len(BROKERS))
            assert controller.unclean_leader_elections == 0
            recorder.start()
            client.delete(znodes.broker_path(1))
            await recorder.settle(controller, lambda sent: any(api == ApiKey.LEADER_AND_ISR for _, api, _ in sent))
            states = controller._ctx.states
            assert all(states[tp].leader == 2 and states[tp].isr == (2,) for tp in t0)
            assert sum(1 for tp, state in states.items() if tp.topic != "t0" and state.leader != 1) == (TOPICS - 1) * PER_TOPIC
            assert controller.unclean_leader_elections == PER_TOPIC
            names = [name for name, _, _ in events]
            assert names[0] == "elect" and "broker change" in names and names[-1] == "sync"
            assert all(queued_s >= 0 and processed_s >= 0 for _, queued_s, processed_s in events)
            assert controller.queued_events() == 0
        finally:
            await controller.stop()
            await zk.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))
