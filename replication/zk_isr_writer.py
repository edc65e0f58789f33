"""The leader's ISR changes, written to ZooKeeper as Kafka's ZooKeeper-mode leaders write them.

`write_isr` (the `IsrWriter` of replication/partition_state.py) replaces the partition state
znode by compare-and-set on the version the leader last knew, keeping this broker as leader at
its leader epoch. A lost compare-and-set is accepted when the znode already holds exactly this
leader, epoch and ISR (Kafka's check after a retried write). When it holds this leader and epoch
with another ISR, an earlier write of this leader was stored though its answer was lost (a
ZooKeeper connection cut mid-write): that ISR is returned (`IsrFound`) and announced, since the
controller never heard of it. Otherwise the controller changed the partition (it bumps the
leader epoch with every change) and None is returned.

The controller hears of the changes in batches, as Kafka's ReplicaManager sends them
(maybePropagateIsrChanges): the partitions changed are collected, and every 2.5 s they go in one
sequential /isr_change_notification/isr_change_<seq> znode when no change came for 5 s, or the
last one went 60 s ago (so a stream of changes is not held back forever). The controller updates
every broker's metadata from it and deletes it. A failed write keeps the partitions for the next
check.

Thread-safety: owned by the event loop.
"""

import asyncio
import logging
import time
from collections.abc import Callable

from replication import znodes
from replication.partition_state import IsrFound
from replication.zk import BadVersionError, NoNodeError, ZkClient, ZkError
from storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 2.5
QUIET_S = 5.0  # Kafka's IsrChangePropagationBlackOut
MAX_DELAY_S = 60.0  # Kafka's IsrChangePropagationInterval


class ZkIsrWriter:
    def __init__(
        self,
        zk: ZkClient,
        broker_id: int,
        controller_epoch: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._zk = zk
        self._broker_id = broker_id
        self._controller_epoch = controller_epoch
        self._clock = clock
        self._changed: set[TopicPartition] = set()
        self._last_change_s = 0.0
        self._last_propagation_s = clock()
        self._propagator: asyncio.Task | None = None

    def start(self) -> None:
        self._propagator = asyncio.get_running_loop().create_task(self._propagate_periodically())

    async def close(self) -> None:
        if self._propagator is not None:
            self._propagator.cancel()
            await asyncio.wait({self._propagator})
            self._propagator = None

    async def write_isr(
        self, tp: TopicPartition, leader_epoch: int, isr: tuple[int, ...], zk_version: int
    ) -> int | IsrFound | None:
        wanted = znodes.LeaderIsr(self._broker_id, leader_epoch, tuple(isr), self._controller_epoch())
        path = znodes.partition_state_path(tp)
        result: int | IsrFound
        try:
            stat = await self._zk.set(path, znodes.encode_partition_state(wanted), zk_version)
            result = stat.version
        except (BadVersionError, NoNodeError):
            found = await self._state_after_refusal(path, wanted)
            if found is None:
                log.info("%s: ISR change to %s refused, the controller changed the partition", tp, list(isr))
                return None
            result = found
        self._changed.add(tp)
        self._last_change_s = self._clock()
        return result

    async def _state_after_refusal(self, path: str, wanted: znodes.LeaderIsr) -> int | IsrFound | None:
        found = await self._zk.get_or_none(path)
        if found is None:
            return None
        current = znodes.decode_partition_state(found[0], found[1].version)
        if (current.leader, current.leader_epoch) != (wanted.leader, wanted.leader_epoch):
            return None
        if current.isr == wanted.isr:
            return current.zk_version
        return IsrFound(current.isr, current.zk_version)

    async def _propagate_periodically(self) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            await self.propagate_if_due()

    async def propagate_if_due(self) -> None:
        """Announce the partitions changed since the last announcement, if it is time."""
        now = self._clock()
        if not self._changed:
            return
        if now - self._last_change_s < QUIET_S and now - self._last_propagation_s < MAX_DELAY_S:
            return
        changed, self._changed = self._changed, set()
        try:
            await self._zk.create(
                f"{znodes.ISR_CHANGE_NOTIFICATION}/{znodes.ISR_CHANGE_PREFIX}",
                znodes.encode_isr_change(changed),
                sequence=True,
                makepath=True,
            )
        except ZkError as exc:
            log.warning("ISR change notification failed (%s); retried at the next check", exc)
            self._changed |= changed
            return
        self._last_propagation_s = now
