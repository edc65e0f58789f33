"""Planning and reading offset ranges, online or offline: what the data source, its streaming
reader and the export job share.

`lookup_for` picks the log to ask (brokers, or segment files when logDirs is set), `plan` turns
options into offset ranges (spark_jobs.planning; with rsm.config.url the offsets in the tiered
store become ranges of remote segments: spark_jobs.remote), and `arrow_batches` reads one range
(from its remote segment, the brokers or the log dirs) into Arrow record batches through the
single record-to-row conversion (spark_jobs.rows).
"""

from collections.abc import Iterable, Iterator, Mapping

import pyarrow as pa

from spark_jobs.options import TP, OffsetSpec, ReadOptions
from spark_jobs.planning import OffsetLookup, OffsetRange, plan_ranges, resolve, split_ranges
from spark_jobs.rows import RowBuilder, build_batches


class CachedLookup:
    """An OffsetLookup that asks for each partition's earliest and latest offsets once."""

    def __init__(self, lookup: OffsetLookup) -> None:
        self._lookup = lookup
        self._earliest: dict[TP, int] = {}
        self._latest: dict[TP, int] = {}
        self._topics: dict[str, int] | None = None

    def topics(self) -> dict[str, int]:
        if self._topics is None:
            self._topics = self._lookup.topics()
        return self._topics

    def _cached(self, cache: dict[TP, int], fetch, tps: Iterable[TP]) -> dict[TP, int]:
        tps = list(tps)
        missing = [tp for tp in tps if tp not in cache]
        if missing:
            cache.update(fetch(missing))
        return {tp: cache[tp] for tp in tps}

    def earliest(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self._cached(self._earliest, self._lookup.earliest, tps)

    def latest(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self._cached(self._latest, self._lookup.latest, tps)

    def for_timestamps(self, timestamps: Mapping[TP, int]) -> dict[TP, int | None]:
        return self._lookup.for_timestamps(timestamps)


def lookup_for(options: ReadOptions) -> CachedLookup:
    if options.offline:
        from spark_jobs.offline import OfflineLog

        return CachedLookup(OfflineLog(options.log_dirs))
    from spark_jobs.online import KafkaLookup

    return CachedLookup(KafkaLookup(options))


def partitions_of(options: ReadOptions, lookup: OffsetLookup) -> list[TP]:
    return options.subscription.select(lookup.topics())


def resolve_starts(
    options: ReadOptions, spec: OffsetSpec, tps: list[TP], lookup: OffsetLookup
) -> dict[TP, int]:
    return resolve(
        spec, tps, lookup, is_start=True, timestamp_strategy=options.starting_by_timestamp_strategy
    )


def plan(options: ReadOptions, lookup: OffsetLookup | None = None) -> list[OffsetRange]:
    """The offset ranges a batch read covers, split for parallelism."""
    lookup = lookup or lookup_for(options)
    tps = partitions_of(options, lookup)
    if not tps:
        return []
    starts = resolve_starts(options, options.starting, tps, lookup)
    ends = resolve(options.ending, tps, lookup, is_start=False)
    ranges = plan_ranges(
        starts,
        ends,
        lookup.earliest(tps),
        lookup.latest(tps),
        fail_on_data_loss=options.fail_on_data_loss,
    )
    return split_ranges(
        remote_pieces(options, ranges), options.min_partitions, options.max_records_per_partition
    )


def remote_pieces(options: ReadOptions, ranges: list[OffsetRange]) -> list[OffsetRange]:
    """`ranges` cut at the tiered store's segments when rsm.config.url is set (spark_jobs.remote)."""
    if options.remote_store_url is None:
        return ranges
    from spark_jobs import remote

    return remote.plan(options, ranges)


def records(options: ReadOptions, offsets: OffsetRange) -> Iterator[tuple]:
    """The records of one range, as RowBuilder.add takes them."""
    if offsets.remote is not None:
        from spark_jobs import remote

        return remote.read_range(options, offsets)
    if options.offline:
        from spark_jobs import offline

        return offline.read_range(
            options.log_dirs, offsets, options.read_committed, options.fail_on_data_loss
        )
    from spark_jobs import online

    return online.read_range(options, offsets)


def arrow_batches(
    options: ReadOptions, offsets: OffsetRange, schema: pa.Schema, builder: RowBuilder | None = None
) -> Iterator[pa.RecordBatch]:
    builder = builder or RowBuilder(schema, offsets.topic, offsets.partition)
    return build_batches(builder, records(options, offsets))
