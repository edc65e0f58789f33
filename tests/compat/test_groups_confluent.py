"""Consumer groups with confluent-kafka (librdkafka; the eager range assignor, and
cooperative-sticky where noted) against a real broker process, over real sockets: members sharing
a topic, a member leaving and a member killed (its session expires), a static member restarting
without a rebalance, and groups and committed offsets across broker restarts.

Members commit synchronously after processing each message (group_support.GroupMember); where a
rebalance is under test, the assertion is that after it every partition is read from exactly the
offset committed before it: nothing committed is read again, nothing is skipped.
"""

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.compat.group_support import (
    FETCH_WAIT_MAX_MS,
    GROUP_BROKER_OVERRIDES,
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    TIMEOUT_S,
    GroupMember,
    assert_clean_log,
    committed_offsets,
    create_topic,
    delete_topic,
    describe_group,
    is_balanced,
    member_assignments,
    poll_until,
    produce,
    settle,
    value_of,
)
from tests.harness import unique_topic

pytestmark = pytest.mark.compat

CHILD_SCRIPT = Path(__file__).resolve().parent / "committing_consumer.py"
# librdkafka's eager default, and the incremental protocol (KIP-429) where members keep what
# they are not asked to give up.
ASSIGNORS = ["range", "cooperative-sticky"]
KILLED_SESSION_TIMEOUT_MS = 3000


def close_all(members) -> None:
    for member in members:
        member.consumer.close()


def read_to(members, ends: dict[int, int]):
    """A condition: the members together processed every partition up to (not including) its
    end."""

    def done() -> bool:
        last: dict[int, int] = {}
        for member in members:
            for partition, offset, _ in member.processed:
                last[partition] = max(last.get(partition, -1), offset)
        return all(last.get(p, -1) >= end - 1 for p, end in ends.items())

    return done


def balanced(members, partitions: int):
    """A condition: the members' assignments split the partitions evenly."""
    return lambda: is_balanced((m.assignment for m in members), partitions)


def processed_since(members, marks: list[int]) -> dict[int, list[int]]:
    """What the members processed per partition since the marks (their processed counts then)."""
    merged: dict[int, list[int]] = {}
    for member, mark in zip(members, marks):
        for partition, offsets in member.processed_offsets(since=mark).items():
            merged.setdefault(partition, []).extend(offsets)
    return merged


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_three_members_share_six_partitions_each_message_processed_once(group_broker, assignor):
    bootstrap = group_broker.bootstrap
    topic, group = unique_topic("share"), unique_topic("share-group")
    create_topic(bootstrap, topic, 6)
    config = {"partition.assignment.strategy": assignor}
    members = [GroupMember(bootstrap, group, topic, f"member-{i}", **config) for i in range(3)]
    try:
        poll_until(members, balanced(members, 6), "2 partitions each")
        settle(members)
        assignments = [m.assignment for m in members]
        produce(bootstrap, topic, 6, 30)

        poll_until(members, lambda: sum(len(m.processed) for m in members) >= 180, "180 messages")

        processed = [record for m in members for record in m.processed]
        assert len(processed) == 180, "no message processed twice"
        assert sorted(processed) == sorted(
            (p, offset, value_of(p, offset)) for p in range(6) for offset in range(30)
        )
        for member in members:
            assert {p for p, _, _ in member.processed} == member.assignment, member
            assert member.committed == dict.fromkeys(member.assignment, 30), member
        assert [m.assignment for m in members] == assignments, "partitions stay put once balanced"
        assert committed_offsets(bootstrap, group, topic, 6) == dict.fromkeys(range(6), 30)
        description = describe_group(bootstrap, group)
        assert (description.state.name, description.partition_assignor) == ("STABLE", assignor)
        assert member_assignments(description) == {m.name: m.assignment for m in members}
    finally:
        close_all(members)


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_member_leaving_hands_its_partitions_over_at_its_commits(group_broker, assignor):
    bootstrap = group_broker.bootstrap
    topic, group = unique_topic("leave"), unique_topic("leave-group")
    create_topic(bootstrap, topic, 6)
    config = {"partition.assignment.strategy": assignor}
    # The leaver's session would keep it in the group far longer than the test waits for the
    # rebalance: only its LeaveGroup can start that rebalance in time.
    leaver = GroupMember(
        bootstrap,
        group,
        topic,
        "leaver",
        **config,
        **{"session.timeout.ms": 30_000, "max.poll.interval.ms": 30_000},
    )
    stayers = [GroupMember(bootstrap, group, topic, f"stayer-{i}", **config) for i in range(2)]
    members = [leaver, *stayers]
    try:
        poll_until(members, balanced(members, 6), "2 partitions each")
        settle(members)
        produce(bootstrap, topic, 6, 20)
        # The stayers process and commit all of theirs; the leaver commits 5 messages, then
        # processes 2 more without committing them.
        stayers_ends = {p: 20 for s in stayers for p in s.assignment}
        poll_until(stayers, read_to(stayers, stayers_ends), "the stayers' messages")
        poll_until([leaver], lambda: len(leaver.processed) >= 5, "the leaver's first 5 messages")
        poll_until([leaver], lambda: len(leaver.processed) >= 7, "2 more messages", commit=False)
        committed_before = committed_offsets(bootstrap, group, topic, 6)
        expected = {p: None for p in leaver.assignment} | leaver.committed
        expected |= {p: 20 for s in stayers for p in s.assignment}
        assert committed_before == expected

        # Marked before the rebalance: a stayer may read its new partitions before the other one
        # has its assignment.
        marks = [len(s.processed) for s in stayers]
        leaver.consumer.close()
        poll_until(stayers, balanced(stayers, 6), "rebalance", timeout_s=10)
        settle(stayers)
        produce(bootstrap, topic, 6, 5, start=20)
        poll_until(stayers, read_to(stayers, dict.fromkeys(range(6), 25)), "every partition read")

        # Without a commit a partition starts at the beginning (auto.offset.reset=earliest).
        assert processed_since(stayers, marks) == {
            p: list(range(committed_before[p] or 0, 25)) for p in range(6)
        }
        description = describe_group(bootstrap, group)
        assert member_assignments(description) == {s.name: s.assignment for s in stayers}
    finally:
        close_all(members)


