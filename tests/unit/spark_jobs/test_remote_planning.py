"""Planning of a tiered partition's read: the offsets the store holds in one piece per remote
segment, the rest left to the brokers, and read_committed's aborted transactions."""

import uuid

from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.planning import (
    OffsetRange,
    StoredLog,
    StoredSegment,
    cut_at_remote_segments,
    split_ranges,
)
from storage.remote.metadata import RemoteSegmentMetadata, SegmentState, TopicIdPartition
from storage.txn_index import AbortedTxn

TIP = TopicIdPartition(uuid.uuid4(), "t", 0)
TP = ("t", 0)


def segment(start: int, end: int, *aborted: AbortedTxn) -> StoredSegment:
    metadata = RemoteSegmentMetadata(
        TIP, uuid.uuid4(), start, end, 1, 0, 0, ((0, start),), 4096, SegmentState.COPY_SEGMENT_FINISHED
    )
    return StoredSegment(metadata, tuple(aborted))


def stored(*segments: StoredSegment, end: int | None = None) -> dict:
    return {TP: StoredLog(segments, segments[-1].metadata.end_offset + 1 if end is None else end)}


def spans(pieces):
    return [(p.start, p.end, None if p.remote is None else p.remote.segment.start_offset) for p in pieces]


def test_the_store_s_offsets_are_read_one_segment_per_task_and_the_tail_from_the_brokers():
    pieces = cut_at_remote_segments(
        [OffsetRange("t", 0, 0, 250)], stored(segment(0, 99), segment(100, 179)), read_committed=False
    )
    assert spans(pieces) == [(0, 100, 0), (100, 180, 100), (180, 250, None)]


def test_a_range_starting_inside_a_segment_reads_from_there():
    pieces = cut_at_remote_segments(
        [OffsetRange("t", 0, 150, 170)], stored(segment(0, 99), segment(100, 179)), read_committed=False
    )
    assert spans(pieces) == [(150, 170, 100)]


def test_partitions_without_a_remote_part_are_read_from_the_brokers_as_before():
    ranges = [OffsetRange("u", 0, 0, 10)]
    assert cut_at_remote_segments(ranges, stored(segment(0, 99)), read_committed=False) == ranges


def test_a_gap_between_remote_segments_is_left_to_the_brokers_not_skipped():
    pieces = cut_at_remote_segments(
        [OffsetRange("t", 0, 0, 300)], stored(segment(0, 99), segment(200, 249)), read_committed=False
    )
    assert spans(pieces) == [(0, 100, 0), (100, 200, None), (200, 250, 200), (250, 300, None)]


def test_read_committed_leaves_transactions_open_at_the_store_s_end_to_the_brokers():
    # A transaction began at 150 and its marker is not in the store: whether it was aborted is
    # known only to the brokers, so the store is read only below 150.
    pieces = cut_at_remote_segments(
        [OffsetRange("t", 0, 0, 250)], stored(segment(0, 99), segment(100, 179), end=150), read_committed=True
    )
    assert spans(pieces) == [(0, 100, 0), (100, 150, 100), (150, 250, None)]


def test_read_committed_pieces_carry_the_aborted_transactions_of_later_segments_indexes():
    # Aborted at 90..120 with its marker (and so its index entry) in the second segment; a
    # later abort, 130..140, concerns only the second piece.
    early = AbortedTxn(7, 90, 120, 122)
    late = AbortedTxn(8, 130, 140, 142)
    pieces = cut_at_remote_segments(
        [OffsetRange("t", 0, 0, 180)], stored(segment(0, 99), segment(100, 179, early, late)), read_committed=True
    )
    assert [p.remote.aborted for p in pieces] == [(early,), (early, late)]


def test_read_uncommitted_pieces_carry_no_aborted_transactions():
    pieces = cut_at_remote_segments(
        [OffsetRange("t", 0, 0, 100)], stored(segment(0, 99, AbortedTxn(7, 5, 6, 7))), read_committed=False
    )
    assert pieces[0].remote.aborted == ()


def test_splitting_for_parallelism_keeps_each_piece_s_segment():
    pieces = cut_at_remote_segments([OffsetRange("t", 0, 0, 100)], stored(segment(0, 99)), read_committed=False)
    split = split_ranges(pieces, max_records=30)
    assert [(p.start, p.end) for p in split] == [(0, 25), (25, 50), (50, 75), (75, 100)]
    assert {p.remote.segment.segment_id for p in split} == {pieces[0].remote.segment.segment_id}


@given(
    lengths=st.lists(st.integers(1, 50), min_size=1, max_size=6),
    start=st.integers(0, 400),
    size=st.integers(0, 400),
)
def test_the_pieces_cover_the_ranges_exactly_and_remote_ones_lie_in_their_segment(lengths, start, size):
    segments, base = [], 0
    for length in lengths:
        segments.append(segment(base, base + length - 1))
        base += length
    r = OffsetRange("t", 0, start, start + size)
    pieces = cut_at_remote_segments([r], stored(*segments), read_committed=False) if size else []
    covered = [offset for p in pieces for offset in range(p.start, p.end)]
    assert covered == list(range(r.start, r.end))
    for p in pieces:
        if p.remote is not None:
            assert p.remote.segment.start_offset <= p.start < p.end <= p.remote.segment.end_offset + 1
        else:
            assert p.start >= base or all(not s.metadata.start_offset <= p.start <= s.metadata.end_offset for s in segments)
