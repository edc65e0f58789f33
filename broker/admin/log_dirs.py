"""`logway-admin log-dirs`: kafka-log-dirs.sh (DescribeLogDirs to each broker).

    logway-admin log-dirs --bootstrap-server H:P --describe [--broker-list 0,1] [--topic-list t1,t2]

Prints, as Kafka's LogDirsCommand, "Querying brokers for log directories information", the
brokers answered, then one JSON line:
{"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":"/data/a","error":null,
"partitions":[{"partition":"orders-0","size":1234,"offsetLag":0,"isFuture":false}]}]}]}
A log dir's "error" is the Kafka error name (KAFKA_STORAGE_ERROR for an offline dir) where
Kafka's tool prints the Java exception class.
"""

import argparse
import json

from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest

from broker.admin import cluster
from broker.admin.connection import Admin, AdminError, UsageError, check, error_name


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--describe", action="store_true", required=True, help="Describe the specified log directories.")
    parser.add_argument("--broker-list", help="brokers to query: 0,1,2 (all without it)")
    parser.add_argument("--topic-list", help="topics to show: t1,t2 (all without it)")


def _ids(text: str | None) -> list[int]:
    try:
        return [int(b) for b in (text or "").split(",") if b.strip()]
    except ValueError:
        raise UsageError(f"--broker-list {text!r}: broker ids are integers") from None


async def run(args: argparse.Namespace, admin: Admin) -> int:
    wanted = _ids(args.broker_list)
    topics = {t.strip() for t in (args.topic_list or "").split(",") if t.strip()}
    _, _, brokers = await cluster.describe(admin)
    existing = sorted(b[0] for b in brokers)
    missing = sorted(set(wanted) - set(existing))
    if missing:
        raise AdminError(f"The given brokers do not exist from --broker-list: {','.join(map(str, missing))}. "
                         f"Current existent brokers: {','.join(map(str, existing))}")
    queried = sorted(wanted) if wanted else existing
    print("Querying brokers for log directories information")
    by_broker = {}
    for broker in queried:
        response = await admin.send(DescribeLogDirsRequest(topics=None), node=broker, min_version=1)
        check(response.error_code, f"DescribeLogDirs on broker {broker}")
        by_broker[broker] = response.results
    print(f"Received log directory information from brokers {','.join(map(str, queried))}")
    print(format_json(by_broker, topics))
    return 0


def format_json(by_broker: dict, topics: set[str]) -> str:
    """Kafka's JSON of DescribeLogDirs results per broker, partitions filtered by `topics`."""
    return json.dumps({"version": 1, "brokers": [
        {"broker": broker, "logDirs": [
            {
                "logDir": result.log_dir,
                "error": None if result.error_code == 0 else error_name(result.error_code),
                "partitions": [
                    {"partition": f"{topic.name}-{p.partition_index}", "size": p.partition_size,
                     "offsetLag": p.offset_lag, "isFuture": p.is_future_key}
                    for topic in result.topics if not topics or topic.name in topics
                    for p in topic.partitions
                ],
            }
            for result in results
        ]}
        for broker, results in by_broker.items()
    ]}, separators=(",", ":"))
