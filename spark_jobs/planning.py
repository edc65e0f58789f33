"""From options to offset ranges: which offsets of which partitions each Spark task reads.

1. The subscription names the partitions (options.Subscription.select, given the topics).
2. The starting and ending specs are resolved against the log through an `OffsetLookup`: the
   broker's ListOffsets online (spark_jobs.online), the segment files offline
   (spark_jobs.offline). Both sides look up in bulk, one call per kind of question.
3. `plan_ranges` checks each partition's [start, end) against the log start (retention may have
   deleted the start: failOnDataLoss) and the log end, and drops empty ranges.
   With rsm.config.url, `cut_at_remote_segments` then cuts them at the tiered store's segments
   (spark_jobs.remote gives it the segments): the store's offsets are read from the store.
4. `split_ranges` cuts big ranges by offset (minPartitions, maxRecordsPerPartition), so one hot
   partition is read by several tasks at once. Offsets are split, not records: in a compacted
   topic a piece may hold fewer records than its length, or none.

A range is [start, end): `end` is exclusive, like Kafka's "next offset" and Spark's untilOffset.
Pure Python, unit-tested without Spark or a broker.
"""

import logging
from collections.abc import Iterable, Mapping
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from spark_jobs.options import EARLIEST, LATEST, TP, OffsetSpec, OptionError
from storage.remote.metadata import RemoteSegmentMetadata
from storage.txn_index import AbortedTxn, collect_aborted

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Offsets a read was asked for that the log no longer holds (failOnDataLoss=true)."""


@dataclass(frozen=True)
class RemoteSource:
    """Where a range is read from the tiered store (spark_jobs.remote): one remote segment, and
    for read_committed the aborted transactions with records in the range (complete: the
    planner made sure the store's transaction indexes list them all)."""

    segment: RemoteSegmentMetadata
    aborted: tuple[AbortedTxn, ...] = ()


@dataclass(frozen=True, order=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int
    # Set: read from this remote segment; None: from the brokers (or the log dirs, offline).
    remote: RemoteSource | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def tp(self) -> TP:
        return (self.topic, self.partition)

    def __str__(self) -> str:
        where = "" if self.remote is None else f" from remote segment {self.remote.segment.segment_id}"
        return f"{self.topic}-{self.partition}[{self.start},{self.end}){where}"


class OffsetLookup(Protocol):
    """What planning asks of a log, online or offline."""

    def topics(self) -> dict[str, int]:
        """Every topic and its partition count."""

    def earliest(self, tps: Iterable[TP]) -> dict[TP, int]:
        """The log start offset of each partition."""

    def latest(self, tps: Iterable[TP]) -> dict[TP, int]:
        """The end offset readers may reach: the high watermark (read_committed: the last
        stable offset)."""

    def for_timestamps(self, timestamps: Mapping[TP, int]) -> dict[TP, int | None]:
        """The first offset stamped at or after each timestamp; None where no record is."""


def resolve(
    spec: OffsetSpec,
    tps: list[TP],
    lookup: OffsetLookup,
    *,
    is_start: bool,
    timestamp_strategy: str = "error",
) -> dict[TP, int]:
    """The offset `spec` names for each partition of `tps`.

    JSON specs must not name partitions outside `tps`; the partitions they leave out start at
    the earliest offset and end at the latest. A timestamp no record reaches resolves to the
    latest offset when ending, and when starting fails the read unless `timestamp_strategy` is
    "latest" (Spark's startingOffsetsByTimestampStrategy).
    """
    if spec.kind == "earliest":
        return lookup.earliest(tps)
    if spec.kind == "latest":
        return lookup.latest(tps)
    wanted = set(tps)
    if spec.kind == "timestamp":
        timestamps = {tp: spec.timestamp for tp in tps}
    elif spec.kind == "timestamps":
        timestamps = dict(spec.timestamps)
        _check_known(timestamps, wanted, "offsets by timestamp")
    else:
        return _resolve_offsets(dict(spec.offsets), tps, wanted, lookup, is_start)
    found = lookup.for_timestamps(timestamps) if timestamps else {}
    resolved: dict[TP, int] = {}
    left_out, unmatched = [], []
    for tp in tps:
        if tp not in timestamps:
            left_out.append(tp)
        elif found.get(tp) is None:
            unmatched.append(tp)
        else:
            resolved[tp] = found[tp]  # type: ignore[assignment]
    if unmatched and is_start and timestamp_strategy != "latest":
        names = ", ".join(f"{t}-{p}" for t, p in unmatched)
        raise OptionError(
            f"no record at or after the starting timestamp in {names} "
            "(startingOffsetsByTimestampStrategy=latest starts those at the latest offset)"
        )
    to_latest = unmatched + ([] if is_start else left_out)
    if is_start and left_out:
        resolved.update(lookup.earliest(left_out))
    if to_latest:
        resolved.update(lookup.latest(to_latest))
    return {tp: resolved[tp] for tp in tps}


def _check_known(given: Mapping[TP, int], wanted: set[TP], what: str) -> None:
    unknown = sorted(set(given) - wanted)
    if unknown:
        names = ", ".join(f"{t}-{p}" for t, p in unknown)
        raise OptionError(f"{what} name partitions that are not read: {names}")


def _resolve_offsets(
    offsets: dict[TP, int], tps: list[TP], wanted: set[TP], lookup: OffsetLookup, is_start: bool
) -> dict[TP, int]:
    _check_known(offsets, wanted, "starting offsets" if is_start else "ending offsets")
    default = EARLIEST if is_start else LATEST
    specs = {tp: offsets.get(tp, default) for tp in tps}
    earliest_of = [tp for tp, v in specs.items() if v == EARLIEST]
    latest_of = [tp for tp, v in specs.items() if v == LATEST]
    resolved = {tp: v for tp, v in specs.items() if v >= 0}
    if earliest_of:
        resolved.update(lookup.earliest(earliest_of))
    if latest_of:
        resolved.update(lookup.latest(latest_of))
    return {tp: resolved[tp] for tp in tps}


def plan_ranges(
    starts: Mapping[TP, int],
    ends: Mapping[TP, int],
    earliest: Mapping[TP, int],
    latest: Mapping[TP, int],
    *,
    fail_on_data_loss: bool,
) -> list[OffsetRange]:
    """One range per partition, checked against the log: [start, end), empty ones dropped.

    A start below the log start offset is data loss (retention or DeleteRecords removed what was
    asked for): DataLossError, or with `fail_on_data_loss` false a warning and a start at the log
    start. An end beyond the log end, or before the start, is an error in the options.
    """
    ranges = []
    for tp in sorted(starts):
        start, end = starts[tp], ends[tp]
        if end > latest[tp]:
            raise OptionError(
                f"ending offset {end} of {tp[0]}-{tp[1]} is beyond its end offset {latest[tp]}"
            )
        if start > end:
            raise OptionError(
                f"starting offset {start} of {tp[0]}-{tp[1]} is after its ending offset {end}"
            )
        kept = clip_to_log_start(OffsetRange(tp[0], tp[1], start, end), earliest[tp], fail_on_data_loss)
        if kept is not None:
            ranges.append(kept)
    return ranges


def clip_to_log_start(
    r: OffsetRange, log_start: int, fail_on_data_loss: bool
) -> OffsetRange | None:
    """`r` if the log still holds its start; None if empty. Offsets below `log_start` were
    deleted (retention, DeleteRecords): DataLossError, or without `fail_on_data_loss` a warning
    and what is left of the range."""
    if r.start < log_start and r.start < r.end:
        message = (
            f"offsets {r.start}..{min(r.end, log_start) - 1} of {r.topic}-{r.partition} are gone: "
            f"the log starts at {log_start} (deleted by retention or DeleteRecords)"
        )
        if fail_on_data_loss:
            raise DataLossError(message + "; set failOnDataLoss=false to skip them")
        log.warning("%s; skipping them (failOnDataLoss=false)", message)
        r = OffsetRange(r.topic, r.partition, min(log_start, r.end), r.end)
    return r if r.start < r.end else None


def split_ranges(
    ranges: list[OffsetRange],
    min_partitions: int | None = None,
    max_records: int | None = None,
) -> list[OffsetRange]:
    """Cut ranges into pieces of contiguous offsets, in order, covering exactly the same offsets.

    minPartitions: when there are fewer ranges than that, each range is cut into its share of
    minPartitions, proportional to its size and rounded up (so the pieces number at least
    minPartitions unless ranges run out of offsets), so big partitions get several tasks and
    small ones stay whole. maxRecordsPerPartition: then any
    piece longer than that is cut into equal pieces no longer than it.
    """
    pieces = list(ranges)
    if min_partitions and len(pieces) < min_partitions:
        total = sum(r.size for r in pieces)
        if total:
            pieces = [
                piece
                for r in pieces
                for piece in _cut(r, max(1, -(-r.size * min_partitions // total)))
            ]
    if max_records:
        pieces = [piece for r in pieces for piece in _cut(r, -(-r.size // max_records))]
    return pieces


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """`r` in `parts` contiguous pieces whose sizes differ by one at most."""
    parts = max(1, min(parts, r.size))
    bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
    return [replace(r, start=a, end=b) for a, b in zip(bounds, bounds[1:])]


@dataclass(frozen=True)
class StoredSegment:
    """A remote segment of a partition, as planning sees it: its metadata and, for read_committed,
    the entries of its transaction index."""

    metadata: RemoteSegmentMetadata
    txn_entries: tuple[AbortedTxn, ...] = ()


@dataclass(frozen=True)
class StoredLog:
    """The remote part of a partition: its finished segments by start offset, and `end`, the
    offset below which the store alone decides every record (for read_uncommitted the store's
    end; for read_committed no later than the first offset of a transaction still open at the
    store's end, whose outcome only the brokers know)."""

    segments: tuple[StoredSegment, ...]
    end: int


def cut_at_remote_segments(
    ranges: list[OffsetRange], stored: Mapping[TP, StoredLog], read_committed: bool
) -> list[OffsetRange]:
    """The offsets of `ranges`, in order, in pieces: one per remote segment for the offsets the
    store holds (below the StoredLog's end), read from the store; the rest left to the brokers.
    For read_committed each remote piece carries the aborted transactions that the transaction
    indexes of its segment and the later ones list for it."""
    pieces: list[OffsetRange] = []
    for r in ranges:
        remote_log = stored.get(r.tp)
        position = r.start
        if remote_log is not None:
            for index, segment in enumerate(remote_log.segments):
                meta = segment.metadata
                end = min(r.end, meta.end_offset + 1, remote_log.end)
                if end <= position:
                    continue
                if meta.start_offset >= end:
                    break
                if meta.start_offset > position:
                    pieces.append(replace(r, start=position, end=meta.start_offset, remote=None))
                    position = meta.start_offset
                aborted: tuple[AbortedTxn, ...] = ()
                if read_committed:
                    aborted = _aborted_in(remote_log.segments[index:], position, end)
                pieces.append(replace(r, start=position, end=end, remote=RemoteSource(meta, aborted)))
                position = end
        if position < r.end:
            pieces.append(replace(r, start=position, remote=None))
    return pieces


def _aborted_in(segments: Sequence[StoredSegment], start: int, end: int) -> tuple[AbortedTxn, ...]:
    """Aborted transactions with records in [start, end) that the segments' indexes list, from
    the segment holding `start` on, up to an entry that makes the search complete (as the
    broker's fetch searches; the store's end bounds it otherwise: see StoredLog.end)."""
    found: list[AbortedTxn] = []
    for segment in segments:
        more, complete = collect_aborted(list(segment.txn_entries), start, end)
        found += more
        if complete:
            break
    return tuple(found)


def subtract(want: OffsetRange, done: Iterable[tuple[int, int]]) -> list[OffsetRange]:
    """The parts of `want` that none of the [start, end) intervals of `done` covers, in order.

    What the export job has left to do in a partition after a failed run."""
    holes = []
    position = want.start
    for start, end in sorted(done):
        if end <= position:
            continue
        if start >= want.end:
            break
        if start > position:
            holes.append(OffsetRange(want.topic, want.partition, position, start))
        position = max(position, end)
    if position < want.end:
        holes.append(OffsetRange(want.topic, want.partition, position, want.end))
    return holes


def contiguous_end(start: int, done: Iterable[tuple[int, int]]) -> int:
    """How far from `start` the intervals of `done` cover every offset without a hole."""
    position = start
    for begin, end in sorted(done):
        if begin > position:
            break
        position = max(position, end)
    return position
