"""The group APIs through the dispatcher of an in-process broker: request frames in, responses
out, no sockets. Each API at its oldest and newest served version, and the errors it answers."""

import asyncio
import dataclasses
import datetime
import threading
import typing

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.schema.delete_groups.v0.request import DeleteGroupsRequest as DeleteGroupsV0
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v0.request import DescribeGroupsRequest as DescribeGroupsV0
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest as FindCoordinatorV0
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v0.request import HeartbeatRequest as HeartbeatV0
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v0.request import JoinGroupRequest as JoinGroupV0
from kio.schema.join_group.v0.request import JoinGroupRequestProtocol as ProtocolV0
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v0.request import LeaveGroupRequest as LeaveGroupV0
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.list_groups.v0.request import ListGroupsRequest as ListGroupsV0
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.offset_commit.v2.request import OffsetCommitRequest as OffsetCommitV2
from kio.schema.offset_commit.v2.request import OffsetCommitRequestPartition as PartitionV2
from kio.schema.offset_commit.v2.request import OffsetCommitRequestTopic as TopicV2
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v1.request import OffsetFetchRequest as OffsetFetchV1
from kio.schema.offset_fetch.v1.request import OffsetFetchRequestTopic as TopicV1
from kio.schema.offset_fetch.v2.request import OffsetFetchRequest as OffsetFetchV2
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.sync_group.v0.request import SyncGroupRequest as SyncGroupV0
from kio.schema.sync_group.v0.request import SyncGroupRequestAssignment as AssignmentV0
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment

from coordinator import group_coordinator
from coordinator.records import decode_group_metadata_value, decode_offset_commit_value
from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.primitives import INT16
from tests.in_process import Client, offsets_log_records, running_broker

MS = datetime.timedelta(milliseconds=1)
FAST = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
TOPIC, OTHER_TOPIC = "clicks", "views"
SUBSCRIPTION = INT16.pack(0) + schemas.encode(ConsumerProtocolSubscription(topics=(TOPIC,), user_data=None))


def run(tmp_path, scenario, extra: dict | None = None):
    async def main():
        async with running_broker(tmp_path, {**FAST, **(extra or {})}) as broker:
            await broker.topics.create(TOPIC, 2, {})
            await broker.topics.create(OTHER_TOPIC, 1, {})
            return await scenario(Client(broker, client_id="app"))

    return asyncio.run(main())


def legacy_request(api_key: ApiKey, version: int) -> tuple[type, type, type]:
    """(request, topic, partition) classes of a version kio lacks (protocol.legacy)."""
    request = schemas.request_type(api_key, version)
    topic = typing.get_args(typing.get_type_hints(request)["topics"])[0]
    partition = typing.get_args(typing.get_type_hints(topic).get("partitions", tuple[None, ...]))[0]
    return request, topic, partition


def join_v9(group_id: str, member_id: str = "", instance_id: str | None = None, protocol: str = "range"):
    return JoinGroupRequest(
        group_id=group_id,
        session_timeout=10_000 * MS,
        rebalance_timeout=30_000 * MS,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name=protocol, metadata=SUBSCRIPTION),),
    )


async def stable_member(client: Client, group_id: str, instance_id: str | None = None) -> tuple[str, int]:
    """Join (v9) and sync (v5) a one-member group: (member id, generation)."""
    joined = await client.call(ApiKey.JOIN_GROUP, 9, join_v9(group_id, instance_id=instance_id))
    if joined.error_code is ErrorCode.member_id_required:
        joined = await client.call(ApiKey.JOIN_GROUP, 9, join_v9(group_id, joined.member_id, instance_id))
    synced = await client.call(
        ApiKey.SYNC_GROUP,
        5,
        SyncGroupRequest(
            group_id=group_id,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=instance_id,
            assignments=(SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"assigned"),),
        ),
    )
    assert synced.error_code is ErrorCode.none
    return joined.member_id, joined.generation_id


# --------------------------------------------------------------------- FindCoordinator


def test_find_coordinator_v0_names_this_broker(tmp_path):
    async def scenario(client):
        response = await client.call(ApiKey.FIND_COORDINATOR, 0, FindCoordinatorV0(key="g"))
        endpoint = client.broker.endpoint
        assert (response.error_code, response.node_id, response.host, response.port) == (
            ErrorCode.none,
            endpoint.node_id,
            endpoint.host,
            endpoint.port,
        )

    run(tmp_path, scenario)


