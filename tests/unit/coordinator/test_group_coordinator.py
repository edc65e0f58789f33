"""The group coordinator inside an in-process broker (no sockets): where groups live in
__consumer_offsets, what is written there and when, and loading it back after a restart."""

import asyncio
import datetime
import threading

import pytest

from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment

from coordinator import group_coordinator
from coordinator.group import CommittedOffset
from coordinator.group_coordinator import OFFSETS_TOPIC
from coordinator.internal_topic import partition_for
from coordinator.records import GroupMetadataKey, OffsetCommitKey, decode_group_metadata_value
from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.primitives import INT16
from replication.partition_state import LeaderEndpoint, PartitionState
from storage.log import Log
from storage.topic_partition import TopicPartition
from tests.in_process import Client, offsets_log_records, running_broker

MS = datetime.timedelta(milliseconds=1)
FAST = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}
TOPIC = "events"
SUBSCRIPTION = INT16.pack(0) + schemas.encode(ConsumerProtocolSubscription(topics=(TOPIC,), user_data=None))


# --------------------------------------------------------------------------- requests


def join_request(group_id: str, member_id: str = "", instance_id: str | None = None) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group_id,
        session_timeout=10_000 * MS,
        rebalance_timeout=30_000 * MS,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION),),
    )


async def join_and_sync(client: Client, group_id: str, instance_id: str | None = None) -> tuple[str, int]:
    """A one-member group, Stable: (member id, generation)."""
    response = await client.call(ApiKey.JOIN_GROUP, 9, join_request(group_id, instance_id=instance_id))
    if response.error_code is ErrorCode.member_id_required:
        response = await client.call(ApiKey.JOIN_GROUP, 9, join_request(group_id, response.member_id))
    assert response.error_code is ErrorCode.none, response
    sync = await client.call(
        ApiKey.SYNC_GROUP,
        5,
        SyncGroupRequest(
            group_id=group_id,
            generation_id=response.generation_id,
            member_id=response.member_id,
            group_instance_id=instance_id,
            assignments=(SyncGroupRequestAssignment(member_id=response.member_id, assignment=b"assigned"),),
        ),
    )
    assert sync.error_code is ErrorCode.none, sync
    return response.member_id, response.generation_id


async def commit(client: Client, group_id: str, offsets: dict[int, int], member_id: str = "", generation: int = -1):
    response = await client.call(
        ApiKey.OFFSET_COMMIT,
        8,
        OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            topics=(
                OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=tuple(
                        OffsetCommitRequestPartition(
                            partition_index=partition, committed_offset=offset, committed_metadata="m"
                        )
                        for partition, offset in offsets.items()
                    ),
                ),
            ),
        ),
    )
    return [p.error_code for p in response.topics[0].partitions]


async def fetch(client: Client, group_id: str):
    """(group error, {partition: offset}) for every offset the group has."""
    response = await client.call(
        ApiKey.OFFSET_FETCH, 8, OffsetFetchRequest(groups=(OffsetFetchRequestGroup(group_id=group_id, topics=None),))
    )
    group = response.groups[0]
    return group.error_code, {p.partition_index: p.committed_offset for t in group.topics for p in t.partitions}


async def describe(client: Client, group_id: str):
    response = await client.call(
        ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=(group_id,), include_authorized_operations=False)
    )
    return response.groups[0]


def run(scenario):
    return asyncio.run(scenario())


# ---------------------------------------------------------------------- partition map


def test_groups_map_to_partitions_by_javas_string_hash_code():
    # Java: h = 31 * h + c over UTF-16 code units, wrapping at 32 bits; Utils.abs; modulo.
    assert partition_for("a", 50) == 97 % 50
    assert partition_for("hello", 50) == 99162322 % 50  # "hello".hashCode()
    assert partition_for("Hello World", 50) == 862545276 % 50  # hashCode() -862545276
    assert partition_for("polygenelubricants", 50) == 0  # hashCode() is Integer.MIN_VALUE
    assert partition_for("", 50) == 0
    # Non-ASCII: the UTF-16 code unit U+00E9, not its two UTF-8 bytes.
    assert partition_for("é", 50) == 0xE9 % 50
    assert partition_for("aé", 50) == (97 * 31 + 0xE9) % 50
    # Outside the BMP: U+1F600 is the surrogate pair D83D DE00, two code units.
    assert partition_for("😀", 50) == (0xD83D * 31 + 0xDE00) % 50
    assert partition_for("😀", 7) == (0xD83D * 31 + 0xDE00) % 7


