"""Load Parquet, JSON or CSV files into a topic, partitioned by a key column, counts verified.

    python -m spark_jobs.bulk_load --bootstrap 127.0.0.1:9092 --topic events \\
        --input /data/events.parquet --key-column user_id

What becomes of a row:

- key: --key-column's value (binary as it is, strings as UTF-8, anything else as its string
  form), or no key. Records are placed by the producer's murmur2 partitioner, as a Java client
  would place them, so every record of a key lands in one partition; the rows are first
  repartitioned by the key column, so each key goes through a single Spark task, in file order.
- value: --value-column (binary or string), or else the whole row as a JSON object.
- headers: --headers-column, an array<struct<key string, value binary>> (an export's headers
  column is one), if given.

The topic is created when missing (--partitions, else the broker's num.partitions). The job
counts the input rows first, then loads them with one producer per Spark task (spark_jobs.writer,
the same code as df.write.format("logway")), printing progress every few seconds from the growth
of the topic's end offsets. Each task writes in one transaction (--no-transactions: an
idempotent producer, at least once across task attempts), so a retried task's failed attempt
is aborted and read_committed readers see every row once.

At the end it verifies that every input row was acknowledged, and that each partition's end
offset grew by exactly the records acknowledged there plus one commit marker per task
transaction that wrote there. A partition that grew by more (a retried task's aborted attempt,
or another producer writing meanwhile) is counted again with a read_committed read of the new
offsets: it verifies when that count is the records acknowledged there, and the report notes
the offsets aborted attempts took. Without transactions, a retried task's duplicates make the
check fail.

The summary gives rows, bytes, each partition's offset range and the time taken. Exit status 0
when verified, 1 when not, 2 for bad arguments.
"""

import argparse
import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from spark_jobs.cli import key_values, run_job
from spark_jobs.options import TP, OptionError, WriteOptions, client_config
from spark_jobs.writer import WriteStats

log = logging.getLogger(__name__)

_FORMATS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv"}


@dataclass
class LoadConfig:
    topic: str
    inputs: list[str]
    bootstrap: str
    format: str | None = None
    key_column: str | None = None
    value_column: str | None = None
    headers_column: str | None = None
    partitions: int | None = None
    replication_factor: int = -1
    tasks: int | None = None
    csv_header: bool = True
    transactional: bool = True
    client_options: dict[str, str] = field(default_factory=dict)
    progress_interval_s: float = 5.0


@dataclass
class LoadSummary:
    topic: str
    input_rows: int
    stats: WriteStats
    before: dict[TP, int]
    after: dict[TP, int]
    seconds: float
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return not self.problems

    def report(self) -> str:
        lines = [
            f"bulk_load: {self.input_rows} rows read, {self.stats.acked} records written to "
            f"{self.topic}, {self.stats.bytes} bytes of keys and values, {self.seconds:.1f}s "
            f"({self.stats.acked / max(self.seconds, 1e-9):.0f} records/s)"
        ]
        for tp in sorted(self.after):
            count, first, last = self.stats.partitions.get(tp, (0, None, None))
            span = f"offsets {first}..{last}" if count else "nothing"
            lines.append(
                f"  {tp[0]}-{tp[1]}: {count} records, {span} (end offset {self.before.get(tp, 0)}"
                f" -> {self.after[tp]})"
            )
        lines += [f"  {note}" for note in self.notes]
        if self.problems:
            lines += ["VERIFICATION FAILED:"] + [f"  {p}" for p in self.problems]
        else:
            lines.append("verified: every row acknowledged and committed once")
        return "\n".join(lines)


def input_format(config: LoadConfig) -> str:
    if config.format:
        return config.format
    for suffix, name in _FORMATS.items():
        if all(path.rstrip("/").endswith(suffix) for path in config.inputs):
            return name
    raise OptionError("cannot tell the input format from the file names: give --format")