def test_find_coordinator_v4_answers_each_key(tmp_path):
    async def scenario(client):
        groups = await client.call(ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=("a", "b")))
        assert [(c.key, c.error_code, c.node_id) for c in groups.coordinators] == [
            ("a", ErrorCode.none, 0),
            ("b", ErrorCode.none, 0),
        ]
        share = await client.call(ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=2, coordinator_keys=("s",)))
        assert share.coordinators[0].error_code is ErrorCode.invalid_request

    run(tmp_path, scenario)


# --------------------------------------------------------------------------- JoinGroup


def test_join_group_v0_joins_at_once_with_the_session_timeout_as_rebalance_timeout(tmp_path):
    async def scenario(client):
        request = JoinGroupV0(
            group_id="g",
            session_timeout=7_000 * MS,
            member_id="",
            protocol_type="consumer",
            protocols=(ProtocolV0(name="range", metadata=SUBSCRIPTION),),
        )
        joined = await client.call(ApiKey.JOIN_GROUP, 0, request)
        assert joined.error_code is ErrorCode.none  # no MEMBER_ID_REQUIRED before v4
        assert joined.member_id.startswith("app-")
        assert (joined.generation_id, joined.protocol_name, joined.leader) == (1, "range", joined.member_id)
        assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, SUBSCRIPTION)]
        synced = await client.call(
            ApiKey.SYNC_GROUP,
            0,
            SyncGroupV0(
                group_id="g",
                generation_id=1,
                member_id=joined.member_id,
                assignments=(AssignmentV0(member_id=joined.member_id, assignment=b"mine"),),
            ),
        )
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"mine")
        [(_, value)] = offsets_log_records(client.broker, "g")
        member = decode_group_metadata_value(value).members[0]
        assert (member.session_timeout, member.rebalance_timeout, member.client_host) == (7_000, 7_000, "/127.0.0.1")
        bad = await client.call(
            ApiKey.JOIN_GROUP,
            0,
            JoinGroupV0(group_id="", session_timeout=7_000 * MS, member_id="", protocol_type="consumer", protocols=()),
        )
        assert (bad.error_code, bad.protocol_name) == (ErrorCode.invalid_group_id, "")  # not null before v7

    run(tmp_path, scenario)


def test_join_group_v9_asks_for_the_member_id_first(tmp_path):
    async def scenario(client):
        first = await client.call(ApiKey.JOIN_GROUP, 9, join_v9("g"))
        assert first.error_code is ErrorCode.member_id_required and first.member_id.startswith("app-")
        second = await client.call(ApiKey.JOIN_GROUP, 9, join_v9("g", first.member_id))
        assert (second.error_code, second.member_id, second.generation_id) == (ErrorCode.none, first.member_id, 1)
        assert (second.protocol_type, second.protocol_name, second.skip_assignment) == ("consumer", "range", False)
        refused = await client.call(ApiKey.JOIN_GROUP, 9, join_v9("g", protocol="roundrobin"))
        assert (refused.error_code, refused.protocol_name) == (ErrorCode.inconsistent_group_protocol, None)
        unknown = await client.call(ApiKey.JOIN_GROUP, 9, join_v9("other", "made-up"))
        assert unknown.error_code is ErrorCode.unknown_member_id
        too_short = await client.call(ApiKey.JOIN_GROUP, 9, dataclasses.replace(join_v9("g"), session_timeout=10 * MS))
        assert too_short.error_code is ErrorCode.invalid_session_timeout

    run(tmp_path, scenario, {"group.min.session.timeout.ms": "6000"})


def test_join_group_v9_restarted_static_leader_skips_the_assignment(tmp_path):
    async def scenario(client):
        member_id, generation = await stable_member(client, "g", instance_id="host-1")
        again = await client.call(ApiKey.JOIN_GROUP, 9, join_v9("g", instance_id="host-1"))
        assert again.error_code is ErrorCode.none and again.member_id != member_id
        assert (again.generation_id, again.leader, again.skip_assignment) == (generation, again.member_id, True)
        fenced = await client.call(
            ApiKey.HEARTBEAT,
            4,
            HeartbeatRequest(group_id="g", generation_id=generation, member_id=member_id, group_instance_id="host-1"),
        )
        assert fenced.error_code is ErrorCode.fenced_instance_id

    run(tmp_path, scenario)


