"""This broker's replica of one partition: its role (leader or follower), and as leader the
in-sync replica set (ISR) and the high watermark (Kafka's Partition).

Leader: takes appends (`append_as_leader`), learns each follower's log end offset (LEO) from its
fetches (`update_follower_fetch`), and keeps
- HW = the smallest LEO over the ISR (the leader's own included); it never decreases, and a
  follower whose LEO is unknown since this broker became leader holds it back. It does not move
  at all while the ISR is smaller than min.insync.replicas (at most the replica count), as in
  Kafka 3.9: records only the leader holds are not committed, and acks=all produces wait;
- ISR shrink (`maybe_shrink_isr`, called periodically): a follower that has not caught up to the
  leader's LEO within replica.lag.time.max.ms leaves;
- ISR expand (on a fetch): a follower outside the ISR whose LEO reached the HW and the start of
  the current leader epoch rejoins.
ISR changes go through the IsrWriter (ZooKeeper's compare-and-set) and take effect when written;
one write at a time. A write answered None (the controller changed the partition meanwhile)
stops ISR changes until the next LeaderAndIsr (`isr_stale`); one answered IsrFound (an earlier
write of this leader was stored, its answer lost) makes the ISR found the ISR; a failed write
(ZooKeeper unreachable) is retried by the next check. The leader keeps serving either way, but
its HW cannot pass followers that stopped fetching, so acks=all writes cannot commit
(docs/cluster.md).

Follower: knows its leader and epoch; the fetcher (replication.fetcher) appends and truncates
its log and sets its HW, up to which it serves consumers (KIP-392). As leader, the in-sync
followers whose log holds a consumer's fetch offset are the replicas it may send the consumer to
(`read_replicas_holding`).

Standalone (`standalone_state`): leader at epoch 0 of a one-member ISR, so the HW follows the log end
as soon as an append returns.

State is owned by the event loop; `on_change` tells the replica manager that the HW or the ISR
moved (delayed produces and fetches may complete).
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from protocol.errors import ErrorCode, KafkaError
from storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from storage.log import AppendResult, Log
from storage.topic_partition import TopicPartition

from replication.partition_state import NO_LEADER, IsrFound, IsrWriter, PartitionState

log: Final = logging.getLogger(__name__)

NO_LEADER_EPOCH: Final = -1
UNKNOWN_OFFSET: Final = -1


# Bound once: compiled code looks a module's attribute up at every use.
_monotonic: Final = time.monotonic


def now_ms() -> int:
    """The partitions' clock (`Partition.clock`): monotonic milliseconds."""
    return int(_monotonic() * 1000)