class ChildMember:
    """committing_consumer.py in a child process; its reports are read by a thread."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, count: int, stderr_path: Path
    ) -> None:
        self.assignment: frozenset[int] = frozenset()
        self.committed: dict[int, int] = {}
        self.paused = False
        arguments = [bootstrap, group, topic, str(count), str(KILLED_SESSION_TIMEOUT_MS)]
        with open(stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, str(CHILD_SCRIPT), *arguments],
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        self._reader = threading.Thread(target=self._read_reports, daemon=True)
        self._reader.start()

    def _read_reports(self) -> None:
        for line in self.process.stdout:  # ends when the process does
            report = json.loads(line)
            if "assignment" in report:
                self.assignment = frozenset(report["assignment"])
            elif "committed" in report:
                partition, offset = report["committed"]
                self.committed[partition] = offset
            elif report.get("paused"):
                self.paused = True

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self._reader.join(10)


def test_killed_member_expires_and_the_others_resume_at_its_commits(group_broker, tmp_path):
    bootstrap = group_broker.bootstrap
    topic, group = unique_topic("kill"), unique_topic("kill-group")
    create_topic(bootstrap, topic, 6)
    child = ChildMember(bootstrap, group, topic, 5, tmp_path / "child.stderr")
    members = [GroupMember(bootstrap, group, topic, f"survivor-{i}") for i in range(2)]
    try:
        poll_until(
            members,
            lambda: is_balanced([child.assignment, *(m.assignment for m in members)], 6),
            "2 partitions each",
        )
        settle(members)
        produce(bootstrap, topic, 6, 20)
        survivors_read = read_to(members, {p: 20 for m in members for p in m.assignment})
        poll_until(
            members,
            lambda: child.paused and survivors_read(),
            "the survivors' messages, and 5 of the child's",
        )
        committed_before = committed_offsets(bootstrap, group, topic, 6)
        expected = {p: None for p in child.assignment} | child.committed
        expected |= {p: 20 for m in members for p in m.assignment}
        assert committed_before == expected

        marks = [len(m.processed) for m in members]  # before the rebalance, as in the leave test
        child.kill()  # SIGKILL: no LeaveGroup, the broker must notice the silence
        poll_until(
            members,
            balanced(members, 6),
            "rebalance after the session timeout",
            timeout_s=KILLED_SESSION_TIMEOUT_MS / 1000 + 10,
        )
        expired = rf"group {re.escape(group)}: removing member killed-member-\S+: its session timed"
        assert re.search(expired, group_broker.log())
        settle(members)
        produce(bootstrap, topic, 6, 5, start=20)
        poll_until(members, read_to(members, dict.fromkeys(range(6), 25)), "every partition read")

        assert processed_since(members, marks) == {
            p: list(range(committed_before[p] or 0, 25)) for p in range(6)
        }
    finally:
        child.kill()
        close_all(members)


def test_static_member_restarts_without_rebalance_and_gets_its_partitions_back(group_broker):
    bootstrap = group_broker.bootstrap
    topic, group = unique_topic("static"), unique_topic("static-group")
    create_topic(bootstrap, topic, 4)
    static_config = {"group.instance.id": "static-a"}
    static = GroupMember(bootstrap, group, topic, "static-member", **static_config)
    other = GroupMember(bootstrap, group, topic, "other-member")
    to_close = [static, other]
    try:
        poll_until(to_close, balanced(to_close, 4), "2 partitions each")
        settle(to_close)
        produce(bootstrap, topic, 4, 10)
        poll_until(to_close, read_to(to_close, dict.fromkeys(range(4), 10)), "the first 10 of each")
        other_before = (other.assignment, other.assign_calls, other.revoke_calls)
        static_partitions = static.assignment
        [static_before] = [
            m for m in describe_group(bootstrap, group).members if m.client_id == "static-member"
        ]

        # librdkafka closes a static member without LeaveGroup: it stays in the group.
        static.consumer.close()
        after_close = describe_group(bootstrap, group)
        assert after_close.state.name == "STABLE"
        assert {(m.client_id, m.group_instance_id) for m in after_close.members} == {
            ("static-member", "static-a"),
            ("other-member", None),
        }

        produce(bootstrap, topic, 4, 5, start=10)
        restarted = GroupMember(bootstrap, group, topic, "static-member", **static_config)
        to_close.append(restarted)
        members = [restarted, other]
        poll_until(members, read_to(members, dict.fromkeys(range(4), 15)), "the next 5 of each")
        # A rebalance would reach the other member at its next heartbeat: give it several.
        settle_until = time.monotonic() + 8 * 0.25
        poll_until(members, lambda: time.monotonic() >= settle_until, "time passing")

        assert (other.assignment, other.assign_calls, other.revoke_calls) == other_before
        assert restarted.assignment == static_partitions
        assert (restarted.assign_calls, restarted.revoke_calls) == (1, 0)
        assert restarted.processed_offsets() == {p: list(range(10, 15)) for p in static_partitions}
        description = describe_group(bootstrap, group)
        assert description.state.name == "STABLE"
        assert member_assignments(description) == {
            "static-member": static_partitions,
            "other-member": other.assignment,
        }
        [static_now] = [m for m in description.members if m.client_id == "static-member"]
        assert static_now.group_instance_id == "static-a"
        assert static_now.member_id != static_before.member_id, "a restarted member gets a new id"
    finally:
        close_all(to_close)


def start_own_broker(broker_factory):
    """A broker of the test's own, to restart (the factory takes overrides with '_' for '.')."""
    overrides = {key.replace(".", "_"): value for key, value in GROUP_BROKER_OVERRIDES.items()}
    return broker_factory(**overrides)


