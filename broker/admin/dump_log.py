"""`logway-admin dump-log`: kafka-dump-log.sh, offline, over a partition's files.

    logway-admin dump-log --files /data/orders-0/00000000000000000000.log [--print-data-log]
        [--deep-iteration] [--skip-record-metadata] [--max-bytes N]
    logway-admin dump-log --files ...00000000000000000000.index [--verify-index-only | --index-sanity-check]
    logway-admin dump-log --files ...00000000000000000000.timeindex,...00000000000000000000.txnindex

By suffix, as Kafka's DumpLogSegments:
- .log: a line per batch (baseOffset lastOffset count baseSequence lastSequence producerId
  producerEpoch partitionLeaderEpoch isTransactional isControl deleteHorizonMs position
  CreateTime|LogAppendTime size magic compresscodec crc isvalid, isvalid being the CRC-32C
  check), with --deep-iteration (implied by --print-data-log) a `| offset: ...` line per record
  (keySize valueSize sequence headerKeys, endTxnMarker of control records, key and payload as
  UTF-8 with --print-data-log); offsets that do not follow each other and bytes after the last
  whole batch are reported.
- .index: each entry `offset: O position: P`, checked against the batch at that position of
  the segment (whose last offset must be O); --index-sanity-check runs the index's own check
  (storage.index, what the broker runs before it trusts an index); --verify-index-only checks
  without printing.
- .timeindex: each entry `timestamp: T offset: O`, checked against the batch's max timestamp.
- .txnindex: the aborted transactions.

Files are read with storage/ and protocol/ readers (storage.index, storage.txn_index,
protocol.record_batch, protocol.records); nothing connects to a broker. Exit status 1 when a
batch fails its CRC, an index disagrees with its segment or fails its sanity check, or a file
cannot be read. Only message format v2 batches are decoded (logway writes no other); an older
one is reported by its offset, size and magic.
"""

import argparse
import sys
from pathlib import Path

from protocol.errors import CorruptRecordError, InvalidRecordError
from protocol.record_batch import (
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_SEQUENCE,
    BatchHeader,
    TimestampType,
    crc_is_valid,
    increment_sequence,
    magic_of,
    size_of,
)
from protocol.records import control_batch_marker, iter_records
from storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from storage.txn_index import read_entries

OFFLINE = True
_TIMESTAMP_TYPES = {TimestampType.CREATE_TIME: "CreateTime", TimestampType.LOG_APPEND_TIME: "LogAppendTime"}
_INT32_MAX = 2**31 - 1


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--files", required=True, help="REQUIRED: comma separated data and index files to dump")
    parser.add_argument("--print-data-log", action="store_true", help="print the records' keys and payloads")
    parser.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    parser.add_argument("--skip-record-metadata", action="store_true", help="leave out each record's metadata")
    parser.add_argument("--verify-index-only", action="store_true", help="check the index without printing it")
    parser.add_argument("--index-sanity-check", action="store_true", help="only run the index's sanity check")
    parser.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024, help="size of the largest batch")
    parser.add_argument("--max-bytes", type=int, default=_INT32_MAX, help="read at most this many bytes of a .log")


class Report:
    """What dump-log found wrong, printed on stderr at the end as Kafka's tool does."""

    def __init__(self) -> None:
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.non_consecutive: dict[str, list[tuple[int, int]]] = {}
        self.failed = False

    def print(self, err=None) -> None:
        err = err or sys.stderr
        for name, pairs in self.index_mismatches.items():
            print(f"Mismatches in :{name}", file=err)
            for indexed, found in pairs:
                print(f"  Index offset: {indexed}, log offset: {found}", file=err)
        for name, pairs in self.time_mismatches.items():
            print(f"Found timestamp mismatch in :{name}", file=err)
            for indexed, found in pairs:
                print(f"  Index timestamp: {indexed}, log timestamp: {found}", file=err)
        for name, pairs in self.non_consecutive.items():
            print(f"Non-consecutive offsets in {name}", file=err)
            for first, second in pairs:
                print(f"  {first} is followed by {second}", file=err)

    @property
    def ok(self) -> bool:
        return not (self.failed or self.index_mismatches or self.time_mismatches)


