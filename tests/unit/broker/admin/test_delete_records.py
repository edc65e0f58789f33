import pytest

from broker.admin.connection import UsageError
from broker.admin.delete_records import parse_offsets


def test_offsets_per_partition_from_kafkas_json():
    assert parse_offsets({"partitions": [{"topic": "t", "partition": 0, "offset": 10},
                                         {"topic": "t", "partition": 1, "offset": -1}], "version": 1}) == {
        ("t", 0): 10, ("t", 1): -1}


@pytest.mark.parametrize("data, message", [
    ({"partitions": []}, "doesn't contain any partition"),
    ({"partitions": [{"topic": "t", "partition": 0, "offset": 1}] * 2}, "duplicate"),
    ({"partitions": [{"topic": "t"}]}, "Invalid offset JSON"),
])
def test_invalid_offset_files_are_refused(data, message):
    with pytest.raises(UsageError, match=message):
        parse_offsets(data)