# --------------------------------------------------------------- SyncGroup, Heartbeat


def test_sync_group_v5_checks_the_protocol(tmp_path):
    async def scenario(client):
        joined = await client.call(ApiKey.JOIN_GROUP, 9, join_v9("g", instance_id="i"))

        def sync(protocol_name):
            return SyncGroupRequest(
                group_id="g",
                generation_id=joined.generation_id,
                member_id=joined.member_id,
                group_instance_id="i",
                protocol_type="consumer",
                protocol_name=protocol_name,
                assignments=(SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"x"),),
            )

        wrong = await client.call(ApiKey.SYNC_GROUP, 5, sync("roundrobin"))
        assert wrong.error_code is ErrorCode.inconsistent_group_protocol
        right = await client.call(ApiKey.SYNC_GROUP, 5, sync("range"))
        assert (right.error_code, right.protocol_type, right.protocol_name, right.assignment) == (
            ErrorCode.none,
            "consumer",
            "range",
            b"x",
        )

    run(tmp_path, scenario)


def test_heartbeat_v0_and_v4(tmp_path):
    async def scenario(client):
        member_id, generation = await stable_member(client, "g")
        ok = await client.call(ApiKey.HEARTBEAT, 0, HeartbeatV0(group_id="g", generation_id=generation, member_id=member_id))
        assert ok.error_code is ErrorCode.none
        stale = await client.call(ApiKey.HEARTBEAT, 0, HeartbeatV0(group_id="g", generation_id=99, member_id=member_id))
        assert stale.error_code is ErrorCode.illegal_generation
        unknown = await client.call(ApiKey.HEARTBEAT, 4, HeartbeatRequest(group_id="g", generation_id=1, member_id="who"))
        assert unknown.error_code is ErrorCode.unknown_member_id
        no_group = await client.call(ApiKey.HEARTBEAT, 4, HeartbeatRequest(group_id="", generation_id=1, member_id="x"))
        assert no_group.error_code is ErrorCode.invalid_group_id

    run(tmp_path, scenario)


# ------------------------------------------------------------------------- LeaveGroup


def test_leave_group_v0_answers_the_members_error(tmp_path):
    async def scenario(client):
        member_id, _ = await stable_member(client, "g")
        unknown = await client.call(ApiKey.LEAVE_GROUP, 0, LeaveGroupV0(group_id="g", member_id="who"))
        assert unknown.error_code is ErrorCode.unknown_member_id
        left = await client.call(ApiKey.LEAVE_GROUP, 0, LeaveGroupV0(group_id="g", member_id=member_id))
        assert left.error_code is ErrorCode.none
        described = await client.call(ApiKey.DESCRIBE_GROUPS, 0, DescribeGroupsV0(groups=("g",)))
        assert described.groups[0].group_state == "Empty"

    run(tmp_path, scenario)


def test_leave_group_v5_answers_per_member(tmp_path):
    async def scenario(client):
        member_id, _ = await stable_member(client, "g", instance_id="host-1")
        response = await client.call(
            ApiKey.LEAVE_GROUP,
            5,
            LeaveGroupRequest(
                group_id="g",
                members=(
                    MemberIdentity(member_id="stale", group_instance_id="host-1"),
                    MemberIdentity(member_id="", group_instance_id="host-1"),
                    MemberIdentity(member_id="who"),
                ),
            ),
        )
        assert response.error_code is ErrorCode.none
        assert [(m.member_id, m.group_instance_id, m.error_code) for m in response.members] == [
            ("stale", "host-1", ErrorCode.fenced_instance_id),
            ("", "host-1", ErrorCode.none),
            ("who", None, ErrorCode.unknown_member_id),
        ]

    run(tmp_path, scenario)


# ---------------------------------------------------------------------- OffsetCommit


