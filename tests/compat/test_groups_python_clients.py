"""Consumer groups with auto-commit, in kafka-python and aiokafka, against a real broker process
over real sockets. Two members share a four-partition topic and commit only through auto-commit
(a short interval, no explicit commit anywhere); the committed offsets, read with each library's
own admin client, catch up with what was consumed. Two new members then resume after those
offsets: they may read again what was consumed after the last auto-commit (at-least-once), but
nothing before it, and they leave no gap.
"""

import asyncio
import threading
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import ConsumerRebalanceListener as AioRebalanceListener
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from tests.compat.group_support import (
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    TIMEOUT_S,
    create_topic,
    is_balanced,
    value_of,
    wait_until,
)
from tests.harness import unique_topic

pytestmark = pytest.mark.compat

PARTITIONS = 4
PER_PHASE = 25  # records per partition produced before each pair of members starts
AUTO_COMMIT_INTERVAL_MS = 100

# What both libraries call their group settings.
MEMBER_SETTINGS = {
    "enable_auto_commit": True,
    "auto_commit_interval_ms": AUTO_COMMIT_INTERVAL_MS,
    "auto_offset_reset": "earliest",
    "session_timeout_ms": SESSION_TIMEOUT_MS,
    "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
    # The rebalance timeout: a member that fails to rejoin holds a rebalance up this long at most.
    "max_poll_interval_ms": 15_000,
    "fetch_max_wait_ms": 200,
    "request_timeout_ms": 15_000,
}


def assert_resumed_after_commits(phase_one, phase_two, committed: dict[int, int]) -> None:
    """The first members read all of the first phase; the second ones started each partition at
    its committed offset (re-reading nothing before it) and read on without a gap."""
    assert set(phase_one) == {(p, o) for p in range(PARTITIONS) for o in range(PER_PHASE)}
    for partition in range(PARTITIONS):
        offsets = {o for p, o in phase_two if p == partition}
        assert offsets == set(range(committed[partition], 2 * PER_PHASE)), partition


def assert_values(records) -> None:
    assert all(value == value_of(p, o) for p, o, value in records)


# --------------------------------------------------------------------------- kafka-python


# kafka-python 3.0's group leader always joins twice: its first assignment is made before its
# metadata snapshot knows the topic, and the snapshot's update asks for a rejoin. Should a poll()
# time out while that second JoinGroup/SyncGroup is in flight, the consumer drops the finished
# join (the leader's new snapshot has made need_rejoin() false meanwhile) and never takes its
# assignment nor heartbeats again, until its session expires. Polls long enough for a whole
# rebalance keep clear of that.
POLL_TIMEOUT_MS = 1000


class KafkaPythonMember(threading.Thread):
    """A kafka-python group member in a thread of its own: KafkaConsumer is not thread safe, so
    it is made, polled and closed there. Records its assignment and every record it got."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.assignment: frozenset[int] = frozenset()
        self.records: list[tuple[int, int, bytes]] = []
        self.failure: BaseException | None = None
        self._settings = {
            "bootstrap_servers": bootstrap,
            "group_id": group,
            "client_id": name,
            **MEMBER_SETTINGS,
        }
        self._topic = topic
        self.stopping = threading.Event()
        self.start()

    def run(self) -> None:
        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                member.assignment -= {tp.partition for tp in revoked}

            def on_partitions_assigned(self, assigned):
                member.assignment = frozenset(tp.partition for tp in assigned)

        try:
            consumer = KafkaConsumer(**self._settings)
        except BaseException as exc:  # handed to the test thread by stop_all()
            self.failure = exc
            return
        try:
            consumer.subscribe([self._topic], listener=Listener())
            deadline = time.monotonic() + 3 * TIMEOUT_S
            while not self.stopping.is_set() and time.monotonic() < deadline:
                for batch in consumer.poll(timeout_ms=POLL_TIMEOUT_MS).values():
                    self.records.extend((r.partition, r.offset, r.value) for r in batch)
        except BaseException as exc:
            self.failure = exc
        finally:
            # Without a last commit: what stays committed is what auto-commit stored meanwhile.
            consumer.close(autocommit=False, timeout_ms=10_000)


def stop_all(members: list[KafkaPythonMember]) -> None:
    """Stop the members together (each finishes its poll first) and raise what failed in them."""
    for member in members:
        member.stopping.set()
    for member in members:
        member.join(TIMEOUT_S)
        assert not member.is_alive(), f"{member.name} did not stop"
        if member.failure is not None:
            raise member.failure


def kafka_python_committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        partitions = [KpTopicPartition(topic, p) for p in range(PARTITIONS)]
        offsets = admin.list_group_offsets({group: partitions})[group]
    finally:
        admin.close()
    return {tp.partition: committed.offset for tp, committed in offsets.items()}


def kafka_python_produce(bootstrap: str, topic: str, start: int) -> None:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        # kafka-python 3 turns idempotence on by default, which needs InitProducerId (issue 6).
        enable_idempotence=False,
        request_timeout_ms=10_000,
        max_block_ms=TIMEOUT_S * 1000,
    )
    try:
        futures = [
            producer.send(topic, value_of(p, offset), partition=p)
            for p in range(PARTITIONS)
            for offset in range(start, start + PER_PHASE)
        ]
        producer.flush(TIMEOUT_S)
        offsets = [f.get(TIMEOUT_S).offset for f in futures]
        assert offsets == list(range(start, start + PER_PHASE)) * PARTITIONS
    finally:
        producer.close(timeout=TIMEOUT_S)


def run_kafka_python_members(
    bootstrap: str, group: str, topic: str, read_until: int
) -> list[tuple[int, int, bytes]]:
    """Two members, balanced before the next PER_PHASE records are produced, reading until every
    partition is read to `read_until` and auto-commit has stored that; returns what they got."""
    members = [KafkaPythonMember(bootstrap, group, topic, f"kafka-python-{i}") for i in range(2)]
    try:
        wait_until(lambda: balanced(members), "2 partitions each")
        kafka_python_produce(bootstrap, topic, start=read_until - PER_PHASE)
        wait_until(lambda: all_read(members, read_until), f"every partition read to {read_until}")
        wait_until(
            lambda: kafka_python_committed(bootstrap, group, topic) == at(read_until),
            "auto-commit of everything consumed",
        )
    finally:
        stop_all(members)
    return [record for m in members for record in m.records]


def at(offset: int) -> dict[int, int]:
    """The same offset for every partition."""
    return dict.fromkeys(range(PARTITIONS), offset)


def balanced(members) -> bool:
    return is_balanced((m.assignment for m in members), PARTITIONS)


def all_read(members, end: int) -> bool:
    read = {(p, o) for m in members for p, o, _ in list(m.records)}
    return all((p, end - 1) in read for p in range(PARTITIONS))


def test_kafka_python_members_resume_after_the_auto_committed_offsets(group_broker):
    bootstrap = group_broker.bootstrap
    topic, group = unique_topic("kp-auto"), unique_topic("kp-auto-group")
    create_topic(bootstrap, topic, PARTITIONS)

    phase_one = run_kafka_python_members(bootstrap, group, topic, read_until=PER_PHASE)
    committed = kafka_python_committed(bootstrap, group, topic)
    phase_two = run_kafka_python_members(bootstrap, group, topic, read_until=2 * PER_PHASE)

    assert committed == at(PER_PHASE)
    assert_resumed_after_commits([r[:2] for r in phase_one], [r[:2] for r in phase_two], committed)
    assert_values(phase_one + phase_two)


# -------------------------------------------------------------------------------- aiokafka


class AiokafkaMember:
    """An aiokafka group member reading in a task; records its assignment and every record."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self.assignment: frozenset[int] = frozenset()
        self.records: list[tuple[int, int, bytes]] = []
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id=name, **MEMBER_SETTINGS
        )
        self._topic = topic
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        member = self

        class Listener(AioRebalanceListener):
            def on_partitions_revoked(self, revoked):
                member.assignment -= {tp.partition for tp in revoked}

            def on_partitions_assigned(self, assigned):
                member.assignment = frozenset(tp.partition for tp in assigned)

        self.consumer.subscribe([self._topic], listener=Listener())
        await self.consumer.start()
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:  # until stop() cancels it; the whole scenario runs under asyncio.wait_for
            for batch in (await self.consumer.getmany(timeout_ms=100)).values():
                self.records.extend((r.partition, r.offset, r.value) for r in batch)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.consumer.stop()


