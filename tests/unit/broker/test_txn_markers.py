"""broker.txn_markers in an in-process broker: the coordinator's markers wait for the ISR."""

import asyncio

from coordinator.transaction_coordinator import Marker
from protocol.errors import ErrorCode
from replication.partition_state import PartitionState
from storage.topic_partition import TopicPartition
from tests.in_process import running_broker

TP = TopicPartition("t", 0)
MARKER = Marker(producer_id=5, producer_epoch=0, coordinator_epoch=0, commit=True)


def test_a_marker_is_written_once_the_isr_has_it(tmp_path):
    async def main():
        async with running_broker(tmp_path, {"offsets.commit.timeout.ms": "300"}) as broker:
            await broker.topics.create(TP.topic, 1, {})
            assert await broker.markers.write_markers(MARKER, [TP]) == {TP: ErrorCode.none}
            # A second ISR member that never fetches holds the high watermark back.
            broker.replica_manager.become_leader_or_follower(1, [PartitionState(TP, 1, 0, 1, (0, 1), 1, (0, 1))], {}, 0)
            assert await broker.markers.write_markers(MARKER, [TP]) == {TP: ErrorCode.request_timed_out}
            assert broker.markers.write_marker(MARKER, TP) == ErrorCode.none  # WriteTxnMarkers: appended
            missing = TopicPartition("none", 0)
            assert await broker.markers.write_markers(MARKER, [missing]) == {missing: ErrorCode.unknown_topic_or_partition}

    asyncio.run(main())