def prepare(df, config: LoadConfig):
    """The rows as the writer takes them: key, value and headers columns."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType

    def as_bytes(name: str):
        column_type = df.schema[name].dataType
        if isinstance(column_type, BinaryType):
            return F.col(name)
        if isinstance(column_type, StringType):
            return F.encode(F.col(name), "UTF-8")
        return F.encode(F.col(name).cast("string"), "UTF-8")

    for name in (config.key_column, config.value_column, config.headers_column):
        if name is not None and name not in df.columns:
            raise OptionError(f"the input has no column {name!r} (it has {', '.join(df.columns)})")
    if config.value_column is not None:
        value = as_bytes(config.value_column)
    else:
        value = F.encode(F.to_json(F.struct(*[F.col(c) for c in df.columns])), "UTF-8")
    columns = [value.alias("value")]
    if config.key_column is not None:
        columns.append(as_bytes(config.key_column).alias("key"))
    if config.headers_column is not None:
        columns.append(F.col(config.headers_column).alias("headers"))
    return df.select(*columns)


def _admin(config: LoadConfig):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": config.bootstrap, **config.client_options})


def ensure_topic(admin, config: LoadConfig) -> int:
    """The topic's partition count, creating it first if it does not exist."""
    from confluent_kafka.admin import NewTopic

    topics = admin.list_topics(timeout=30).topics
    if config.topic in topics and topics[config.topic].error is None:
        return len(topics[config.topic].partitions)
    new = NewTopic(config.topic, config.partitions or -1, config.replication_factor)
    admin.create_topics([new])[config.topic].result(60)
    for _ in range(100):
        topic = admin.list_topics(config.topic, timeout=30).topics.get(config.topic)
        if topic is not None and topic.error is None and topic.partitions:
            return len(topic.partitions)
        time.sleep(0.1)
    raise RuntimeError(f"topic {config.topic} was created but does not show in metadata")


def end_offsets(admin, topic: str, partitions: int) -> dict[TP, int]:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    futures = admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
        request_timeout=30,
    )
    return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}


def _write_task(options: WriteOptions, job_id: str):
    def write(batches):
        import pyarrow as pa

        from spark_jobs.writer import write_batches

        stats = write_batches(options, batches, job_id)
        encoded = json.dumps(
            {
                "rows": stats.rows,
                "bytes": stats.bytes,
                "partitions": [[t, p, *v] for (t, p), v in stats.partitions.items()],
                "markers": [[t, p, count] for (t, p), count in stats.markers.items()],
            }
        )
        yield pa.RecordBatch.from_pydict({"stats": [encoded]})

    return write


def _decode_stats(rows) -> WriteStats:
    total = WriteStats()
    for row in rows:
        raw = json.loads(row["stats"])
        part = WriteStats(raw["rows"], raw["bytes"])
        part.partitions = {(t, p): (count, first, last) for t, p, count, first, last in raw["partitions"]}
        part.markers = {(t, p): count for t, p, count in raw["markers"]}
        total.merge(part)
    return total


def verify(
    input_rows: int,
    stats: WriteStats,
    before: dict[TP, int],
    after: dict[TP, int],
    committed_records: Callable[[TP], int] | None = None,
) -> tuple[list[str], list[str]]:
    """(problems, notes). `committed_records(tp)` counts what read_committed readers see in
    tp's new offsets; given for transactional loads, it settles partitions that grew by more
    than their acknowledged records and commit markers."""
    problems, notes = [], []
    if stats.rows != input_rows:
        problems.append(f"{input_rows} rows in the input, but the tasks sent {stats.rows}")
    if stats.acked != stats.rows:
        problems.append(f"{stats.rows} records sent, {stats.acked} acknowledged")
    for tp in sorted(after):
        grown = after[tp] - before.get(tp, 0)
        acked = stats.partitions.get(tp, (0, 0, 0))[0]
        markers = stats.markers.get(tp, 0)
        if grown == acked + markers:
            continue
        name = f"{tp[0]}-{tp[1]}"
        if committed_records is None or grown < acked + markers:
            problems.append(
                f"{name}: end offset grew by {grown}, {acked} records acknowledged and {markers} "
                "commit markers (another producer, or a retried task's duplicates)"
            )
            continue
        committed = committed_records(tp)
        if committed == acked:
            notes.append(
                f"{name}: {grown - acked - markers} more offsets, not visible to read_committed "
                "readers (aborted attempts of retried tasks, or another producer's aborted "
                "transactions)"
            )
        else:
            problems.append(
                f"{name}: read_committed readers see {committed} new records, {acked} acknowledged "
                "(another producer, or a committed task attempt that was retried)"
            )
    return problems, notes


def committed_counter(spark, config: LoadConfig, before: dict[TP, int], after: dict[TP, int]):
    """committed_records for verify: a read_committed read of the new offsets of a partition."""
    from spark_jobs.options import offsets_to_json

    def count(tp: TP) -> int:
        reader = spark.read.format("logway").option("kafka.bootstrap.servers", config.bootstrap)
        for key, value in config.client_options.items():
            reader = reader.option(f"kafka.{key}", value)
        return (
            reader.option("assign", json.dumps({tp[0]: [tp[1]]}))
            .option("startingOffsets", offsets_to_json({tp: before.get(tp, 0)}))
            .option("endingOffsets", offsets_to_json({tp: after[tp]}))
            .option("kafka.isolation.level", "read_committed")
            .load()
            .count()
        )

    return count


