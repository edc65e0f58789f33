"""confluent-kafka's AdminClient (librdkafka) on consumer groups, against a real broker process
over real sockets: list_consumer_groups, describe_consumer_groups, list_consumer_group_offsets,
alter_consumer_group_offsets and delete_consumer_groups report what real members did, and refuse
what Kafka refuses (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID for a commit from
outside an active group); a consumer then starts from the offsets an admin set."""

import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from tests.compat.group_support import (
    TIMEOUT_S,
    GroupMember,
    admin_for,
    committed_offsets,
    create_topic,
    describe_group,
    is_balanced,
    member_assignments,
    poll_until,
    produce,
)
from tests.harness import unique_topic

pytestmark = pytest.mark.compat


def listed_states(bootstrap: str, states=None) -> dict[str, ConsumerGroupState]:
    """list_consumer_groups: the state of each group listed (those in `states`, if given)."""
    admin = admin_for(bootstrap)
    options = {"states": states} if states is not None else {}
    result = admin.list_consumer_groups(request_timeout=TIMEOUT_S, **options).result(TIMEOUT_S)
    assert not result.errors, result.errors
    return {listing.group_id: listing.state for listing in result.valid}


def delete_error(bootstrap: str, group: str) -> KafkaError | None:
    """What delete_consumer_groups answers for the group: None when it was deleted."""
    admin = admin_for(bootstrap)
    future = admin.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group]
    try:
        future.result(TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0]
    return None


def alter_offsets(
    bootstrap: str, group: str, topic: str, offsets: dict[int, int]
) -> dict[int, KafkaError | None]:
    """alter_consumer_group_offsets; returns each partition's error (None: stored)."""
    admin = admin_for(bootstrap)
    partitions = [TopicPartition(topic, p, offset) for p, offset in offsets.items()]
    request = ConsumerGroupTopicPartitions(group, partitions)
    future = admin.alter_consumer_group_offsets([request], request_timeout=TIMEOUT_S)[group]
    return {tp.partition: tp.error for tp in future.result(TIMEOUT_S).topic_partitions}


def all_committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """list_consumer_group_offsets without partitions: every offset the group has."""
    admin = admin_for(bootstrap)
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S
    )
    future = futures[group]
    return {(tp.topic, tp.partition): tp.offset for tp in future.result(TIMEOUT_S).topic_partitions}


def test_admin_reports_an_active_group_and_refuses_to_delete_it(group_broker):
    bootstrap = group_broker.bootstrap
    topic, group = unique_topic("adm-active"), unique_topic("adm-active-group")
    create_topic(bootstrap, topic, 4)
    members = [GroupMember(bootstrap, group, topic, f"admin-member-{i}") for i in range(2)]
    try:
        poll_until(
            members, lambda: is_balanced((m.assignment for m in members), 4), "2 partitions each"
        )
        produce(bootstrap, topic, 4, 10)
        poll_until(members, lambda: sum(len(m.processed) for m in members) >= 40, "every message")

        assert listed_states(bootstrap)[group] == ConsumerGroupState.STABLE
        assert group in listed_states(bootstrap, {ConsumerGroupState.STABLE})
        assert group not in listed_states(bootstrap, {ConsumerGroupState.EMPTY})

        description = describe_group(bootstrap, group)
        assert description.group_id == group
        assert description.state == ConsumerGroupState.STABLE
        assert description.partition_assignor == "range"
        assert description.is_simple_consumer_group is False
        assert description.coordinator.id == 0
        assert member_assignments(description) == {m.name: m.assignment for m in members}
        member_ids = {m.consumer.memberid() for m in members}
        assert {m.member_id for m in description.members} == member_ids
        assert {m.host for m in description.members} == {"/127.0.0.1"}
        assert all(m.group_instance_id is None for m in description.members)

        assert all_committed_offsets(bootstrap, group) == {(topic, p): 10 for p in range(4)}

        assert delete_error(bootstrap, group).code() == KafkaError.NON_EMPTY_GROUP
        # An admin's commit carries no member id: refused while the group has members.
        errors = alter_offsets(bootstrap, group, topic, {0: 3})
        assert errors[0] is not None and errors[0].code() == KafkaError.UNKNOWN_MEMBER_ID
        assert committed_offsets(bootstrap, group, topic, 4) == dict.fromkeys(range(4), 10)
    finally:
        for member in members:
            member.consumer.close()

    emptied = describe_group(bootstrap, group)
    assert (emptied.state, emptied.members) == (ConsumerGroupState.EMPTY, [])
    assert listed_states(bootstrap)[group] == ConsumerGroupState.EMPTY


def test_unknown_group_is_dead_and_cannot_be_deleted(group_broker):
    unknown = unique_topic("adm-unknown-group")
    description = describe_group(group_broker.bootstrap, unknown)
    assert (description.state, description.members) == (ConsumerGroupState.DEAD, [])
    assert delete_error(group_broker.bootstrap, unknown).code() == KafkaError.GROUP_ID_NOT_FOUND
    assert all_committed_offsets(group_broker.bootstrap, unknown) == {}
    assert unknown not in listed_states(group_broker.bootstrap)


def test_consumer_starts_from_altered_offsets_and_a_deleted_group_is_gone(group_broker):
    bootstrap = group_broker.bootstrap
    topic, group = unique_topic("adm-alter"), unique_topic("adm-alter-group")
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 3, 10)

    # A member reads and commits everything, then leaves: the group is Empty with offsets at 10.
    first = GroupMember(bootstrap, group, topic, "before-alter")
    try:
        poll_until([first], lambda: len(first.processed) >= 30, "every message")
    finally:
        first.consumer.close()
    assert committed_offsets(bootstrap, group, topic, 3) == dict.fromkeys(range(3), 10)

    altered = {0: 2, 1: 7, 2: 0}
    assert alter_offsets(bootstrap, group, topic, altered) == dict.fromkeys(altered)
    assert committed_offsets(bootstrap, group, topic, 3) == altered

    second = GroupMember(bootstrap, group, topic, "after-alter")
    try:
        expected = {p: list(range(start, 10)) for p, start in altered.items()}
        poll_until([second], lambda: second.processed_offsets() == expected, "the rest")
    finally:
        second.consumer.close()

    assert delete_error(bootstrap, group) is None
    assert group not in listed_states(bootstrap)
    assert committed_offsets(bootstrap, group, topic, 3) == dict.fromkeys(range(3), None)
    assert all_committed_offsets(bootstrap, group) == {}
    assert delete_error(bootstrap, group).code() == KafkaError.GROUP_ID_NOT_FOUND
