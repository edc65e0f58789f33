"""log-dirs' output from a DescribeLogDirs response as a broker sends it (encoded, then decoded
as the admin client decodes it)."""

import datetime
import json

from kio.schema.describe_log_dirs.v4.response import (
    DescribeLogDirsPartition,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)

from broker.admin.log_dirs import format_json
from protocol import schemas
from protocol.errors import ErrorCode


def _decoded_response() -> DescribeLogDirsResponse:
    response = DescribeLogDirsResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, results=(
        DescribeLogDirsResult(error_code=ErrorCode.none, log_dir="/data/a", total_bytes=1000, usable_bytes=500, topics=(
            DescribeLogDirsTopic(name="orders", partitions=(
                DescribeLogDirsPartition(partition_index=0, partition_size=123, offset_lag=0, is_future_key=False),
                DescribeLogDirsPartition(partition_index=1, partition_size=7, offset_lag=2, is_future_key=True),
            )),
            DescribeLogDirsTopic(name="other", partitions=(
                DescribeLogDirsPartition(partition_index=0, partition_size=1, offset_lag=0, is_future_key=False),
            )),
        )),
        DescribeLogDirsResult(error_code=ErrorCode.kafka_storage_error, log_dir="/data/b", total_bytes=-1, usable_bytes=-1, topics=()),
    ))
    return schemas.decode(DescribeLogDirsResponse, memoryview(schemas.encode(response)))


def test_log_dirs_print_as_kafkas_json_with_the_topics_asked_for():
    printed = json.loads(format_json({0: _decoded_response().results}, {"orders"}))
    assert printed == {"version": 1, "brokers": [{"broker": 0, "logDirs": [
        {"logDir": "/data/a", "error": None, "partitions": [
            {"partition": "orders-0", "size": 123, "offsetLag": 0, "isFuture": False},
            {"partition": "orders-1", "size": 7, "offsetLag": 2, "isFuture": True},
        ]},
        {"logDir": "/data/b", "error": "KAFKA_STORAGE_ERROR", "partitions": []},
    ]}]}


def test_without_a_topic_list_every_partition_is_shown():
    printed = json.loads(format_json({0: _decoded_response().results}, set()))
    assert [p["partition"] for p in printed["brokers"][0]["logDirs"][0]["partitions"]] == ["orders-0", "orders-1", "other-0"]
