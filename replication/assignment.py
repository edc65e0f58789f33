"""The controller's decisions as pure functions: where replicas go, who leads, and how a
reassignment proceeds. No I/O here, so each rule is unit-tested on its own
(tests/unit/replication/test_assignment.py); replication/controller.py applies them.

Rules are Kafka's (docs/cluster.md, "Controller"):
- assignment: round-robin over the live brokers from a random start, followers shifted by a
  random amount that grows every full round, never two replicas on one broker; with racks, the
  broker list alternates racks and each partition takes brokers of racks it has no replica on
  yet, while there are any.
- leader election: the first replica, in assignment order, that is alive and in the ISR; failing
  that, with unclean leader election, the first live replica with an ISR of just itself;
  otherwise none (the partition is offline, leader -1).
"""

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from protocol.errors import ErrorCode, KafkaError

NO_LEADER = -1


def _invalid_replication_factor(replication_factor: int, brokers: int) -> KafkaError:
    return KafkaError(
        f"Replication factor: {replication_factor} larger than available brokers: {brokers}.",
        ErrorCode.invalid_replication_factor,
    )


def assign_replicas(
    partition_count: int,
    replication_factor: int,
    brokers: Mapping[int, str | None],
    first_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """Replicas of partitions first_partition .. first_partition+partition_count-1 over
    `brokers` (id -> rack, None without one); raises INVALID_REPLICATION_FACTOR when there are
    fewer brokers than replicas."""
    if replication_factor <= 0:
        raise KafkaError("Replication factor must be larger than 0.", ErrorCode.invalid_replication_factor)
    if replication_factor > len(brokers):
        raise _invalid_replication_factor(replication_factor, len(brokers))
    rng = rng or random.Random()
    racks = {rack for rack in brokers.values() if rack is not None}
    if racks and all(rack is not None for rack in brokers.values()):
        ordered = rack_alternated(brokers)
    else:
        ordered = sorted(brokers)
    count = len(ordered)
    start = rng.randrange(count)
    shift = rng.randrange(count)
    assignment = {}
    for n in range(partition_count):
        partition = first_partition + n
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        replicas = [ordered[first]]
        candidates = [ordered[_follower_index(first, shift, j, count)] for j in range(count - 1)]
        replicas += _pick_followers(candidates, replication_factor - 1, replicas[0], brokers, len(racks))
        assignment[partition] = tuple(replicas)
    return assignment


def _follower_index(first: int, shift: int, j: int, count: int) -> int:
    return (first + 1 + (shift + j) % (count - 1)) % count if count > 1 else first


def _pick_followers(
    candidates: Sequence[int], wanted: int, leader: int, brokers: Mapping[int, str | None], rack_count: int
) -> list[int]:
    """Followers from `candidates` in order, preferring racks the partition has no replica on
    until every rack has one."""
    chosen: list[int] = []
    racks_used = {brokers[leader]}
    for candidate in candidates:
        if len(chosen) == wanted:
            break
        if candidate == leader or candidate in chosen:
            continue
        rack = brokers[candidate]
        if rack_count and rack in racks_used and len(racks_used) < rack_count:
            continue
        chosen.append(candidate)
        racks_used.add(rack)
        if len(racks_used) == rack_count:
            racks_used = set()
    for candidate in candidates:  # racks ran out before replicas did
        if len(chosen) == wanted:
            break
        if candidate != leader and candidate not in chosen:
            chosen.append(candidate)
    return chosen


def rack_alternated(brokers: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered rack by rack in turn: r1's first, r2's first, r1's second, ..."""
    by_rack: dict[str | None, list[int]] = {}
    for broker_id in sorted(brokers):
        by_rack.setdefault(brokers[broker_id], []).append(broker_id)
    lists = [by_rack[rack] for rack in sorted(by_rack, key=str)]
    ordered = []
    for index in range(max(len(ids) for ids in lists)):
        ordered += [ids[index] for ids in lists if index < len(ids)]
    return ordered


# ------------------------------------------------------------------------------ leaders


@dataclass(frozen=True)
class Election:
    leader: int
    isr: tuple[int, ...]


def elect_leader(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], unclean: bool
) -> Election:
    """A leader for a partition whose leader is gone (or that has none yet); leader -1 when no
    replica qualifies. The ISR keeps its live members (all of it when a clean leader is found)."""
    live_isr = tuple(r for r in isr if r in live)
    for replica in replicas:
        if replica in live_isr:
            return Election(replica, live_isr)
    if unclean:
        for replica in replicas:
            if replica in live:
                return Election(replica, (replica,))
    return Election(NO_LEADER, live_isr or tuple(isr[:1]))


def preferred_leader(replicas: Sequence[int], isr: Sequence[int], live: Collection[int]) -> int | None:
    """The first replica of the assignment, when it can lead (alive and in the ISR)."""
    if replicas and replicas[0] in live and replicas[0] in isr:
        return replicas[0]
    return None


def elect_for_shutdown(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], shutting_down: Collection[int]
) -> Election | None:
    """A leader that is not stopping, with the stopping brokers out of the ISR; None when no
    other in-sync replica is left (the partition stays where it is)."""
    isr_left = tuple(r for r in isr if r not in shutting_down and r in live)
    for replica in replicas:
        if replica in isr_left:
            return Election(replica, isr_left)
    return None


def imbalanced_partitions(
    leaders: Mapping[object, tuple[int, Sequence[int]]], percentage: int
) -> list[object]:
    """Partitions to hand back to their preferred leader: those of every broker that leads
    more than `percentage` percent fewer of its preferred partitions. `leaders` maps each
    partition to (current leader, replicas)."""
    preferred_count: dict[int, int] = {}
    not_led: dict[int, list[object]] = {}
    for partition, (leader, replicas) in leaders.items():
        if not replicas:
            continue
        preferred = replicas[0]
        preferred_count[preferred] = preferred_count.get(preferred, 0) + 1
        if leader != preferred:
            not_led.setdefault(preferred, []).append(partition)
    chosen = []
    for broker_id, partitions in not_led.items():
        if len(partitions) * 100 > percentage * preferred_count[broker_id]:
            chosen += partitions
    return chosen


# ------------------------------------------------------------------------- reassignment


@dataclass(frozen=True)
class ReassignmentPlan:
    """The replica sets of a reassignment in progress (Kafka's ReplicaAssignment)."""

    replicas: tuple[int, ...]  # target first, then the replicas leaving
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)


def plan_reassignment(current: Sequence[int], target: Sequence[int]) -> ReassignmentPlan:
    adding = tuple(r for r in target if r not in current)
    removing = tuple(r for r in current if r not in target)
    return ReassignmentPlan(tuple(target) + removing, adding, removing)


def reassignment_caught_up(plan: ReassignmentPlan, isr: Collection[int]) -> bool:
    """Every target replica is in the ISR: old replicas can go."""
    return all(r in isr for r in plan.target)


def finish_reassignment(
    plan: ReassignmentPlan, leader: int, isr: Sequence[int], live: Collection[int]
) -> Election:
    """The leader and ISR once the old replicas leave: the leader stays when it is a target
    replica, else the first live in-sync target replica takes over."""
    target = plan.target
    new_isr = tuple(r for r in isr if r in target)
    if leader in target and leader in live:
        return Election(leader, new_isr)
    for replica in target:
        if replica in new_isr and replica in live:
            return Election(replica, new_isr)
    return Election(NO_LEADER, new_isr)
