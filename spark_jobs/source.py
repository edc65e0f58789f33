"""The "logway" Spark data source (pyspark.sql.datasource, pyspark >= 4).

    import spark_jobs
    spark_jobs.register(spark)
    df = (spark.read.format("logway")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")
          .load())
    df.write.format("logway").option("kafka.bootstrap.servers", ...).option("topic", "copy").save()

Options and schema are those of Spark's Kafka source (spark_jobs.options, spark_jobs.rows).

Batch reads: `partitions()` runs once per query on the driver side: it resolves the offsets and
plans one InputPartition per offset range (spark_jobs.planning), so the offsets a query reads
are fixed when it starts. Each task reads its range online through the partition leader, with
logDirs from the segment files, or with rsm.config.url from a segment of the tiered store
(spark_jobs.reading, spark_jobs.remote), and hands Spark Arrow batches.

Streams (spark.readStream.format("logway")): offsets are JSON like Spark's Kafka source,
{"topic": {"0": 42}}. Each micro-batch reads from the previous end to the latest offsets,
capped by maxOffsetsPerTrigger (shared out by how far behind each partition is); partitions that
appear later start at their earliest offset. Trigger.AvailableNow reads up to the offsets
latest at its start. Spark's checkpoint keeps the offsets, so nothing is committed to logway.

Writes: spark_jobs.writer (one transactional producer per task: exactly once per task for
read_committed readers, except for an attempt lost after it committed).
"""

import uuid
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

from spark_jobs import reading
from spark_jobs.options import (
    EARLIEST,
    TP,
    OptionError,
    parse_read_options,
    parse_write_options,
)
from spark_jobs.planning import OffsetRange, plan_ranges, split_ranges
from spark_jobs.rows import arrow_schema, spark_schema
from spark_jobs.writer import WriteStats, abort_tasks, check_columns, write_batches

try:  # pyspark 4.2 and later
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older pyspark: no admission control

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

    ReadMaxRows = None  # type: ignore[assignment,misc]


class RangePartition(InputPartition):
    """One Spark task's work: an offset range of one topic-partition."""

    def __init__(self, offsets: OffsetRange) -> None:
        super().__init__(str(offsets))
        self.offsets = offsets


class LogwayDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "logway"

    def schema(self):
        return spark_schema(_include_headers(self.options))

    def reader(self, schema) -> "LogwayBatchReader":
        return LogwayBatchReader(self.options, schema)

    def streamReader(self, schema) -> "LogwayStreamReader":
        return LogwayStreamReader(self.options, schema)

    def writer(self, schema, overwrite: bool) -> "LogwayWriter":
        if overwrite:
            raise OptionError("a topic cannot be overwritten: write with mode('append')")
        return LogwayWriter(self.options, schema)


def _include_headers(options) -> bool:
    return str(options.get("includeHeaders", "false")).strip().lower() == "true"


class LogwayBatchReader(DataSourceReader):
    def __init__(self, options, schema) -> None:
        self.options = parse_read_options(dict(options))
        self.arrow_schema = arrow_schema(schema)

    def partitions(self) -> list[RangePartition]:
        return [RangePartition(r) for r in reading.plan(self.options)]

    def read(self, partition: InputPartition):
        # Spark reads one InputPartition(None) when the plan is empty (nothing to read).
        if not isinstance(partition, RangePartition):
            return iter(())
        return reading.arrow_batches(self.options, partition.offsets, self.arrow_schema)


def offsets_to_dict(offsets: dict[TP, int]) -> dict[str, dict[str, int]]:
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = offset
    return nested


def offsets_from_dict(nested: dict | None) -> dict[TP, int]:
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in (nested or {}).items()
        for partition, offset in partitions.items()
    }


def cap_offsets(start: dict[TP, int], latest: dict[TP, int], max_offsets: int) -> dict[TP, int]:
    """The end offsets of a micro-batch reading at most `max_offsets` offsets, shared out in
    proportion to how far behind each partition is (at least one offset for each behind)."""
    lag = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(lag.values())
    if total <= max_offsets:
        return dict(latest)
    ends = {}
    for tp, end in latest.items():
        share = max(1, lag[tp] * max_offsets // total) if lag[tp] else 0
        ends[tp] = min(end, start.get(tp, end) + share)
    return ends


class LogwayStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options, schema) -> None:
        self.options = parse_read_options(dict(options), streaming=True)
        self.arrow_schema = arrow_schema(schema)
        self._target: dict[TP, int] | None = None  # Trigger.AvailableNow stops here

    def _lookup(self):
        return reading.lookup_for(self.options)

    def initialOffset(self) -> dict:
        lookup = self._lookup()
        tps = reading.partitions_of(self.options, lookup)
        return offsets_to_dict(reading.resolve_starts(self.options, self.options.starting, tps, lookup))

    def _latest(self, start: dict[TP, int]) -> dict[TP, int]:
        lookup = self._lookup()
        tps = reading.partitions_of(self.options, lookup)
        latest = lookup.latest(tps)
        new = [tp for tp in tps if tp not in start]
        start.update(lookup.earliest(new))
        return latest

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest({})

    def getDefaultReadLimit(self):
        if self.options.max_offsets_per_trigger and ReadMaxRows is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return super().getDefaultReadLimit()

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        begin = offsets_from_dict(start)
        latest = self._target if self._target is not None else self._latest(begin)
        latest = {tp: max(end, begin.get(tp, end)) for tp, end in latest.items()}
        max_rows = getattr(limit, "max_rows", None)
        if max_rows is None and limit is None:
            max_rows = self.options.max_offsets_per_trigger
        if max_rows:
            latest = cap_offsets(begin, latest, max_rows)
        return offsets_to_dict(latest)

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begin, finish = offsets_from_dict(start), offsets_from_dict(end)
        if not finish:
            return []
        lookup = self._lookup()
        tps = sorted(finish)
        earliest = lookup.earliest(tps)
        starts = {tp: begin.get(tp, earliest[tp]) for tp in tps}
        starts = {tp: (earliest[tp] if offset == EARLIEST else offset) for tp, offset in starts.items()}
        ranges = plan_ranges(
            starts, finish, earliest, finish, fail_on_data_loss=self.options.fail_on_data_loss
        )
        ranges = split_ranges(
            reading.remote_pieces(self.options, ranges),
            self.options.min_partitions,
            self.options.max_records_per_partition,
        )
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition):
        if not isinstance(partition, RangePartition):
            return iter(())
        return reading.arrow_batches(self.options, partition.offsets, self.arrow_schema)

    def commit(self, end: dict) -> None:
        pass


class WriteCommit(WriterCommitMessage):
    def __init__(self, stats: WriteStats) -> None:
        self.stats = stats


class LogwayWriter(DataSourceArrowWriter):
    """Made once per write on the driver and pickled into every task, so `job_id` is the same
    for every task and attempt of this write, and new for the next write: it names the tasks'
    transactional ids (spark_jobs.writer)."""

    def __init__(self, options, schema) -> None:
        self.options = parse_write_options(dict(options))
        check_columns(schema.fieldNames(), self.options.topic)
        self.job_id = uuid.uuid4().hex

    def write(self, iterator) -> WriteCommit:
        return WriteCommit(write_batches(self.options, iterator, self.job_id))

    def commit(self, messages) -> None:
        pass

    def abort(self, messages) -> None:
        # The tasks that committed stay committed: each task's transaction is its own (see
        # spark_jobs.writer). Spark lists the messages by partition id, None for a failed task.
        abort_tasks(
            self.options, self.job_id, [i for i, message in enumerate(messages) if message is None]
        )