@pytest.mark.parametrize("stop", ["clean", "kill"])
def test_new_member_resumes_at_the_committed_offsets_after_a_broker_restart(broker_factory, stop):
    broker = start_own_broker(broker_factory)
    topic, group = unique_topic("restart"), unique_topic("restart-group")
    create_topic(broker.bootstrap, topic, 3)
    produce(broker.bootstrap, topic, 3, 20)
    committed = {0: 5, 1: 11, 2: 17}

    first = GroupMember(broker.bootstrap, group, topic, "before-restart")
    try:
        poll_until([first], lambda: first.assignment == {0, 1, 2}, "the assignment")
        offsets = [
            TopicPartition(topic, p, offset, metadata=f"checkpoint-{p}")
            for p, offset in committed.items()
        ]
        first.consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        first.consumer.close()
    assert committed_offsets(broker.bootstrap, group, topic, 3) == committed

    if stop == "clean":
        broker.restart()
    else:
        broker.kill()
        broker.start()

    assert committed_offsets(broker.bootstrap, group, topic, 3) == committed
    second = GroupMember(broker.bootstrap, group, topic, "after-restart")
    try:
        stored = second.consumer.committed(
            [TopicPartition(topic, p) for p in range(3)], timeout=TIMEOUT_S
        )
        assert [(tp.partition, tp.offset, tp.metadata) for tp in stored] == [
            (p, offset, f"checkpoint-{p}") for p, offset in committed.items()
        ]
        poll_until([second], read_to([second], dict.fromkeys(range(3), 20)), "every partition read")
        assert second.processed_offsets() == {
            p: list(range(offset, 20)) for p, offset in committed.items()
        }
        assert all(value == value_of(p, offset) for p, offset, value in second.processed)
    finally:
        second.consumer.close()
    assert_clean_log(broker)