def test_a_groups_records_go_to_its_partition(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, {"offsets.topic.num.partitions": "50"}) as broker:
            await broker.topics.create(TOPIC, 1, {})
            client = Client(broker)
            assert await commit(client, "😀", {0: 3}) == [ErrorCode.none]
            partition = (0xD83D * 31 + 0xDE00) % 50
            assert broker.group_coordinator.partition_for("😀") == partition
            assert [key for key, _ in offsets_log_records(broker, "😀")] == [OffsetCommitKey("😀", TOPIC, 0)]

    run(scenario)


# ----------------------------------------------------------------- the offsets topic


def test_the_offsets_topic_is_created_on_first_use_compacted_and_internal(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, {"offsets.topic.num.partitions": "7", "offsets.topic.segment.bytes": "1048576"}) as broker:
            client = Client(broker)
            assert OFFSETS_TOPIC not in broker.topics.topics
            response = await client.call(
                ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=("g",))
            )
            assert response.coordinators[0].error_code is ErrorCode.none
            info = broker.topics.get(OFFSETS_TOPIC)
            assert info.partitions == 7
            assert info.configs == {"cleanup.policy": "compact", "segment.bytes": "1048576", "compression.type": "producer"}
            metadata = await client.call(
                ApiKey.METADATA,
                12,
                MetadataRequest(
                    topics=(MetadataRequestTopic(name=OFFSETS_TOPIC, topic_id=None),),
                    include_topic_authorized_operations=False,
                ),
            )
            assert metadata.topics[0].is_internal

    run(scenario)


@pytest.mark.pure_python
def test_offset_commit_is_answered_only_once_the_records_are_in_the_log(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, FAST) as broker:
            await broker.topics.create(TOPIC, 1, {})
            client = Client(broker)
            await fetch(client, "g")  # creates the offsets topic
            release = asyncio.Event()
            appended = []
            original = broker.replica_manager.append_committed

            async def held_append(tp, records):
                await release.wait()
                appended.append(tp)
                return await original(tp, records)

            broker.replica_manager.append_committed = held_append
            committing = asyncio.ensure_future(commit(client, "g", {0: 42}))
            for _ in range(20):
                await asyncio.sleep(0)
            assert not committing.done() and not appended
            release.set()
            assert await committing == [ErrorCode.none]
            assert appended == [TopicPartition(OFFSETS_TOPIC, broker.group_coordinator.partition_for("g"))]
            assert await fetch(client, "g") == (ErrorCode.none, {0: 42})

    run(scenario)


# --------------------------------------------------------------------------- loading


def test_groups_and_offsets_are_loaded_back_after_a_restart(tmp_path):
    async def first_run():
        async with running_broker(tmp_path, FAST) as broker:
            await broker.topics.create(TOPIC, 2, {})
            client = Client(broker)
            member_id, generation = await join_and_sync(client, "live", instance_id="instance-1")
            assert await commit(client, "live", {0: 10, 1: 20}, member_id, generation) == [ErrorCode.none] * 2
            assert await commit(client, "simple", {1: 7}) == [ErrorCode.none]
            return member_id, generation

    member_id, generation = run(first_run)

    async def second_run():
        async with running_broker(tmp_path, FAST) as broker:
            client = Client(broker)
            await wait_until_loaded(client, "live")
            await wait_until_loaded(client, "simple")  # its partition may load later
            group = await describe(client, "live")
            assert (group.group_state, group.protocol_type, group.protocol_data) == ("Stable", "consumer", "range")
            [member] = group.members
            assert (member.member_id, member.group_instance_id) == (member_id, "instance-1")
            assert (member.member_metadata, member.member_assignment) == (SUBSCRIPTION, b"assigned")
            assert await fetch(client, "live") == (ErrorCode.none, {0: 10, 1: 20})
            assert await fetch(client, "simple") == (ErrorCode.none, {1: 7})
            # The member carries on where it was, without rejoining.
            heartbeat = await client.call(
                ApiKey.HEARTBEAT,
                4,
                HeartbeatRequest(
                    group_id="live", generation_id=generation, member_id=member_id, group_instance_id="instance-1"
                ),
            )
            assert heartbeat.error_code is ErrorCode.none

    run(second_run)


