"""Export topic partitions to Parquet, exactly once per offset, resumable.

    python -m spark_jobs.export --bootstrap 127.0.0.1:9092 --topic events --output /data/events
    spark-submit spark_jobs/export.py --bootstrap ... --topic events --output /data/events

Output layout (readable as spark.read.parquet(output), with topic and partition columns):

    <output>/_logway_export.json            the manifest: where each partition's export starts
    <output>/_temporary/                    files being written (readers skip names with _)
    <output>/topic=<topic>/partition=<n>/<start>-<end>.parquet
                                            the records of offsets [start, end), 20 digits each

How a run goes:

1. Plan (driver). The manifest fixes each partition's first offset the first time the partition
   is exported (--starting-offsets, default earliest); later runs keep it, so retention moving
   the log start cannot hide an offset a failed run left out. The end is --ending-offsets
   (default latest) at this run's start. The committed files give the ranges already done; what
   is left of [first offset, end) is cut into ranges of at most --max-records-per-range offsets.
2. One Spark task per range reads it (online through the leader, offline with --log-dirs, or,
   with --option rsm.config.url=<the brokers' store>, the offsets a tiered store holds straight
   from its segments, one task per segment at least: spark_jobs.reading, spark_jobs.remote), writes one Parquet file under _temporary, fsyncs it, and renames it to
   the name that states its range. The rename is the commit: a range's records and the range
   they cover appear together or not at all, and a task that dies half way leaves only a
   temporary file. A retried or speculative attempt renames the same records onto the same
   name.
3. A rerun after a failure plans only the holes: every offset ends up in exactly one file, no
   duplicates, no gaps. Compaction gaps and control records inside a range just mean fewer rows;
   a range with no records left still gets its (empty) file, which records that it is done.
4. Progress: a driver thread commits, per partition, the end of the contiguous run of committed
   ranges to the consumer group --group-id (default logway-export), every few seconds and at the
   end, so lag tools (kafka-consumer-groups, kcat -G) show how far the export is. The files are
   the truth; the group only reports them. --no-group-commit turns it off.

One job per output directory at a time (a lock file enforces it on the driver's machine); the
output must be a filesystem whose rename is atomic (local disks, NFS, HDFS mounts) and that the
driver and every executor see at the same path. A range start retention deleted fails the run
(--no-fail-on-data-loss: warn and export what is left).

The summary gives rows, bytes, per-partition ranges and the time taken. Exit status: 0 when the
export is complete up to the planned end, 1 when tasks failed (rerun to resume), 2 for bad
arguments.
"""

import argparse
import fcntl
import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from spark_jobs.faults import InjectedFailure, task_attempt
from spark_jobs.cli import key_values, run_job
from spark_jobs.options import TP, OptionError, ReadOptions, parse_read_options
from spark_jobs.planning import (
    DataLossError,
    OffsetRange,
    contiguous_end,
    resolve,
    split_ranges,
    subtract,
)

log = logging.getLogger(__name__)

MANIFEST = "_logway_export.json"
LOCK = "_logway_export.lock"
TEMPORARY = "_temporary"
DEFAULT_GROUP = "logway-export"
DEFAULT_MAX_RECORDS_PER_RANGE = 1_000_000
_MANIFEST_VERSION = 1


# ----------------------------------------------------------------------------- the output


def range_path(output: str, r: OffsetRange) -> str:
    return os.path.join(
        output, f"topic={r.topic}", f"partition={r.partition}", f"{r.start:020d}-{r.end:020d}.parquet"
    )


def committed_ranges(output: str) -> dict[TP, list[tuple[int, int]]]:
    """The [start, end) of every committed file, by partition."""
    done: dict[TP, list[tuple[int, int]]] = {}
    try:
        topic_dirs = os.listdir(output)
    except FileNotFoundError:
        return done
    for topic_dir in topic_dirs:
        if not topic_dir.startswith("topic="):
            continue
        topic = topic_dir[len("topic=") :]
        for partition_dir in os.listdir(os.path.join(output, topic_dir)):
            if not partition_dir.startswith("partition="):
                continue
            try:
                partition = int(partition_dir[len("partition=") :])
            except ValueError:
                continue
            for name in os.listdir(os.path.join(output, topic_dir, partition_dir)):
                bounds = _parse_range_name(name)
                if bounds is not None:
                    done.setdefault((topic, partition), []).append(bounds)
    for ranges in done.values():
        ranges.sort()
    return done


