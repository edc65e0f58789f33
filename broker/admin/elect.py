"""`logway-admin elect`: kafka-leader-election.sh (ElectLeaders, sent to the controller).

    --election-type PREFERRED|UNCLEAN (--topic T --partition P | --all-topic-partitions |
                                       --path-to-json-file F)

F is Kafka's {"partitions": [{"topic": "t", "partition": 0}, ...]}. Output as Kafka's:
`Successfully completed leader election (PREFERRED) for partitions t-0, t-1`, `Valid replica
already elected for partitions ...` (ELECTION_NOT_NEEDED), and per failure `Error completing
leader election (PREFERRED) for partition: t-0: <ERROR_NAME>`, then exit status 1.
"""

import argparse
import datetime
import json

from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions

from broker.admin.connection import Admin, AdminError, UsageError, check, error_name
from protocol.errors import ErrorCode

ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}
TIMEOUT = datetime.timedelta(seconds=30)


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--election-type", required=True, type=str.upper, choices=tuple(ELECTION_TYPES))
    parser.add_argument("--topic")
    parser.add_argument("--partition", type=int)
    parser.add_argument("--all-topic-partitions", action="store_true")
    parser.add_argument("--path-to-json-file")


def partitions_of(args: argparse.Namespace) -> list[tuple[str, int]] | None:
    """The partitions the flags name; None for every partition."""
    given = sum((args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None))
    if given != 1:
        raise UsageError("One and only one of the following options is required: --all-topic-partitions, --topic, --path-to-json-file")
    if args.all_topic_partitions:
        return None
    if args.topic is not None:
        if args.partition is None:
            raise UsageError("Missing required option(s): partition")
        return [(args.topic, args.partition)]
    try:
        with open(args.path_to_json_file, encoding="utf-8") as file:
            data = json.load(file)
        return [(p["topic"], int(p["partition"])) for p in data["partitions"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"Cannot read the partitions of {args.path_to_json_file}: {exc}") from None


async def run(args: argparse.Namespace, admin: Admin) -> int:
    partitions = partitions_of(args)
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions or ():
        topics.setdefault(topic, []).append(partition)
    request = ElectLeadersRequest(
        election_type=ELECTION_TYPES[args.election_type],
        topic_partitions=None if partitions is None else tuple(
            TopicPartitions(topic=t, partitions=tuple(ps)) for t, ps in topics.items()
        ),
        timeout=TIMEOUT,
    )
    response = await admin.send_to_controller(request, min_version=1)
    if response.error_code == ErrorCode.cluster_authorization_failed:
        print("Not authorized to perform leader election")
    check(response.error_code, "ElectLeaders")
    lines, failed = report(args.election_type, response.replica_election_results)
    for line in lines:
        print(line)
    if failed:
        raise AdminError(f"{failed} replica(s) could not be elected")
    return 0


def report(election_type: str, results) -> tuple[list[str], int]:
    succeeded, noop, failed = [], [], []
    for topic in results:
        for partition in topic.partition_result:
            name = f"{topic.topic}-{partition.partition_id}"
            if partition.error_code == ErrorCode.none:
                succeeded.append(name)
            elif partition.error_code == ErrorCode.election_not_needed:
                noop.append(name)
            else:
                detail = f" {partition.error_message}" if partition.error_message else ""
                failed.append(f"Error completing leader election ({election_type}) for partition: {name}: "
                              f"{error_name(partition.error_code)}{detail}")
    lines = []
    if succeeded:
        lines.append(f"Successfully completed leader election ({election_type}) for partitions {', '.join(succeeded)}")
    if noop:
        lines.append(f"Valid replica already elected for partitions {', '.join(noop)}")
    return lines + failed, len(failed)