async def wait_until_loaded(client: Client, group_id: str) -> None:
    for _ in range(500):
        error, _ = await fetch(client, group_id)
        if error is not ErrorCode.coordinator_load_in_progress:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the offsets partition never loaded")


def test_requests_wait_with_coordinator_load_in_progress_while_the_partition_loads(tmp_path, monkeypatch):
    async def first_run():
        async with running_broker(tmp_path, FAST) as broker:
            await broker.topics.create(TOPIC, 1, {})
            assert await commit(Client(broker), "g", {0: 5}) == [ErrorCode.none]

    run(first_run)
    release = threading.Event()
    read = group_coordinator.read_offsets_partition

    def paused_read(*args):
        release.wait(30)
        return read(*args)

    monkeypatch.setattr(group_coordinator, "read_offsets_partition", paused_read)

    async def second_run():
        async with running_broker(tmp_path, FAST) as broker:
            client = Client(broker)
            try:
                assert await fetch(client, "g") == (ErrorCode.coordinator_load_in_progress, {})
                join = await client.call(ApiKey.JOIN_GROUP, 9, join_request("g"))
                assert join.error_code is ErrorCode.coordinator_load_in_progress
                assert await commit(client, "g", {0: 6}) == [ErrorCode.coordinator_load_in_progress]
                listed = await client.call(ApiKey.LIST_GROUPS, 4, ListGroupsRequest())
                assert listed.error_code is ErrorCode.coordinator_load_in_progress
                # As Kafka answers clients that predate the code on these two:
                heartbeat = await client.call(
                    ApiKey.HEARTBEAT, 4, HeartbeatRequest(group_id="g", generation_id=1, member_id="m")
                )
                assert heartbeat.error_code is ErrorCode.none
                sync = await client.call(
                    ApiKey.SYNC_GROUP, 5, SyncGroupRequest(group_id="g", generation_id=1, member_id="m", assignments=())
                )
                assert sync.error_code is ErrorCode.rebalance_in_progress
            finally:
                release.set()
            await wait_until_loaded(client, "g")
            assert await fetch(client, "g") == (ErrorCode.none, {0: 5})

    run(second_run)


class ThreadRecordingLog(Log):
    """A Log that notes the thread of every attribute lookup made on it."""

    def __getattribute__(self, name):
        object.__getattribute__(self, "looked_up_from").add(threading.get_ident())
        return super().__getattribute__(name)


@pytest.mark.pure_python
def test_loading_never_touches_the_partition_log_off_the_event_loop(tmp_path):
    """The event loop owns a Log: the loading thread reads a slice of its files, not the Log."""

    async def scenario():
        async with running_broker(tmp_path, FAST) as broker:
            await broker.topics.create(TOPIC, 1, {})
            client = Client(broker)
            assert await commit(client, "g", {0: 5}) == [ErrorCode.none]
            tp = TopicPartition(OFFSETS_TOPIC, partition_for("g", 5))
            partition_log = broker.replica_manager.get_partition(tp).log
            partition_log.looked_up_from = set()
            partition_log.__class__ = ThreadRecordingLog
            broker.group_coordinator.offsets_topic.on_become_leader(tp)  # load the partition again
            await wait_until_loaded(client, "g")
            assert await fetch(client, "g") == (ErrorCode.none, {0: 5})
            assert partition_log.looked_up_from == {threading.get_ident()}

    run(scenario)


