"""A partition's open transactions: the first offset of each producer's ongoing transaction,
which gives the last stable offset (LSO), and the aborted transactions the abort markers
complete, which go to the segments' transaction indexes (storage.txn_index).

A transactional batch opens its producer's transaction (if none is open); a COMMIT or ABORT
control batch of that producer closes it. The LSO is the first offset of the earliest open
transaction; with none open, everything below the high watermark is stable.

Loading rebuilds this state by reading the batch headers of the whole log (and the one record
of each control batch); segments being recovered get their transaction index rebuilt on the
way.

Thread-safety: owned by the event loop, like its log (built in `Log.load`'s worker thread).
"""

from collections.abc import Iterable

from protocol.record_batch import BatchHeader
from protocol.records import ControlRecordType, control_record_type, iter_records
from storage.segment import LogSegment
from storage.txn_index import AbortedTxn


class PartitionTransactions:
    def __init__(self) -> None:
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction

    @property
    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values(), default=None)

    def on_batch(self, header: BatchHeader) -> None:
        if header.is_transactional and not header.is_control:
            self.ongoing.setdefault(header.producer_id, header.base_offset)

    def on_marker(self, producer_id: int, marker_offset: int, record_type: ControlRecordType) -> AbortedTxn | None:
        """Close the producer's transaction; the index entry when it was aborted."""
        first_offset = self.ongoing.pop(producer_id, None)
        if first_offset is None or record_type is not ControlRecordType.ABORT:
            return None
        other = self.first_unstable_offset
        return AbortedTxn(producer_id, first_offset, marker_offset, marker_offset + 1 if other is None else other)

    def replay(self, segments: Iterable[LogSegment], rebuild_from: int) -> None:
        """Replay the segments' batches; those based at or after `rebuild_from` get their
        transaction index rebuilt."""
        for segment in segments:
            rebuild = segment.base_offset >= rebuild_from
            if rebuild:
                segment.txn_index.reset()
            for location in segment.records.batches():
                header = location.header
                if not header.is_control:
                    self.on_batch(header)
                    continue
                if not header.is_transactional:
                    continue
                data = segment.records.read(location.position, location.size)
                for record in iter_records(memoryview(data)):
                    aborted = self.on_marker(header.producer_id, header.base_offset, control_record_type(record))
                    if aborted is not None and rebuild:
                        segment.txn_index.append(aborted)