@dataclass(init=False)  # its own __init__, which compiled code calls directly
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica)."""

    log_end_offset: int
    log_start_offset: int
    last_caught_up_ms: int
    last_fetch_ms: int
    last_fetch_leader_log_end_offset: int
    fetched_in_epoch: int  # the leader epoch of its latest fetch

    def __init__(self, last_caught_up_ms: int = 0) -> None:
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_caught_up_ms = last_caught_up_ms
        self.last_fetch_ms = 0
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.fetched_in_epoch = NO_LEADER_EPOCH


class Partition:
    def __init__(
        self,
        topic_partition: TopicPartition,
        log: Log,
        broker_id: int,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.topic_partition = topic_partition
        self.log = log
        self.broker_id = broker_id
        self.clock = clock
        self.leader_id = NO_LEADER
        self.leader_epoch = NO_LEADER_EPOCH
        self.controller_epoch = 0
        self.zk_version = 0
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.followers: dict[int, FollowerState] = {}
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self.isr_stale = False
        self._isr_write: asyncio.Task | None = None
        self.isr_writer: IsrWriter | None = None
        self.on_change: Callable[["Partition"], None] = lambda partition: None
        # Told (ISR size before, after) of every ISR change this leader stores: the broker's
        # IsrShrinks and IsrExpands counts.
        self.on_isr_change: Callable[[int, int], None] = lambda before, after: None

    @staticmethod
    def standalone_state(topic_partition: TopicPartition, broker_id: int) -> PartitionState:
        """Led by `broker_id` at epoch 0, which is the only replica and the whole ISR."""
        return PartitionState(topic_partition, 0, broker_id, 0, (broker_id,), 0, (broker_id,))

    def stopped_state(self) -> PartitionState:
        """The current state without a leader (StopReplica without delete)."""
        return PartitionState(
            self.topic_partition, self.controller_epoch, NO_LEADER, self.leader_epoch, self.isr,
            self.zk_version, self.replicas,
        )

    # ---------------------------------------------------------------------------- roles

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def make_leader(self, state: PartitionState) -> bool:
        """Lead at `state.leader_epoch`; True when this broker was not the leader before (or
        led an older epoch). Followers' LEOs are unknown until they fetch again."""
        was_leader = self.is_leader and self.leader_epoch == state.leader_epoch
        self._take_state(state)
        if not was_leader:
            now = self.clock()
            self.followers = {
                replica: FollowerState(last_caught_up_ms=now)
                for replica in state.replicas
                if replica != self.broker_id
            }
            self.leader_epoch_start_offset = self.log.log_end_offset
            # The new epoch starts here, even before anything is written in it: a follower
            # asking for the end of an older epoch must be told where it ended.
            self.log.assign_epoch_start(state.leader_epoch, self.log.log_end_offset)
        else:
            for replica in state.replicas:
                if replica != self.broker_id:
                    self.followers.setdefault(replica, FollowerState(last_caught_up_ms=self.clock()))
        for gone in set(self.followers) - set(state.replicas):
            del self.followers[gone]
        self.maybe_increment_high_watermark()
        return not was_leader

    def make_follower(self, state: PartitionState) -> bool:
        """Follow `state.leader`; True when the leader or its epoch changed (the fetcher must
        truncate by epoch before fetching again)."""
        changed = self.leader_id != state.leader or self.leader_epoch != state.leader_epoch
        self._take_state(state)
        self.followers = {}
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        return changed

    def _take_state(self, state: PartitionState) -> None:
        if self._isr_write is not None:
            self._isr_write.cancel()
            self._isr_write = None
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.controller_epoch = state.controller_epoch
        self.zk_version = state.zk_version
        self.replicas = tuple(state.replicas)
        self.isr = tuple(state.isr)
        self.isr_stale = False

    def check_leader_epoch(self, requested_epoch: int) -> None:
        """Refuse a request made for another leader epoch than this replica's (KIP-320)."""
        if requested_epoch == NO_LEADER_EPOCH or requested_epoch == self.leader_epoch:
            return
        if requested_epoch < self.leader_epoch:
            raise KafkaError(
                f"{self.topic_partition}: leader epoch {requested_epoch} is older than "
                f"{self.leader_epoch}",
                ErrorCode.fenced_leader_epoch,
            )
        raise KafkaError(
            f"{self.topic_partition}: leader epoch {requested_epoch} is newer than "
            f"{self.leader_epoch}",
            ErrorCode.unknown_leader_epoch,
        )

    def check_leader(self) -> None:
        if not self.is_leader:
            raise KafkaError(
                f"this broker is not the leader of {self.topic_partition} (leader: {self.leader_id})",
                ErrorCode.not_leader_or_follower,
            )

    # -------------------------------------------------------------------------- leading

    def append_as_leader(
        self, records: memoryview, required_acks: int = 1, min_insync: int = 1, from_coordinator: bool = False
    ) -> AppendResult:
        """Append produced records; acks=-1 needs at least `min_insync` ISR members first.
        A coordinator's batches skip the producer sequence checks (storage.log)."""
        if self.leader_id != self.broker_id:
            self.check_leader()
        if required_acks == -1 and len(self.isr) < min_insync:
            raise KafkaError(
                f"{self.topic_partition}: {len(self.isr)} in-sync replica(s), "
                f"min.insync.replicas is {min_insync}",
                ErrorCode.not_enough_replicas,
            )
        log = self.log
        result = log.append_as_leader(records, self.leader_epoch, from_coordinator)
        if self.isr == (self.broker_id,) and self.replicas == self.isr:
            # The sole replica and the whole ISR (a standalone broker, or RF=1): the HW follows
            # the log end at once, as maybe_increment_high_watermark would decide, without its
            # lookups on every append.
            if log.log_end_offset > log.high_watermark:
                log.high_watermark = log.log_end_offset
        else:
            self.maybe_increment_high_watermark()
        return result

    def append_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> AppendResult:
        """Write a transaction coordinator's COMMIT or ABORT marker (WriteTxnMarkers)."""
        self.check_leader()
        result = self.log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit, self.leader_epoch)
        self.maybe_increment_high_watermark()
        return result

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, at most the high watermark:
        read_committed reads stop there."""
        first_unstable = self.log.first_unstable_offset
        if first_unstable is None:
            return self.log.high_watermark
        return min(first_unstable, self.log.high_watermark)

    @property
    def min_insync_replicas(self) -> int:
        """min.insync.replicas capped at the replica count (Kafka's effectiveMinIsr): a topic
        with fewer replicas than that is not under it for good."""
        return min(self.log.config.min_insync_replicas, max(len(self.replicas), 1))

    @property
    def is_under_min_isr(self) -> bool:
        return len(self.isr) < self.min_insync_replicas

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest LEO over the ISR, if that is higher and the ISR is not under
        min.insync.replicas; True when it moved."""
        if not self.is_leader or self.is_under_min_isr:
            return False
        candidate = self.log.log_end_offset
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            follower = self.followers.get(replica)
            if follower is None or follower.log_end_offset == UNKNOWN_OFFSET:
                return False
            candidate = min(candidate, follower.log_end_offset)
        if candidate <= self.log.high_watermark:
            return False
        self.log.high_watermark = candidate
        return True

    def update_follower_fetch(
        self, replica_id: int, fetch_offset: int, now_ms: int | None = None, log_start_offset: int = UNKNOWN_OFFSET
    ) -> bool:
        """A follower fetched from `fetch_offset`: that is its LEO (and `log_start_offset` its
        log start). Returns whether the HW moved, which it can only if that LEO did (as Kafka's
        updateFollowerFetchState: an idle follower's fetches leave the HW alone). May start an
        ISR expansion."""
        follower = self.followers.get(replica_id)
        if follower is None or not self.is_leader:
            raise KafkaError(
                f"broker {replica_id} is not a replica of {self.topic_partition}",
                ErrorCode.not_leader_or_follower,
            )
        now = self.clock() if now_ms is None else now_ms
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = now
        elif fetch_offset >= follower.last_fetch_leader_log_end_offset >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        moved = fetch_offset != follower.log_end_offset
        follower.log_end_offset = fetch_offset
        follower.log_start_offset = log_start_offset
        follower.last_fetch_ms = now
        follower.last_fetch_leader_log_end_offset = leader_end
        follower.fetched_in_epoch = self.leader_epoch
        self._maybe_expand_isr(replica_id, follower)
        return moved and self.maybe_increment_high_watermark()

    def read_replicas_holding(self, fetch_offset: int, now_ms: int | None = None) -> list[tuple[int, int, int]]:
        """(broker id, LEO, ms since it last caught up) of the in-sync followers whose log holds
        `fetch_offset`: the replicas a consumer may be sent to (Kafka's
        findPreferredReadReplica leaves out followers outside the ISR, which may lag for good)."""
        now = self.clock() if now_ms is None else now_ms
        candidates = []
        for replica in self.isr:
            follower = self.followers.get(replica)
            if follower is not None and follower.log_start_offset <= fetch_offset <= follower.log_end_offset:
                candidates.append((replica, follower.log_end_offset, now - follower.last_caught_up_ms))
        return candidates

    def _maybe_expand_isr(self, replica_id: int, follower: FollowerState) -> None:
        if replica_id in self.isr or not self._can_change_isr():
            return
        if (
            follower.log_end_offset >= self.log.high_watermark
            and follower.log_end_offset >= self.leader_epoch_start_offset
            and follower.fetched_in_epoch == self.leader_epoch
        ):
            self._write_isr((*self.isr, replica_id), f"broker {replica_id} caught up")

    def out_of_sync_replicas(self, max_lag_ms: int, now_ms: int | None = None) -> list[int]:
        now = self.clock() if now_ms is None else now_ms
        leader_end = self.log.log_end_offset
        lagging = []
        for replica in self.isr:
            follower = self.followers.get(replica)
            if follower is None:
                continue
            if follower.log_end_offset != leader_end and now - follower.last_caught_up_ms > max_lag_ms:
                lagging.append(replica)
        return lagging

    def maybe_shrink_isr(self, max_lag_ms: int, now_ms: int | None = None) -> None:
        if not self.is_leader or not self._can_change_isr():
            return
        lagging = self.out_of_sync_replicas(max_lag_ms, now_ms)
        if lagging:
            remaining = tuple(r for r in self.isr if r not in lagging)
            self._write_isr(remaining, f"broker(s) {lagging} fell behind for over {max_lag_ms} ms")

    def _can_change_isr(self) -> bool:
        return self.isr_writer is not None and not self.isr_stale and self._isr_write is None

    def _write_isr(self, isr: tuple[int, ...], reason: str) -> None:
        self._isr_write = asyncio.ensure_future(self._store_isr(isr, reason))

    async def _store_isr(self, isr: tuple[int, ...], reason: str) -> None:
        epoch, version = self.leader_epoch, self.zk_version
        writer = self.isr_writer
        assert writer is not None, "_can_change_isr checked it"
        try:
            new_version = await writer.write_isr(self.topic_partition, epoch, isr, version)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # ZooKeeper unreachable: the next check tries again
            log.warning("%s: writing ISR %s failed: %s", self.topic_partition, list(isr), exc)
            self._isr_write = None
            return
        self._isr_write = None
        if self.leader_epoch != epoch or not self.is_leader:
            return
        if new_version is None:
            log.warning(
                "%s: the ISR changed elsewhere (zk version %d is stale); not changing it until "
                "the controller says",
                self.topic_partition,
                version,
            )
            self.isr_stale = True
            return
        if isinstance(new_version, IsrFound):
            # Our own earlier write, stored though its answer was lost: the ISR in force, from
            # which the next check decides again (not `isr`, which assumed the ISR before it).
            isr, new_version = new_version
            reason = f"found in ZooKeeper at version {new_version}: an earlier change whose answer was lost"
        log.info("%s: ISR %s -> %s (%s)", self.topic_partition, list(self.isr), list(isr), reason)
        self.on_isr_change(len(self.isr), len(isr))
        self.isr, self.zk_version = isr, new_version
        self.maybe_increment_high_watermark()
        self.on_change(self)

    # -------------------------------------------------------------------------- epochs

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
        """(epoch, end offset) when a follower's log diverged from ours before `fetch_offset`:
        its last fetched epoch ends earlier here, or is not ours (Fetch v12, KIP-595)."""
        return diverging_epoch(self.log.leader_epochs, self.log.log_end_offset, last_fetched_epoch, fetch_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, from the leader epoch cache."""
        return self.log.leader_epochs.end_offset_for(epoch, self.log.log_end_offset)


def diverging_epoch(
    epochs: LeaderEpochCache, log_end_offset: int, last_fetched_epoch: int, fetch_offset: int
) -> tuple[int, int] | None:
    if last_fetched_epoch < 0:
        return None
    epoch, end_offset = epochs.end_offset_for(last_fetched_epoch, log_end_offset)
    if epoch == UNDEFINED_EPOCH or end_offset == UNDEFINED_EPOCH_OFFSET:
        return None
    if epoch < last_fetched_epoch or end_offset < fetch_offset:
        return epoch, end_offset
    return None
