import pytest

from broker.admin import reassign
from broker.admin.connection import UsageError


def test_reassignment_json_round_trips_in_kafkas_format():
    parts = {("t", 1): [2, 3], ("t", 0): [1, 2]}
    text = reassign.reassignment_json(parts)
    assert text.startswith('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}')
    import json
    assert reassign.parse_reassignment(json.loads(text)) == parts


@pytest.mark.parametrize("data, message", [
    ({"partitions": []}, "cannot be empty"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}, "duplicate"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/data"]}]}, "log_dirs"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}] * 2}, "multiple entries"),
    ({"topics": []}, "Invalid reassignment JSON"),
])
def test_invalid_reassignments_are_refused(data, message):
    with pytest.raises(UsageError, match=message):
        reassign.parse_reassignment(data)


def test_throttles_cover_the_replicas_moving_from_and_to():
    leaders, followers, brokers = reassign.throttles({("t", 0): [1, 2], ("t", 1): [2, 3]},
                                                     {("t", 0): [2, 4], ("t", 1): [2, 3]})
    assert leaders == {"t": "0:1,0:2,1:2,1:3"}
    assert followers == {"t": "0:4"}
    assert brokers == {1, 2, 3, 4}


def test_verify_states_print_as_kafkas():
    targets = {("t", 0): [1, 2], ("t", 1): [2, 3], ("t", 2): [1]}
    found = {("t", 0): (True, [1, 2]), ("t", 1): (False, [2, 3, 1]), ("t", 2): (True, [2])}
    assert reassign.state_lines(targets, found) == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.",
        "Reassignment of partition t-1 is still in progress.",
        "There is no active reassignment of partition t-2, but replica set is 2 rather than 1.",
    ]
