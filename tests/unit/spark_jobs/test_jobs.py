"""The pure parts of the jobs and the writer: export planning from the manifest and committed
files, the stream's offset caps, bulk_load's verification, the writer's columns."""

import json

import pyarrow as pa
import pytest

from spark_jobs.bulk_load import LoadConfig, input_format, verify
from spark_jobs.export import (
    MANIFEST,
    committed_ranges,
    config_from_args,
    parse_args,
    plan_export,
    progress_ends,
    range_path,
    read_manifest,
)
from spark_jobs.options import OptionError, parse_read_options
from spark_jobs.planning import DataLossError, OffsetRange
from spark_jobs.source import cap_offsets, offsets_from_dict, offsets_to_dict
from spark_jobs.writer import WriteError, WriteStats, _bytes_column, check_columns


class Lookup:
    def __init__(self, earliest, latest):
        self.earliest_ = earliest
        self.latest_ = latest

    def topics(self):
        counts = {}
        for topic, partition in self.latest_:
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        return counts

    def earliest(self, tps):
        return {tp: self.earliest_[tp] for tp in tps}

    def latest(self, tps):
        return {tp: self.latest_[tp] for tp in tps}

    def for_timestamps(self, timestamps):
        return {tp: None for tp in timestamps}


def commit_file(output, topic, partition, start, end):
    path = range_path(str(output), OffsetRange(topic, partition, start, end))
    import os

    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").close()


OPTIONS = parse_read_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})


def test_first_run_plans_everything_and_fixes_the_starts(tmp_path):
    lookup = Lookup({("t", 0): 5, ("t", 1): 0}, {("t", 0): 25, ("t", 1): 0})
    plan = plan_export(OPTIONS, str(tmp_path), lookup, max_records_per_range=8)
    assert plan.todo == [OffsetRange("t", 0, 5, 11), OffsetRange("t", 0, 11, 18), OffsetRange("t", 0, 18, 25)]
    assert read_manifest(str(tmp_path)) == {("t", 0): 5, ("t", 1): 0}
    assert json.loads((tmp_path / MANIFEST).read_text())["starts"] == {"t": {"0": 5, "1": 0}}


def test_a_rerun_plans_the_holes_only(tmp_path):
    lookup = Lookup({("t", 0): 0, ("t", 1): 0}, {("t", 0): 100, ("t", 1): 30})
    plan_export(OPTIONS, str(tmp_path), lookup, max_records_per_range=None)
    for start, end in [(0, 20), (40, 60), (90, 100)]:
        commit_file(tmp_path, "t", 0, start, end)
    commit_file(tmp_path, "t", 1, 0, 30)
    (tmp_path / "topic=t" / "partition=0" / "junk.parquet").write_bytes(b"")
    assert committed_ranges(str(tmp_path)) == {("t", 0): [(0, 20), (40, 60), (90, 100)], ("t", 1): [(0, 30)]}
    plan = plan_export(OPTIONS, str(tmp_path), lookup, max_records_per_range=None)
    assert plan.todo == [OffsetRange("t", 0, 20, 40), OffsetRange("t", 0, 60, 90)]
    assert progress_ends(str(tmp_path), plan.starts) == {("t", 0): 20, ("t", 1): 30}


def test_retention_below_the_exported_part_is_no_loss_but_a_hole_is(tmp_path):
    lookup = Lookup({("t", 0): 0}, {("t", 0): 100})
    plan_export(OPTIONS, str(tmp_path), lookup, max_records_per_range=None)
    commit_file(tmp_path, "t", 0, 0, 50)
    lookup.earliest_[("t", 0)] = 30  # retention deleted 0..29, all of it exported
    plan = plan_export(OPTIONS, str(tmp_path), lookup, max_records_per_range=None)
    assert plan.todo == [OffsetRange("t", 0, 50, 100)]
    assert read_manifest(str(tmp_path)) == {("t", 0): 30}

    other = tmp_path / "other"
    plan_export(OPTIONS, str(other), Lookup({("t", 0): 0}, {("t", 0): 100}), None)
    commit_file(other, "t", 0, 20, 100)  # a failed run left 0..19 out
    lost = Lookup({("t", 0): 10}, {("t", 0): 100})
    with pytest.raises(DataLossError, match=r"t-0\[0,10\)"):
        plan_export(OPTIONS, str(other), lost, None)
    lenient = parse_read_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "false"})
    assert plan_export(lenient, str(other), lost, None).todo == [OffsetRange("t", 0, 10, 20)]
    assert read_manifest(str(other)) == {("t", 0): 10}


def test_new_partitions_join_the_manifest(tmp_path):
    plan_export(OPTIONS, str(tmp_path), Lookup({("t", 0): 0}, {("t", 0): 10}), None)
    commit_file(tmp_path, "t", 0, 0, 10)
    grown = Lookup({("t", 0): 0, ("t", 1): 3}, {("t", 0): 10, ("t", 1): 9})
    assert plan_export(OPTIONS, str(tmp_path), grown, None).todo == [OffsetRange("t", 1, 3, 9)]
    assert read_manifest(str(tmp_path)) == {("t", 0): 0, ("t", 1): 3}


