"""The classic rebalance protocol as a state machine (coordinator.group): every transition and
every error code, with time moved by hand and group metadata stores completed by hand."""

import pytest
from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription

from coordinator.group import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    CommittedOffset,
    Group,
    GroupConfig,
    GroupState,
    JoinRequest,
    Member,
)
from protocol import schemas
from protocol.errors import ErrorCode
from protocol.primitives import INT16
from storage.topic_partition import TopicPartition

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD
SESSION_MS = 10_000
REBALANCE_MS = 20_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Store:
    """A GroupStore whose writes complete when the test says (at once with `auto`)."""

    def __init__(self, auto: bool = True) -> None:
        self.auto = auto
        self.stored: list[tuple[int, str | None, dict[str, bytes], list[str]]] = []
        self._pending = []

    def store_group(self, group, assignment, on_stored) -> None:
        self.stored.append((group.generation_id, group.protocol_name, dict(assignment), list(group.members)))
        if self.auto:
            on_stored(ErrorCode.none)
        else:
            self._pending.append(on_stored)

    def complete(self, error: ErrorCode = ErrorCode.none) -> None:
        self._pending.pop(0)(error)


class Reply:
    """A callback that records what the group answered."""

    def __init__(self) -> None:
        self.results = []

    def __call__(self, result) -> None:
        self.results.append(result)

    @property
    def pending(self) -> bool:
        return not self.results

    @property
    def result(self):
        assert len(self.results) == 1, self.results
        return self.results[0]


def make_group(store: Store | None = None, **config) -> tuple[Group, Clock, Store]:
    clock = Clock()
    store = store or Store()
    settings = {"initial_rebalance_delay_ms": 0, **config}
    return Group("g", GroupConfig(**settings), clock, store), clock, store


def join(
    group: Group,
    member_id: str = "",
    instance_id: str | None = None,
    protocols=(("range", b"r-meta"),),
    protocol_type: str = "consumer",
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
    client_id: str = "client",
    require_known_member_id: bool = False,
    supports_skip_assignment: bool = False,
) -> Reply:
    reply = Reply()
    group.join(
        JoinRequest(
            member_id=member_id,
            group_instance_id=instance_id,
            client_id=client_id,
            client_host="/127.0.0.1",
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type=protocol_type,
            protocols=tuple(protocols),
            require_known_member_id=require_known_member_id,
            supports_skip_assignment=supports_skip_assignment,
        ),
        reply,
    )
    return reply


def sync(group: Group, member_id: str, generation: int, assignments=None, instance_id=None, **kw) -> Reply:
    reply = Reply()
    group.sync(
        member_id,
        instance_id,
        generation,
        kw.get("protocol_type"),
        kw.get("protocol_name"),
        assignments or {},
        reply,
    )
    return reply


def stable_group(*instance_ids: str | None, **config) -> tuple[Group, Clock, Store, list[str]]:
    """A Stable group of one member per instance id (None: dynamic), each assigned b"a-<id>"."""
    group, clock, store = make_group(**config)
    replies = [join(group, instance_id=instance_id, client_id=f"c{i}") for i, instance_id in enumerate(instance_ids)]
    group.on_time(clock.now)
    member_ids = [reply.result.member_id for reply in replies]
    generation = group.generation_id
    leader = group.leader_id
    for member_id in member_ids:
        if member_id != leader:
            sync(group, member_id, generation)
    sync(group, leader, generation, {m: b"a-" + m.encode() for m in member_ids})
    assert group.state is STABLE
    return group, clock, store, member_ids


def subscription(*topics: str) -> bytes:
    return INT16.pack(0) + schemas.encode(ConsumerProtocolSubscription(topics=topics, user_data=None))


# --------------------------------------------------------------------------- joining


def test_a_first_member_makes_an_empty_group_prepare_then_complete_with_it_as_leader():
    group, clock, store = make_group()
    assert group.state is EMPTY
    reply = join(group, client_id="app")
    assert group.state is PREPARING
    assert reply.pending  # the initial delay (0 here) runs out only when time is handled
    group.on_time(clock.now)
    result = reply.result
    assert result.error is ErrorCode.none
    assert result.member_id.startswith("app-")
    assert (result.generation_id, result.protocol_type, result.protocol_name) == (1, "consumer", "range")
    assert result.leader_id == result.member_id
    assert [(m.member_id, m.metadata) for m in result.members] == [(result.member_id, b"r-meta")]
    assert group.state is COMPLETING
    assert store.stored == []  # metadata is stored with the assignment, at SyncGroup