def test_offset_commit_v0_is_a_simple_commit(tmp_path):
    async def scenario(client):
        request_type, topic_type, partition_type = legacy_request(ApiKey.OFFSET_COMMIT, 0)
        response = await client.call(
            ApiKey.OFFSET_COMMIT,
            0,
            request_type(
                group_id="g",
                topics=(
                    topic_type(name=TOPIC, partitions=(partition_type(partition_index=1, committed_offset=11, committed_metadata=None),)),
                    topic_type(name="missing", partitions=(partition_type(partition_index=0, committed_offset=1, committed_metadata=""),)),
                ),
            ),
        )
        assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in response.topics] == [
            (TOPIC, [(1, ErrorCode.none)]),
            ("missing", [(0, ErrorCode.unknown_topic_or_partition)]),
        ]
        fetched = await client.call(ApiKey.OFFSET_FETCH, 2, OffsetFetchV2(group_id="g", topics=None))
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in fetched.topics[0].partitions] == [(1, 11, "")]

    run(tmp_path, scenario)


def test_offset_commit_v1_keeps_the_commit_timestamp_and_v2_the_retention_time(tmp_path):
    async def scenario(client):
        request_type, topic_type, partition_type = legacy_request(ApiKey.OFFSET_COMMIT, 1)
        v1 = request_type(
            group_id="g",
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=(
                topic_type(
                    name=TOPIC,
                    partitions=(partition_type(partition_index=0, committed_offset=5, commit_timestamp=1234, committed_metadata="m"),),
                ),
            ),
        )
        assert (await client.call(ApiKey.OFFSET_COMMIT, 1, v1)).topics[0].partitions[0].error_code is ErrorCode.none
        v2 = OffsetCommitV2(
            group_id="g",
            generation_id_or_member_epoch=-1,
            member_id="",
            retention_time=datetime.timedelta(hours=1),
            topics=(TopicV2(name=TOPIC, partitions=(PartitionV2(partition_index=1, committed_offset=6, committed_metadata=None),)),),
        )
        now = client.broker.group_coordinator.clock()
        assert (await client.call(ApiKey.OFFSET_COMMIT, 2, v2)).topics[0].partitions[0].error_code is ErrorCode.none
        records = offsets_log_records(client.broker, "g")
        stored = {key.partition: decode_offset_commit_value(value) for key, value in records}
        assert (stored[0].commit_timestamp, stored[0].metadata, stored[0].expire_timestamp) == (1234, "m", -1)
        assert now <= stored[1].expire_timestamp - 3_600_000 <= client.broker.group_coordinator.clock()

    run(tmp_path, scenario)


def test_offset_commit_v8_by_a_member(tmp_path):
    async def scenario(client):
        member_id, generation = await stable_member(client, "g")

        def request(generation_id, metadata="m"):
            return OffsetCommitRequest(
                group_id="g",
                generation_id_or_member_epoch=generation_id,
                member_id=member_id,
                topics=(
                    OffsetCommitRequestTopic(
                        name=TOPIC,
                        partitions=(
                            OffsetCommitRequestPartition(
                                partition_index=0, committed_offset=3, committed_leader_epoch=4, committed_metadata=metadata
                            ),
                        ),
                    ),
                ),
            )

        def errors(response):
            return [p.error_code for t in response.topics for p in t.partitions]

        assert errors(await client.call(ApiKey.OFFSET_COMMIT, 8, request(generation))) == [ErrorCode.none]
        assert errors(await client.call(ApiKey.OFFSET_COMMIT, 8, request(generation + 1))) == [ErrorCode.illegal_generation]
        too_long = request(generation, metadata="x" * 4097)
        assert errors(await client.call(ApiKey.OFFSET_COMMIT, 8, too_long)) == [ErrorCode.offset_metadata_too_large]
        fetched = await client.call(
            ApiKey.OFFSET_FETCH,
            8,
            OffsetFetchRequest(
                groups=(OffsetFetchRequestGroup(group_id="g", topics=(OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0, 1)),)),)
            ),
        )
        [topic] = fetched.groups[0].topics
        assert [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata) for p in topic.partitions] == [
            (0, 3, 4, "m"),
            (1, -1, -1, ""),
        ]

    run(tmp_path, scenario)


# ----------------------------------------------------------------------- OffsetFetch


