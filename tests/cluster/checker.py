"""What the fault tests check, Jepsen style: a history of writes as the producer saw them, the
topic as a reader sees it afterwards, and the replicas' files.

A write is acknowledged (the broker answered with an offset), failed (the broker or the client
gave up: it may or may not be in the log), or unknown (no answer before the workload ended). The
verdict, for a topic written only by the workload:

- lost: acknowledged writes missing from the log, or found at another offset than the one
  acknowledged: with acks=all this must never happen;
- duplicated: values present more than once (expected without idempotence after retries);
- unexpected: values nobody wrote (corruption);
- reordered: a partition whose records are not in the order one producer sent them (a single
  producer with max.in.flight 1 or idempotence keeps its order per partition).

Replica agreement is checked on the partition directories of every replica: the batches below
the smallest log end offset of the replicas are the same bytes on each (Kafka's followers append
the leader's batches as they are, so replicas are byte-for-byte identical, not just equal in
content); the partition leader epoch field is part of those bytes.
"""

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from protocol.record_batch import iter_batches
from protocol.records import iter_records


@dataclass
class History:
    """Every value one workload wrote to a topic, and what became of it."""

    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> (partition, offset)
    failed: dict[bytes, str] = field(default_factory=dict)  # value -> error
    sent: list[bytes] = field(default_factory=list)  # in send order

    @property
    def unknown(self) -> set[bytes]:
        return set(self.sent) - self.acked.keys() - self.failed.keys()


@dataclass
class Verdict:
    lost: dict[bytes, tuple[int, int]]
    duplicated: dict[bytes, int]
    unexpected: list[bytes]
    reordered: dict[int, tuple[bytes, bytes]]  # partition -> (value, value read after it but sent before)

    @property
    def valid(self) -> bool:
        return not (self.lost or self.unexpected or self.reordered)

    def __str__(self) -> str:
        return (
            f"lost {len(self.lost)} {_sample(self.lost)}, duplicated {len(self.duplicated)} "
            f"{_sample(self.duplicated)}, unexpected {len(self.unexpected)} "
            f"{self.unexpected[:3]}, reordered {self.reordered}"
        )


def check(history: History, read: Mapping[int, list[tuple[int, bytes]]]) -> Verdict:
    """`read`: partition -> the (offset, value) pairs a reader found, in offset order."""
    found_at = {(partition, offset): value for partition, records in read.items() for offset, value in records}
    counts = Counter(value for records in read.values() for _, value in records)
    lost = {
        value: where for value, where in history.acked.items() if found_at.get(where) != value
    }
    written = set(history.sent)
    send_order = {value: position for position, value in enumerate(history.sent)}
    return Verdict(
        lost=lost,
        duplicated={value: n for value, n in counts.items() if n > 1},
        unexpected=[value for value in counts if value not in written],
        reordered={
            partition: pair
            for partition, records in read.items()
            if (pair := _first_out_of_order([value for _, value in records], send_order))
        },
    )


def _first_out_of_order(values: list[bytes], send_order: Mapping[bytes, int]) -> tuple[bytes, bytes] | None:
    """The first (value, later value) pair whose later value was sent before the first one.
    A retried duplicate repeats an earlier value: order is judged on first sightings."""
    seen: set[bytes] = set()
    latest = None
    for value in values:
        if value in seen or value not in send_order:
            continue
        seen.add(value)
        if latest is not None and send_order[value] < send_order[latest]:
            return latest, value
        latest = value
    return None


def partition_batches(partition_dir: str) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of every whole batch in a partition directory's segments, in order.
    Meant for logs at rest (brokers stopped or quiet): a torn tail ends the list."""
    segments = sorted(name for name in os.listdir(partition_dir) if name.endswith(".log"))
    batches = []
    for name in segments:
        with open(os.path.join(partition_dir, name), "rb") as f:
            data = f.read()
        batches += [(header.base_offset, data[pos : pos + header.size]) for pos, header in iter_batches(data)]
    return batches


def replicas_agree(partition_dirs: Iterable[str]) -> str | None:
    """None when the replicas' batches are identical below the smallest of their log ends;
    otherwise where the first difference is."""
    logs = {directory: partition_batches(directory) for directory in partition_dirs}
    common = min((len(batches) for batches in logs.values()), default=0)
    (first_dir, first), *others = logs.items()
    for directory, batches in others:
        for index in range(common):
            if batches[index] != first[index]:
                return (
                    f"{directory} differs from {first_dir} at batch {index} "
                    f"(base offsets {batches[index][0]} and {first[index][0]})"
                )
    return None


def values_in(partition_dir: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every data record of a partition directory (control batches skipped)."""
    return [
        (record.offset, record.value)
        for _, batch in partition_batches(partition_dir)
        if not _is_control(batch)
        for record in iter_records(batch)
    ]


def control_batch_offsets(partition_dir: str) -> list[int]:
    """The base offsets of the control batches (transaction markers) of a partition directory."""
    return [offset for offset, batch in partition_batches(partition_dir) if _is_control(batch)]


def _is_control(batch: bytes) -> bool:
    return next(iter_batches(batch))[1].is_control


def _sample(items: Mapping) -> list:
    return list(items.items())[:3]