def test_members_carry_on_without_rebalance_across_a_broker_kill(broker_factory):
    broker = start_own_broker(broker_factory)
    topic, group = unique_topic("survive"), unique_topic("survive-group")
    create_topic(broker.bootstrap, topic, 2)
    members = [GroupMember(broker.bootstrap, group, topic, f"member-{i}") for i in range(2)]
    try:
        poll_until(members, balanced(members, 2), "a partition each")
        settle(members)
        produce(broker.bootstrap, topic, 2, 10)
        poll_until(members, read_to(members, dict.fromkeys(range(2), 10)), "the first 10 of each")
        before = [(m.assignment, m.assign_calls, m.consumer.memberid()) for m in members]

        # The group comes back from __consumer_offsets Stable, with its members and generation:
        # their heartbeats (within the session timeout) and commits are accepted as before.
        marks = [len(m.processed) for m in members]
        broker.kill()
        broker.start()
        produce(broker.bootstrap, topic, 2, 10, start=10)
        poll_until(members, read_to(members, dict.fromkeys(range(2), 20)), "the next 10 of each")

        assert processed_since(members, marks) == {p: list(range(10, 20)) for p in range(2)}
        assert [(m.assignment, m.assign_calls, m.consumer.memberid()) for m in members] == before
        assert committed_offsets(broker.bootstrap, group, topic, 2) == dict.fromkeys(range(2), 20)
        description = describe_group(broker.bootstrap, group)
        assert description.state.name == "STABLE"
        assert member_assignments(description) == {m.name: m.assignment for m in members}
    finally:
        close_all(members)
    assert_clean_log(broker)


def test_a_member_whose_other_topic_is_deleted_keeps_the_first_and_closes_at_once(group_broker):
    """librdkafka's own test 0113 (h_delete_topic; i, j and n delete a topic too) never returns
    from close() here with librdkafka 2.0.2, whose log says its bootstrap broker handle "still
    has 2 refcnt(s)" with no request outstanding: the reference-count bug librdkafka 2.1.0's
    changelog fixes ("blocking the consumer from closing ... if the corresponding topic is
    deleted"). The librdkafka under confluent-kafka here closes at once against the same
    broker."""
    bootstrap = group_broker.bootstrap
    kept, deleted, group = unique_topic("kept"), unique_topic("deleted"), unique_topic("deleted-group")
    create_topic(bootstrap, kept, 1)
    create_topic(bootstrap, deleted, 1)
    assignment: set[tuple[str, int]] = set()

    def on_assign(consumer, partitions) -> None:
        assignment.update((tp.topic, tp.partition) for tp in partitions)
        consumer.incremental_assign(partitions)

    def on_revoke(consumer, partitions) -> None:  # also called for partitions lost
        assignment.difference_update((tp.topic, tp.partition) for tp in partitions)
        consumer.incremental_unassign(partitions)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
            # As 0113: the deletion is seen at the next refresh, at most 3 s on.
            "topic.metadata.refresh.interval.ms": 3000,
        }
    )
    consumer.subscribe([kept, deleted], on_assign=on_assign, on_revoke=on_revoke)
    closed = threading.Event()
    try:
        wait_polling(consumer, lambda: assignment == {(kept, 0), (deleted, 0)}, "both topics assigned")
        delete_topic(bootstrap, deleted)
        wait_polling(consumer, lambda: assignment == {(kept, 0)}, "the deleted topic revoked")
    finally:
        closer = threading.Thread(target=lambda: (consumer.close(), closed.set()), daemon=True)
        closer.start()
        closer.join(TIMEOUT_S)
    assert closed.is_set(), f"close() has not returned within {TIMEOUT_S} s"


def wait_polling(consumer: Consumer, condition, what: str) -> None:
    """Poll (serving the rebalance callbacks; the deleted topic's errors are expected) until
    the condition holds."""
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {TIMEOUT_S} s"
        consumer.poll(0.1)
