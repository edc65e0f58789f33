"""Tiered storage (KIP-405) in a cluster: three brokers and real ZooKeeper sharing one directory
store (a tmp dir: the brokers are local processes, as a shared mount would serve machines). The
brokers share the remote log metadata through __remote_log_metadata, whoever leads its
partitions: a leader killed while copying is succeeded by one that goes on copying after the last
segment in the store, and every record stays readable from offset 0 with confluent-kafka; a
broker whose data dir is wiped rejoins and catches up from its leader's local log start (the
state of the remote segment before it taken from the store), fetching only the local tail;
deleting the topic through the controller removes its remote data; a reassignment copies only the
local tail to the new replica."""

import datetime
import os
import shutil
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.record_batch import BatchHeader
from tests.cluster.checker import partition_batches
from tests.cluster.clients import (
    SMALL_INDEXES,
    TIMEOUT_S,
    admin_client,
    agreed_view,
    create_topic,
    full_isrs,
    send_request,
    topic_view,
    wait_formed,
    zk_controller,
)
from tests.cluster.harness import wait_until
from tests.compat.test_tiered_storage import assert_every_record, consume_from_zero
from tests.harness import unique_topic

pytestmark = pytest.mark.slow

RECORDS = 3000  # per round of producing: about 300 KB, some 20 segments of SEGMENT_BYTES
SEGMENT_BYTES = 16384


def tiered_cluster(cluster_factory, store: Path):
    cluster = cluster_factory(overrides={
        **SMALL_INDEXES,
        "remote.log.storage.system.enable": "true",
        "rsm.config.url": f"file://{store}",
        "remote.log.manager.task.interval.ms": "300",
        "log.retention.check.interval.ms": "300",
        "log.segment.delete.delay.ms": "0",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
    })
    wait_formed(cluster)
    return cluster


def create_tiered_topic(cluster) -> str:
    topic = unique_topic("tiered")
    create_topic(cluster, topic, 1, 3, {
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": "1",
        "retention.ms": "-1", "min.insync.replicas": "2",
    })
    wait_until(lambda: full_isrs(cluster, topic, 1), TIMEOUT_S, "a full ISR")
    return topic


