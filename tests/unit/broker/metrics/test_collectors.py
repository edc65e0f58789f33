"""The broker's metric families read from the registry of an in-process broker after requests
through its dispatcher (no sockets): each count and gauge moves with the work that should move it."""

import asyncio
import datetime

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.metrics.collectors import controller_event_families, rate_and_time_name, request_part, zookeeper_families
from broker.metrics.stats import RequestStats, SendTimer
from broker.security.quotas import PRODUCER_BYTE_RATE, QuotaEntity
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import Record, build_batch
from replication.partition_state import PartitionState
from storage.topic_partition import TopicPartition
from tests.in_process import Client, running_broker
from tests.unit.broker.test_group_handlers import stable_member

MS = datetime.timedelta(milliseconds=1)
TOPIC = "orders"
ME, FOLLOWER = 0, 1


def value(broker, name: str, **labels) -> float | None:
    return broker.metrics.registry.get_sample_value(name, labels)


def batch(count: int) -> bytes:
    return bytes(build_batch([Record(i, 1_000 + i, b"k", b"v%d" % i) for i in range(count)]))


async def produce(client: Client, topic: str, partition: int, records: bytes):
    request = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=5_000 * MS,
        topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition, records=records),)),),
    )
    return await client.call(ApiKey.PRODUCE, 9, request)


async def fetch(client: Client, topic: str, partition: int, offset: int, max_wait_ms: int = 0):
    """A consumer's fetch; with `max_wait_ms`, a long poll for data beyond `offset`."""
    request = FetchRequest(
        replica_id=-1,
        max_wait=max_wait_ms * MS,
        min_bytes=1,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20),),
            ),
        ),
        forgotten_topics_data=(),
    )
    return await client.call(ApiKey.FETCH, 12, request)


def run(tmp_path, scenario, topic_configs: dict | None = None):
    async def main():
        async with running_broker(tmp_path, {"group.initial.rebalance.delay.ms": "0"}) as broker:
            await broker.topics.create(TOPIC, 2, topic_configs or {})
            return await scenario(broker, Client(broker, client_id="app"))

    return asyncio.run(main())


def test_produce_and_fetch_count_messages_bytes_and_requests_per_topic_and_for_the_broker(tmp_path):
    five, three = batch(5), batch(3)

    async def scenario(broker, client):
        await produce(client, TOPIC, 0, five)
        await produce(client, TOPIC, 1, three)
        refused = await produce(client, TOPIC, 7, three)  # no such partition
        fetched = await fetch(client, TOPIC, 0, 0)
        assert refused.responses[0].partition_responses[0].error_code != ErrorCode.none
        assert fetched.responses[0].partitions[0].error_code == ErrorCode.none
        per_topic = {
            metric: value(broker, f"kafka_server_brokertopicmetrics_{metric}_total", topic=TOPIC)
            for metric in (
                "messagesin", "bytesin", "bytesrejected", "totalproducerequests", "failedproducerequests",
                "totalfetchrequests", "failedfetchrequests", "bytesout",
            )
        }
        return per_topic, value(broker, "kafka_server_brokertopicmetrics_messagesin_total")

    per_topic, broker_messages = run(tmp_path, scenario)
    assert per_topic == {
        "messagesin": 8,
        "bytesin": len(five) + len(three),
        "bytesrejected": len(three),
        "totalproducerequests": 3,
        "failedproducerequests": 1,
        "totalfetchrequests": 1,
        "failedfetchrequests": 0,
        "bytesout": len(five),
    }
    assert broker_messages == 8


def test_a_deleted_topic_leaves_the_per_topic_counts_and_stays_in_the_broker_totals(tmp_path):
    async def scenario(broker, client):
        await produce(client, TOPIC, 0, batch(4))
        await broker.topics.delete(TOPIC)
        return (
            value(broker, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC),
            value(broker, "kafka_server_brokertopicmetrics_messagesin_total"),
        )

    assert run(tmp_path, scenario) == (None, 4)