def run_offline(args: argparse.Namespace) -> int:
    report = Report()
    deep = args.deep_iteration or args.print_data_log
    for name in [f for f in args.files.split(",") if f]:
        path = Path(name)
        print(f"Dumping {path}")
        try:
            if path.suffix == ".log":
                dump_log(path, args.print_data_log, deep, args.skip_record_metadata, args.max_bytes, report)
            elif path.suffix == ".index":
                dump_index(path, args.index_sanity_check, args.verify_index_only, args.max_message_size, report)
            elif path.suffix == ".timeindex":
                dump_time_index(path, args.index_sanity_check, args.verify_index_only, report)
            elif path.suffix == ".txnindex":
                for entry in read_entries(str(path)):
                    print(f"version: 0 producerId: {entry.producer_id} firstOffset: {entry.first_offset} "
                          f"lastOffset: {entry.last_offset} lastStableOffset: {entry.last_stable_offset}")
            else:
                print(f"Ignoring unknown file {path}", file=sys.stderr)
        except BrokenPipeError:
            raise  # the reader went away (| head): not a problem of the file
        except (OSError, CorruptIndexError, CorruptRecordError, InvalidRecordError) as exc:
            print(f"Error: {path}: {exc}", file=sys.stderr)
            report.failed = True
    report.print()
    return 0 if report.ok else 1


def _base_offset(path: Path) -> int:
    try:
        return int(path.name.split(".")[0])
    except ValueError:
        raise CorruptIndexError(f"{path.name} is not named by its base offset") from None


def _read(path: Path, limit: int = _INT32_MAX) -> bytes:
    with open(path, "rb") as file:
        return file.read(limit)


def batches(data: bytes):
    """(position, size, magic) of each whole batch of a segment's bytes, in any message format;
    stops at a partial or impossible one."""
    position = 0
    while len(data) - position >= LOG_OVERHEAD + 5:
        size = size_of(data, position)
        if size < LOG_OVERHEAD + 5 or size > len(data) - position:
            return
        yield position, size, magic_of(data, position)
        position += size


def batch_line(header: BatchHeader, position: int, valid: bool) -> str:
    horizon = f"OptionalLong[{header.base_timestamp}]" if header.has_delete_horizon else "OptionalLong.empty"
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.record_count} "
        f"baseSequence: {header.base_sequence} lastSequence: {header.last_sequence} "
        f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} isTransactional: {str(header.is_transactional).lower()} "
        f"isControl: {str(header.is_control).lower()} deleteHorizonMs: {horizon} position: {position} "
        f"{_TIMESTAMP_TYPES[header.timestamp_type]}: {header.max_timestamp} size: {header.size} magic: {header.magic} "
        f"compresscodec: {header.compression.name.lower()} crc: {header.crc} isvalid: {str(valid).lower()}"
    )


def record_lines(batch: bytes, header: BatchHeader, print_data: bool, skip_metadata: bool) -> list[tuple[int, str]]:
    """(offset, line) per record of a v2 batch, as Kafka's deep iteration prints them."""
    lines = []
    marker = control_batch_marker(batch) if header.is_control else None
    for record in iter_records(batch):
        prefix = "| "
        line = ""
        if not skip_metadata:
            delta = record.offset - header.base_offset
            sequence = NO_SEQUENCE if header.base_sequence == NO_SEQUENCE else increment_sequence(header.base_sequence, delta)
            line += (
                f"{prefix}offset: {record.offset} {_TIMESTAMP_TYPES[header.timestamp_type]}: {record.timestamp} "
                f"keySize: {_size(record.key)} valueSize: {_size(record.value)} sequence: {sequence} "
                f"headerKeys: [{','.join(h.key for h in record.headers)}]"
            )
            prefix = " "
            if marker is not None:
                line += f" endTxnMarker: {marker[0].name} coordinatorEpoch: {marker[1]}"
        if print_data and not header.is_control:
            if record.key is not None:
                line += f"{prefix}key: {_text(record.key)}"
                prefix = " "
            if record.value is not None:
                line += f" payload: {_text(record.value)}"
        lines.append((record.offset, line))
    return lines


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def dump_log(path: Path, print_data: bool, deep: bool, skip_metadata: bool, max_bytes: int, report: Report) -> None:
    print(f"Log starting offset: {_base_offset(path)}")
    data = _read(path, max_bytes)
    valid_bytes = 0
    last_offset = -1
    for position, size, magic in batches(data):
        batch = data[position:position + size]
        if magic != MAGIC_V2:
            print(f"offset: {BatchHeader.from_buffer(batch).base_offset} position: {position} size: {size} magic: {magic} "
                  "(message format v0/v1: not decoded)")
            valid_bytes += size
            continue
        header = BatchHeader.from_buffer(batch)
        valid = crc_is_valid(batch)
        report.failed = report.failed or not valid
        print(batch_line(header, position, valid))
        if deep:
            for offset, line in record_lines(batch, header, print_data, skip_metadata):
                if last_offset != -1 and offset != last_offset + 1:
                    report.non_consecutive.setdefault(str(path.resolve()), []).append((last_offset, offset))
                last_offset = offset
                print(line)
        valid_bytes += size
    trailing = len(data) - valid_bytes
    if trailing > 0 and max_bytes == _INT32_MAX:
        print(f"Found {trailing} invalid bytes at the end of {path.name}")
        report.failed = True


