"""One consumer group under Kafka's classic rebalance protocol, as a plain state machine: no
asyncio, no I/O, time read from an injected clock (milliseconds).

States, named as DescribeGroups and ListGroups report them:

    Empty ──first JoinGroup──> PreparingRebalance ──every member joined, or the rebalance
    timeout──> CompletingRebalance ──leader's SyncGroup stored──> Stable

    Stable, CompletingRebalance ──a member joins, changes its protocols, leaves or goes silent;
    the leader rejoins──> PreparingRebalance
    PreparingRebalance ──nobody left when it completes──> Empty
    Empty ──deleted, or its last offsets expired──> Dead (the coordinator then forgets it)

A rebalance: every member sends JoinGroup; when all known members have rejoined (or the
rebalance timeout, the largest of the members', has passed and the silent ones are dropped), the
generation is bumped, the protocol chosen by the members' votes among those all of them support,
and each JoinGroup answered; the leader's answer lists every member with its metadata for that
protocol. The leader computes the assignment and sends it in its SyncGroup; the group stores it
and only then answers every SyncGroup, the followers' included, which wait for it.

An Empty group starting to rebalance waits group.initial.rebalance.delay.ms for more members, and
again (up to the rebalance timeout in all) each time a new member arrived in the meantime.
JoinGroup v4+ gives a new dynamic member its id with MEMBER_ID_REQUIRED first and keeps that id
pending until the member rejoins with it. Static members (group.instance.id) keep their place
across restarts: a restarted one gets a new member id and, when the group is Stable and the
chosen protocol would not change, its previous assignment back without a rebalance; a request
naming an instance with a member id other than the current one is FENCED_INSTANCE_ID.

Results that wait (a JoinGroup until the rebalance completes, a follower's SyncGroup until the
leader's is stored) are delivered through the `respond` callback given with the request, now or
later. Timers are deadlines: `next_deadline()` says when the group next needs attention and
`on_time(now)` handles everything due (expired sessions, pending members that never came back,
the rebalance and sync timeouts, the initial delay). Storing group metadata goes through the
injected GroupStore, which answers through a callback once the record is committed.

The group also keeps its committed offsets (the coordinator commits and removes them), because
their expiry depends on the group's state.
"""

import enum
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from protocol.errors import ErrorCode, ProtocolError
from storage.topic_partition import TopicPartition

from coordinator.consumer_protocol import CONSUMER_PROTOCOL_TYPE, subscribed_topics

log = logging.getLogger(__name__)

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
# How long a new member's JoinGroup may wait before the member is dropped: it has no member id
# to heartbeat with, and a client that gave up and retried would otherwise leave a defunct member
# behind for the whole rebalance (Kafka's NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_size: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str  # UNKNOWN_MEMBER_ID for a member joining for the first time
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), the member's preference first
    require_known_member_id: bool = False  # JoinGroup v4+: a new dynamic member gets its id first
    supports_skip_assignment: bool = False  # JoinGroup v9+ (KIP-814)


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()  # for the leader only
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None = None  # set only by OffsetCommit v1-4 clients asking for it


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


class GroupStore(Protocol):
    def store_group(
        self, group: "Group", assignment: Mapping[str, bytes], on_stored: Callable[[ErrorCode], None]
    ) -> None:
        """Persist the group as it is now, with `assignment` for its members; call `on_stored`
        with NONE once committed, or with the error the members should see."""