def test_requests_are_counted_by_name_and_version_and_a_consumer_fetch_also_as_fetch_consumer(tmp_path):
    async def scenario(broker, client):
        for _ in range(2):
            await produce(client, TOPIC, 0, batch(1))
            # What the connection does once the response is out (no connection here).
            client.session.send_timer.sent(0.004)
        await fetch(client, TOPIC, 0, 0)
        unsent = value(broker, "kafka_network_requestmetrics_totaltimems_count", request="Fetch")
        counts = {
            request: value(broker, "kafka_network_requestmetrics_requests_total", request=request, version=version)
            for request, version in (("Produce", "9"), ("Fetch", "12"), ("FetchConsumer", "12"), ("FetchFollower", "12"))
        }
        times = {
            metric: value(broker, f"kafka_network_requestmetrics_{metric}_count", request="Produce")
            for metric in ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems", "totaltimems")
        }
        sent = value(broker, "kafka_network_requestmetrics_responsesendtimems_sum", request="Produce")
        return counts, times, sent, unsent

    counts, times, sent, unsent = run(tmp_path, scenario)
    assert counts == {"Produce": 2, "Fetch": 1, "FetchConsumer": 1, "FetchFollower": None}
    assert times == dict.fromkeys(times, 2)
    assert sent == 8
    assert unsent == 0  # a response not sent yet has no send time nor total time


def test_fetch_is_the_sum_of_consumer_and_follower_fetches():
    """A fetch is recorded once, as FetchConsumer or FetchFollower; Fetch is made when read."""
    stats = RequestStats()
    SendTimer(stats.record("FetchConsumer", 12, 1.0, 2.0, 3.0), 6.0).sent(0.001)
    SendTimer(stats.record("FetchFollower", 12, 0.5, 0.5, 0.5), 1.5).sent(0.0005)
    stats.record("FetchFollower", 11, 0.0, 0.0, 0.0)
    families = {family.name: family for family in request_part(stats)()}

    def sample(family: str, suffix: str, request: str, **labels) -> float | None:
        wanted = {"request": request, **labels}
        return next((s.value for s in families[family].samples
                     if s.name == family + suffix and all(s.labels.get(k) == v for k, v in wanted.items())), None)

    requests = "kafka_network_requestmetrics_requests"
    assert sample(requests, "_total", "Fetch", version="12") == 2
    assert sample(requests, "_total", "Fetch", version="11") == 1
    assert sample("kafka_network_requestmetrics_localtimems", "_sum", "Fetch") == 2.5
    assert sample("kafka_network_requestmetrics_totaltimems", "_count", "Fetch") == 2
    assert sample("kafka_network_requestmetrics_totaltimems", "_sum", "Fetch") == 6.0 + 1.0 + 1.5 + 0.5


def test_a_long_poll_fetch_spends_its_wait_in_remote_time(tmp_path):
    async def scenario(broker, client):
        await fetch(client, TOPIC, 0, 0, max_wait_ms=50)  # nothing to read: waits out max_wait
        return value(broker, "kafka_network_requestmetrics_remotetimems_sum", request="FetchConsumer")

    assert run(tmp_path, scenario) >= 50


def test_log_gauges_give_each_partitions_size_segments_and_offsets(tmp_path):
    records = batch(6)

    async def scenario(broker, client):
        await produce(client, TOPIC, 1, records)
        labels = {"topic": TOPIC, "partition": "1"}
        return {
            metric: value(broker, f"kafka_log_log_{metric}", **labels)
            for metric in ("size", "numlogsegments", "logstartoffset", "logendoffset")
        }

    assert run(tmp_path, scenario) == {"size": len(records), "numlogsegments": 1, "logstartoffset": 0, "logendoffset": 6}


def test_replica_manager_gauges_count_leaders_and_under_replicated_and_under_min_isr_partitions(tmp_path):
    async def scenario(broker, client):
        tp = TopicPartition(TOPIC, 0)
        # Led here with a follower outside the ISR: under-replicated, and under min.insync.replicas=2.
        state = PartitionState(tp, 1, ME, 1, (ME,), 0, (ME, FOLLOWER))
        broker.replica_manager.become_leader_or_follower(1, [state], {}, ME)
        return {
            metric: value(broker, f"kafka_server_replicamanager_{metric}")
            for metric in (
                "leadercount", "partitioncount", "underreplicatedpartitions", "underminisrpartitioncount",
                "atminisrpartitioncount", "offlinereplicacount",
            )
        } | {"partition": value(broker, "kafka_cluster_partition_underreplicated", topic=TOPIC, partition="0")}

    assert run(tmp_path, scenario, {"min.insync.replicas": "2"}) == {
        "leadercount": 2,
        "partitioncount": 2,
        "underreplicatedpartitions": 1,
        "underminisrpartitioncount": 1,
        # Partition 1, standalone: one replica caps min.insync.replicas at 1 (Kafka's effectiveMinIsr).
        "atminisrpartitioncount": 1,
        "offlinereplicacount": 0,
        "partition": 1,
    }


class _IsrWriter:
    """Stores every ISR it is given (ZooKeeper's part in cluster mode)."""

    def __init__(self) -> None:
        self.version = 0

    async def write_isr(self, tp, leader_epoch, isr, zk_version):
        self.version += 1
        return self.version