def _first_batch_at(data: bytes, position: int, max_size: int) -> BatchHeader | None:
    if position + LOG_OVERHEAD + 5 > len(data):
        return None
    size = size_of(data, position)
    if size > max_size or position + size > len(data) or magic_of(data, position) != MAGIC_V2:
        return None
    return BatchHeader.from_buffer(data, position)


def dump_index(path: Path, sanity_only: bool, verify_only: bool, max_message_size: int, report: Report) -> None:
    base = _base_offset(path)
    index = OffsetIndex(path, base, 0, writable=False)
    try:
        if index.entries == 0:
            print(f"{path} is empty.")
            return
        if sanity_only:
            index.sanity_check()
            print(f"{path} passed sanity check.")
            return
        data = _read(path.with_suffix(".log"))
        for n in range(index.entries):
            offset, position = index.entry(n)
            if offset == base and n > 0:
                return
            batch = _first_batch_at(data, position, max_message_size)
            found = batch.last_offset if batch is not None else -1
            if found != offset:
                report.index_mismatches.setdefault(str(path.resolve()), []).append((offset, found))
            if not verify_only:
                print(f"offset: {offset} position: {position}")
    finally:
        index.close()


def dump_time_index(path: Path, sanity_only: bool, verify_only: bool, report: Report) -> None:
    base = _base_offset(path)
    time_index = TimeIndex(path, base, 0, writable=False)
    try:
        if sanity_only:
            time_index.sanity_check()
            print(f"{path} passed sanity check.")
            return
        data = _read(path.with_suffix(".log"))
        offset_index_path = path.with_suffix(".index")
        offset_index = OffsetIndex(offset_index_path, base, 0, writable=False) if offset_index_path.exists() else None
        try:
            previous = -1
            for n in range(time_index.entries):
                timestamp, offset = time_index.entry(n)
                if offset == base and n > 0:
                    return
                start = offset_index.lookup(offset)[1] if offset_index is not None else 0
                found = next(
                    (BatchHeader.from_buffer(data, p) for p, _, magic in _batches_from(data, start)
                     if magic == MAGIC_V2 and BatchHeader.from_buffer(data, p).last_offset >= offset),
                    None,
                )
                name = str(path.resolve())
                if found is None or found.last_offset != offset:
                    report.index_mismatches.setdefault(name, []).append((offset, found.last_offset if found else -1))
                elif found.max_timestamp != timestamp:
                    report.time_mismatches.setdefault(name, []).append((timestamp, found.max_timestamp))
                if previous >= timestamp:
                    report.time_mismatches.setdefault(name, []).append((timestamp, previous))
                if not verify_only:
                    print(f"timestamp: {timestamp} offset: {offset}")
                previous = timestamp
        finally:
            if offset_index is not None:
                offset_index.close()
    finally:
        time_index.close()


def _batches_from(data: bytes, start: int):
    for position, size, magic in batches(memoryview(data)[start:]):
        yield start + position, size, magic

