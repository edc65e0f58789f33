"""DescribeLogDirs and AlterReplicaLogDirs through the dispatcher of an in-process broker with
two log dirs: each API at its oldest and newest version, and the errors it answers."""

import asyncio

from kio.schema.alter_replica_log_dirs.v2.request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic, DescribeLogDirsRequest

from protocol import legacy
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition
from tests.unit.broker.test_admin_handlers import run


def two_dirs(tmp_path) -> dict:
    return {"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}"}


def alter(path: str, topic: str, *partitions: int) -> AlterReplicaLogDirsRequest:
    return AlterReplicaLogDirsRequest(
        dirs=(AlterReplicaLogDir(path=path, topics=(AlterReplicaLogDirTopic(name=topic, partitions=partitions),)),)
    )


def partitions_by_dir(response) -> dict[str, dict[tuple[str, int], tuple]]:
    return {
        result.log_dir: {
            (topic.name, p.partition_index): (p.partition_size > 0, p.offset_lag, p.is_future_key)
            for topic in result.topics
            for p in topic.partitions
        }
        for result in response.results
    }


def test_describe_log_dirs_lists_every_dir_with_its_partitions_and_volume(tmp_path):
    async def scenario(admin):
        await admin.create_topic("orders", 2)
        admin.produce("orders", 0, 3)
        newest = await admin.call(ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None))
        only_one = await admin.call(
            ApiKey.DESCRIBE_LOG_DIRS, 4,
            DescribeLogDirsRequest(topics=(DescribableLogDirTopic(topic="orders", partitions=(1,)),)),
        )
        oldest = await admin.call(ApiKey.DESCRIBE_LOG_DIRS, 0, legacy.DescribeLogDirsRequestV0(topics=None))
        return admin.broker.replica_manager.log_manager, newest, only_one, oldest

    logs, newest, only_one, oldest = run(tmp_path, scenario, two_dirs(tmp_path))
    where = {tp: logs.log_dir_of(tp) for tp in (TopicPartition("orders", 0), TopicPartition("orders", 1))}
    assert newest.error_code == ErrorCode.none
    described = partitions_by_dir(newest)
    assert set(described) == {str(tmp_path / "a"), str(tmp_path / "b")}
    assert described[where[TopicPartition("orders", 0)]][("orders", 0)] == (True, 0, False)
    assert described[where[TopicPartition("orders", 1)]][("orders", 1)] == (False, 0, False)
    assert all(r.total_bytes >= r.usable_bytes > 0 and r.error_code == ErrorCode.none for r in newest.results)
    assert [key for d in partitions_by_dir(only_one).values() for key in d] == [("orders", 1)]
    assert partitions_by_dir(oldest) == described


def test_alter_replica_log_dirs_moves_a_replica_and_answers_kafkas_errors(tmp_path):
    async def scenario(admin):
        await admin.create_topic("orders", 1)
        admin.produce("orders", 0, 5)
        logs = admin.broker.replica_manager.log_manager
        tp = TopicPartition("orders", 0)
        source = logs.log_dir_of(tp)
        target = next(d.path for d in logs.dirs.values() if d.path != source)
        answers = {
            "unknown dir": await admin.call(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, alter(str(tmp_path / "c"), "orders", 0)),
            "no replica": await admin.call(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, alter(target, "nothing", 0)),
            "too long": await admin.call(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, alter(target, "x" * 249, 0)),
            "moved": await admin.call(ApiKey.ALTER_REPLICA_LOG_DIRS, 0, legacy.AlterReplicaLogDirsRequestV0(dirs=(
                legacy.AlterReplicaLogDirV0(path=target, topics=(legacy.AlterReplicaLogDirTopicV0(name="orders", partitions=(0,)),)),
            ))),
        }
        for _ in range(500):
            if logs.log_dir_of(tp) == target:
                break
            await asyncio.sleep(0.01)
        partition = admin.broker.replica_manager.partitions[tp]
        admin.produce("orders", 0, 1)  # the partition appends to its moved log
        return answers, logs.log_dir_of(tp), target, partition.log is logs.get(tp), logs.get(tp).log_end_offset

    answers, now_in, target, follows, end = run(tmp_path, scenario, two_dirs(tmp_path))
    errors = {name: answer.results[0].partitions[0].error_code for name, answer in answers.items()}
    assert errors == {
        "unknown dir": ErrorCode.log_dir_not_found,
        "no replica": ErrorCode.replica_not_available,
        "too long": ErrorCode.invalid_topic_exception,
        "moved": ErrorCode.none,
    }
    assert (now_in, follows, end) == (target, True, 6)