def test_join_v4_gives_a_new_member_its_id_first_and_keeps_it_pending():
    group, clock, _ = make_group()
    first = join(group, client_id="app", require_known_member_id=True)
    assert first.result.error is ErrorCode.member_id_required
    member_id = first.result.member_id
    assert member_id.startswith("app-")
    assert group.state is EMPTY and member_id in group.pending_members and not group.members
    second = join(group, member_id=member_id, require_known_member_id=True)
    assert group.state is PREPARING and member_id in group.members and not group.pending_members
    group.on_time(clock.now)
    assert second.result.member_id == member_id and second.result.generation_id == 1


def test_a_pending_member_that_does_not_come_back_lapses_after_its_session_timeout():
    group, clock, _ = make_group()
    member_id = join(group, require_known_member_id=True).result.member_id
    clock.now += SESSION_MS - 1
    group.on_time(clock.now)
    assert member_id in group.pending_members
    clock.now += 1
    group.on_time(clock.now)
    assert not group.pending_members
    assert join(group, member_id=member_id).result.error is ErrorCode.unknown_member_id


def test_a_pending_member_holds_back_the_rebalance_until_it_joins():
    group, clock, _, (a,) = stable_group(None)
    pending_id = join(group, require_known_member_id=True).result.member_id
    rejoin = join(group, member_id=a)  # the leader rejoining starts a rebalance
    assert group.state is PREPARING and rejoin.pending
    newcomer = join(group, member_id=pending_id)
    assert rejoin.result.generation_id == newcomer.result.generation_id == 2


def test_a_new_member_makes_a_stable_group_rebalance_and_completes_when_all_rejoined():
    group, clock, store, (a,) = stable_group(None)
    b_reply = join(group, protocols=(("range", b"b-meta"),))
    assert group.state is PREPARING and b_reply.pending
    assert group.heartbeat(a, None, 1) is ErrorCode.rebalance_in_progress
    a_reply = join(group, member_id=a, protocols=(("range", b"a-meta"),))
    assert group.state is COMPLETING
    leader, follower = a_reply.result, b_reply.result
    assert leader.generation_id == follower.generation_id == 2
    assert leader.leader_id == follower.leader_id == a
    assert {(m.member_id, m.metadata) for m in leader.members} == {(a, b"a-meta"), (follower.member_id, b"b-meta")}
    assert follower.members == ()


def test_followers_sync_waits_for_the_leader_and_for_the_assignment_to_be_stored():
    store = Store(auto=False)
    group, clock, _ = make_group(store)
    a_join, b_join = join(group), join(group)
    group.on_time(clock.now)
    a, b = a_join.result.member_id, b_join.result.member_id
    follower = sync(group, b, 1)
    assert follower.pending
    leader = sync(group, a, 1, {a: b"for-a", b: b"for-b"})
    assert leader.pending and follower.pending and group.state is COMPLETING
    assert store.stored == [(1, "range", {a: b"for-a", b: b"for-b"}, [a, b])]
    store.complete()
    assert group.state is STABLE
    assert (leader.result.error, leader.result.assignment) == (ErrorCode.none, b"for-a")
    assert (follower.result.error, follower.result.assignment) == (ErrorCode.none, b"for-b")
    assert (follower.result.protocol_type, follower.result.protocol_name) == ("consumer", "range")
    late = sync(group, b, 1)  # a Stable group answers at once
    assert late.result.assignment == b"for-b"


def test_members_the_leader_left_out_get_an_empty_assignment():
    group, clock, _ = make_group()
    a_join, b_join = join(group), join(group)
    group.on_time(clock.now)
    a, b = a_join.result.member_id, b_join.result.member_id
    follower = sync(group, b, 1)
    sync(group, a, 1, {a: b"all", "stranger": b"x"})
    assert follower.result.assignment == b""
    assert group.members[b].assignment == b"" and "stranger" not in group.members


def test_a_failed_store_of_the_assignment_fails_the_syncs_and_rebalances():
    store = Store(auto=False)
    group, clock, _ = make_group(store)
    a = join(group)
    group.on_time(clock.now)
    leader = sync(group, a.result.member_id, 1, {a.result.member_id: b"x"})
    store.complete(ErrorCode.not_coordinator)
    assert leader.result.error is ErrorCode.not_coordinator
    assert group.state is PREPARING


