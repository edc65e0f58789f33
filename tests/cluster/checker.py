"""What the fault tests check, Jepsen style: a history of writes as the producer saw them, the
topic as a reader sees it afterwards, and the replicas' files.

A write is acknowledged (the broker answered with an offset), failed (the broker or the client
gave up: it may or may not be in the log), or unknown (no answer before the workload ended). The
verdict, for a topic written only by the workload:

- lost: acknowledged writes missing from the log: with acks=all this must never happen;
- misplaced: acknowledged writes found, but at another offset than the one acknowledged;
- offset-less: acknowledged writes whose acknowledgement carried no offset (-1, or librdkafka's
  -1001). The broker always answers a success with an offset; these are librdkafka's implicit
  acknowledgements: a request of the producer failed with an uncertain outcome (the broker's
  REQUEST_TIMED_OUT, a timeout of its own) and a later one of the same partition succeeded, so
  the earlier one's messages were written, where is not known. They are reported, and count as
  lost when the value is not in the log (and as duplicated when it is there twice);
- duplicated: values present more than once (expected without idempotence after retries; with
  idempotence a failure, which `Verdict.exactly_once` adds);
- unexpected: values nobody wrote (corruption);
- reordered: a partition whose records are not in the order one producer sent them (a single
  producer with max.in.flight 1 or idempotence keeps its order per partition).

Transactional producers are judged by `check_transactions` on what a read_committed reader got:
their committed values as acknowledged writes (exactly once), nothing of an aborted transaction,
and a transaction whose outcome the producer never learnt either whole or absent.

Replica agreement is checked on the partition directories of every replica: the batches below
the smallest log end offset of the replicas are the same bytes on each (Kafka's followers append
the leader's batches as they are, so replicas are byte-for-byte identical, not just equal in
content); the partition leader epoch field is part of those bytes.
"""

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from protocol.record_batch import iter_batches
from protocol.records import control_batch_marker, iter_records
from storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, read_entries


@dataclass
class History:
    """Every value one workload wrote to a topic, and what became of it."""

    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> (partition, offset)
    failed: dict[bytes, str] = field(default_factory=dict)  # value -> error
    sent: list[bytes] = field(default_factory=list)  # in send order

    @property
    def unknown(self) -> set[bytes]:
        return set(self.sent) - self.acked.keys() - self.failed.keys()


Where = tuple[int, int]  # (partition, offset)
Read = Mapping[int, list[tuple[int, bytes]]]  # partition -> (offset, value) in offset order


@dataclass
class Verdict:
    lost: dict[bytes, Where]  # value -> where it was acknowledged
    duplicated: dict[bytes, list[Where]]  # value -> everywhere it was read
    unexpected: list[bytes]
    reordered: dict[int, tuple[bytes, bytes]]  # partition -> (value, value read after it but sent before)
    misplaced: dict[bytes, tuple[Where, list[Where]]] = field(default_factory=dict)  # acked -> read at
    offsetless: dict[bytes, tuple[Where, list[Where]]] = field(default_factory=dict)  # acked -> read at
    found: Mapping[bytes, list[Where]] = field(default_factory=dict, repr=False)  # value -> where read

    @property
    def valid(self) -> bool:
        return not (self.lost or self.misplaced or self.unexpected or self.reordered)

    @property
    def exactly_once(self) -> bool:
        """Valid, and no value twice: what an idempotent or transactional producer promises."""
        return self.valid and not self.duplicated

    def __str__(self) -> str:
        reordered = {
            p: f"{a!r}@{self._offsets(a, p)} before {b!r}@{self._offsets(b, p)}"
            for p, (a, b) in list(self.reordered.items())[:3]
        }
        return (
            f"lost {len(self.lost)} {_sample(self.lost)}, duplicated {len(self.duplicated)} "
            f"{_sample(self.duplicated)}, offset-less acks {len(self.offsetless)} {_sample(self.offsetless)}, "
            f"misplaced {len(self.misplaced)} {_sample(self.misplaced)}, unexpected {len(self.unexpected)} "
            f"{self.unexpected[:3]}, reordered {len(self.reordered)} partitions {reordered}"
        )

    def _offsets(self, value: bytes, partition: int) -> list[int]:
        return [o for p, o in self.found.get(value, []) if p == partition]


def check(history: History, read: Read) -> Verdict:
    """`read`: partition -> the (offset, value) pairs a reader found, in offset order."""
    found: dict[bytes, list[Where]] = {}
    for partition, records in read.items():
        for offset, value in records:
            found.setdefault(value, []).append((partition, offset))
    lost, misplaced, offsetless = {}, {}, {}
    for value, where in history.acked.items():
        if value not in found:
            lost[value] = where
        elif where[1] < 0:
            offsetless[value] = (where, found[value])
        elif where not in found[value]:
            misplaced[value] = (where, found[value])
    written = set(history.sent)
    send_order = {value: position for position, value in enumerate(history.sent)}
    return Verdict(
        lost=lost,
        duplicated={value: places for value, places in found.items() if len(places) > 1},
        unexpected=[value for value in found if value not in written],
        reordered={
            partition: pair
            for partition, records in read.items()
            if (pair := _first_out_of_order([value for _, value in records], send_order))
        },
        misplaced=misplaced,
        offsetless=offsetless,
        found=found,
    )


def by_producer(read: Read, prefix: str) -> dict[int, list[tuple[int, bytes]]]:
    """The records of `read` whose values one producer wrote (`<prefix>-...`)."""
    return {p: [(o, v) for o, v in records if v.startswith(f"{prefix}-".encode())] for p, records in read.items()}