def test_isr_shrinks_and_expands_stored_by_the_leader_are_counted(tmp_path):
    async def scenario(broker, client):
        tp = TopicPartition(TOPIC, 0)
        broker.replica_manager.set_isr_writer(_IsrWriter())
        broker.replica_manager.become_leader_or_follower(
            1, [PartitionState(tp, 1, ME, 1, (ME, FOLLOWER), 0, (ME, FOLLOWER))], {}, ME
        )
        await produce(client, TOPIC, 0, batch(2))
        partition = broker.replica_manager.partitions[tp]
        # The follower has not fetched for longer than any lag allowed: out of the ISR.
        partition.maybe_shrink_isr(0, now_ms=partition.clock() + 60_000)
        await partition._isr_write
        shrunk = partition.isr
        broker.replica_manager.record_follower_fetch(partition, FOLLOWER, partition.log.log_end_offset)
        await partition._isr_write
        return (
            shrunk,
            partition.isr,
            value(broker, "kafka_server_replicamanager_isrshrinks_total"),
            value(broker, "kafka_server_replicamanager_isrexpands_total"),
        )

    assert run(tmp_path, scenario) == ((ME,), (ME, FOLLOWER), 1, 1)


def test_records_sent_to_a_follower_count_as_replication_bytes_out_and_not_as_the_topics_bytes_out(tmp_path):
    five = batch(5)

    async def scenario(broker, client):
        tp = TopicPartition(TOPIC, 0)
        broker.replica_manager.set_isr_writer(_IsrWriter())
        broker.replica_manager.become_leader_or_follower(
            1, [PartitionState(tp, 1, ME, 1, (ME, FOLLOWER), 0, (ME, FOLLOWER))], {}, ME
        )
        await produce(client, TOPIC, 0, five)
        request = FetchRequest(
            replica_id=FOLLOWER,
            max_wait=0 * MS,
            min_bytes=1,
            topics=(
                FetchTopic(topic=TOPIC, partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),
            ),
            forgotten_topics_data=(),
        )
        fetched = await client.call(ApiKey.FETCH, 12, request)
        assert fetched.responses[0].partitions[0].error_code == ErrorCode.none
        return (
            value(broker, "kafka_server_brokertopicmetrics_replicationbytesout_total"),
            value(broker, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC),
            value(broker, "kafka_server_brokertopicmetrics_replicationbytesin_total"),  # it follows nothing
        )

    assert run(tmp_path, scenario) == (len(five), 0, 0)


def test_controller_gauges_of_a_standalone_broker_count_it_active_and_its_offline_partitions(tmp_path):
    async def scenario(broker, client):
        before = value(broker, "kafka_controller_kafkacontroller_offlinepartitionscount")
        broker.log_manager.handle_io_error(TopicPartition(TOPIC, 0), OSError(5, "Input/output error"))
        return (
            value(broker, "kafka_controller_kafkacontroller_activecontrollercount"),
            value(broker, "kafka_controller_kafkacontroller_globalpartitioncount"),
            before,
            value(broker, "kafka_controller_kafkacontroller_offlinepartitionscount"),
            value(broker, "kafka_log_logmanager_offlinelogdirectorycount"),
            value(broker, "kafka_log_logmanager_logdirectoryoffline", logdirectory=str(tmp_path)),
        )

    # Every partition is in the one log dir, which the I/O error took offline.
    assert run(tmp_path, scenario) == (1, 2, 0, 2, 1, 1)


def test_group_states_and_consumer_lag_of_the_groups_coordinated_here(tmp_path):
    async def scenario(broker, client):
        await produce(client, TOPIC, 0, batch(10))
        member_id, generation = await stable_member(client, "readers")
        commit = OffsetCommitRequest(
            group_id="readers",
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            topics=(
                OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=(OffsetCommitRequestPartition(partition_index=0, committed_offset=4, committed_metadata=""),),
                ),
            ),
        )
        committed = await client.call(ApiKey.OFFSET_COMMIT, 8, commit)
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none
        labels = {"consumergroup": "readers", "topic": TOPIC, "partition": "0"}
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        return (
            value(broker, prefix + "numgroups"),
            value(broker, prefix + "numgroupsstable"),
            value(broker, prefix + "numoffsets"),
            value(broker, "kafka_consumergroup_current_offset", **labels),
            value(broker, "kafka_consumergroup_lag", **labels),
            value(broker, "kafka_consumergroup_lag_sum", consumergroup="readers", topic=TOPIC),
            value(broker, "kafka_topic_partition_current_offset", topic=TOPIC, partition="0"),
        )

    assert run(tmp_path, scenario) == (1, 1, 1, 4, 6, 6, 10)