def test_sync_errors():
    group, clock, _, (a, b) = stable_group(None, None)
    assert sync(group, "nobody", 1).result.error is ErrorCode.unknown_member_id
    assert sync(group, a, 7).result.error is ErrorCode.illegal_generation
    wrong_type = sync(group, a, 1, protocol_type="connect")
    assert wrong_type.result.error is ErrorCode.inconsistent_group_protocol
    wrong_name = sync(group, a, 1, protocol_name="roundrobin")
    assert wrong_name.result.error is ErrorCode.inconsistent_group_protocol
    assert sync(group, a, 1, protocol_type="consumer", protocol_name="range").result.error is ErrorCode.none
    join(group)  # a third member: the group prepares a rebalance
    assert sync(group, a, 1).result.error is ErrorCode.rebalance_in_progress


def test_a_sync_waiting_when_a_rebalance_starts_is_told_to_rejoin():
    group, clock, _ = make_group()
    a_join, b_join = join(group), join(group)
    group.on_time(clock.now)
    follower = sync(group, b_join.result.member_id, 1)
    join(group)  # a new member arrives before the leader's SyncGroup
    assert follower.result.error is ErrorCode.rebalance_in_progress
    assert group.state is PREPARING


# ------------------------------------------------------------------- protocol and leader


def test_the_protocol_is_chosen_by_the_members_votes():
    group, clock, _ = make_group()
    join(group, protocols=(("roundrobin", b""), ("range", b"")))
    join(group, protocols=(("range", b""), ("roundrobin", b"")))
    join(group, protocols=(("range", b""), ("roundrobin", b"")))
    group.on_time(clock.now)
    assert group.protocol_name == "range"


def test_only_protocols_every_member_supports_can_win():
    group, clock, _ = make_group()
    join(group, protocols=(("sticky", b""), ("range", b"")))
    join(group, protocols=(("sticky", b""), ("range", b"")))
    join(group, protocols=(("range", b""),))
    group.on_time(clock.now)
    assert group.protocol_name == "range"


def test_a_tie_goes_to_the_oldest_members_choice():
    group, clock, _ = make_group()
    join(group, protocols=(("b", b""), ("a", b"")))
    join(group, protocols=(("a", b""), ("b", b"")))
    group.on_time(clock.now)
    assert group.protocol_name == "b"


def test_the_leader_gets_every_members_metadata_for_the_chosen_protocol():
    group, clock, _ = make_group()
    a = join(group, protocols=(("range", b"a-range"), ("roundrobin", b"a-rr")))
    b = join(group, protocols=(("roundrobin", b"b-rr"), ("range", b"b-range")))
    c = join(group, protocols=(("roundrobin", b"c-rr"),))
    group.on_time(clock.now)
    assert a.result.protocol_name == "roundrobin"
    assert [m.metadata for m in a.result.members] == [b"a-rr", b"b-rr", b"c-rr"]
    assert b.result.members == c.result.members == ()


def test_a_leader_that_does_not_rejoin_is_replaced_by_the_oldest_member_that_did():
    group, clock, _, (a, b, c) = stable_group(None, None, None)
    assert group.leader_id == a
    join(group)  # d: a rebalance
    join(group, member_id=c)
    join(group, member_id=b)
    clock.now += REBALANCE_MS
    group.on_time(clock.now)
    assert a not in group.members
    assert group.leader_id == b  # b joined the group before c


def test_a_leader_that_leaves_hands_over_to_the_oldest_member():
    group, clock, _, (a, b, c) = stable_group(None, None, None)
    assert group.leave([(a, None)]) == (ErrorCode.none, [ErrorCode.none])
    assert group.leader_id == b


# ----------------------------------------------------------------------- join errors


@pytest.mark.parametrize("session_ms", [5_999, 1_800_001])
def test_a_session_timeout_outside_the_brokers_bounds_is_refused(session_ms):
    group, _, _ = make_group(min_session_timeout_ms=6_000, max_session_timeout_ms=1_800_000)
    assert join(group, session_ms=session_ms).result.error is ErrorCode.invalid_session_timeout
    assert group.state is EMPTY and not group.members


