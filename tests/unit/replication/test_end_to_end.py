"""Three in-process brokers in one event loop, replicating over real loopback sockets.

No ZooKeeper: the test plays the controller, calling become_leader_or_follower on each broker,
and an in-test IsrWriter keeps the partition state the way the state znode would (compare-and-set
on its version). Produce and Fetch go over the wire with the broker client.
"""

import asyncio
import dataclasses
import datetime
import time

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.server import Broker
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from replication.broker_client import BrokerClient
from replication.partition_state import LeaderEndpoint, PartitionState
from storage.topic_partition import TopicPartition
from tests.in_process import broker_config
from tests.unit.storage.conftest import batch

TP = TopicPartition("replicated", 0)
SETTINGS = {
    "replica.lag.time.max.ms": "600",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "50",
    "replica.high.watermark.checkpoint.interval.ms": "100",
}


class RecordingIsrWriter:
    """The partition state znode: ISR writes succeed only at its current version."""

    def __init__(self, state: PartitionState) -> None:
        self.state = state
        self.writes: list[tuple[int, ...]] = []

    def control(self, state: PartitionState) -> None:
        self.state = state

    async def write_isr(self, tp, leader_epoch, isr, zk_version):
        if zk_version != self.state.zk_version or leader_epoch != self.state.leader_epoch:
            return None
        self.state = self.state._replace(isr=tuple(isr), zk_version=zk_version + 1)
        self.writes.append(tuple(isr))
        return self.state.zk_version


class Cluster:
    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.brokers: dict[int, Broker] = {}
        self.state = PartitionState(TP, 1, 1, 0, (1, 2, 3), 0, (1, 2, 3), is_new=True)
        self.isr_writer = RecordingIsrWriter(self.state)
        self.controller_epoch = 1

    async def start(self, broker_id: int) -> Broker:
        config = broker_config(self.tmp_path / f"broker-{broker_id}", {"broker.id": str(broker_id), **SETTINGS})
        broker = self.brokers[broker_id] = Broker(config)
        await broker.start()
        broker.replica_manager.set_isr_writer(self.isr_writer)
        return broker

    async def stop(self, broker_id: int) -> None:
        await self.brokers.pop(broker_id).stop()

    def endpoint(self, broker_id: int) -> LeaderEndpoint:
        return LeaderEndpoint(broker_id, "127.0.0.1", self.brokers[broker_id].port)

    def elect(self, leader: int, isr: tuple[int, ...]) -> None:
        """A new leader epoch, as the controller's election writes it, sent to every broker."""
        current = self.isr_writer.state
        self.state = current._replace(
            leader=leader, leader_epoch=current.leader_epoch + 1, isr=isr, zk_version=current.zk_version + 1
        )
        self.isr_writer.control(self.state)
        self.send_leader_and_isr()

    def send_leader_and_isr(self, broker_ids=None) -> None:
        leaders = {self.state.leader: self.endpoint(self.state.leader)}
        for broker_id in broker_ids or list(self.brokers):
            errors = self.brokers[broker_id].replica_manager.become_leader_or_follower(
                self.controller_epoch, [self.state], leaders, broker_id
            )
            assert errors == {TP: ErrorCode.none}

    def log(self, broker_id: int):
        return self.brokers[broker_id].replica_manager.partitions[TP].log

    def log_bytes(self, broker_id: int) -> bytes:
        log = self.log(broker_id)
        region = log.read(log.log_start_offset, 1 << 30, log.log_end_offset, True)
        return b"" if region is None else region.read()

    async def produce(self, broker_id: int, *values: bytes, acks: int = -1, timeout_ms: int = 5000):
        client = BrokerClient("127.0.0.1", self.brokers[broker_id].port, "producer", 5, 10)
        try:
            response = await client.send(
                ApiKey.PRODUCE,
                9,
                ProduceRequest(
                    transactional_id=None,
                    acks=acks,
                    timeout=datetime.timedelta(milliseconds=timeout_ms),
                    topic_data=(
                        TopicProduceData(
                            name=TP.topic,
                            partition_data=(PartitionProduceData(index=0, records=bytes(batch(*values))),),
                        ),
                    ),
                ),
            )
        finally:
            await client.close()
        return response.responses[0].partition_responses[0]

    async def consume(self, broker_id: int):
        client = BrokerClient("127.0.0.1", self.brokers[broker_id].port, "consumer", 5, 10)
        try:
            response = await client.send(
                ApiKey.FETCH,
                12,
                FetchRequest(
                    max_wait=datetime.timedelta(0),
                    min_bytes=1,
                    topics=(
                        FetchTopic(
                            topic=TP.topic,
                            partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),),
                        ),
                    ),
                    forgotten_topics_data=(),
                ),
            )
        finally:
            await client.close()
        return response.topics[0].partitions[0]

    def set_min_insync(self, broker_id: int, count: int) -> None:
        log = self.log(broker_id)
        log.update_config(dataclasses.replace(log.config, min_insync_replicas=count))


async def on_three_brokers(tmp_path, scenario) -> None:
    """`scenario(cluster)` with brokers 1, 2 and 3 started, all stopped after."""
    cluster = Cluster(tmp_path)
    for broker_id in (1, 2, 3):
        await cluster.start(broker_id)
    try:
        await scenario(cluster)
    finally:
        for broker_id in list(cluster.brokers):
            await cluster.stop(broker_id)