def test_offset_fetch_v0(tmp_path):
    async def scenario(client):
        member_id, generation = await stable_member(client, "g")
        commit = OffsetCommitRequest(
            group_id="g",
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            topics=(OffsetCommitRequestTopic(name=TOPIC, partitions=(OffsetCommitRequestPartition(partition_index=1, committed_offset=8, committed_metadata="z"),)),),
        )
        await client.call(ApiKey.OFFSET_COMMIT, 8, commit)
        request_type, topic_type, _ = legacy_request(ApiKey.OFFSET_FETCH, 0)
        response = await client.call(
            ApiKey.OFFSET_FETCH, 0, request_type(group_id="g", topics=(topic_type(name=TOPIC, partition_indexes=(1, 0)),))
        )
        assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in response.topics[0].partitions] == [
            (1, 8, "z", ErrorCode.none),
            (0, -1, "", ErrorCode.none),
        ]

    run(tmp_path, scenario)


def test_offset_fetch_v8_asks_for_several_groups(tmp_path):
    async def scenario(client):
        request_type, topic_type, partition_type = legacy_request(ApiKey.OFFSET_COMMIT, 0)
        await client.call(
            ApiKey.OFFSET_COMMIT,
            0,
            request_type(group_id="a", topics=(topic_type(name=TOPIC, partitions=(partition_type(partition_index=0, committed_offset=1, committed_metadata=""),)),)),
        )
        response = await client.call(
            ApiKey.OFFSET_FETCH,
            8,
            OffsetFetchRequest(groups=(OffsetFetchRequestGroup(group_id="a", topics=None), OffsetFetchRequestGroup(group_id="b", topics=None))),
        )
        assert [(g.group_id, g.error_code, [(t.name, [p.committed_offset for p in t.partitions]) for t in g.topics]) for g in response.groups] == [
            ("a", ErrorCode.none, [(TOPIC, [1])]),
            ("b", ErrorCode.none, []),
        ]

    run(tmp_path, scenario)


def test_offset_fetch_places_a_coordinator_error_by_version(tmp_path, monkeypatch):
    run(tmp_path, lambda client: client.call(ApiKey.FIND_COORDINATOR, 0, FindCoordinatorV0(key="g")))
    release = threading.Event()
    read = group_coordinator.read_offsets_partition
    monkeypatch.setattr(group_coordinator, "read_offsets_partition", lambda *args: release.wait(30) and read(*args))

    async def scenario(client):
        try:
            v1 = await client.call(
                ApiKey.OFFSET_FETCH, 1, OffsetFetchV1(group_id="g", topics=(TopicV1(name=TOPIC, partition_indexes=(0,)),))
            )
            [partition] = v1.topics[0].partitions  # before v2 the error goes to each partition
            assert (partition.committed_offset, partition.error_code) == (-1, ErrorCode.coordinator_load_in_progress)
            v2 = await client.call(ApiKey.OFFSET_FETCH, 2, OffsetFetchV2(group_id="g", topics=None))
            assert (v2.error_code, v2.topics) == (ErrorCode.coordinator_load_in_progress, ())
            v8 = await client.call(
                ApiKey.OFFSET_FETCH, 8, OffsetFetchRequest(groups=(OffsetFetchRequestGroup(group_id="g", topics=None),))
            )
            assert v8.groups[0].error_code is ErrorCode.coordinator_load_in_progress
        finally:
            release.set()

    asyncio.run(_on_existing_broker(tmp_path, scenario))


async def _on_existing_broker(tmp_path, scenario):
    async with running_broker(tmp_path, FAST) as broker:
        await scenario(Client(broker))


# ------------------------------------------------------ DescribeGroups, ListGroups


def test_describe_groups_v0_and_v5(tmp_path):
    async def scenario(client):
        member_id, _ = await stable_member(client, "g", instance_id="host-1")
        old = await client.call(ApiKey.DESCRIBE_GROUPS, 0, DescribeGroupsV0(groups=("g", "nobody")))
        stable, unknown = old.groups
        assert (stable.error_code, stable.group_state, stable.protocol_type, stable.protocol_data) == (
            ErrorCode.none,
            "Stable",
            "consumer",
            "range",
        )
        [member] = stable.members
        assert (member.member_id, member.client_id, member.client_host) == (member_id, "app", "/127.0.0.1")
        assert (member.member_metadata, member.member_assignment) == (SUBSCRIPTION, b"assigned")
        assert (unknown.group_state, unknown.members) == ("Dead", ())
        new = await client.call(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=("g",), include_authorized_operations=True))
        assert new.groups[0].members[0].group_instance_id == "host-1"

    run(tmp_path, scenario)