class Member:
    __slots__ = (
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "session_timeout_ms",
        "rebalance_timeout_ms",
        "protocols",
        "assignment",
        "join_waiter",
        "sync_waiter",
        "session_deadline",
        "is_new",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocols: tuple[tuple[str, bytes], ...],
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocols = protocols
        self.assignment = assignment
        self.join_waiter: JoinCallback | None = None
        self.sync_waiter: SyncCallback | None = None
        self.session_deadline: int | None = None
        self.is_new = False

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among `candidates`."""
        return next(name for name, _ in self.protocols if name in candidates)

    def answer_join(self, result: JoinResult) -> None:
        waiter, self.join_waiter = self.join_waiter, None
        if waiter is not None:
            waiter(result)

    def answer_sync(self, result: SyncResult) -> None:
        waiter, self.sync_waiter = self.sync_waiter, None
        if waiter is not None:
            waiter(result)


class _InitialDelay(NamedTuple):
    """The running wait of an Empty group's first rebalance (Kafka's InitialDelayedJoin)."""

    delay_ms: int
    remaining_ms: int


class Group:
    def __init__(
        self, group_id: str, config: GroupConfig, clock: Callable[[], int], store: GroupStore
    ) -> None:
        self.group_id = group_id
        self.config = config
        self.clock = clock
        self.store = store
        self.state = GroupState.EMPTY
        self.state_timestamp: int | None = clock()
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}  # in joining order: the oldest is the next leader
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.pending_members: dict[str, int] = {}  # member ids handed out -> when they lapse
        self.subscribed_topics: frozenset[str] | None = None
        self.offsets: dict[TopicPartition, CommittedOffset] = {}
        self._pending_offset_commits: Counter[TopicPartition] = Counter()
        self._join_deadline: int | None = None
        self._initial_delay: _InitialDelay | None = None
        self._new_member_added = False
        self._sync_deadline: int | None = None
        self._pending_sync: set[str] = set()

    @classmethod
    def restore(
        cls,
        group_id: str,
        config: GroupConfig,
        clock: Callable[[], int],
        store: GroupStore,
        *,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        leader_id: str | None,
        state_timestamp: int | None,
        members: Sequence[Member],
    ) -> "Group":
        """A group as its last stored metadata left it: Stable with its members, or Empty.
        Every member must heartbeat within its session timeout from now."""
        group = cls(group_id, config, clock, store)
        group.generation_id = generation_id
        group.protocol_type = protocol_type
        group.protocol_name = protocol_name
        group.leader_id = leader_id
        now = clock()
        for member in members:
            member.session_deadline = now + member.session_timeout_ms
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
        group.state = GroupState.STABLE if members else GroupState.EMPTY
        group.state_timestamp = state_timestamp
        group.subscribed_topics = group._compute_subscribed_topics()
        if len(members) > config.max_size:
            # Shrinking happens in the rebalance, which admits at most max_size members.
            group._prepare_rebalance(f"it has {len(members)} members, more than group.max.size")
        return group

    # ------------------------------------------------------------------------------ JoinGroup

    def join(self, request: JoinRequest, respond: JoinCallback) -> None:
        if not (
            self.config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            respond(JoinResult(ErrorCode.invalid_session_timeout, request.member_id))
            return
        if not self._accepts_joining(request):
            member = self.members.get(request.member_id)
            if member is not None:
                self._remove_member(member, "the group reached group.max.size")
            respond(JoinResult(ErrorCode.group_max_size_reached, request.member_id))
            return
        if request.member_id == UNKNOWN_MEMBER_ID:
            self._join_new_member(request, respond)
        else:
            self._join_known_member(request, respond)
        self._try_complete_join()

    def _accepts_joining(self, request: JoinRequest) -> bool:
        """group.max.size: a full group admits only its own members (a restarting static
        member among them: it takes its former place)."""
        member_id = self.static_members.get(request.group_instance_id, request.member_id)
        member = self.members.get(member_id)
        if self.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if self.state is GroupState.PREPARING_REBALANCE:
            if member is not None and member.join_waiter is not None:
                return True
            return self._members_awaiting_join() < self.config.max_size
        return member is not None or len(self.members) < self.config.max_size

    def _join_new_member(self, request: JoinRequest, respond: JoinCallback) -> None:
        if self.state is GroupState.DEAD:
            respond(JoinResult(ErrorCode.coordinator_not_available))
            return
        instance_id = request.group_instance_id
        # A restarted static member is judged against the others, not its former self.
        previous_id = self.static_members.get(instance_id) if instance_id is not None else None
        if not self._supports(request.protocol_type, request.protocols, joining=previous_id):
            respond(JoinResult(ErrorCode.inconsistent_group_protocol))
            return
        member_id = f"{instance_id if instance_id is not None else request.client_id}-{uuid.uuid4()}"
        if previous_id is not None:
            self._replace_static_member(previous_id, member_id, request, respond)
        elif instance_id is None and request.require_known_member_id:
            self.pending_members[member_id] = self.clock() + request.session_timeout_ms
            respond(JoinResult(ErrorCode.member_id_required, member_id))
        else:
            self._add_member(member_id, request, respond)

    def _join_known_member(self, request: JoinRequest, respond: JoinCallback) -> None:
        member_id = request.member_id
        instance_id = request.group_instance_id
        if self.state is GroupState.DEAD:
            respond(JoinResult(ErrorCode.coordinator_not_available, member_id))
        elif not self._supports(request.protocol_type, request.protocols, joining=member_id):
            respond(JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
        elif instance_id is None and member_id in self.pending_members:
            self._add_member(member_id, request, respond)
        elif self._is_fenced(member_id, instance_id):
            respond(JoinResult(ErrorCode.fenced_instance_id, member_id))
        elif member_id not in self.members or (
            instance_id is not None and instance_id not in self.static_members
        ):
            respond(JoinResult(ErrorCode.unknown_member_id, member_id))
        else:
            self._rejoin(self.members[member_id], request, respond)

    def _rejoin(self, member: Member, request: JoinRequest, respond: JoinCallback) -> None:
        unchanged = member.protocols == request.protocols
        if self.state is GroupState.PREPARING_REBALANCE:
            self._update_member(member, request, respond)
        elif self.state is GroupState.COMPLETING_REBALANCE and unchanged:
            # It missed its JoinGroup answer: give it again.
            respond(self._join_result(member, with_members=member.member_id == self.leader_id))
        elif self.state is GroupState.STABLE and unchanged and member.member_id != self.leader_id:
            respond(self._join_result(member, with_members=False))
        elif self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            # New metadata, or the leader asking for a new assignment (its topics' metadata
            # changed, which the member metadata does not show).
            self._update_member(member, request, respond)
            self._prepare_rebalance(f"member {member.member_id} rejoined")
        else:
            respond(JoinResult(ErrorCode.unknown_member_id, member.member_id))

    def _add_member(self, member_id: str, request: JoinRequest, respond: JoinCallback) -> None:
        member = Member(
            member_id,
            request.group_instance_id,
            request.client_id,
            request.client_host,
            request.session_timeout_ms,
            request.rebalance_timeout_ms,
            request.protocols,
        )
        member.join_waiter = respond
        member.is_new = True
        member.session_deadline = self.clock() + NEW_MEMBER_JOIN_TIMEOUT_MS
        if self._initial_delay is not None:
            self._new_member_added = True
        if not self.members:
            self.protocol_type = request.protocol_type
        if self.leader_id is None:
            self.leader_id = member_id
        self.members[member_id] = member
        self.pending_members.pop(member_id, None)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member_id
        self._maybe_prepare_rebalance(f"member {member_id} joined")

    def _update_member(self, member: Member, request: JoinRequest, respond: JoinCallback) -> None:
        if member.join_waiter is not None and member.join_waiter is not respond:
            # A retried JoinGroup (from a new connection) supersedes the earlier one.
            member.answer_join(JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.join_waiter = respond

    def _replace_static_member(
        self, old_id: str, new_id: str, request: JoinRequest, respond: JoinCallback
    ) -> None:
        """A static member restarted: it takes over its instance's place under a new member id."""
        previous_leader = self.leader_id
        member = self.members[old_id]
        previous = (member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms)
        self._rename_member(member, new_id)
        self._update_member(member, request, respond)
        member.session_deadline = self.clock() + member.session_timeout_ms
        if self.state is GroupState.STABLE:
            if self._select_protocol() != self.protocol_name:
                self._prepare_rebalance(f"static member {new_id} changed the group's protocol")
                return
            self._store_replaced_static_member(
                member, old_id, previous, previous_leader, request.supports_skip_assignment
            )
        elif self.state is GroupState.COMPLETING_REBALANCE:
            # The leader may be assigning to the old member id: start over.
            self._prepare_rebalance(f"static member {new_id} rejoined during the sync")

    def _rename_member(self, member: Member, new_id: str) -> None:
        old_id = member.member_id
        # Whoever still waits under the old id is a stale instance of this member.
        member.answer_join(JoinResult(ErrorCode.fenced_instance_id, old_id))
        member.answer_sync(SyncResult(ErrorCode.fenced_instance_id))
        del self.members[old_id]
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader_id == old_id:
            self.leader_id = new_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = new_id
        if old_id in self._pending_sync:
            self._pending_sync.discard(old_id)
            self._pending_sync.add(new_id)

    def _store_replaced_static_member(
        self,
        member: Member,
        old_id: str,
        previous: tuple[tuple[tuple[str, bytes], ...], int, int],
        previous_leader: str | None,
        supports_skip_assignment: bool,
    ) -> None:
        """Persist the new member id, then give the member its place in the current generation.

        The answer names the previous leader id, so that a restarted leader does not compute an
        assignment a Stable group would never hand out; JoinGroup v9+ instead tells it that it
        leads and must skip the assignment (KIP-814).
        """
        new_id = member.member_id
        waiter = member.join_waiter

        def on_stored(error: ErrorCode) -> None:
            if (
                self.members.get(new_id) is not member
                or member.join_waiter is not waiter
                or self.state is not GroupState.STABLE
            ):
                return  # replaced again, or a rebalance started meanwhile and answers it
            member.join_waiter = None
            if error is not ErrorCode.none:
                self._rename_member(member, old_id)
                member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms = previous
                waiter(JoinResult(error, UNKNOWN_MEMBER_ID))
                return
            leads = new_id == self.leader_id and supports_skip_assignment
            waiter(
                JoinResult(
                    ErrorCode.none,
                    new_id,
                    self.generation_id,
                    self.protocol_type,
                    self.protocol_name,
                    new_id if leads else (previous_leader or ""),
                    self._joined_members() if leads else (),
                    skip_assignment=leads,
                )
            )

        self.store.store_group(self, self._assignments(), on_stored)

    def _supports(
        self, protocol_type: str, protocols: Sequence[tuple[str, bytes]], joining: str | None
    ) -> bool:
        """Whether a member may join with these protocols: the first member sets the protocol
        type; later ones must share it and support one protocol every other member supports."""
        names = [name for name, _ in protocols]
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        others = [m for m in self.members.values() if m.member_id != joining]
        return any(all(name in m.protocol_names for m in others) for name in names)

    # ------------------------------------------------------------------ completing the join

    def _try_complete_join(self) -> None:
        """Complete the rebalance early once every member rejoined (never during the initial
        delay, which exists to wait for more members)."""
        if (
            self.state is GroupState.PREPARING_REBALANCE
            and self._initial_delay is None
            and not self.pending_members
            and self._members_awaiting_join() == len(self.members)
        ):
            self._complete_join()

    def _complete_join(self) -> None:
        now = self.clock()
        for member in list(self.members.values()):
            # Static members keep their place until their session expires: they may be
            # restarting.
            if member.join_waiter is None and member.group_instance_id is None:
                self._drop_member(member)
        if self.members and not self._elect_joined_leader():
            # Only silent static members remain: wait for them to come back or expire.
            self._join_deadline = now + self._rebalance_timeout_ms()
            return
        self._init_next_generation()
        if self.state is GroupState.EMPTY:
            self.store.store_group(self, {}, self._log_store_failure)
            return
        log.info(
            "group %s stabilized at generation %d with %d member(s), protocol %s",
            self.group_id,
            self.generation_id,
            len(self.members),
            self.protocol_name,
        )
        for member in self.members.values():
            member.answer_join(self._join_result(member, with_members=member.member_id == self.leader_id))
            member.session_deadline = now + member.session_timeout_ms
            member.is_new = False
        self._pending_sync = set(self.members)
        self._sync_deadline = now + self._rebalance_timeout_ms()

    def _elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else make the oldest rejoined member leader."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.join_waiter is not None:
            return True
        for member in self.members.values():
            if member.join_waiter is not None:
                self.leader_id = member.member_id
                return True
        return False

    def _init_next_generation(self) -> None:
        self.generation_id += 1
        self._join_deadline = None
        self._initial_delay = None
        self._new_member_added = False
        if self.members:
            self.protocol_name = self._select_protocol()
            self._transition(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self._transition(GroupState.EMPTY)
        self.subscribed_topics = self._compute_subscribed_topics()

    def _select_protocol(self) -> str:
        """The protocol with most votes among those every member supports, each member voting
        for its most preferred one. A tie goes to the protocol the oldest member voted for."""
        members = list(self.members.values())
        candidates = set(members[0].protocol_names)
        for member in members[1:]:
            candidates.intersection_update(member.protocol_names)
        votes = Counter(member.vote(candidates) for member in members)
        return max(votes, key=votes.__getitem__)

    def _compute_subscribed_topics(self) -> frozenset[str] | None:
        """The topics the members subscribe to, for a consumer group; None when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or not self.members or self.protocol_name is None:
            return None
        try:
            topics: set[str] = set()
            for member in self.members.values():
                topics |= subscribed_topics(member.metadata(self.protocol_name))
        except ProtocolError as exc:
            log.warning("group %s: cannot read a member's subscription: %s", self.group_id, exc)
            return None
        return frozenset(topics)

    def _join_result(self, member: Member, with_members: bool) -> JoinResult:
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            self.generation_id,
            self.protocol_type,
            self.protocol_name,
            self.leader_id or "",
            self._joined_members() if with_members else (),
        )

    def _joined_members(self) -> tuple[JoinedMember, ...]:
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    # ------------------------------------------------------------------------------ SyncGroup

    def sync(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
        respond: SyncCallback,
    ) -> None:
        error = self._check_member(member_id, group_instance_id, generation_id)
        if error is ErrorCode.none and (
            (protocol_type is not None and protocol_type != self.protocol_type)
            or (protocol_name is not None and protocol_name != self.protocol_name)
        ):
            error = ErrorCode.inconsistent_group_protocol
        if error is not ErrorCode.none:
            respond(SyncResult(error))
            return
        member = self.members[member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            respond(SyncResult(ErrorCode.rebalance_in_progress))
        elif self.state is GroupState.STABLE:
            self._pending_sync.discard(member_id)
            member.session_deadline = self.clock() + member.session_timeout_ms
            respond(SyncResult(ErrorCode.none, self.protocol_type, self.protocol_name, member.assignment))
        else:
            if member.sync_waiter is not None:
                member.answer_sync(SyncResult(ErrorCode.rebalance_in_progress))
            member.sync_waiter = respond
            self._pending_sync.discard(member_id)
            if member_id == self.leader_id:
                self._store_assignment(assignments)

    def _store_assignment(self, assignments: Mapping[str, bytes]) -> None:
        """Store the leader's assignment (members it left out get an empty one); once stored,
        the group is Stable and every waiting SyncGroup gets its part."""
        assignment = {member_id: assignments.get(member_id, b"") for member_id in self.members}
        generation = self.generation_id

        def on_stored(error: ErrorCode) -> None:
            if self.state is not GroupState.COMPLETING_REBALANCE or self.generation_id != generation:
                return  # a new rebalance started meanwhile
            if error is not ErrorCode.none:
                self._fail_syncs(error)
                self._prepare_rebalance(f"storing the assignment failed with {error.name}")
                return
            now = self.clock()
            for member in self.members.values():
                member.assignment = assignment.get(member.member_id, b"")
                if member.sync_waiter is not None:
                    member.answer_sync(
                        SyncResult(ErrorCode.none, self.protocol_type, self.protocol_name, member.assignment)
                    )
                    member.session_deadline = now + member.session_timeout_ms
            self._transition(GroupState.STABLE)

        self.store.store_group(self, assignment, on_stored)

    def _fail_syncs(self, error: ErrorCode) -> None:
        now = self.clock()
        for member in self.members.values():
            member.assignment = b""
            if member.sync_waiter is not None:
                member.answer_sync(SyncResult(error))
                member.session_deadline = now + member.session_timeout_ms

    # ----------------------------------------------------------------- Heartbeat, LeaveGroup

    def heartbeat(self, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        """Keep the member's session alive; tells it to rejoin while a rebalance is on.
        It only ever moves this member's deadline later."""
        error = self._check_member(member_id, group_instance_id, generation_id)
        if error is not ErrorCode.none:
            return error
        member = self.members[member_id]
        member.session_deadline = self.clock() + member.session_timeout_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, leaving: Iterable[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove members given as (member id, group instance id); a static member may be
        removed by its instance id alone (an administrator's LeaveGroup). Returns the
        group-level error and one error per member."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available, []
        return ErrorCode.none, [self._leave(member_id, instance_id) for member_id, instance_id in leaving]

    def _leave(self, member_id: str, instance_id: str | None) -> ErrorCode:
        if member_id == UNKNOWN_MEMBER_ID:
            current = self.static_members.get(instance_id) if instance_id is not None else None
            if current is None:
                return ErrorCode.unknown_member_id
            self._remove_member(self.members[current], "its instance was removed")
        elif member_id in self.pending_members:
            del self.pending_members[member_id]
            self._try_complete_join()
        elif self._is_fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        elif member_id in self.members:
            self._remove_member(self.members[member_id], "it left")
        else:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    # ----------------------------------------------------------------------- member checks

    def _check_member(self, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        """What SyncGroup, Heartbeat and OffsetCommit answer a member not entitled to act."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if self._is_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        if generation_id != self.generation_id:
            return ErrorCode.illegal_generation
        if self.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def _is_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """A known static instance named with another member id than its current one."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    # -------------------------------------------------------------------- removing members

    def _remove_member(self, member: Member, reason: str) -> None:
        log.info("group %s: removing member %s: %s", self.group_id, member.member_id, reason)
        self._drop_member(member)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(f"member {member.member_id} was removed: {reason}")
        else:
            self._try_complete_join()

    def _drop_member(self, member: Member) -> None:
        # Its waiting requests are answered so that a still-running client joins again afresh.
        member.answer_join(JoinResult(ErrorCode.unknown_member_id))
        member.answer_sync(SyncResult(ErrorCode.unknown_member_id))
        del self.members[member.member_id]
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)
        self._pending_sync.discard(member.member_id)

    # ----------------------------------------------------------------------- rebalancing

    def _maybe_prepare_rebalance(self, reason: str) -> None:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(reason)

    def _prepare_rebalance(self, reason: str) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            self._fail_syncs(ErrorCode.rebalance_in_progress)
        self._sync_deadline = None
        self._pending_sync.clear()
        now = self.clock()
        if self.state is GroupState.EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            self._initial_delay = _InitialDelay(delay, max(self._rebalance_timeout_ms() - delay, 0))
            self._new_member_added = False
            self._join_deadline = now + delay
        else:
            self._initial_delay = None
            self._join_deadline = now + self._rebalance_timeout_ms()
        log.info(
            "group %s preparing to rebalance (generation %d): %s", self.group_id, self.generation_id, reason
        )
        self._transition(GroupState.PREPARING_REBALANCE)
        self._try_complete_join()

    def _rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _members_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.join_waiter is not None)

    def _transition(self, state: GroupState) -> None:
        self.state = state
        self.state_timestamp = self.clock()

    def _assignments(self) -> dict[str, bytes]:
        return {member_id: member.assignment for member_id, member in self.members.items()}

    def _log_store_failure(self, error: ErrorCode) -> None:
        if error is not ErrorCode.none:
            log.warning("group %s: storing its metadata failed with %s", self.group_id, error.name)

    # ------------------------------------------------------------------------------- time

    def next_deadline(self) -> int | None:
        """When the group next needs `on_time`, or None when nothing is pending."""
        deadlines = [m.session_deadline for m in self.members.values() if m.session_deadline is not None]
        deadlines.extend(self.pending_members.values())
        deadlines.extend(d for d in (self._join_deadline, self._sync_deadline) if d is not None)
        return min(deadlines, default=None)

    def on_time(self, now: int) -> None:
        """Handle every deadline passed by `now`."""
        for member_id, deadline in list(self.pending_members.items()):
            if deadline <= now:
                del self.pending_members[member_id]
                self._try_complete_join()
        for member in list(self.members.values()):
            if member.session_deadline is not None and member.session_deadline <= now:
                self._on_session_expired(member)
        if self._sync_deadline is not None and self._sync_deadline <= now:
            self._on_sync_timeout()
        if self._join_deadline is not None and self._join_deadline <= now:
            self._on_join_deadline(now)

    def _on_session_expired(self, member: Member) -> None:
        if not member.is_new and (member.join_waiter is not None or member.sync_waiter is not None):
            # Waiting on the group is as good as a heartbeat; the deadline is set again when
            # the wait ends.
            member.session_deadline = None
            return
        self._remove_member(member, "its session timed out")

    def _on_sync_timeout(self) -> None:
        self._sync_deadline = None
        silent = [self.members[member_id] for member_id in self._pending_sync if member_id in self.members]
        self._pending_sync.clear()
        if not silent or self.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        for member in silent:
            self._drop_member(member)
        self._prepare_rebalance(
            f"member(s) {', '.join(m.member_id for m in silent)} sent no SyncGroup in time"
        )

    def _on_join_deadline(self, now: int) -> None:
        delay = self._initial_delay
        next_delay = 0 if delay is None else min(self.config.initial_rebalance_delay_ms, delay.remaining_ms)
        if self._new_member_added and next_delay > 0:
            # Members are still arriving: wait a little longer, within the rebalance timeout.
            self._initial_delay = _InitialDelay(next_delay, max(delay.remaining_ms - delay.delay_ms, 0))
            self._new_member_added = False
            self._join_deadline = now + next_delay
            return
        self._join_deadline = None
        self._initial_delay = None
        self._complete_join()

    # ------------------------------------------------------------------------- unloading

    def unload(self) -> None:
        """The coordinator is going away (shutdown, or another broker takes the partition over):
        waiting members are told to find the new coordinator."""
        for member in self.members.values():
            member.answer_join(JoinResult(ErrorCode.not_coordinator, member.member_id))
            member.answer_sync(SyncResult(ErrorCode.not_coordinator))
        self._transition(GroupState.DEAD)

    def mark_dead(self) -> None:
        self._transition(GroupState.DEAD)

    # ------------------------------------------------------------------------- describing

    def describe(self) -> GroupDescription:
        """What DescribeGroups shows: members' metadata and assignments only when Stable."""
        stable = self.state is GroupState.STABLE
        return GroupDescription(
            self.state.value,
            self.protocol_type or "",
            (self.protocol_name or "") if stable else "",
            tuple(
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(self.protocol_name) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in self.members.values()
            ),
        )

    # ---------------------------------------------------------------------------- offsets

    def check_offset_commit(self, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        """Whether this commit may be stored. A commit without member id and generation is a
        "simple" one (a consumer using assign()), allowed only while the group has no members."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._check_member(member_id, group_instance_id, generation_id)
            if error is not ErrorCode.none:
                return error
        elif self.state is not GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        if self.state is GroupState.COMPLETING_REBALANCE:
            # A valid member between JoinGroup and SyncGroup: it must finish the rebalance.
            return ErrorCode.rebalance_in_progress
        member = self.members.get(member_id)
        if member is not None:
            member.session_deadline = self.clock() + member.session_timeout_ms
        return ErrorCode.none

    def prepare_offset_commit(self, partitions: Iterable[TopicPartition]) -> None:
        """Note commits on their way to the log, so that removals meanwhile win over them."""
        for tp in partitions:
            self._pending_offset_commits[tp] += 1

    def complete_offset_commit(self, offsets: Mapping[TopicPartition, CommittedOffset], stored: bool) -> None:
        for tp, committed in offsets.items():
            if self._pending_offset_commits[tp] <= 0:
                continue  # removed while being written
            self._pending_offset_commits[tp] -= 1
            if self._pending_offset_commits[tp] == 0:
                del self._pending_offset_commits[tp]
            if stored and self.state is not GroupState.DEAD:
                self.offsets[tp] = committed

    def remove_offsets(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Forget these partitions' offsets, pending commits included; returns those that had
        either, which need a tombstone."""
        removed = []
        for tp in partitions:
            pending = self._pending_offset_commits.pop(tp, None)
            if self.offsets.pop(tp, None) is not None or pending:
                removed.append(tp)
        return removed

    @property
    def offset_partitions(self) -> set[TopicPartition]:
        """The partitions with an offset, stored or on its way to the log."""
        return set(self.offsets) | set(self._pending_offset_commits)

    def is_subscribed_to(self, topic: str) -> bool:
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    def expired_offsets(self, now: int, retention_ms: int) -> list[TopicPartition]:
        """Offsets past offsets.retention.minutes: all of an Empty group's, counted from when
        it became Empty; a simple group's (one that never had members) and a Stable consumer
        group's for topics it no longer subscribes to, counted from their commit. A commit asking for its own expiry (OffsetCommit
        v1-4 with a retention time) expires then instead."""
        if self.protocol_type is None:
            base = None  # a simple group: each offset from its commit
            unsubscribed_only = False
        elif self.state is GroupState.EMPTY:
            base = self.state_timestamp
            unsubscribed_only = False
        elif (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.state is GroupState.STABLE
        ):
            base = None
            unsubscribed_only = True
        else:
            return []
        expired = []
        for tp, committed in self.offsets.items():
            if tp in self._pending_offset_commits:
                continue
            if unsubscribed_only and tp.topic in self.subscribed_topics:
                continue
            if committed.expire_timestamp is not None:
                if now >= committed.expire_timestamp:
                    expired.append(tp)
            elif now - (committed.commit_timestamp if base is None else base) >= retention_ms:
                expired.append(tp)
        return expired