def test_inconsistent_protocols_are_refused():
    group, _, _ = make_group()
    assert join(group, protocol_type="").result.error is ErrorCode.inconsistent_group_protocol
    assert join(group, protocols=()).result.error is ErrorCode.inconsistent_group_protocol
    join(group, protocols=(("range", b""),))
    assert join(group, protocol_type="connect").result.error is ErrorCode.inconsistent_group_protocol
    no_common = join(group, protocols=(("roundrobin", b""),))
    assert no_common.result.error is ErrorCode.inconsistent_group_protocol


def test_a_member_may_change_its_protocols_when_the_others_support_the_new_ones():
    group, clock, _, (a,) = stable_group(None)
    rejoin = join(group, member_id=a, protocols=(("roundrobin", b""),))
    assert rejoin.result.error is ErrorCode.none
    assert group.protocol_name == "roundrobin"


def test_an_unknown_member_id_is_refused():
    group, _, _, _ = stable_group(None)
    assert join(group, member_id="ghost").result.error is ErrorCode.unknown_member_id


def test_a_full_group_refuses_new_members():
    group, clock, _, (a, b) = stable_group(None, None, max_size=2)
    assert join(group).result.error is ErrorCode.group_max_size_reached
    assert group.state is STABLE and len(group.members) == 2


def test_a_full_group_takes_a_restarting_static_member_back():
    group, clock, _, (a, b) = stable_group("static-a", None, max_size=2)
    rejoin = join(group, instance_id="static-a")
    assert rejoin.result.error is ErrorCode.none and group.state is STABLE


def test_while_preparing_the_members_awaiting_join_count_against_the_maximum():
    group, clock, _ = make_group(max_size=2, initial_rebalance_delay_ms=1_000)
    first, second = join(group), join(group)
    third = join(group)
    assert third.result.error is ErrorCode.group_max_size_reached
    assert first.pending and second.pending and len(group.members) == 2


def test_requests_to_a_dead_group_are_refused_with_coordinator_not_available():
    group, _, _, (a,) = stable_group(None)
    group.mark_dead()
    assert join(group).result.error is ErrorCode.coordinator_not_available
    assert join(group, member_id=a).result.error is ErrorCode.coordinator_not_available
    assert group.heartbeat(a, None, 1) is ErrorCode.coordinator_not_available
    assert sync(group, a, 1).result.error is ErrorCode.coordinator_not_available
    assert group.leave([(a, None)]) == (ErrorCode.coordinator_not_available, [])


# ---------------------------------------------------------------------- rejoining


def test_a_follower_rejoining_a_stable_group_unchanged_gets_the_current_generation():
    group, _, _, (a, b) = stable_group(None, None)
    reply = join(group, member_id=b)
    assert (reply.result.error, reply.result.generation_id, reply.result.leader_id) == (ErrorCode.none, 1, a)
    assert group.state is STABLE


def test_the_leader_rejoining_a_stable_group_triggers_a_rebalance():
    group, _, _, (a, b) = stable_group(None, None)
    reply = join(group, member_id=a)
    assert reply.pending and group.state is PREPARING


def test_a_member_rejoining_with_new_metadata_triggers_a_rebalance():
    group, _, _, (a, b) = stable_group(None, None)
    join(group, member_id=b, protocols=(("range", b"changed"),))
    assert group.state is PREPARING


def test_a_member_that_missed_its_join_answer_gets_it_again_while_completing():
    group, clock, _ = make_group()
    a, b = join(group), join(group)
    group.on_time(clock.now)
    again = join(group, member_id=a.result.member_id)
    assert again.result.generation_id == 1 and len(again.result.members) == 2  # still the leader
    assert group.state is COMPLETING


def test_a_retried_join_supersedes_the_one_waiting():
    group, clock, _, (a, b) = stable_group(None, None)
    first = join(group, member_id=a)
    second = join(group, member_id=a)
    assert first.result.error is ErrorCode.rebalance_in_progress
    assert second.pending


# ----------------------------------------------------------------------- heartbeats


def test_heartbeat_answers_per_state():
    group, clock, _ = make_group()
    reply = join(group)
    group.on_time(clock.now)
    a = reply.result.member_id
    assert group.heartbeat(a, None, 1) is ErrorCode.none  # CompletingRebalance
    sync(group, a, 1, {a: b""})
    assert group.heartbeat(a, None, 1) is ErrorCode.none  # Stable
    assert group.heartbeat(a, None, 0) is ErrorCode.illegal_generation
    assert group.heartbeat("ghost", None, 1) is ErrorCode.unknown_member_id
    join(group)
    assert group.heartbeat(a, None, 1) is ErrorCode.rebalance_in_progress


