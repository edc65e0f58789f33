import argparse
import json

import pytest
from kio.schema.elect_leaders.v2.response import PartitionResult, ReplicaElectionResult

from broker.admin import elect
from broker.admin.connection import UsageError


def _args(**values):
    defaults = dict(election_type="PREFERRED", topic=None, partition=None, all_topic_partitions=False, path_to_json_file=None)
    return argparse.Namespace(**{**defaults, **values})


def test_partitions_come_from_one_source(tmp_path):
    assert elect.partitions_of(_args(all_topic_partitions=True)) is None
    assert elect.partitions_of(_args(topic="t", partition=2)) == [("t", 2)]
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0}, {"topic": "u", "partition": 1}]}))
    assert elect.partitions_of(_args(path_to_json_file=str(path))) == [("t", 0), ("u", 1)]
    with pytest.raises(UsageError, match="One and only one"):
        elect.partitions_of(_args(topic="t", partition=0, all_topic_partitions=True))


def test_results_print_as_kafkas_leader_election_command():
    results = [ReplicaElectionResult(topic="t", partition_result=(
        PartitionResult(partition_id=0, error_code=0, error_message=None),
        PartitionResult(partition_id=1, error_code=84, error_message=None),  # ELECTION_NOT_NEEDED
        PartitionResult(partition_id=2, error_code=83, error_message="no live replica"),  # ELIGIBLE_LEADERS_NOT_AVAILABLE
    ))]
    lines, failed = elect.report("UNCLEAN", results)
    assert lines == [
        "Successfully completed leader election (UNCLEAN) for partitions t-0",
        "Valid replica already elected for partitions t-1",
        "Error completing leader election (UNCLEAN) for partition: t-2: ELIGIBLE_LEADERS_NOT_AVAILABLE no live replica",
    ]
    assert failed == 1