def test_export_command_line():
    args = parse_args(
        ["--bootstrap", "h:1", "--topic", "a", "--topic", "b", "--output", "/o", "--option", "maxOffsetsPerTrigger=5",
         "--inject-failure", "a-b:1:42", "--no-headers"]
    )
    config = config_from_args(args)
    assert config.read_options["subscribe"] == "a,b"
    assert config.read_options["includeHeaders"] == "false"
    assert config.read_options["maxOffsetsPerTrigger"] == "5"
    assert config.fail_at == ("a-b", 1, 42)
    with pytest.raises(SystemExit):
        parse_args(["--output", "/o", "--topic", "a"])  # neither --bootstrap nor --log-dirs


def test_stream_offsets_and_caps():
    offsets = {("a", 0): 5, ("a", 10): 7, ("b", 1): 0}
    assert offsets_to_dict(offsets) == {"a": {"0": 5, "10": 7}, "b": {"1": 0}}
    assert offsets_from_dict(offsets_to_dict(offsets)) == offsets
    start = {("a", 0): 0, ("b", 0): 90}
    latest = {("a", 0): 300, ("b", 0): 100}
    assert cap_offsets(start, latest, 1000) == latest
    capped = cap_offsets(start, latest, 100)
    assert capped == {("a", 0): 96, ("b", 0): 93}
    assert sum(capped[tp] - start[tp] for tp in start) <= 100


def test_bulk_load_verification():
    stats = WriteStats(rows=10, bytes=100)
    for offset in range(6):
        stats.add_delivery(("t", 0), 20 + offset)
    for offset in range(4):
        stats.add_delivery(("t", 1), offset)
    assert stats.partitions == {("t", 0): (6, 20, 25), ("t", 1): (4, 0, 3)}
    before = {("t", 0): 20, ("t", 1): 0}
    assert verify(10, stats, before, {("t", 0): 26, ("t", 1): 4}) == ([], [])
    problems, _ = verify(11, stats, before, {("t", 0): 27, ("t", 1): 4})
    assert len(problems) == 2 and "t-0: end offset grew by 7, 6 records" in problems[1]
    merged = WriteStats().merge(stats).merge(stats)
    assert merged.rows == 20 and merged.partitions[("t", 1)] == (8, 0, 3)


def test_bulk_load_verification_with_transactions():
    stats = WriteStats(rows=10, bytes=100, markers={("t", 0): 1, ("t", 1): 2})
    for offset in range(6):
        stats.add_delivery(("t", 0), offset)
    for offset in range(4):
        stats.add_delivery(("t", 1), offset)
    before = {("t", 0): 0, ("t", 1): 0}
    committed = {("t", 0): 6, ("t", 1): 4}
    # Records and one commit marker per task transaction: verified without reading.
    assert verify(10, stats, before, {("t", 0): 7, ("t", 1): 6}, committed.__getitem__) == ([], [])
    # A retried task's aborted attempt took offsets: what read_committed sees settles it.
    problems, notes = verify(10, stats, before, {("t", 0): 12, ("t", 1): 6}, committed.__getitem__)
    assert problems == [] and "t-0: 5 more offsets" in notes[0]
    committed[("t", 0)] = 11
    problems, _ = verify(10, stats, before, {("t", 0): 12, ("t", 1): 6}, committed.__getitem__)
    assert "read_committed readers see 11 new records, 6 acknowledged" in problems[0]
    merged = WriteStats().merge(stats).merge(stats)
    assert merged.markers == {("t", 0): 2, ("t", 1): 4}


def test_input_format():
    assert input_format(LoadConfig("t", ["/a/x.parquet", "/b/y.parquet/"], "h:1")) == "parquet"
    assert input_format(LoadConfig("t", ["x.csv"], "h:1")) == "csv"
    assert input_format(LoadConfig("t", ["x"], "h:1", format="json")) == "json"
    with pytest.raises(OptionError):
        input_format(LoadConfig("t", ["x.parquet", "y.csv"], "h:1"))


def test_writer_columns():
    batch = pa.RecordBatch.from_pydict(
        {"value": pa.array(["é", None]), "key": pa.array([b"k", None], pa.binary()), "n": [1, 2]}
    )
    assert _bytes_column(batch, "value") == ["é".encode(), None]
    assert _bytes_column(batch, "key") == [b"k", None]
    assert _bytes_column(batch, "headers") == [None, None]
    with pytest.raises(WriteError, match="binary or string"):
        _bytes_column(batch, "n")
    check_columns(["value", "topic"], None)
    check_columns(["value"], "t")
    with pytest.raises(WriteError, match="value column"):
        check_columns(["key", "topic"], None)
    with pytest.raises(WriteError, match="topic"):
        check_columns(["value"], None)