def test_heartbeat_to_an_empty_group_is_unknown_member():
    group, clock, _, (a,) = stable_group(None)
    group.leave([(a, None)])
    assert group.state is EMPTY
    assert group.heartbeat(a, None, group.generation_id) is ErrorCode.unknown_member_id


def test_a_silent_member_is_removed_when_its_session_expires():
    group, clock, _, (a, b) = stable_group(None, None)
    clock.now += SESSION_MS - 1
    assert group.heartbeat(a, None, 1) is ErrorCode.none
    group.on_time(clock.now)
    assert b in group.members
    clock.now += 1
    assert group.next_deadline() == clock.now
    group.on_time(clock.now)
    assert b not in group.members and a in group.members
    assert group.state is PREPARING
    assert group.heartbeat(a, None, 1) is ErrorCode.rebalance_in_progress


def test_members_waiting_on_the_group_do_not_expire_but_new_ones_time_out():
    group, clock, _, (a, b) = stable_group(None, None)
    clock.now += 1
    rejoin = join(group, member_id=a, protocols=(("range", b"changed"),))  # a waits for b
    clock.now += SESSION_MS
    group.on_time(clock.now)  # b's session expires; a waits, so it stays
    assert b not in group.members and a in group.members
    assert rejoin.result.generation_id == 2  # b gone, a alone completes the rebalance
    # A new member cannot heartbeat while it waits: it is dropped after the new-member timeout,
    # even when the rebalance may last longer.
    newcomer = join(group, rebalance_ms=2 * NEW_MEMBER_JOIN_TIMEOUT_MS)
    clock.now += NEW_MEMBER_JOIN_TIMEOUT_MS - 1
    group.heartbeat(a, None, 2)
    group.on_time(clock.now)
    assert newcomer.pending
    clock.now += 1
    group.on_time(clock.now)
    assert newcomer.result.error is ErrorCode.unknown_member_id
    assert group.state is PREPARING  # a has yet to rejoin


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed():
    group, clock, _, (a, b) = stable_group(None, None)
    c = join(group)
    join(group, member_id=a)
    clock.now += REBALANCE_MS - 1
    group.heartbeat(b, None, 1)  # alive but not rejoining
    group.on_time(clock.now)
    assert c.pending
    clock.now += 1
    group.on_time(clock.now)
    assert b not in group.members
    assert c.result.generation_id == 2 and set(group.members) == {a, c.result.member_id}


def test_a_static_member_not_rejoining_in_time_stays_until_its_session_expires():
    group, clock, _, (a, b) = stable_group(None, "static-b")
    c = join(group)
    join(group, member_id=a)
    clock.now += REBALANCE_MS
    group.heartbeat(b, "static-b", 1)
    group.on_time(clock.now)
    assert b in group.members  # it may be restarting
    assert c.result.generation_id == 2
    clock.now += SESSION_MS
    group.on_time(clock.now)
    assert b not in group.members


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout():
    group, clock, _ = make_group()
    a_join, b_join = join(group), join(group)
    group.on_time(clock.now)
    a, b = a_join.result.member_id, b_join.result.member_id
    sync(group, a, 1, {a: b"x", b: b"y"})
    assert group.state is STABLE
    clock.now += REBALANCE_MS
    group.heartbeat(a, None, 1)
    group.heartbeat(b, None, 1)  # heartbeats are not enough: b must sync
    group.on_time(clock.now)
    assert b not in group.members and group.state is PREPARING


# ------------------------------------------------------------------- initial delay


def test_the_initial_delay_waits_and_is_extended_while_members_keep_arriving():
    group, clock, _ = make_group(initial_rebalance_delay_ms=3_000)
    start = clock.now
    a = join(group, rebalance_ms=10_000)
    assert group.next_deadline() == start + 3_000
    clock.now = start + 1_000
    b = join(group, rebalance_ms=10_000)
    clock.now = start + 3_000
    group.on_time(clock.now)
    assert a.pending and b.pending  # b arrived: wait another delay
    assert group.next_deadline() == start + 6_000
    clock.now = start + 6_000
    group.on_time(clock.now)  # nobody new: complete
    assert a.result.generation_id == b.result.generation_id == 1