def produce(bootstrap: str, topic: str, first: int, count: int = RECORDS) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 8192})
    for i in range(first, first + count):
        producer.produce(topic, key=b"k%d" % i, value=value_of(i), partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def value_of(offset: int) -> bytes:
    """As tests/compat/test_tiered_storage.py's producer writes them, for its readers."""
    return b"record-%06d-" % offset + b"x" * 80


def remote_starts(store: Path, topic: str) -> list[int]:
    """The start offsets of the topic's segments in the store (one per copy)."""
    return sorted(int(path.name[:20]) for path in store.glob(f"{topic}-*/0/*.log"))


def local_starts(cluster, broker_id: int, topic: str) -> list[int]:
    partition_dir = cluster.broker(broker_id).data_dirs[0] / f"{topic}-0"
    if not partition_dir.exists():
        return []
    return sorted(int(name[:20]) for name in os.listdir(partition_dir) if name.endswith(".log"))


def local_log_end(cluster, broker_id: int, topic: str) -> int:
    """The offset after the last whole batch in the broker's files of partition 0."""
    partition_dir = cluster.broker(broker_id).data_dirs[0] / f"{topic}-0"
    batches = partition_batches(str(partition_dir)) if partition_dir.exists() else []
    return BatchHeader.from_buffer(batches[-1][1]).last_offset + 1 if batches else 0


def leader_of(cluster, topic: str, broker_ids) -> int:
    def found():
        for broker_id in broker_ids:
            view = topic_view(cluster.broker(broker_id).bootstrap, topic)
            if view is not None and view[0][0] in broker_ids:
                return view[0][0]
        return None

    return wait_until(found, TIMEOUT_S, "a leader")


def test_a_new_leader_goes_on_copying_after_the_last_segment_in_the_store(cluster_factory, tmp_path):
    store = tmp_path / "store"
    cluster = tiered_cluster(cluster_factory, store)
    topic = create_tiered_topic(cluster)
    produce(cluster.bootstrap, topic, 0)
    wait_until(lambda: len(remote_starts(store, topic)) >= 3, TIMEOUT_S, "the first copies to the store")
    old_leader = leader_of(cluster, topic, (1, 2, 3))
    cluster.broker(old_leader).kill()  # while copying: its copy under way is left unfinished
    survivors = tuple(b for b in (1, 2, 3) if b != old_leader)
    new_leader = leader_of(cluster, topic, survivors)
    copied_before = max(remote_starts(store, topic))
    bootstrap = ",".join(cluster.broker(b).bootstrap for b in survivors)
    produce(bootstrap, topic, RECORDS)

    # The new leader copies on from the store's last segment, up to the records produced after
    # the failover, and its local retention deletes what is copied.
    wait_until(
        lambda: max(remote_starts(store, topic)) > RECORDS and local_starts(cluster, new_leader, topic)[0] > RECORDS,
        TIMEOUT_S, "copies by the new leader",
    )
    assert max(remote_starts(store, topic)) > copied_before
    # One copy per segment: what the killed leader left unfinished is cleaned up, nothing is
    # copied twice.
    wait_until(
        lambda: len(set(starts := remote_starts(store, topic))) == len(starts), TIMEOUT_S, "one copy per segment"
    )
    assert_every_record(consume_from_zero(bootstrap, topic, 2 * RECORDS), 2 * RECORDS)

    cluster.broker(old_leader).start()
    wait_until(lambda: full_isrs(cluster, topic, 1), TIMEOUT_S, "the old leader back in the ISR")
    assert_every_record(consume_from_zero(cluster.bootstrap, topic, 2 * RECORDS), 2 * RECORDS)


def test_a_wiped_broker_catches_up_by_fetching_only_the_local_tail(cluster_factory, tmp_path):
    store = tmp_path / "store"
    cluster = tiered_cluster(cluster_factory, store)
    topic = create_tiered_topic(cluster)
    produce(cluster.bootstrap, topic, 0)
    leader = leader_of(cluster, topic, (1, 2, 3))
    wait_until(
        lambda: len(remote_starts(store, topic)) >= 10 and local_starts(cluster, leader, topic)[0] >= RECORDS // 2,
        TIMEOUT_S, "copies to the store and local deletion of the copied segments",
    )
    wiped = next(b for b in (1, 2, 3) if b != leader)
    cluster.broker(wiped).kill()
    for data_dir in cluster.broker(wiped).data_dirs:
        shutil.rmtree(data_dir)
    cluster.broker(wiped).start()
    # (Killed and back before its leader noticed, it may never have left the ISR.)
    wait_until(
        lambda: local_log_end(cluster, wiped, topic) == RECORDS and full_isrs(cluster, topic, 1),
        TIMEOUT_S, "the wiped broker caught up and back in the ISR",
    )

    # It holds the leader's local tail only: its log starts far beyond 0, at the end of the
    # remote segment before the leader's local log start, and it has far fewer bytes than were
    # produced.
    held = local_starts(cluster, wiped, topic)
    assert held and held[0] >= RECORDS // 2, held
    partition_dir = cluster.broker(wiped).data_dirs[0] / f"{topic}-0"
    fetched = sum(path.stat().st_size for path in partition_dir.glob("*.log"))
    assert fetched < RECORDS * 100 // 2, fetched

    # Alone, and so the leader, the wiped broker still serves the topic whole from offset 0.
    others = [b for b in (1, 2, 3) if b != wiped]
    for other in others:
        cluster.broker(other).stop()
    assert leader_of(cluster, topic, (wiped,)) == wiped
    assert_every_record(consume_from_zero(cluster.broker(wiped).bootstrap, topic, RECORDS), RECORDS)


def test_deleting_a_tiered_topic_through_the_controller_removes_its_remote_data(cluster_factory, tmp_path):
    store = tmp_path / "store"
    cluster = tiered_cluster(cluster_factory, store)
    topic = create_tiered_topic(cluster)
    produce(cluster.bootstrap, topic, 0)
    wait_until(lambda: len(remote_starts(store, topic)) >= 3, TIMEOUT_S, "copies to the store")
    admin = admin_client(cluster.bootstrap)  # kept: the futures die with their client
    admin.delete_topics([topic])[topic].result(timeout=TIMEOUT_S)
    wait_until(lambda: not list(store.glob(f"{topic}-*")), TIMEOUT_S, "the remote data of the deleted topic to go")


def test_a_reassignment_copies_only_the_local_tail_to_the_new_replica(cluster_factory, tmp_path):
    store = tmp_path / "store"
    cluster = tiered_cluster(cluster_factory, store)
    topic = unique_topic("tiered")
    admin = admin_client(cluster.bootstrap)  # kept: the futures die with their client
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]], config={
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": "1",
        "retention.ms": "-1",
    })])[topic].result(timeout=TIMEOUT_S)
    wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 1), TIMEOUT_S, "metadata agreement")
    produce(cluster.bootstrap, topic, 0)
    leader = leader_of(cluster, topic, (1, 2))
    wait_until(
        lambda: len(remote_starts(store, topic)) >= 10 and local_starts(cluster, leader, topic)[0] >= RECORDS // 2,
        TIMEOUT_S, "copies to the store and local deletion of the copied segments",
    )
    copied = remote_starts(store, topic)
    controller, _ = zk_controller(cluster)
    started = send_request(cluster.broker(controller).bootstrap, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0,
                           AlterPartitionReassignmentsRequest(timeout=datetime.timedelta(seconds=30), topics=(
                               ReassignableTopic(name=topic, partitions=(ReassignablePartition(partition_index=0, replicas=(2, 3)),)),
                           )))
    assert [p.error_code for t in started.responses for p in t.partitions] == [ErrorCode.none]

    def moved():
        after = agreed_view(cluster, topic, (1, 2, 3), 1)
        return after if after and after[0][1] == (2, 3) and sorted(after[0][2]) == [2, 3] else None

    wait_until(moved, TIMEOUT_S, "replicas moved to brokers 2 and 3")
    # The new replica holds the local tail only; the store keeps what the moved replica's broker
    # held (a reassignment deletes no remote data).
    assert local_starts(cluster, 3, topic)[0] >= RECORDS // 2
    assert set(copied) <= set(remote_starts(store, topic))
    assert_every_record(consume_from_zero(cluster.bootstrap, topic, RECORDS), RECORDS)
