"""`logway-admin delete-records`: kafka-delete-records.sh (DeleteRecords to each partition's
leader), the forced deletion of a partition's oldest records.

    logway-admin delete-records --bootstrap-server H:P --offset-json-file F

F: {"partitions":[{"topic":"orders","partition":0,"offset":1000}],"version":1}; offset -1 is the
high watermark (everything). Each partition's log start offset moves up to the offset and the
segments wholly below it are deleted. Prints, as Kafka's tool, `partition: orders-0
low_watermark: 1000` or `partition: orders-0  error: <ERROR_NAME>`; exit status 1 when a
partition failed.
"""

import argparse
import datetime
import json

from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic

from broker.admin.connection import Admin, UsageError, error_name

TIMEOUT = datetime.timedelta(seconds=30)


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--offset-json-file", required=True,
                        help='{"partitions":[{"topic":"t","partition":0,"offset":10}],"version":1}')


def parse_offsets(data) -> dict[tuple[str, int], int]:
    try:
        offsets = {}
        for entry in data["partitions"]:
            key = (entry["topic"], int(entry["partition"]))
            if key in offsets:
                raise UsageError(f"Offset json file contains duplicate topic partitions: {key[0]}-{key[1]}")
            offsets[key] = int(entry["offset"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"Invalid offset JSON: {exc}") from None
    if not offsets:
        raise UsageError("Offset json file doesn't contain any partition")
    return offsets


async def run(args: argparse.Namespace, admin: Admin) -> int:
    try:
        with open(args.offset_json_file, encoding="utf-8") as file:
            offsets = parse_offsets(json.load(file))
    except (OSError, ValueError) as exc:
        raise UsageError(f"Cannot read {args.offset_json_file}: {exc}") from None
    print("Executing records delete operation")
    leaders = await admin.leaders(offsets)
    by_leader: dict[int, dict[str, list]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_leader.setdefault(leaders[(topic, partition)], {}).setdefault(topic, []).append(
            DeleteRecordsPartition(partition_index=partition, offset=offset))
    results = {}
    for leader, topics in by_leader.items():
        response = await admin.send(DeleteRecordsRequest(
            topics=tuple(DeleteRecordsTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()), timeout=TIMEOUT,
        ), node=leader)
        for topic in response.topics:
            for partition in topic.partitions:
                results[(topic.name, partition.partition_index)] = (partition.error_code, partition.low_watermark)
    print("Records delete operation completed:")
    failed = False
    for (topic, partition), (code, low_watermark) in sorted(results.items()):
        if code:
            failed = True
            print(f"partition: {topic}-{partition}\terror: {error_name(code)}")
        else:
            print(f"partition: {topic}-{partition}\tlow_watermark: {low_watermark}")
    return 1 if failed else 0