def test_the_initial_delay_never_exceeds_the_rebalance_timeout():
    group, clock, _ = make_group(initial_rebalance_delay_ms=3_000)
    start = clock.now
    first = join(group, rebalance_ms=10_000)
    deadlines = []
    while first.pending:
        clock.now = group.next_deadline()
        deadlines.append(clock.now - start)
        join(group, rebalance_ms=10_000)  # a new member in every delay
        group.on_time(clock.now)
    assert deadlines == [3_000, 6_000, 9_000, 10_000]


def test_the_initial_delay_does_not_end_early_when_everyone_joined():
    group, clock, _ = make_group(initial_rebalance_delay_ms=3_000)
    reply = join(group)
    group.on_time(clock.now + 2_999)
    assert reply.pending


# --------------------------------------------------------------- static membership


def test_a_restarted_static_member_gets_its_assignment_back_without_a_rebalance():
    group, clock, store, (a, b) = stable_group("static-a", None)
    stored_before = len(store.stored)
    rejoin = join(group, instance_id="static-a", client_id="restarted")
    result = rejoin.result
    new_id = result.member_id
    assert new_id != a and new_id.startswith("static-a-")
    assert (result.error, result.generation_id, group.state) == (ErrorCode.none, 1, STABLE)
    assert result.leader_id == a  # the old id: the restarted leader must not assign
    assert result.members == () and not result.skip_assignment
    assert store.stored[stored_before][3] == [b, new_id]  # the new member id is persisted
    assert sync(group, new_id, 1, instance_id="static-a").result.assignment == b"a-" + a.encode()
    assert group.heartbeat(a, "static-a", 1) is ErrorCode.fenced_instance_id


def test_a_restarted_static_leader_is_told_to_skip_the_assignment_from_join_v9():
    group, clock, store, (a, b) = stable_group("static-a", None)
    result = join(group, instance_id="static-a", supports_skip_assignment=True).result
    assert result.leader_id == result.member_id == group.leader_id
    assert result.skip_assignment
    assert {m.member_id for m in result.members} == {result.member_id, b}


def test_a_static_member_rejoining_with_another_protocol_rebalances():
    group, clock, store, (a,) = stable_group("static-a")
    changed = join(group, instance_id="static-a", protocols=(("roundrobin", b""),))
    # The group's protocol would change: a rebalance, which completes at once with one member.
    assert (changed.result.generation_id, changed.result.protocol_name) == (2, "roundrobin")


def test_a_failed_store_of_a_replaced_static_member_restores_the_old_one():
    group, clock, _, (a,) = stable_group("static-a")
    group.store = Store(auto=False)
    rejoin = join(group, instance_id="static-a")
    group.store.complete(ErrorCode.not_coordinator)
    assert rejoin.result.error is ErrorCode.not_coordinator
    assert set(group.members) == {a} and group.static_members == {"static-a": a}


def test_a_static_member_rejoining_while_completing_restarts_the_rebalance():
    group, clock, _ = make_group()
    a = join(group, instance_id="static-a")
    b = join(group)
    group.on_time(clock.now)
    rejoin = join(group, instance_id="static-a")
    assert group.state is PREPARING and rejoin.pending


def test_stale_instances_of_a_static_member_are_fenced():
    group, clock, _, (a, b) = stable_group("static-a", None)
    current = join(group, instance_id="static-a").result.member_id
    assert join(group, member_id=a, instance_id="static-a").result.error is ErrorCode.fenced_instance_id
    assert sync(group, a, 1, instance_id="static-a").result.error is ErrorCode.fenced_instance_id
    assert group.heartbeat(a, "static-a", 1) is ErrorCode.fenced_instance_id
    assert group.check_offset_commit(a, "static-a", 1) is ErrorCode.fenced_instance_id
    assert group.leave([(a, "static-a")]) == (ErrorCode.none, [ErrorCode.fenced_instance_id])
    assert group.heartbeat(current, "static-a", 1) is ErrorCode.none


def test_a_waiting_request_of_a_replaced_static_member_is_fenced():
    group, clock, _ = make_group(initial_rebalance_delay_ms=1_000)
    old = join(group, instance_id="static-a")
    join(group, instance_id="static-a")
    assert old.result.error is ErrorCode.fenced_instance_id


def test_an_unknown_instance_id_with_a_member_id_is_unknown_member():
    group, _, _, (a,) = stable_group(None)
    assert join(group, member_id=a, instance_id="never-seen").result.error is ErrorCode.unknown_member_id