def offsets_acked_twice(histories: Iterable[History]) -> dict[Where, set[bytes]]:
    """Offsets acknowledged to more than one value (offset-less acknowledgements aside)."""
    holders: dict[Where, set[bytes]] = {}
    for history in histories:
        for value, where in history.acked.items():
            if where[1] >= 0:
                holders.setdefault(where, set()).add(value)
    return {where: values for where, values in holders.items() if len(values) > 1}


def offsets_going_backwards(history: History) -> list[tuple[bytes, Where, bytes, Where]]:
    """(value, where, later value, where) for each acknowledged value sent later but placed lower
    in its partition (offset-less acknowledgements aside)."""
    last: dict[int, tuple[bytes, int]] = {}
    backwards = []
    for value in history.sent:
        if value not in history.acked or history.acked[value][1] < 0:
            continue
        partition, offset = history.acked[value]
        if partition in last and offset <= last[partition][1]:
            earlier, earlier_offset = last[partition]
            backwards.append((earlier, (partition, earlier_offset), value, (partition, offset)))
        last[partition] = (value, offset)
    return backwards


@dataclass
class Transactions:
    """What one transactional producer wrote: every value as an idempotent write (`history`: the
    delivery reports), and each transaction's values by the outcome the producer learnt."""

    history: History = field(default_factory=History)
    committed: list[list[bytes]] = field(default_factory=list)
    aborted: list[list[bytes]] = field(default_factory=list)
    unknown: list[list[bytes]] = field(default_factory=list)  # the commit's answer never came
    # Commits the client answered although some of the transaction's sends had failed
    # (kafka-python 3.0 goes on after a batch expired or an epoch bump, where Java's producer
    # must abort): its values may each be there once, or not.
    contradicted: list[list[bytes]] = field(default_factory=list)


@dataclass
class TransactionVerdict:
    values: Verdict  # the committed values as acknowledged writes
    aborted_read: dict[bytes, list[Where]]
    partial: list[tuple[int, int, list[Where]]]  # an unknown transaction read in part: (read, of, where)

    @property
    def valid(self) -> bool:
        return self.values.exactly_once and not self.aborted_read and not self.partial

    def __str__(self) -> str:
        return (
            f"{self.values}; aborted values read {len(self.aborted_read)} {_sample(self.aborted_read)}, "
            f"transactions of unknown outcome read in part {len(self.partial)} {self.partial[:3]}"
        )


def check_transactions(transactions: Transactions, read_committed: Read) -> TransactionVerdict:
    """`read_committed`: the producer's records as a read_committed reader found them."""
    history = transactions.history
    committed = {value for values in transactions.committed for value in values}
    # A committed value's delivery report came before the commit: its offset must hold it. One
    # without any report is offset-less.
    as_acked = History(acked={value: history.acked.get(value, (-1, -1)) for value in committed},
                       failed=history.failed, sent=history.sent)
    values = check(as_acked, read_committed)
    partial = []
    for txn in transactions.unknown:
        read = [value for value in txn if value in values.found]
        if read and len(read) != len(txn):
            partial.append((len(read), len(txn), [values.found[value][0] for value in read[:3]]))
    return TransactionVerdict(
        values=values,
        aborted_read={v: values.found[v] for txn in transactions.aborted for v in txn if v in values.found},
        partial=partial,
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


def producer_fields(partition_dir: str, offsets: Iterable[int]) -> dict[int, tuple[int, int, int]]:
    """offset -> (producer id, producer epoch, sequence) of the records at `offsets` in a
    partition directory: which producer session wrote each copy of a duplicate."""
    wanted, fields = set(offsets), {}
    for base, batch in partition_batches(partition_dir):
        header = next(iter_batches(batch))[1]
        for offset in wanted.intersection(range(base, base + header.last_offset_delta + 1)):
            sequence = header.base_sequence + offset - base if header.base_sequence >= 0 else -1
            fields[offset] = (header.producer_id, header.producer_epoch, sequence)
    return fields


def last_sequences(partition_dir: str) -> dict[tuple[int, int], int]:
    """(producer id, producer epoch) -> the last sequence number written under it in a partition
    directory: where each producer session's sequence stopped."""
    last = {}
    for _, batch in partition_batches(partition_dir):
        header = next(iter_batches(batch))[1]
        if header.producer_id >= 0 and header.base_sequence >= 0 and not header.is_control:
            last[header.producer_id, header.producer_epoch] = header.last_sequence
    return last


def producer_batches(partition_dir: str, producer_id: int, from_offset: int) -> list[str]:
    """A producer id's batches from `from_offset` on in a partition directory, in order:
    "<offset> data e<epoch>" or "<offset> COMMIT|ABORT e<epoch> c<coordinator epoch>" (what
    a transaction left in one partition)."""
    found = []
    for base, batch in partition_batches(partition_dir):
        header = next(iter_batches(batch))[1]
        if header.producer_id != producer_id or base + header.last_offset_delta < from_offset:
            continue
        if header.is_control:
            record_type, coordinator_epoch = control_batch_marker(batch)
            found.append(f"{base} {record_type.name} e{header.producer_epoch} c{coordinator_epoch}")
        else:
            found.append(f"{base} data e{header.producer_epoch}")
    return found


def aborted_entries(partition_dir: str, producer_id: int) -> list[AbortedTxn]:
    """The transaction index entries of a producer id in a partition directory."""
    return [
        entry
        for name in sorted(os.listdir(partition_dir))
        if name.endswith(TXN_INDEX_SUFFIX)
        for entry in read_entries(os.path.join(partition_dir, name))
        if entry.producer_id == producer_id
    ]


def _is_control(batch: bytes) -> bool:
    return next(iter_batches(batch))[1].is_control


def _sample(items: Mapping) -> list:
    return list(items.items())[:3]