def _parse_range_name(name: str) -> tuple[int, int] | None:
    if not name.endswith(".parquet"):
        return None
    start, sep, end = name[: -len(".parquet")].partition("-")
    if not sep or not start.isdigit() or not end.isdigit() or int(start) >= int(end):
        return None
    return int(start), int(end)


def read_manifest(output: str) -> dict[TP, int]:
    try:
        with open(os.path.join(output, MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        return {}
    if manifest.get("version") != _MANIFEST_VERSION:
        raise OptionError(f"{output}/{MANIFEST} has unknown version {manifest.get('version')!r}")
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in manifest["starts"].items()
        for partition, offset in partitions.items()
    }


def write_manifest(output: str, starts: dict[TP, int]) -> None:
    os.makedirs(output, exist_ok=True)
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(starts.items()):
        nested.setdefault(topic, {})[str(partition)] = offset
    _atomic_write(
        os.path.join(output, MANIFEST),
        json.dumps({"version": _MANIFEST_VERSION, "starts": nested}, indent=1).encode(),
    )


def _atomic_write(path: str, data: bytes) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    _fsync_dir(os.path.dirname(path))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ planning


@dataclass
class ExportPlan:
    starts: dict[TP, int]
    ends: dict[TP, int]
    done: dict[TP, list[tuple[int, int]]]
    todo: list[OffsetRange]


def plan_export(
    options: ReadOptions, output: str, lookup, max_records_per_range: int | None
) -> ExportPlan:
    """What is left to export, given the manifest and the committed files (see the module
    docstring). Writes the manifest when new partitions join."""
    from spark_jobs import reading

    tps = reading.partitions_of(options, lookup)
    starts = read_manifest(output)
    new = [tp for tp in tps if tp not in starts]
    if new:
        starts.update(reading.resolve_starts(options, options.starting, new, lookup))
        write_manifest(output, starts)
    ends = resolve(options.ending, tps, lookup, is_start=False) if tps else {}
    latest = lookup.latest(tps) if tps else {}
    earliest = lookup.earliest(tps) if tps else {}
    done = committed_ranges(output)
    todo: list[OffsetRange] = []
    moved = False
    for tp in tps:
        if ends[tp] > latest[tp]:
            raise OptionError(f"ending offset {ends[tp]} of {tp[0]}-{tp[1]} is beyond its end {latest[tp]}")
        if starts[tp] < earliest[tp]:
            # Offsets not exported yet that the log no longer holds are lost for good: fail, or
            # warn once and move the partition's start past them.
            gone = OffsetRange(tp[0], tp[1], starts[tp], max(starts[tp], min(earliest[tp], ends[tp])))
            lost = subtract(gone, done.get(tp, []))
            if lost:
                message = (
                    f"{', '.join(map(str, lost))} were never exported and the log now starts at "
                    f"{earliest[tp]} (retention or DeleteRecords deleted them)"
                )
                if options.fail_on_data_loss:
                    raise DataLossError(message + "; rerun with --no-fail-on-data-loss to skip them")
                log.warning("%s; skipping them for good", message)
            starts[tp] = earliest[tp]
            moved = True
        if ends[tp] <= starts[tp]:
            continue
        want = OffsetRange(tp[0], tp[1], starts[tp], ends[tp])
        todo += subtract(want, done.get(tp, []))
    if moved:
        write_manifest(output, starts)
    todo = split_ranges(reading.remote_pieces(options, todo), options.min_partitions, max_records_per_range)
    return ExportPlan({tp: starts[tp] for tp in tps}, ends, done, todo)


# --------------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class RangeTask:
    options: ReadOptions
    offsets: OffsetRange
    output: str
    compression: str
    fail_at: tuple[str, int, int] | None = None  # (topic, partition, offset): --inject-failure
    fail_attempts: int = 1_000_000


def export_range(task: RangeTask) -> dict:
    """Read one range and commit it as one Parquet file (runs in a Spark task)."""
    import pyarrow.parquet as pq

    from spark_jobs import reading
    from spark_jobs.rows import RowBuilder, arrow_schema, spark_schema

    r = task.offsets
    schema = arrow_schema(spark_schema(task.options.include_headers))
    final = range_path(task.output, r)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = os.path.join(task.output, TEMPORARY, f"{r.topic}-{r.partition}-{r.start}-{r.end}.{uuid.uuid4().hex}")
    builder = RowBuilder(schema, r.topic, r.partition)
    first = last = None
    with pq.ParquetWriter(tmp, schema, compression=task.compression) as writer:
        for batch in reading.arrow_batches(task.options, r, schema, builder):
            writer.write_batch(batch)
            offsets = batch.column("offset")
            first = offsets[0].as_py() if first is None else first
            last = offsets[-1].as_py()
            _maybe_fail(task, last)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.rename(tmp, final)
    _fsync_dir(os.path.dirname(final))
    return {
        "topic": r.topic,
        "partition": r.partition,
        "start": r.start,
        "end": r.end,
        "rows": builder.rows,
        "value_bytes": builder.value_bytes,
        "file_bytes": os.path.getsize(final),
        "first_offset": first,
        "last_offset": last,
    }


def _maybe_fail(task: RangeTask, written_up_to: int) -> None:
    if task.fail_at is None:
        return
    topic, partition, offset = task.fail_at
    r = task.offsets
    if (r.topic, r.partition) != (topic, partition) or not r.start <= offset <= written_up_to:
        return
    attempt = task_attempt()
    if attempt < task.fail_attempts:
        raise InjectedFailure(
            f"injected failure in {r} after writing offset {written_up_to} (attempt {attempt})"
        )


# ------------------------------------------------------------------------ group progress


class GroupProgress:
    """Commits each partition's contiguous exported end to a consumer group, as it moves."""

    def __init__(self, bootstrap: str, group: str, client_config: Iterable[tuple[str, str]]) -> None:
        from confluent_kafka.admin import AdminClient

        from spark_jobs.online import client_config as make_config

        self.group = group
        self._admin = AdminClient(make_config(bootstrap, client_config))
        self._committed: dict[TP, int] = {}

    def commit(self, ends: dict[TP, int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        changed = {tp: end for tp, end in ends.items() if self._committed.get(tp) != end}
        if not changed:
            return
        request = ConsumerGroupTopicPartitions(
            self.group, [TopicPartition(t, p, end) for (t, p), end in sorted(changed.items())]
        )
        try:
            for future in self._admin.alter_consumer_group_offsets([request]).values():
                result = future.result(timeout=30)
            errors = [tp for tp in result.topic_partitions if tp.error is not None]
            if errors:
                raise RuntimeError(", ".join(f"{tp.topic}-{tp.partition}: {tp.error}" for tp in errors))
        except Exception as exc:  # progress reporting must not fail the export
            log.warning("could not commit progress to group %s: %s", self.group, exc)
            return
        self._committed.update(changed)


def progress_ends(output: str, starts: dict[TP, int]) -> dict[TP, int]:
    done = committed_ranges(output)
    return {tp: contiguous_end(start, done.get(tp, [])) for tp, start in starts.items()}


# ------------------------------------------------------------------------------- the job


@dataclass
class ExportConfig:
    output: str
    read_options: dict[str, str]
    max_records_per_range: int | None = DEFAULT_MAX_RECORDS_PER_RANGE
    compression: str = "snappy"
    group_id: str | None = DEFAULT_GROUP
    progress_interval_s: float = 5.0
    fail_at: tuple[str, int, int] | None = None
    fail_attempts: int = 1_000_000


@dataclass
class ExportSummary:
    planned: list[OffsetRange]
    results: list[dict] = field(default_factory=list)
    failed: str | None = None
    seconds: float = 0.0
    ends: dict[TP, int] = field(default_factory=dict)  # planned end per partition
    exported_to: dict[TP, int] = field(default_factory=dict)  # contiguous committed end

    @property
    def rows(self) -> int:
        return sum(r["rows"] for r in self.results)

    @property
    def file_bytes(self) -> int:
        return sum(r["file_bytes"] for r in self.results)

    @property
    def complete(self) -> bool:
        return self.failed is None and all(
            self.exported_to.get(tp, 0) >= end for tp, end in self.ends.items()
        )

    def report(self) -> str:
        lines = [
            f"export: {len(self.results)} of {len(self.planned)} planned ranges written, "
            f"{self.rows} rows, {self.file_bytes} bytes of Parquet "
            f"({sum(r['value_bytes'] for r in self.results)} bytes of keys and values), "
            f"{self.seconds:.1f}s"
        ]
        by_tp: dict[TP, list[dict]] = {}
        for r in self.results:
            by_tp.setdefault((r["topic"], r["partition"]), []).append(r)
        for tp in sorted(self.ends):
            written = sorted(by_tp.get(tp, []), key=lambda r: r["start"])
            ranges = ", ".join(f"[{r['start']},{r['end']})" for r in written) or "nothing new"
            rows = sum(r["rows"] for r in written)
            lines.append(
                f"  {tp[0]}-{tp[1]}: {ranges}: {rows} rows; exported up to "
                f"{self.exported_to.get(tp, '?')} of {self.ends[tp]}"
            )
        if self.failed:
            lines.append(f"FAILED: {self.failed}")
            lines.append("rerun the same command to resume: committed ranges are kept")
        elif not self.complete:
            lines.append("INCOMPLETE: some offsets were not exported (see the warnings)")
        return "\n".join(lines)


def run_export(spark, config: ExportConfig) -> ExportSummary:
    from spark_jobs import reading

    started = time.monotonic()
    output = os.path.abspath(config.output.removeprefix("file://"))
    options = parse_read_options(config.read_options)
    os.makedirs(os.path.join(output, TEMPORARY), exist_ok=True)
    with _locked(output):
        _clear_temporary(output)
        plan = plan_export(options, output, reading.lookup_for(options), config.max_records_per_range)
        summary = ExportSummary(plan.todo, ends=plan.ends)
        progress = None
        if config.group_id and options.bootstrap_servers:
            progress = GroupProgress(options.bootstrap_servers, config.group_id, options.client_config)
        stop = threading.Event()
        reporter = threading.Thread(
            target=_report_progress,
            args=(output, plan, progress, stop, config.progress_interval_s),
            daemon=True,
        )
        reporter.start()
        try:
            if plan.todo:
                tasks = [
                    RangeTask(options, r, output, config.compression, config.fail_at, config.fail_attempts)
                    for r in plan.todo
                ]
                rdd = spark.sparkContext.parallelize(tasks, len(tasks))
                spark.sparkContext.setJobDescription(f"logway export to {output}")
                summary.results = rdd.map(export_range).collect()
        except Exception as exc:
            summary.failed = _short_error(exc)
        finally:
            stop.set()
            reporter.join()
            summary.exported_to = progress_ends(output, plan.starts)
            if progress is not None:
                progress.commit(summary.exported_to)
            summary.seconds = time.monotonic() - started
    if summary.failed is None:
        summary.results.sort(key=lambda r: (r["topic"], r["partition"], r["start"]))
    else:
        # The tasks that finished committed their files; count them from the output.
        summary.results = _results_from_files(output, plan.todo)
    return summary


def _results_from_files(output: str, planned: list[OffsetRange]) -> list[dict]:
    import pyarrow.parquet as pq

    results = []
    for r in planned:
        path = range_path(output, r)
        if os.path.exists(path):
            metadata = pq.read_metadata(path)
            results.append(
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "start": r.start,
                    "end": r.end,
                    "rows": metadata.num_rows,
                    "value_bytes": 0,
                    "file_bytes": os.path.getsize(path),
                    "first_offset": None,
                    "last_offset": None,
                }
            )
    return results


def _short_error(exc: BaseException) -> str:
    """The line of a (Py4J-wrapped) task failure that says what went wrong."""
    text = str(exc)
    for marker in ("InjectedFailure:", "DataLossError:", "TransactionalDataError:", "Error:"):
        for line in text.splitlines():
            if marker in line:
                return line.strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _report_progress(output, plan: ExportPlan, progress, stop: threading.Event, interval: float) -> None:
    planned = {(r.topic, r.partition, r.start, r.end) for r in plan.todo}
    while not stop.wait(interval):
        done = committed_ranges(output)
        finished = sum(
            1 for (t, p), ranges in done.items() for (s, e) in ranges if (t, p, s, e) in planned
        )
        print(f"export: {finished}/{len(planned)} ranges committed", file=sys.stderr, flush=True)
        if progress is not None:
            progress.commit(
                {tp: contiguous_end(start, done.get(tp, [])) for tp, start in plan.starts.items()}
            )


class _locked:
    def __init__(self, output: str) -> None:
        self.path = os.path.join(output, LOCK)

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise OptionError(f"another export is writing to {os.path.dirname(self.path)}") from None
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _clear_temporary(output: str) -> None:
    """Files a failed run left half written: never committed, so never read."""
    directory = os.path.join(output, TEMPORARY)
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))


