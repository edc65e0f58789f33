"""DescribeLogDirs (api key 35), versions 0-4.

Every log dir of this broker (log.dirs) with, per replica it holds of the requested partitions
(all partitions when the topics are null): the size of its segments in bytes, its offset lag
and whether it is a future replica (a copy an AlterReplicaLogDirs is making in that dir). The
offset lag of a current replica is how far its log end lies below the high watermark (0 when at
or past it), that of a future replica how far its log end lies behind the current replica's (-1
when the current replica is not available). v4 adds the total and usable bytes of the volume
holding each dir. Topics with no replica in a dir are left out of it.

Errors: a log dir that has failed answers KAFKA_STORAGE_ERROR with no topics (and -1 bytes).

Version notes: v1 is v0 (its answers may be throttled); v2 is flexible; v3 adds the top-level
error code; v4 the volume's total and usable bytes.

Authorization (with an authorizer, as Kafka's KafkaApis): DESCRIBE on the CLUSTER, else no log
dir is listed and the top-level error code is CLUSTER_AUTHORIZATION_FAILED.
"""

import datetime
import itertools

from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.describe_log_dirs.v4.response import (
    DescribeLogDirsPartition,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.log_manager import LogDirDescription
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation


@api(ApiKey.DESCRIBE_LOG_DIRS, versions=(0, 4))
async def handle_describe_log_dirs(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not authorized(ctx, AclOperation.DESCRIBE):
        return _response(ErrorCode.cluster_authorization_failed, ())
    partitions = (
        None
        if request.topics is None
        else {TopicPartition(topic.topic, index) for topic in request.topics for index in topic.partitions}
    )
    described = await ctx.broker.replica_manager.log_manager.describe_dirs(partitions)
    return _response(ErrorCode.none, tuple(_result(d) for d in described))


def _response(error: ErrorCode, results: tuple[DescribeLogDirsResult, ...]) -> DescribeLogDirsResponse:
    return DescribeLogDirsResponse(throttle_time=datetime.timedelta(0), error_code=error, results=results)


def _result(described: LogDirDescription) -> DescribeLogDirsResult:
    if not described.online:
        return DescribeLogDirsResult(error_code=ErrorCode.kafka_storage_error, log_dir=described.path, topics=())
    by_topic = itertools.groupby(
        sorted(described.replicas, key=lambda r: (r.topic_partition, r.is_future)), key=lambda r: r.topic_partition.topic
    )
    return DescribeLogDirsResult(
        error_code=ErrorCode.none,
        log_dir=described.path,
        topics=tuple(
            DescribeLogDirsTopic(
                name=topic,
                partitions=tuple(
                    DescribeLogDirsPartition(
                        partition_index=r.topic_partition.partition,
                        partition_size=r.size,
                        offset_lag=r.offset_lag,
                        is_future_key=r.is_future,
                    )
                    for r in replicas
                ),
            )
            for topic, replicas in by_topic
        ),
        total_bytes=described.total_bytes,
        usable_bytes=described.usable_bytes,
    )