# ------------------------------------------------------------------- persistence


def test_a_completed_rebalance_and_an_emptied_group_are_stored(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, FAST) as broker:
            client = Client(broker)
            member_id, generation = await join_and_sync(client, "g")
            leave = await client.call(
                ApiKey.LEAVE_GROUP, 5, LeaveGroupRequest(group_id="g", members=(MemberIdentity(member_id=member_id),))
            )
            assert leave.members[0].error_code is ErrorCode.none
            for _ in range(3):  # the emptied group is written after LeaveGroup is answered
                await asyncio.sleep(0)
            stored = [decode_group_metadata_value(value) for key, value in offsets_log_records(broker, "g")]
            assert [(v.generation, v.protocol, [m.member_id for m in v.members]) for v in stored] == [
                (generation, "range", [member_id]),
                (generation + 1, None, []),
            ]
            assert stored[0].members[0].assignment == b"assigned"

    run(scenario)


def test_expired_offsets_and_the_groups_they_leave_empty_are_tombstoned(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, {**FAST, "offsets.retention.minutes": "1"}) as broker:
            await broker.topics.create(TOPIC, 2, {})
            coordinator = broker.group_coordinator
            now = [1_700_000_000_000]
            coordinator.clock = lambda: now[0]
            client = Client(broker)
            assert await commit(client, "simple", {0: 1}) == [ErrorCode.none]
            member_id, generation = await join_and_sync(client, "consumers")
            assert await commit(client, "consumers", {1: 2}, member_id, generation) == [ErrorCode.none]
            await client.call(
                ApiKey.LEAVE_GROUP, 5, LeaveGroupRequest(group_id="consumers", members=(MemberIdentity(member_id=member_id),))
            )
            now[0] += 60_000 - 1
            await coordinator.expire_offsets()
            assert await fetch(client, "simple") == (ErrorCode.none, {0: 1})
            now[0] += 1
            await coordinator.expire_offsets()
            assert await fetch(client, "simple") == (ErrorCode.none, {})
            assert await fetch(client, "consumers") == (ErrorCode.none, {})
            listed = await client.call(ApiKey.LIST_GROUPS, 4, ListGroupsRequest())
            assert listed.groups == ()
            assert offsets_log_records(broker, "simple")[-1] == (OffsetCommitKey("simple", TOPIC, 0), None)
            # The simple group never stored metadata: no group tombstone for it.
            assert GroupMetadataKey("simple") not in [key for key, _ in offsets_log_records(broker, "simple")]
            assert offsets_log_records(broker, "consumers")[-2:] == [
                (OffsetCommitKey("consumers", TOPIC, 1), None),
                (GroupMetadataKey("consumers"), None),
            ]

    run(scenario)


def test_a_deleted_topics_offsets_leave_every_group_with_tombstones(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, FAST) as broker:
            await broker.topics.create(TOPIC, 2, {})
            await broker.topics.create("other", 1, {})
            client = Client(broker)
            assert await commit(client, "simple", {0: 1, 1: 2}) == [ErrorCode.none] * 2
            await broker.topics.delete(TOPIC)  # standalone: the topic manager tells the coordinator
            for _ in range(100):
                if offsets_log_records(broker, "simple")[-1][1] is None:
                    break
                await asyncio.sleep(0.01)
            assert await fetch(client, "simple") == (ErrorCode.none, {})
            assert offsets_log_records(broker, "simple")[-2:] == [
                (OffsetCommitKey("simple", TOPIC, 0), None),
                (OffsetCommitKey("simple", TOPIC, 1), None),
            ]
            listed = await client.call(ApiKey.LIST_GROUPS, 4, ListGroupsRequest())
            assert listed.groups == ()  # an Empty group left without offsets is gone

    run(scenario)