def test_list_groups_v0_and_v4_with_a_states_filter(tmp_path):
    async def scenario(client):
        await stable_member(client, "stable-group")
        member_id, _ = await stable_member(client, "empty-group")
        await client.call(ApiKey.LEAVE_GROUP, 0, LeaveGroupV0(group_id="empty-group", member_id=member_id))
        old = await client.call(ApiKey.LIST_GROUPS, 0, ListGroupsV0())
        assert old.error_code is ErrorCode.none
        assert sorted((g.group_id, g.protocol_type) for g in old.groups) == [("empty-group", "consumer"), ("stable-group", "consumer")]
        new = await client.call(ApiKey.LIST_GROUPS, 4, ListGroupsRequest(states_filter=("stable",)))
        assert [(g.group_id, g.group_state) for g in new.groups] == [("stable-group", "Stable")]

    run(tmp_path, scenario)


# ------------------------------------------------------- DeleteGroups, OffsetDelete


def test_delete_groups_v0_and_v2(tmp_path):
    async def scenario(client):
        member_id, _ = await stable_member(client, "busy")
        old = await client.call(ApiKey.DELETE_GROUPS, 0, DeleteGroupsV0(groups_names=("busy", "ghost")))
        assert [(r.group_id, r.error_code) for r in old.results] == [
            ("busy", ErrorCode.non_empty_group),
            ("ghost", ErrorCode.group_id_not_found),
        ]
        await client.call(ApiKey.LEAVE_GROUP, 0, LeaveGroupV0(group_id="busy", member_id=member_id))
        new = await client.call(ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=("busy",)))
        assert [(r.group_id, r.error_code) for r in new.results] == [("busy", ErrorCode.none)]
        listed = await client.call(ApiKey.LIST_GROUPS, 4, ListGroupsRequest())
        assert listed.groups == ()

    run(tmp_path, scenario)


def test_offset_delete_keeps_the_offsets_of_subscribed_topics(tmp_path):
    async def scenario(client):
        member_id, generation = await stable_member(client, "g")  # subscribed to TOPIC
        commit = OffsetCommitRequest(
            group_id="g",
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            topics=tuple(
                OffsetCommitRequestTopic(name=name, partitions=(OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_metadata=""),))
                for name in (TOPIC, OTHER_TOPIC)
            ),
        )
        await client.call(ApiKey.OFFSET_COMMIT, 8, commit)

        def request(group_id):
            return OffsetDeleteRequest(
                group_id=group_id,
                topics=tuple(
                    OffsetDeleteRequestTopic(name=name, partitions=(OffsetDeleteRequestPartition(partition_index=0),))
                    for name in (TOPIC, OTHER_TOPIC)
                ),
            )

        response = await client.call(ApiKey.OFFSET_DELETE, 0, request("g"))
        assert response.error_code is ErrorCode.none
        assert [(t.name, t.partitions[0].error_code) for t in response.topics] == [
            (TOPIC, ErrorCode.group_subscribed_to_topic),
            (OTHER_TOPIC, ErrorCode.none),
        ]
        fetched = await client.call(ApiKey.OFFSET_FETCH, 2, OffsetFetchV2(group_id="g", topics=None))
        assert [t.name for t in fetched.topics] == [TOPIC]
        missing = await client.call(ApiKey.OFFSET_DELETE, 0, request("ghost"))
        assert (missing.error_code, missing.topics) == (ErrorCode.group_id_not_found, ())
        empty_id = await client.call(ApiKey.OFFSET_DELETE, 0, request(""))
        assert empty_id.error_code is ErrorCode.invalid_group_id

    run(tmp_path, scenario)


# ------------------------------------------------------------------------ ApiVersions


def test_api_versions_advertises_the_group_apis(tmp_path):
    async def scenario(client):
        response = await client.call(
            ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert {api: served[api] for api in GROUP_APIS} == GROUP_APIS

    run(tmp_path, scenario)


GROUP_APIS = {
    ApiKey.OFFSET_COMMIT: (0, 8),
    ApiKey.OFFSET_FETCH: (0, 8),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
}