async def aiokafka_committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    await admin.start()
    try:
        partitions = [AioTopicPartition(topic, p) for p in range(PARTITIONS)]
        offsets = await admin.list_consumer_group_offsets(group, partitions=partitions)
    finally:
        await admin.close()
    return {tp.partition: committed.offset for tp, committed in offsets.items()}


async def aiokafka_produce(bootstrap: str, topic: str, start: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=10_000)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value_of(p, offset), partition=p)
            for p in range(PARTITIONS)
            for offset in range(start, start + PER_PHASE)
        ]
        offsets = [(await f).offset for f in futures]
        assert offsets == list(range(start, start + PER_PHASE)) * PARTITIONS
    finally:
        await producer.stop()


async def async_wait_until(condition, what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"no {what} within {timeout_s} s")
        await asyncio.sleep(0.1)


async def run_aiokafka_members(
    bootstrap: str, group: str, topic: str, read_until: int
) -> list[tuple[int, int, bytes]]:
    """As run_kafka_python_members, with aiokafka."""
    members = [AiokafkaMember(bootstrap, group, topic, f"aiokafka-{i}") for i in range(2)]

    async def shared() -> bool:
        return balanced(members)

    async def read() -> bool:
        return all_read(members, read_until)

    async def committed_all() -> bool:
        return await aiokafka_committed(bootstrap, group, topic) == at(read_until)

    try:
        for member in members:
            await member.start()
        await async_wait_until(shared, "2 partitions each")
        await aiokafka_produce(bootstrap, topic, start=read_until - PER_PHASE)
        await async_wait_until(read, f"every partition read to {read_until}")
        await async_wait_until(committed_all, "auto-commit of everything consumed")
    finally:
        for member in members:
            await member.stop()
    return [record for m in members for record in m.records]


def test_aiokafka_members_resume_after_the_auto_committed_offsets(group_broker):
    bootstrap = group_broker.bootstrap
    topic, group = unique_topic("aio-auto"), unique_topic("aio-auto-group")
    create_topic(bootstrap, topic, PARTITIONS)

    async def scenario():
        phase_one = await run_aiokafka_members(bootstrap, group, topic, read_until=PER_PHASE)
        committed = await aiokafka_committed(bootstrap, group, topic)
        phase_two = await run_aiokafka_members(bootstrap, group, topic, read_until=2 * PER_PHASE)
        return phase_one, committed, phase_two

    async def bounded():
        return await asyncio.wait_for(scenario(), 3 * TIMEOUT_S)

    phase_one, committed, phase_two = asyncio.run(bounded())
    assert committed == at(PER_PHASE)
    assert_resumed_after_commits([r[:2] for r in phase_one], [r[:2] for r in phase_two], committed)
    assert_values(phase_one + phase_two)
