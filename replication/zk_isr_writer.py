"""The leader's ISR changes, written to ZooKeeper as Kafka's ZooKeeper-mode leaders write them.

`write_isr` (the `IsrWriter` of replication/partition_state.py) replaces the partition state
znode by compare-and-set on the version the leader last knew, keeping this broker as leader at
its leader epoch, then announces the change with a sequential
/isr_change_notification/isr_change_<seq> entry, from which the controller updates every
broker's metadata. A lost compare-and-set is accepted only when the znode already holds exactly
this leader, epoch and ISR (Kafka's check after a retried write); otherwise the controller changed
the partition and None is returned.
"""

import logging
from collections.abc import Callable

from replication import znodes
from replication.zk import BadVersionError, NoNodeError, ZkClient
from storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)


class ZkIsrWriter:
    def __init__(self, zk: ZkClient, broker_id: int, controller_epoch: Callable[[], int]) -> None:
        self._zk = zk
        self._broker_id = broker_id
        self._controller_epoch = controller_epoch

    async def write_isr(
        self, tp: TopicPartition, leader_epoch: int, isr: tuple[int, ...], zk_version: int
    ) -> int | None:
        wanted = znodes.LeaderIsr(self._broker_id, leader_epoch, tuple(isr), self._controller_epoch())
        path = znodes.partition_state_path(tp)
        try:
            stat = await self._zk.set(path, znodes.encode_partition_state(wanted), zk_version)
            version = stat.version
        except (BadVersionError, NoNodeError):
            version = await self._already_written(path, wanted)
            if version is None:
                log.info("%s: ISR change to %s refused, the controller changed the partition", tp, list(isr))
                return None
        await self._zk.create(
            f"{znodes.ISR_CHANGE_NOTIFICATION}/{znodes.ISR_CHANGE_PREFIX}",
            znodes.encode_isr_change([tp]),
            sequence=True,
            makepath=True,
        )
        return version

    async def _already_written(self, path: str, wanted: znodes.LeaderIsr) -> int | None:
        found = await self._zk.get_or_none(path)
        if found is None:
            return None
        current = znodes.decode_partition_state(found[0], found[1].version)
        same = (current.leader, current.leader_epoch, current.isr) == (wanted.leader, wanted.leader_epoch, wanted.isr)
        return current.zk_version if same else None
