import pytest

from broker.admin import cli
from broker.admin.connection import UsageError
from broker.admin.zk_offsets import (
    Row,
    check_zookeeper,
    compare,
    format_rows,
    offset_path,
    parse_offset,
    plan_export,
    plan_import,
    warnings,
)


def test_parse_offset_reads_the_decimal_text_the_old_consumer_wrote():
    assert parse_offset(b"286894308") == 286894308
    assert parse_offset(b"0") == 0
    assert parse_offset(b" 42\n") == 42  # written by hand with a trailing newline
    assert parse_offset(str(2**63 - 1).encode()) == 2**63 - 1


@pytest.mark.parametrize("value", [b"", b"-1", b"12a", b"1.5", b'{"offset": 3}', str(2**63).encode(), b"\xff"])
def test_parse_offset_refuses_what_is_not_an_offset(value):
    assert parse_offset(value) is None


@pytest.mark.parametrize("connect", ["zk:2181", "zk1:2181,zk2:2181/kafka", "127.0.0.1:2181/a/b"])
def test_zookeeper_connect_strings_with_and_without_chroot(connect):
    assert check_zookeeper(connect) == connect


@pytest.mark.parametrize("connect", ["zk", "zk:port", "/chroot", "zk:2181,", ""])
def test_bad_zookeeper_connect_strings_are_usage_errors(connect):
    with pytest.raises(UsageError, match="Invalid --zookeeper"):
        check_zookeeper(connect)


def test_offset_paths_are_the_old_consumers_layout():
    assert offset_path("g", "orders", 3) == "/consumers/g/offsets/orders/3"
    assert offset_path("g", "orders") == "/consumers/g/offsets/orders"


def test_import_commits_offsets_that_differ_and_leaves_equal_ones():
    rows = plan_import("g", {("t", 0): 5, ("t", 1): 7}, {}, {("t", 1): 7}, {("t", 0): (0, 10), ("t", 1): (0, 10)})
    assert rows == [Row("g", "t", 0, 5, None, "import", 5), Row("g", "t", 1, 7, 7, "none", None)]


def test_import_moves_offsets_outside_the_log_to_its_nearest_end():
    rows = plan_import("g", {("t", 0): 50, ("t", 1): 2}, {}, {}, {("t", 0): (0, 10), ("t", 1): (4, 10)})
    assert [(r.action, r.new_offset) for r in rows] == [("import log end 10", 10), ("import log start 4", 4)]
    assert warnings(rows) == [
        "Warn: ZooKeeper offset (50) of t-0 of group g is higher than the log end offset; importing 10",
        "Warn: ZooKeeper offset (2) of t-1 of group g is lower than the log start offset; importing 4",
    ]


def test_import_skips_unknown_topics_and_znodes_without_an_offset():
    rows = plan_import("g", {("gone", 0): 3}, {("t", "x"): b"abc"}, {}, {})
    assert rows == [Row("g", "gone", 0, 3, None, "skip: unknown topic"), Row("g", "t", "x", None, None, "skip: not an offset")]
    assert all(r.new_offset is None for r in rows)
    assert "UNKNOWN_TOPIC_OR_PARTITION" in warnings(rows)[0]
    assert "does not hold a decimal offset" in warnings(rows)[1]


def test_export_writes_the_broker_offsets_zookeeper_lacks_or_has_otherwise():
    rows = plan_export("g", {("t", 0): 10, ("t", 1): 4, ("t", 2): 8}, {("t", 0): 3, ("t", 1): 4})
    assert [(r.partition, r.zk_offset, r.broker_offset, r.action, r.new_offset) for r in rows] == [
        (0, 3, 10, "export", 10), (1, 4, 4, "none", None), (2, None, 8, "export", 8)]


def test_compare_names_every_kind_of_disagreement():
    rows = compare("g", {("t", 0): 5, ("t", 1): 6, ("t", 2): 1}, {("t", "bad"): b""}, {("t", 0): 5, ("t", 1): 9, ("t", 3): 2})
    assert [(r.partition, r.action) for r in rows] == [
        (0, "same"), (1, "differ"), (2, "only in zookeeper"), (3, "only in broker"), ("bad", "skip: not an offset")]


def test_partitions_sort_by_number_within_a_topic():
    rows = plan_export("g", {("t", 10): 1, ("t", 9): 1, ("a", 2): 1}, {})
    assert [(r.topic, r.partition) for r in rows] == [("a", 2), ("t", 9), ("t", 10)]


def test_table_has_the_reset_offsets_column_layout():
    text = format_rows([Row("g", "orders", 0, 5, None, "import", 5)])
    lines = text.splitlines()
    assert lines[0] == ""  # a blank line first, as kafka-consumer-groups.sh prints its tables
    assert lines[1] == "%-30s %-30s %-10s %-15s %-15s %s" % ("GROUP", "TOPIC", "PARTITION", "ZK-OFFSET", "BROKER-OFFSET", "ACTION")
    assert lines[2] == "%-30s %-30s %-10s %-15s %-15s %s" % ("g", "orders", "0", "5", "-", "import")
    assert format_rows([], "STATUS").splitlines()[1].endswith("BROKER-OFFSET   STATUS")


def test_command_line_takes_one_direction_and_dry_run_or_execute():
    parser = cli.parser()
    args = parser.parse_args(["zk-offsets", "--bootstrap-server", "b:9092", "--zookeeper", "zk:2181/kafka",
                              "--import", "--group", "a", "--group", "b", "--execute"])
    assert (args.import_, args.export, args.verify, args.group, args.execute) == (True, False, False, ["a", "b"], True)
    for wrong in (["--import", "--export"], ["--verify", "--dry-run", "--execute"], []):
        with pytest.raises(SystemExit):
            parser.parse_args(["zk-offsets", "--bootstrap-server", "b:9092", "--zookeeper", "zk:2181", *wrong])
    with pytest.raises(SystemExit):  # --zookeeper is required
        parser.parse_args(["zk-offsets", "--bootstrap-server", "b:9092", "--export", "--all-groups"])
