"""The export and bulk_load jobs in local Spark against a broker process: ranges, group progress,
a task failing half way and the rerun (every record exactly once), offline export, and
bulk_load then export round-tripping a data set byte for byte through both command lines."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from spark_jobs.bulk_load import LoadConfig, run_bulk_load
from spark_jobs.export import TEMPORARY, ExportConfig, committed_ranges, run_export
from tests.harness import REPO, unique_topic
from tests.spark.helpers import SPARK_MARKS, TIMEOUT_S, create_topic, produce

pytestmark = SPARK_MARKS

T0 = 1_700_000_000_000


def records(count: int) -> list[dict]:
    return [
        {
            "key": b"user-%d" % (i % 23),
            "value": b"event-%d:" % i + bytes(range(i % 256))[: i % 50],
            "timestamp": T0 + i,
            **({"headers": [("source", b"test"), ("seq", b"%d" % i)]} if i % 2 else {}),
        }
        for i in range(count)
    ]


def exported(output: Path) -> dict[tuple[str, int, int], tuple]:
    """(topic, partition, offset) -> (key, value, timestamp ms, headers) from every committed
    file, asserting no offset is in two files and each file holds only its range."""
    rows = {}
    for (topic, partition), ranges in committed_ranges(str(output)).items():
        for start, end in ranges:
            path = output / f"topic={topic}" / f"partition={partition}" / f"{start:020d}-{end:020d}.parquet"
            table = pq.read_table(path, partitioning=None)
            for row in table.to_pylist():
                assert start <= row["offset"] < end
                assert (row["topic"], row["partition"]) == (topic, partition)
                key = (topic, partition, row["offset"])
                assert key not in rows, f"{key} exported twice"
                rows[key] = (
                    row["key"],
                    row["value"],
                    int(row["timestamp"].timestamp() * 1000),
                    [(h["key"], h["value"]) for h in row["headers"]],
                )
    return rows


def expected(topic: str, delivered: list[dict]) -> dict:
    return {
        (topic, d["partition"], d["offset"]): (d["key"], d["value"], d["timestamp"], list(d.get("headers", [])))
        for d in delivered
    }


def group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    result = futures[group].result(TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def export_config(broker, topic: str, output: Path, **kwargs) -> ExportConfig:
    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, "includeHeaders": "true"}
    return ExportConfig(str(output), options, progress_interval_s=0.5, **kwargs)


def test_export_by_ranges_with_group_progress_then_only_new_data(spark, spark_broker, tmp_path):
    topic = create_topic(spark_broker.bootstrap, unique_topic("export"), 3)
    delivered = produce(spark_broker.bootstrap, topic, records(900))
    output = tmp_path / "out"
    group = unique_topic("export-group")
    summary = run_export(spark, export_config(spark_broker, topic, output, max_records_per_range=100, group_id=group))
    assert summary.complete and summary.failed is None, summary.report()
    assert summary.rows == 900
    assert exported(output) == expected(topic, delivered)
    ends = {(topic, p): 1 + max(d["offset"] for d in delivered if d["partition"] == p) for p in range(3)}
    for (t, p), ranges in committed_ranges(str(output)).items():
        assert ranges[0][0] == 0 and ranges[-1][1] == ends[(t, p)]
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous
        assert all(end - start <= 100 for start, end in ranges)
    assert summary.exported_to == ends
    assert group_offsets(spark_broker.bootstrap, group) == ends
    assert "rows" in summary.report() and f"{topic}-0" in summary.report()
    # Nothing new: nothing to do. New records: only they are exported.
    again = run_export(spark, export_config(spark_broker, topic, output, group_id=group))
    assert again.planned == [] and again.complete
    more = produce(spark_broker.bootstrap, topic, records(150))
    third = run_export(spark, export_config(spark_broker, topic, output, group_id=group))
    assert third.complete and third.rows == 150
    assert all(r.start == ends[(r.topic, r.partition)] for r in third.planned)
    assert exported(output) == expected(topic, delivered + more)
    assert sum(group_offsets(spark_broker.bootstrap, group).values()) == 1050


def test_a_task_failing_half_way_then_a_rerun_exports_every_record_once(spark, spark_broker, tmp_path):
    topic = create_topic(spark_broker.bootstrap, unique_topic("export-fail"), 2)
    delivered = produce(spark_broker.bootstrap, topic, records(1200))
    output = tmp_path / "out"
    group = unique_topic("export-fail-group")
    end1 = 1 + max(d["offset"] for d in delivered if d["partition"] == 1)
    fail_at = (topic, 1, end1 // 2)  # in the middle of partition 1
    config = export_config(spark_broker, topic, output, max_records_per_range=150, group_id=group, fail_at=fail_at)
    failed = run_export(spark, config)
    assert failed.failed is not None and "injected failure" in failed.failed
    assert not failed.complete
    done = committed_ranges(str(output))
    failing_range = next(r for r in failed.planned if r.tp == (topic, 1) and r.start <= end1 // 2 < r.end)
    assert (failing_range.start, failing_range.end) not in done.get((topic, 1), [])
    # What was committed is exactly what the files say; the group shows the contiguous part.
    partial = exported(output)
    assert partial.items() <= expected(topic, delivered).items()
    offsets = group_offsets(spark_broker.bootstrap, group)
    assert offsets == failed.exported_to
    assert offsets[(topic, 1)] <= failing_range.start
    # The rerun fills the holes only.
    config.fail_at = None
    rerun = run_export(spark, config)
    assert rerun.complete, rerun.report()
    assert (failing_range.start, failing_range.end) in [(r.start, r.end) for r in rerun.planned]
    assert not any((r.start, r.end) in done.get(r.tp, []) for r in rerun.planned)
    assert exported(output) == expected(topic, delivered)
    assert os.listdir(output / TEMPORARY) == []
    ends = {(topic, p): 1 + max(d["offset"] for d in delivered if d["partition"] == p) for p in range(2)}
    assert group_offsets(spark_broker.bootstrap, group) == ends
    # Spark reads the output back, with the topic and partition columns.
    df = spark.read.parquet(str(output))
    assert df.count() == 1200
    assert df.select("topic", "partition", "offset").distinct().count() == 1200


def test_export_offline_from_log_dirs(spark, spark_broker, tmp_path):
    topic = create_topic(spark_broker.bootstrap, unique_topic("export-offline"), 2)
    delivered = produce(spark_broker.bootstrap, topic, records(400), **{"compression.type": "zstd"})
    output = tmp_path / "out"
    options = {"logDirs": str(spark_broker.data_dir), "subscribe": topic, "includeHeaders": "true"}
    summary = run_export(spark, ExportConfig(str(output), options, max_records_per_range=120, group_id=None))
    assert summary.complete, summary.report()
    assert exported(output) == expected(topic, delivered)


def test_bulk_load_json_and_csv(spark, spark_broker, tmp_path):
    lines = [{"id": i % 7, "name": f"n{i}", "score": i * 1.5} for i in range(300)]
    (tmp_path / "in.json").write_text("\n".join(json.dumps(line) for line in lines))
    topic = unique_topic("load-json")
    config = LoadConfig(topic, [str(tmp_path / "in.json")], spark_broker.bootstrap, key_column="id", partitions=3)
    summary = run_bulk_load(spark, config)
    assert summary.verified, summary.report()
    assert summary.input_rows == 300 and summary.stats.acked == 300
    assert sum(summary.after.values()) == 300 + sum(summary.stats.markers.values())  # commit markers
    df = spark.read.format("logway").option("kafka.bootstrap.servers", spark_broker.bootstrap).option(
        "subscribe", topic
    ).load()
    loaded = [(bytes(r["key"]), json.loads(r["value"]), r["partition"]) for r in df.collect()]
    assert sorted((k, v["name"]) for k, v, _ in loaded) == sorted((str(x["id"]).encode(), x["name"]) for x in lines)
    partitions_of_key = {}
    for key, _, partition in loaded:
        partitions_of_key.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in partitions_of_key.values())  # a key lives in one partition
    csv = tmp_path / "in.csv"
    csv.write_text("id,text\n" + "".join(f"{i},line {i}\n" for i in range(50)))
    topic = unique_topic("load-csv")
    summary = run_bulk_load(
        spark, LoadConfig(topic, [str(csv)], spark_broker.bootstrap, key_column="id", value_column="text", partitions=2)
    )
    assert summary.verified and summary.stats.acked == 50, summary.report()


def _run(module: str, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        [sys.executable, "-m", module, *args, "--master", "local[2]"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_bulk_load_then_export_round_trip_byte_for_byte(spark_broker, tmp_path):
    count = 3000
    keys = [f"customer-{i % 97}" for i in range(count)]
    payloads = [bytes((i * 7 + j) % 256 for j in range(i % 300)) for i in range(count)]  # every byte value
    headers = [[{"key": "n", "value": b"%d" % i}, {"key": "empty", "value": None}] if i % 5 else [] for i in range(count)]
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    table = pa.table(
        {"id": keys, "payload": pa.array(payloads, pa.binary()), "headers": pa.array(headers, header_type)}
    )
    source = tmp_path / "dataset.parquet"
    pq.write_table(table, source)
    topic = unique_topic("round-trip")
    load = _run(
        "spark_jobs.bulk_load",
        ["--bootstrap", spark_broker.bootstrap, "--topic", topic, "--input", str(source),
         "--key-column", "id", "--value-column", "payload", "--headers-column", "headers", "--partitions", "4"],
    )
    assert load.returncode == 0, load.stdout + load.stderr[-5000:]
    assert "verified" in load.stdout and f"{count} records written" in load.stdout, load.stdout
    output = tmp_path / "exported"
    export = _run(
        "spark_jobs.export",
        ["--bootstrap", spark_broker.bootstrap, "--topic", topic, "--output", str(output),
         "--max-records-per-range", "500"],
    )
    assert export.returncode == 0, export.stdout + export.stderr[-5000:]
    assert f"{count} rows" in export.stdout, export.stdout
    rows = exported(output)
    got = sorted((k, v, h) for k, v, _, h in rows.values())
    want = sorted(
        (k.encode(), p, [(h["key"], h["value"]) for h in hs]) for k, p, hs in zip(keys, payloads, headers)
    )
    assert got == want
    partitions_of_key = {}
    for (_, partition, _), (key, _, _, _) in rows.items():
        partitions_of_key.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in partitions_of_key.values())
    assert group_offsets(spark_broker.bootstrap, "logway-export").get((topic, 0), 0) > 0
