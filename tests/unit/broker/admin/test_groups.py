import argparse
import asyncio
import datetime
import struct

import pytest
from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment, TopicPartition

from broker.admin import groups
from broker.admin.connection import UsageError
from protocol import schemas


def _assignment(version: int, partitions: dict[str, list[int]]) -> bytes:
    body = schemas.encode(ConsumerProtocolAssignment(
        assigned_partitions=tuple(TopicPartition(topic=t, partitions=tuple(ps)) for t, ps in partitions.items()),
        user_data=None,
    ))
    return struct.pack(">h", version) + body


def test_member_assignment_reads_any_consumer_protocol_version():
    assert groups.member_assignment(_assignment(0, {"a": [1, 0], "b": [2]})) == [("a", 1), ("a", 0), ("b", 2)]
    # v3 adds fields after v0's; what v0 reads is the same
    assert groups.member_assignment(_assignment(3, {"a": [0]}) + b"\xff\xff\xff\xff") == [("a", 0)]
    assert groups.member_assignment(b"") == []
    assert groups.member_assignment(b"\x00\x00\xff") == []


def test_offsets_table_has_kafkas_columns_and_minimum_widths():
    rows = [("g", "orders", 0, 5, 8, 3, "consumer-1-a6b", "/10.0.0.1", "consumer-1"),
            ("g", "orders", 1, None, 4, None, "-", "-", "-")]
    lines = groups.offsets_table(rows).splitlines()
    assert lines[0] == ""
    assert lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert lines[2].startswith("g               orders          0          5               8               3  ")
    assert lines[3].split() == ["g", "orders", "1", "-", "4", "-", "-", "-", "-"]


def test_verbose_assignment_groups_partitions_by_topic():
    assert groups.format_assignment([("b", 1), ("a", 2), ("a", 0)]) == "a(0,2), b(1)"
    assert groups.format_assignment([]) == "-"


def test_datetimes_and_durations_as_kafka_reads_them():
    assert groups.parse_datetime("2024-01-02T03:04:05.678Z") == int(
        datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.timezone.utc).timestamp() * 1000)
    assert groups.parse_datetime("2024-01-02T03:04:05+01:00") == groups.parse_datetime("2024-01-02T02:04:05Z")
    assert groups.parse_duration("P1DT2H3M4.5S") == ((24 + 2) * 3600 + 3 * 60 + 4.5) * 1000
    for bad in ("2024-01-02", "yesterday"):
        with pytest.raises(UsageError):
            groups.parse_datetime(bad)
    with pytest.raises(UsageError):
        groups.parse_duration("PT")


def test_topic_arguments_name_whole_topics_or_partitions():
    assert groups.parse_topic_partitions("orders") == ("orders", None)
    assert groups.parse_topic_partitions("orders:0,2") == ("orders", [0, 2])
    with pytest.raises(UsageError):
        groups.parse_topic_partitions("orders:x")


def test_new_offsets_outside_the_log_move_to_its_nearest_end_with_kafkas_warning(capsys):
    plan = groups._within_range({("t", 0): 100, ("t", 1): -5, ("t", 2): 3},
                                {("t", 0): 0, ("t", 1): 2, ("t", 2): 0}, {("t", 0): 10, ("t", 1): 10, ("t", 2): 10})
    assert plan == {("t", 0): 10, ("t", 1): 2, ("t", 2): 3}
    out = capsys.readouterr().out
    assert "New offset (100) is higher than latest offset for topic partition t-0. Value will be set to 10" in out
    assert "New offset (-5) is lower than earliest offset for topic partition t-1. Value will be set to 2" in out


def test_reset_offsets_needs_a_scenario_and_a_scope():
    args = argparse.Namespace(to_earliest=False, to_latest=False, to_current=False, to_offset=None, shift_by=None,
                              to_datetime=None, by_duration=None, topic=["t"], all_topics=False)
    with pytest.raises(UsageError, match="requires one of the following scenarios"):
        asyncio.run(groups.reset_offsets(None, ["g"], args))