def run_bulk_load(spark, config: LoadConfig) -> LoadSummary:
    started = time.monotonic()
    fmt = input_format(config)
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", str(config.csv_header).lower())
    df = prepare(reader.load(config.inputs), config)
    admin = _admin(config)
    partitions = ensure_topic(admin, config)
    before = end_offsets(admin, config.topic, partitions)
    input_rows = df.count()
    tasks = config.tasks or max(partitions, spark.sparkContext.defaultParallelism)
    if config.key_column is not None:
        df = df.repartition(tasks, "key")
    options = WriteOptions(
        bootstrap_servers=config.bootstrap,
        topic=config.topic,
        client_config=client_config({f"kafka.{k}": v for k, v in config.client_options.items()}),
        transactional=config.transactional,
    )
    stop = threading.Event()
    reporter = threading.Thread(
        target=_report_progress,
        args=(admin, config, partitions, before, input_rows, stop, started),
        daemon=True,
    )
    reporter.start()
    try:
        spark.sparkContext.setJobDescription(f"logway bulk_load into {config.topic}")
        rows = df.mapInArrow(_write_task(options, uuid.uuid4().hex), "stats string").collect()
    finally:
        stop.set()
        reporter.join()
    stats = _decode_stats(rows)
    after = end_offsets(admin, config.topic, partitions)
    counter = committed_counter(spark, config, before, after) if config.transactional else None
    problems, notes = verify(input_rows, stats, before, after, counter)
    return LoadSummary(
        config.topic,
        input_rows,
        stats,
        before,
        after,
        time.monotonic() - started,
        problems,
        notes,
    )


def _report_progress(admin, config, partitions, before, total, stop, started) -> None:
    while not stop.wait(config.progress_interval_s):
        try:
            now = end_offsets(admin, config.topic, partitions)
        except Exception as exc:  # progress is best effort
            log.warning("progress: %s", exc)
            continue
        loaded = sum(now[tp] - before.get(tp, 0) for tp in now)
        elapsed = time.monotonic() - started
        percent = 100 * loaded / total if total else 100
        print(
            f"bulk_load: {loaded}/{total} records ({percent:.0f}%), {loaded / elapsed:.0f} records/s",
            file=sys.stderr,
            flush=True,
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m spark_jobs.bulk_load",
        description="Load Parquet/JSON/CSV files into a topic, partitioned by a key column.",
    )
    parser.add_argument("--bootstrap", required=True, help="brokers, host:port[,host:port]")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--input", action="append", required=True, help="file or directory (repeatable)")
    parser.add_argument("--format", choices=("parquet", "json", "csv"), help="default: from the file names")
    parser.add_argument("--key-column", help="column whose value is the record key")
    parser.add_argument("--value-column", help="column whose value is the record value (default: the row as JSON)")
    parser.add_argument("--headers-column", help="array<struct<key string, value binary>> column of headers")
    parser.add_argument("--partitions", type=int, help="partitions of the topic if it must be created")
    parser.add_argument("--replication-factor", type=int, default=-1)
    parser.add_argument("--tasks", type=int, help="Spark tasks writing (default: the topic's partitions, at least the default parallelism)")
    parser.add_argument("--no-csv-header", action="store_true", help="CSV files have no header line")
    parser.add_argument("--no-transactions", action="store_true", help="write with an idempotent producer: a retried task duplicates its rows")
    parser.add_argument("--producer", action="append", default=[], metavar="KEY=VALUE", help="a librdkafka producer setting (compression.type=zstd, ...)")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> LoadConfig:
    return LoadConfig(
        topic=args.topic,
        inputs=args.input,
        bootstrap=args.bootstrap,
        format=args.format,
        key_column=args.key_column,
        value_column=args.value_column,
        headers_column=args.headers_column,
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        tasks=args.tasks,
        csv_header=not args.no_csv_header,
        transactional=not args.no_transactions,
        client_options=key_values(args.producer, "--producer"),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def configure() -> LoadConfig:
        config = config_from_args(args)
        input_format(config)
        return config

    return run_job("bulk_load", args.master, configure, run_bulk_load, lambda summary: summary.verified)


if __name__ == "__main__":
    sys.exit(main())