# -------------------------------------------------------------------------- leaving


def test_leaving_rebalances_and_the_last_member_leaving_empties_the_group_and_stores_it():
    group, clock, store, (a, b) = stable_group(None, None)
    assert group.leave([(b, None)]) == (ErrorCode.none, [ErrorCode.none])
    assert group.state is PREPARING
    join(group, member_id=a)
    assert group.state is COMPLETING and group.generation_id == 2
    sync(group, a, 2, {a: b""})
    assert group.leave([(a, None)]) == (ErrorCode.none, [ErrorCode.none])
    assert (group.state, group.generation_id, group.protocol_name, group.leader_id) == (EMPTY, 3, None, None)
    assert store.stored[-1] == (3, None, {}, [])


def test_a_member_leaving_while_others_wait_completes_the_rebalance():
    group, clock, _, (a, b) = stable_group(None, None)
    waiting = join(group, member_id=a, protocols=(("range", b"new"),))
    group.leave([(b, None)])
    assert waiting.result.generation_id == 2


def test_leave_by_instance_id_pending_member_and_unknown_member():
    group, clock, _, (a, b) = stable_group("static-a", None)
    pending_id = join(group, require_known_member_id=True).result.member_id
    result = group.leave([("", "static-a"), (pending_id, None), ("ghost", None), ("", "no-such-instance")])
    assert result == (
        ErrorCode.none,
        [ErrorCode.none, ErrorCode.none, ErrorCode.unknown_member_id, ErrorCode.unknown_member_id],
    )
    assert set(group.members) == {b} and not group.pending_members


def test_a_member_removed_while_it_waits_to_join_is_told_so():
    group, clock, _, (a, b) = stable_group(None, "static-b")
    waiting = join(group, member_id=b, protocols=(("range", b"new"),))
    group.leave([("", "static-b")])  # an administrator removes its instance
    assert waiting.result.error is ErrorCode.unknown_member_id


# ------------------------------------------------------------------------- describe


def test_describe_shows_metadata_and_assignments_only_when_stable():
    group, clock, _ = make_group()
    reply = join(group, protocols=(("range", b"meta"),), client_id="app")
    group.on_time(clock.now)
    a = reply.result.member_id
    completing = group.describe()
    assert (completing.state, completing.protocol_type, completing.protocol) == ("CompletingRebalance", "consumer", "")
    assert (completing.members[0].metadata, completing.members[0].assignment) == (b"", b"")
    sync(group, a, 1, {a: b"assigned"})
    stable = group.describe()
    assert (stable.state, stable.protocol) == ("Stable", "range")
    member = stable.members[0]
    assert (member.member_id, member.client_id, member.client_host) == (a, "app", "/127.0.0.1")
    assert (member.metadata, member.assignment) == (b"meta", b"assigned")


# -------------------------------------------------------------------------- offsets


def test_offset_commit_checks():
    group, clock, _ = make_group()
    assert group.check_offset_commit("", None, -1) is ErrorCode.none  # simple commit, Empty group
    reply = join(group)
    group.on_time(clock.now)
    a = reply.result.member_id
    assert group.check_offset_commit(a, None, 1) is ErrorCode.rebalance_in_progress
    sync(group, a, 1, {a: b""})
    assert group.check_offset_commit(a, None, 1) is ErrorCode.none
    assert group.check_offset_commit(a, None, 0) is ErrorCode.illegal_generation
    assert group.check_offset_commit("ghost", None, 1) is ErrorCode.unknown_member_id
    assert group.check_offset_commit("", None, -1) is ErrorCode.unknown_member_id  # it has members
    join(group)
    assert group.check_offset_commit(a, None, 1) is ErrorCode.none  # allowed while preparing


def committed(offset: int, at: int, expire: int | None = None) -> CommittedOffset:
    return CommittedOffset(offset, -1, "", at, expire)


def test_an_empty_groups_offsets_expire_retention_after_it_became_empty():
    group, clock, _, (a,) = stable_group(None)
    tp = TopicPartition("t", 0)
    group.offsets[tp] = committed(5, at=clock.now - 100_000)
    group.leave([(a, None)])
    emptied = clock.now
    assert group.expired_offsets(emptied + 59_999, 60_000) == []
    assert group.expired_offsets(emptied + 60_000, 60_000) == [tp]