async def eventually(predicate, timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_three_brokers_replicate_shrink_the_isr_and_fail_over_without_diverging(tmp_path):

    async def scenario(cluster: Cluster):
        cluster.send_leader_and_isr()

        # acks=all is answered once both followers have the batch.
        for n in range(5):
            answer = await cluster.produce(1, b"a%d" % n, b"b%d" % n)
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 2 * n)
        leader_log = cluster.log(1)
        assert leader_log.high_watermark == 10
        for follower in (2, 3):
            assert cluster.log(follower).log_end_offset == 10
        await eventually(lambda: all(cluster.log(b).high_watermark == 10 for b in (2, 3)), what="follower HWs")
        consumed = await cluster.consume(1)
        assert consumed.high_watermark == 10 and len(consumed.records) == len(cluster.log_bytes(1))
        # An in-sync follower serves consumers of Fetch v11+ (KIP-392) up to the HW it learnt.
        from_follower = await cluster.consume(2)
        assert (from_follower.error_code, from_follower.high_watermark) == (ErrorCode.none, 10)
        assert bytes(from_follower.records) == bytes(consumed.records)

        # A follower stops. The next write waits for it until, replica.lag.time.max.ms after it
        # was last caught up, it leaves the ISR; then the write commits.
        await cluster.stop(3)
        assert cluster.isr_writer.writes == []
        assert (await cluster.produce(1, b"c")).error_code == ErrorCode.none
        assert cluster.isr_writer.writes == [(1, 2)]
        assert cluster.brokers[1].replica_manager.partitions[TP].isr == (1, 2)
        cluster.set_min_insync(1, 2)
        assert (await cluster.produce(1, b"d")).error_code == ErrorCode.none
        cluster.set_min_insync(1, 3)
        refused = await cluster.produce(1, b"refused")
        assert refused.error_code == ErrorCode.not_enough_replicas
        cluster.set_min_insync(1, 1)
        assert leader_log.log_end_offset == 12

        # The leader takes writes its follower never gets, then loses leadership.
        cluster.brokers[2].replica_manager.fetchers.remove_partitions([TP])
        unreplicated = await cluster.produce(1, b"lost-1", b"lost-2", acks=1)
        assert unreplicated.error_code == ErrorCode.none
        timed_out = await cluster.produce(1, b"lost-3", timeout_ms=200)
        assert timed_out.error_code == ErrorCode.request_timed_out
        assert leader_log.log_end_offset == 15 and leader_log.high_watermark == 12
        cluster.elect(leader=2, isr=(2,))
        assert (await cluster.produce(1, b"late")).error_code == ErrorCode.not_leader_or_follower
        for n in range(3):
            assert (await cluster.produce(2, b"new-%d" % n, acks=1)).error_code == ErrorCode.none

        # The old leader truncates its unreplicated tail by epoch and follows: identical logs.
        await eventually(lambda: cluster.log(1).log_end_offset == cluster.log(2).log_end_offset == 15, what="catch-up")
        assert cluster.log_bytes(1) == cluster.log_bytes(2)
        assert cluster.log(1).leader_epochs.entries == cluster.log(2).leader_epochs.entries == ((0, 0), (1, 12))
        await eventually(lambda: cluster.isr_writer.writes[-1:] == [(2, 1)], what="the old leader rejoining the ISR")
        assert (await cluster.produce(2, b"all")).error_code == ErrorCode.none

        # The stopped broker comes back as a follower and catches up.
        await cluster.start(3)
        cluster.send_leader_and_isr([3])
        await eventually(lambda: cluster.log(3).log_end_offset == 16, what="the restarted follower")
        assert cluster.log_bytes(3) == cluster.log_bytes(2)

    asyncio.run(on_three_brokers(tmp_path, scenario))


class FetchSpy:
    """Records a fetcher's Fetch requests and answers as its client sends them:
    (session_id, session_epoch, partitions sent, answer's error code, partitions answered)."""

    def __init__(self, client) -> None:
        self.calls: list[tuple[int, int, int, ErrorCode, int]] = []
        self._send = client.send
        client.send = self.send

    async def send(self, api_key, version, request):
        response = await self._send(api_key, version, request)
        if api_key == ApiKey.FETCH:
            self.calls.append((
                request.session_id, request.session_epoch, sum(len(t.partitions) for t in request.topics),
                response.error_code, sum(len(t.partitions) for t in response.topics),
            ))
        return response


def test_followers_fetch_in_sessions_and_start_over_when_the_leader_loses_them(tmp_path):

    async def scenario(cluster: Cluster):
        cluster.send_leader_and_isr()
        assert (await cluster.produce(1, b"a", b"b")).error_code == ErrorCode.none
        spy = FetchSpy(cluster.brokers[2].replica_manager.fetchers.fetchers[(1, 0)].client)
        await eventually(lambda: len(spy.calls) >= 3, what="three fetches")
        # Idle: each fetch names no partition in its session, and the answer none either.
        session_id, epoch, sent, error, answered = spy.calls[-1]
        assert session_id != 0 and epoch > 0 and (sent, error, answered) == (0, ErrorCode.none, 0)
        assert session_id in cluster.brokers[1].fetch_sessions.sessions

        # Records still come, and the follower's next fetch names its new fetch offset only.
        assert (await cluster.produce(1, b"c")).error_code == ErrorCode.none
        assert cluster.log(2).log_end_offset == 3

        # The leader loses its sessions (a restart, an eviction): the follower starts over.
        cluster.brokers[1].fetch_sessions.sessions.clear()
        spy.calls.clear()
        assert (await cluster.produce(1, b"d")).error_code == ErrorCode.none
        await eventually(lambda: cluster.log(2).log_end_offset == 4 and cluster.log(3).log_end_offset == 4, what="catch-up")
        assert ErrorCode.fetch_session_id_not_found in [call[3] for call in spy.calls]
        assert cluster.log_bytes(2) == cluster.log_bytes(1)

    asyncio.run(on_three_brokers(tmp_path, scenario))
