"""replication.zk_isr_writer against a real ZooKeeper: ISR writes by compare-and-set, and their
notifications batched as Kafka's leaders batch them (5 s without a change, or 60 s since the
last one), on a fake clock."""

import asyncio

from replication import znodes
from replication.zk import ZkClient
from replication.partition_state import IsrFound
from replication.zk_isr_writer import MAX_DELAY_S, QUIET_S, ZkIsrWriter
from storage.topic_partition import TopicPartition

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _scenario(zookeeper, chroot: str, body):
    async def main():
        zk = ZkClient(f"{zookeeper.connect_string}/{chroot}", 6000)
        await zk.start()
        try:
            for tp in (T0, T1):
                state = znodes.LeaderIsr(1, 0, (1, 2, 3), 1)
                await zk.create(znodes.partition_state_path(tp), znodes.encode_partition_state(state), makepath=True)
            clock = FakeClock()
            return await body(zk, ZkIsrWriter(zk, 1, lambda: 1, clock), clock)
        finally:
            await zk.close()

    return asyncio.run(asyncio.wait_for(main(), 60))


async def _notifications(zk: ZkClient) -> list[list[TopicPartition]]:
    names = sorted(await zk.children_or_empty(znodes.ISR_CHANGE_NOTIFICATION))
    return [znodes.decode_isr_change((await zk.get(f"{znodes.ISR_CHANGE_NOTIFICATION}/{n}"))[0]) for n in names]


def test_changes_go_in_one_notification_once_quiet_for_five_seconds(tmp_path, zookeeper):
    async def body(zk, writer, clock):
        assert await writer.write_isr(T0, 0, (1, 2), 0) == 1
        clock.now += 1
        assert await writer.write_isr(T1, 0, (1, 3), 0) == 1
        clock.now += QUIET_S - 0.5
        await writer.propagate_if_due()
        assert await _notifications(zk) == []  # the last change is 4.5 s old
        clock.now += 1
        await writer.propagate_if_due()
        assert await _notifications(zk) == [[T0, T1]]
        await writer.propagate_if_due()
        assert len(await _notifications(zk)) == 1  # nothing new, nothing written
        data, _ = await zk.get(znodes.partition_state_path(T1))
        assert znodes.decode_partition_state(data, 1).isr == (1, 3)

    _scenario(zookeeper, tmp_path.name, body)


def test_a_stream_of_changes_is_announced_every_sixty_seconds(tmp_path, zookeeper):
    async def body(zk, writer, clock):
        start = clock.now
        version = 0
        while clock.now - start < MAX_DELAY_S:
            version = await writer.write_isr(T0, 0, (1, 2) if version % 2 == 0 else (1, 2, 3), version)
            clock.now += 2.5
            await writer.propagate_if_due()
            if clock.now - start < MAX_DELAY_S:
                assert await _notifications(zk) == []
        assert await _notifications(zk) == [[T0]]

    _scenario(zookeeper, tmp_path.name, body)


def test_a_refused_write_is_not_announced(tmp_path, zookeeper):
    async def body(zk, writer, clock):
        # The controller elects broker 1 again: it bumps the leader epoch.
        await zk.set(znodes.partition_state_path(T0), znodes.encode_partition_state(znodes.LeaderIsr(1, 1, (1, 3), 1)))
        assert await writer.write_isr(T0, 0, (1, 2), 0) is None
        clock.now += MAX_DELAY_S
        await writer.propagate_if_due()
        assert await _notifications(zk) == []

    _scenario(zookeeper, tmp_path.name, body)


def test_a_write_stored_though_its_answer_was_lost_is_found_and_announced(tmp_path, zookeeper):
    # Jepsen seed 2960523544: the leader's shrink to [1] reached ZooKeeper as its connection was
    # cut, so the leader kept [1, 2, 3] at the old version; its next change was refused for ever.
    async def body(zk, writer, clock):
        path = znodes.partition_state_path(T0)
        await zk.set(path, znodes.encode_partition_state(znodes.LeaderIsr(1, 0, (1,), 1)), 0)  # the lost write

        assert await writer.write_isr(T0, 0, (1, 2, 3, 4), 0) == IsrFound((1,), 1)
        assert znodes.decode_partition_state(*_data_and_version(await zk.get(path))).isr == (1,)  # not overwritten
        clock.now += QUIET_S
        await writer.propagate_if_due()
        assert await _notifications(zk) == [[T0]]  # the controller hears of the ISR it never saw

    _scenario(zookeeper, tmp_path.name, body)


def _data_and_version(found):
    data, stat = found
    return data, stat.version