def test_a_simple_groups_offsets_expire_retention_after_their_commit():
    group, clock, _ = make_group()
    old, new = TopicPartition("t", 0), TopicPartition("t", 1)
    group.offsets[old] = committed(1, at=clock.now)
    group.offsets[new] = committed(1, at=clock.now + 30_000)
    assert group.expired_offsets(clock.now + 60_000, 60_000) == [old]


def test_a_stable_consumer_group_expires_only_topics_it_no_longer_subscribes_to():
    group, clock, _ = make_group()
    reply = join(group, protocols=(("range", subscription("kept")),))
    group.on_time(clock.now)
    a = reply.result.member_id
    sync(group, a, 1, {a: b""})
    kept, dropped = TopicPartition("kept", 0), TopicPartition("dropped", 0)
    group.offsets[kept] = committed(1, at=clock.now)
    group.offsets[dropped] = committed(1, at=clock.now)
    assert group.subscribed_topics == {"kept"}
    assert group.expired_offsets(clock.now + 60_000, 60_000) == [dropped]
    assert group.is_subscribed_to("kept") and not group.is_subscribed_to("dropped")


def test_a_commit_with_its_own_expiry_expires_then_and_pending_commits_never_do():
    group, clock, _ = make_group()
    own, pending = TopicPartition("t", 0), TopicPartition("t", 1)
    group.offsets[own] = committed(1, at=clock.now, expire=clock.now + 10)
    group.offsets[pending] = committed(1, at=0)
    group.prepare_offset_commit([pending])
    assert group.expired_offsets(clock.now + 10, 10**9) == [own]
    group.complete_offset_commit({pending: committed(2, at=clock.now)}, stored=True)
    assert group.offsets[pending].offset == 2


def test_offsets_removed_while_their_commit_is_written_are_not_installed():
    group, clock, _ = make_group()
    tp = TopicPartition("t", 0)
    group.prepare_offset_commit([tp])
    assert group.offset_partitions == {tp}
    assert group.remove_offsets([tp]) == [tp]
    group.complete_offset_commit({tp: committed(1, at=0)}, stored=True)
    assert tp not in group.offsets and not group.offset_partitions


def test_a_failed_commit_is_not_installed():
    group, _, _ = make_group()
    tp = TopicPartition("t", 0)
    group.prepare_offset_commit([tp])
    group.complete_offset_commit({tp: committed(1, at=0)}, stored=False)
    assert tp not in group.offsets


# ------------------------------------------------------------------ restore, unload


def test_a_restored_group_is_stable_and_its_members_must_heartbeat_within_their_session():
    clock, store = Clock(), Store()
    member = Member("m1", None, "c", "/h", SESSION_MS, REBALANCE_MS, (("range", subscription("t")),), b"assigned")
    group = Group.restore(
        "g",
        GroupConfig(),
        clock,
        store,
        generation_id=4,
        protocol_type="consumer",
        protocol_name="range",
        leader_id="m1",
        state_timestamp=123,
        members=[member],
    )
    assert (group.state, group.generation_id, group.state_timestamp) == (STABLE, 4, 123)
    assert group.subscribed_topics == {"t"}
    assert sync(group, "m1", 4).result.assignment == b"assigned"
    clock.now += SESSION_MS
    group.on_time(clock.now)  # its only member went silent: the group empties at once
    assert (group.state, group.generation_id, group.members) == (EMPTY, 5, {})
    assert store.stored == [(5, None, {}, [])]


def test_a_restored_group_over_the_size_limit_rebalances():
    members = [Member(f"m{i}", None, "c", "/h", SESSION_MS, REBALANCE_MS, (("range", b""),)) for i in range(3)]
    group = Group.restore(
        "g",
        GroupConfig(max_size=2),
        Clock(),
        Store(),
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader_id="m0",
        state_timestamp=None,
        members=members,
    )
    assert group.state is PREPARING


def test_unloading_answers_waiting_requests_not_coordinator():
    preparing, _, _ = make_group(initial_rebalance_delay_ms=1_000)
    waiting_join = join(preparing)
    preparing.unload()
    assert waiting_join.result.error is ErrorCode.not_coordinator
    assert preparing.state is DEAD
    completing, clock, _ = make_group()
    join(completing), join(completing)
    completing.on_time(clock.now)
    follower = [m for m in completing.members if m != completing.leader_id][0]
    waiting_sync = sync(completing, follower, 1)
    completing.unload()
    assert waiting_sync.result.error is ErrorCode.not_coordinator
