"""Tiered storage on an in-process broker: a tiered topic's rolled segments copied to a directory
store by the remote log manager's round (run by the test), deleted locally, then served by Fetch
from the store, with ListOffsets answering the remote log start (-2), the local one (-4), the
last tiered offset (-5) and timestamps from the remote segments."""

import asyncio
import uuid

from kio.schema.list_offsets.v9.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic

from broker.partitioner import murmur2
from broker.remote_log import REMOTE_LOG_METADATA_TOPIC, metadata_partition
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.record_batch import iter_batches
from storage.remote.metadata import TopicIdPartition
from storage.topic_partition import TopicPartition
from tests.in_process import running_broker
from tests.unit.broker.test_replication_handlers import call, fetch
from tests.unit.storage.conftest import batch

TP = TopicPartition("tiered", 0)


def tiered(tmp_path) -> dict:
    return {
        "remote.log.storage.system.enable": "true",
        "rsm.config.url": f"file://{tmp_path / 'store'}",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "2",
        "remote.log.manager.task.interval.ms": "3600000",  # the test runs the rounds
    }


async def list_offset(broker, timestamp: int) -> int:
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(ListOffsetsTopic(name=TP.topic, partitions=(
            ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=timestamp),
        )),),
    )
    answer = (await call(broker, ApiKey.LIST_OFFSETS, 9, request)).topics[0].partitions[0]
    assert answer.error_code == ErrorCode.none
    return answer.offset


def test_fetches_below_the_local_log_start_are_served_from_the_store(tmp_path):
    async def main():
        async with running_broker(tmp_path / "data", tiered(tmp_path)) as broker:
            await broker.topics.create(
                TP.topic, 1, {"remote.storage.enable": "true", "segment.bytes": "400", "local.retention.bytes": "1", "retention.ms": "-1"}
            )
            for i in range(20):
                # Two records a batch, stamped 10_000 + 10 * i and one more.
                broker.replica_manager.append(TP, memoryview(batch(b"value-%d" % i, b"x" * 60, timestamp=10_000 + 10 * i)))
            log = broker.log_manager.get(TP)
            await broker.remote_log.run_once()
            log.apply_retention()
            local_start = log.local_log_start_offset
            assert local_start > 0 and log.log_start_offset == 0
            assert REMOTE_LOG_METADATA_TOPIC in broker.topics.topics
            assert await list_offset(broker, -2) == 0
            assert await list_offset(broker, -4) == local_start
            assert await list_offset(broker, -5) == local_start - 1
            # Timestamps are looked up in the remote segments first, then locally.
            assert await list_offset(broker, 10_030) == 6
            assert await list_offset(broker, 10_031) == 7
            assert await list_offset(broker, 10_000 + 10 * 19) == 38

            answer = await fetch(broker, 0, tp=TP)
            assert answer.error_code == ErrorCode.none
            records = bytes(answer.records)
            first = next(iter_batches(memoryview(records)))[1]
            assert first.base_offset == 0
            assert answer.log_start_offset == 0 and answer.high_watermark == log.log_end_offset

            # Past the remote log, the local log answers as before.
            local = await fetch(broker, local_start, tp=TP)
            assert local.error_code == ErrorCode.none and len(local.records) > 0

    asyncio.run(main())


def test_metadata_records_go_to_kafkas_partition_of_the_topic_id_and_partition():
    tip = TopicIdPartition(uuid.UUID(int=(1 << 64) + 2), "t", 3)
    # Objects.hash(lsb=2, msb=1, 3) = ((31 + 2) * 31 + 1) * 31 + 3 = 31747, whose 4 big-endian
    # bytes go through Kafka's Utils.murmur2.
    assert metadata_partition(tip, 50) == (murmur2((31747).to_bytes(4, "big")) & 0x7FFFFFFF) % 50