def test_a_deleted_partitions_pending_transactional_offsets_are_dropped(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, FAST) as broker:
            coordinator = broker.group_coordinator
            kept, deleted = TopicPartition("other", 0), TopicPartition(TOPIC, 0)
            offset = CommittedOffset(5, -1, "", 0, None)
            coordinator._pending_txn_offsets[7] = {"g": {kept: offset, deleted: offset}}
            coordinator.on_partitions_deleted([deleted])
            assert coordinator._pending_txn_offsets[7] == {"g": {kept: offset}}

    run(scenario)


def test_delete_groups_writes_tombstones_and_the_group_stays_deleted_after_a_restart(tmp_path):
    async def first_run():
        async with running_broker(tmp_path, FAST) as broker:
            await broker.topics.create(TOPIC, 1, {})
            client = Client(broker)
            member_id, generation = await join_and_sync(client, "doomed")
            assert await commit(client, "doomed", {0: 9}, member_id, generation) == [ErrorCode.none]
            request = DeleteGroupsRequest(groups_names=("doomed", "never-was"))
            busy = await client.call(ApiKey.DELETE_GROUPS, 2, request)
            assert [r.error_code for r in busy.results] == [ErrorCode.non_empty_group, ErrorCode.group_id_not_found]
            await client.call(
                ApiKey.LEAVE_GROUP, 5, LeaveGroupRequest(group_id="doomed", members=(MemberIdentity(member_id=member_id),))
            )
            deleted = await client.call(ApiKey.DELETE_GROUPS, 2, request)
            assert [r.error_code for r in deleted.results] == [ErrorCode.none, ErrorCode.group_id_not_found]
            assert offsets_log_records(broker, "doomed")[-2:] == [
                (OffsetCommitKey("doomed", TOPIC, 0), None),
                (GroupMetadataKey("doomed"), None),
            ]

    run(first_run)

    async def second_run():
        async with running_broker(tmp_path, FAST) as broker:
            client = Client(broker)
            await wait_until_loaded(client, "doomed")
            assert (await describe(client, "doomed")).group_state == "Dead"
            assert await fetch(client, "doomed") == (ErrorCode.none, {})

    run(second_run)


def test_shutdown_answers_waiting_joins(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, {**FAST, "group.initial.rebalance.delay.ms": "60000"}) as broker:
            client = Client(broker)
            first = await client.call(ApiKey.JOIN_GROUP, 9, join_request("g"))
            waiting = asyncio.ensure_future(client.call(ApiKey.JOIN_GROUP, 9, join_request("g", first.member_id)))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            await broker.group_coordinator.shutdown()
            assert (await waiting).error_code is ErrorCode.not_coordinator

    run(scenario)


def test_offsets_partitions_load_and_unload_with_leadership(tmp_path):
    async def main():
        async with running_broker(tmp_path, {"offsets.topic.num.partitions": "3"}) as broker:
            coordinator = broker.group_coordinator
            tp = TopicPartition("t", 0)
            errors = await coordinator.commit_offsets("g", "", None, -1, {tp: CommittedOffset(7, -1, "", 0, None)})
            assert errors == {tp: ErrorCode.none}
            offsets_tp = TopicPartition(OFFSETS_TOPIC, coordinator.partition_for("g"))
            replicas = broker.replica_manager

            def state(leader: int, epoch: int) -> PartitionState:
                return PartitionState(offsets_tp, 1, leader, epoch, (leader,), epoch, (0, 1))

            replicas.become_leader_or_follower(1, [state(1, 1)], {1: LeaderEndpoint(1, "127.0.0.1", 9)}, 0)
            assert (await coordinator.fetch_offsets("g", [tp]))[0] == ErrorCode.not_coordinator
            replicas.become_leader_or_follower(1, [state(0, 2)], {}, 0)
            for _ in range(100):
                error, offsets = await coordinator.fetch_offsets("g", [tp])
                if error is not ErrorCode.coordinator_load_in_progress:
                    break
                await asyncio.sleep(0.01)
            assert error == ErrorCode.none and offsets[tp].offset == 7

    asyncio.run(main())
