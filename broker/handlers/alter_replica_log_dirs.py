"""AlterReplicaLogDirs (api key 34), versions 0-2.

Moves replicas of this broker between its log dirs (JBOD), as Kafka's
ReplicaManager.alterReplicaLogDirs: per partition, the absolute path of the log dir it is to live
in. A replica already in that dir stays (a move of it elsewhere under way is given up); else a
future replica is made in that dir, which copies the current one while it goes on serving and
takes its place once it has caught up (storage.log_manager, "Moving a replica"). A move to
another dir under way is given up for the new one; the same move asked again goes on. The answer
comes at once: DescribeLogDirs shows the future replica and its lag until the swap. When one
path names several partitions, or a partition is named under several paths, the last path wins.

Errors, per partition: LOG_DIR_NOT_FOUND for a path that is not one of log.dirs (compared as
an absolute path); KAFKA_STORAGE_ERROR when that dir, or the one holding the replica, is offline,
or any log dir is offline (the replica might have a log there); REPLICA_NOT_AVAILABLE when this
broker holds no replica of the partition (the dir is then remembered, and a replica created
here later goes there); INVALID_TOPIC_EXCEPTION when the future replica's directory name would
be longer than 255 bytes.

Version notes: v1 is v0 (its answers may be throttled); v2 is flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): ALTER on the CLUSTER, else every
partition answers CLUSTER_AUTHORIZATION_FAILED.
"""

import datetime

from kio.schema.alter_replica_log_dirs.v2.request import AlterReplicaLogDirsRequest
from kio.schema.alter_replica_log_dirs.v2.response import (
    AlterReplicaLogDirPartitionResult,
    AlterReplicaLogDirsResponse,
    AlterReplicaLogDirTopicResult,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from storage.log_manager import FUTURE_DIR_SUFFIX
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import cluster_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation

# The future replica's directory: <topic>-<partition>.<32 hex digits>-future
_FUTURE_NAME_OVERHEAD = 1 + 32 + len(FUTURE_DIR_SUFFIX)
_MAX_FILE_NAME_BYTES = 255


@api(ApiKey.ALTER_REPLICA_LOG_DIRS, versions=(0, 2))
@cluster_operation(AclOperation.ALTER)
def handle_alter_replica_log_dirs(ctx: RequestContext, request: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse:
    targets = {
        TopicPartition(topic.name, partition): log_dir.path
        for log_dir in request.dirs
        for topic in log_dir.topics
        for partition in topic.partitions
    }
    errors: dict[str, list[AlterReplicaLogDirPartitionResult]] = {}
    for tp, path in targets.items():
        errors.setdefault(tp.topic, []).append(_result(tp.partition, _move(ctx, tp, path)))
    return AlterReplicaLogDirsResponse(
        throttle_time=datetime.timedelta(0),
        results=tuple(
            AlterReplicaLogDirTopicResult(topic_name=topic, partitions=tuple(results)) for topic, results in errors.items()
        ),
    )


def _move(ctx: RequestContext, tp: TopicPartition, path: str) -> ErrorCode:
    if len(tp.dir_name.encode()) + _FUTURE_NAME_OVERHEAD > _MAX_FILE_NAME_BYTES:
        return ErrorCode.invalid_topic_exception
    try:
        ctx.broker.replica_manager.log_manager.move(tp, path)
    except KafkaError as exc:
        return exc.error_code
    return ErrorCode.none


def _result(partition: int, error: ErrorCode) -> AlterReplicaLogDirPartitionResult:
    return AlterReplicaLogDirPartitionResult(partition_index=partition, error_code=error)