def test_connections_per_listener_come_from_the_broker(tmp_path):
    async def scenario(broker, client):
        return value(
            broker, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT", networkprocessor="0"
        )

    assert run(tmp_path, scenario) == 0


def test_controller_event_timers_are_named_as_kafkas_controller_stats():
    assert rate_and_time_name("BrokerChange") == "LeaderElectionRateAndTimeMs"
    assert rate_and_time_name("IsrChange") == "IsrChangeRateAndTimeMs"


def test_zookeeper_and_controller_event_families_appear_in_cluster_mode_only(tmp_path):
    async def scenario(broker, client):
        return list(zookeeper_families(broker, broker.metrics)), list(controller_event_families(broker, broker.metrics))

    assert run(tmp_path, scenario) == ([], [])


def test_a_waiting_long_poll_is_in_the_fetch_purgatory_and_the_broker_state_is_running(tmp_path):
    async def scenario(broker, client):
        waiting = asyncio.ensure_future(fetch(client, TOPIC, 0, 0, max_wait_ms=10_000))
        for _ in range(500):  # until the fetch waits for data (at most 5 s)
            if broker.replica_manager.waiting_requests()[0]:
                break
            await asyncio.sleep(0.01)
        during = [
            value(broker, f"kafka_server_delayedoperationpurgatory_{name}", delayedoperation="Fetch")
            for name in ("purgatorysize", "numdelayedoperations")
        ]
        await produce(client, TOPIC, 0, batch(1))  # data: the fetch is answered
        await waiting
        after = value(broker, "kafka_server_delayedoperationpurgatory_purgatorysize", delayedoperation="Fetch")
        return during, after, value(broker, "kafka_server_kafkaserver_brokerstate")

    assert run(tmp_path, scenario) == ([1, 1], 0, 3)


def test_fetch_session_gauges_count_sessions_and_their_partitions(tmp_path):
    async def scenario(broker, client):
        request = FetchRequest(
            replica_id=-1,
            max_wait=0 * MS,
            min_bytes=1,
            session_id=0,
            session_epoch=0,  # asks for a session
            topics=(FetchTopic(topic=TOPIC, partitions=tuple(
                FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in (0, 1)
            )),),
            forgotten_topics_data=(),
        )
        await client.call(ApiKey.FETCH, 12, request)
        return [
            value(broker, f"kafka_server_fetchsessioncache_{name}")
            for name in (
                "numincrementalfetchsessions", "numincrementalfetchpartitionscached",
                "incrementalfetchsessionevictions_total",
            )
        ]

    assert run(tmp_path, scenario) == [1, 2, 0]


def test_a_snapshot_reads_the_state_when_taken_and_builds_the_families_later_on_any_thread(tmp_path):
    async def scenario(broker, client):
        await produce(client, TOPIC, 0, batch(2))
        build = broker.metrics.snapshot()
        await produce(client, TOPIC, 0, batch(3))  # after the snapshot: not in it
        built = await asyncio.to_thread(build)
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for family in built for s in family.samples}
        labels = (("partition", "0"), ("topic", TOPIC))
        return (
            samples[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", TOPIC),))],
            samples[("kafka_log_log_logendoffset", labels)],
            ("process_open_fds", ()) in samples,
            value(broker, "kafka_log_log_logendoffset", topic=TOPIC, partition="0"),
        )

    assert run(tmp_path, scenario) == (2, 2, True, 5)


def test_quota_families_give_a_throttled_producers_byte_rate_and_throttle_time_once_a_quota_is_set(tmp_path):
    async def scenario(broker, client):
        await produce(client, TOPIC, 0, batch(3))
        before = value(broker, "kafka_server_quota_byte_rate", resource="Produce", user="", clientid="app")
        broker.client_quotas.set_entity(QuotaEntity(None, "app"), {PRODUCER_BYTE_RATE: 1.0})
        for _ in range(2):
            await produce(client, TOPIC, 0, batch(3))
        labels = {"resource": "Produce", "user": "", "clientid": "app"}
        return (
            before,
            value(broker, "kafka_server_quota_byte_rate", **labels),
            value(broker, "kafka_server_quota_throttle_time", **labels),
            value(broker, "kafka_server_quota_byte_rate", resource="Fetch", user="", clientid="app"),
        )

    before, byte_rate, throttle_ms, fetch_rate = run(tmp_path, scenario)
    assert before is None  # no quota set: Kafka keeps no quota sensors, nor does logway
    assert byte_rate > 0
    assert throttle_ms > 0  # 1 B/s: the second produce is throttled
    assert fetch_rate is None  # no fetch quota in use