# ---------------------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m spark_jobs.export",
        description="Export topic partitions to Parquet: exactly once per offset, resumable.",
    )
    parser.add_argument("--bootstrap", help="brokers, host:port[,host:port] (kafka.bootstrap.servers)")
    parser.add_argument("--topic", action="append", default=[], help="topic to export (repeatable, or a comma list)")
    parser.add_argument("--pattern", help="export every topic whose name matches this regex")
    parser.add_argument("--output", required=True, help="output directory")
    parser.add_argument("--log-dirs", help="read segment files from these log dirs (comma list), offline")
    parser.add_argument("--starting-offsets", default="earliest", help="earliest or JSON, for partitions exported the first time")
    parser.add_argument("--ending-offsets", default="latest", help="latest or JSON")
    parser.add_argument("--max-records-per-range", type=int, default=DEFAULT_MAX_RECORDS_PER_RANGE, help="offsets per task and file at most")
    parser.add_argument("--min-partitions", type=int, help="cut ranges so there are at least this many tasks")
    parser.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted")
    parser.add_argument("--no-headers", action="store_true", help="leave the headers column out")
    parser.add_argument("--no-fail-on-data-loss", action="store_true", help="warn and go on when offsets were deleted")
    parser.add_argument("--compression", default="snappy", help="Parquet codec (snappy, zstd, gzip, none)")
    parser.add_argument("--group-id", default=DEFAULT_GROUP, help="consumer group that shows the export's progress")
    parser.add_argument("--no-group-commit", action="store_true", help="do not commit progress to a group")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="any other data source option (startingOffsetsByTimestamp, kafka.*, ...)")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    parser.add_argument("--inject-failure", metavar="TOPIC:PARTITION:OFFSET", help=argparse.SUPPRESS)
    parser.add_argument("--inject-failure-attempts", type=int, default=1_000_000, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.topic and not args.pattern:
        parser.error("give --topic or --pattern")
    if not args.bootstrap and not args.log_dirs:
        parser.error("give --bootstrap, or --log-dirs to read offline")
    return args


def config_from_args(args: argparse.Namespace) -> ExportConfig:
    options = {
        "startingOffsets": args.starting_offsets,
        "endingOffsets": args.ending_offsets,
        "includeHeaders": str(not args.no_headers).lower(),
        "failOnDataLoss": str(not args.no_fail_on_data_loss).lower(),
        "kafka.isolation.level": args.isolation_level,
    }
    if args.bootstrap:
        options["kafka.bootstrap.servers"] = args.bootstrap
    if args.log_dirs:
        options["logDirs"] = args.log_dirs
    if args.pattern:
        options["subscribePattern"] = args.pattern
    else:
        options["subscribe"] = ",".join(args.topic)
    if args.min_partitions:
        options["minPartitions"] = str(args.min_partitions)
    options.update(key_values(args.option, "--option"))
    fail_at = None
    if args.inject_failure:
        topic, partition, offset = args.inject_failure.rsplit(":", 2)
        fail_at = (topic, int(partition), int(offset))
    return ExportConfig(
        output=args.output,
        read_options=options,
        max_records_per_range=args.max_records_per_range,
        compression=args.compression,
        group_id=None if args.no_group_commit else args.group_id,
        fail_at=fail_at,
        fail_attempts=args.inject_failure_attempts,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def configure() -> ExportConfig:
        config = config_from_args(args)
        parse_read_options(config.read_options)  # fail on bad options before Spark starts
        return config

    return run_job(
        "export", args.master, configure, run_export, lambda summary: summary.complete, failures=(DataLossError,)
    )


if __name__ == "__main__":
    sys.exit(main())
