"""Remote log metadata: Kafka's record layout, the segment state machine and the replay that
rebuilds a replica's view from a compacted __remote_log_metadata."""

import uuid

import pytest

from storage.remote.metadata import (
    InvalidTransitionError,
    PartitionDeleteMetadata,
    PartitionDeleteState,
    RemoteLogMetadataCache,
    RemoteSegmentMetadata,
    SegmentState,
    TopicIdPartition,
    decode,
    encode,
)

TIP = TopicIdPartition(uuid.UUID("6f0b7c3e-1f7c-4a3e-9d39-0d1a2b3c4d5e"), "orders", 3)


def segment(start=0, end=99, state=SegmentState.COPY_SEGMENT_STARTED, segment_id=None) -> RemoteSegmentMetadata:
    return RemoteSegmentMetadata(
        TIP, segment_id or uuid.uuid4(), start, end, 1, 1_700_000_000_000, 1_700_000_000_500,
        ((0, start), (2, start + 40)), 4096, state,
    )


def test_segment_records_have_kafkas_layout():
    metadata = segment()
    value = encode(metadata)
    # api key 0 and version 0 as unsigned varints, then RemoteLogSegmentId: the topic name as a
    # compact string, the topic id, the partition, empty tagged fields, then the segment id.
    assert value[:2] == b"\x00\x00"
    assert value[2:9] == b"\x07orders"
    assert value[9:25] == TIP.topic_id.bytes
    assert value[25:29] == (3).to_bytes(4, "big")
    assert value[29] == 0
    assert value[30:46] == metadata.segment_id.bytes
    assert value[-2:] == bytes([SegmentState.COPY_SEGMENT_STARTED, 0])  # the state, then tagged fields
    assert decode(value) == metadata


def test_partition_delete_records_round_trip():
    metadata = PartitionDeleteMetadata(TIP, 2, 1_700_000_000_000, PartitionDeleteState.DELETE_PARTITION_STARTED)
    assert encode(metadata)[:2] == b"\x02\x00"
    assert decode(encode(metadata)) == metadata


def test_kafkas_update_records_are_read():
    metadata = segment()
    # A RemoteLogSegmentMetadataUpdateRecord as Kafka writes it for COPY_SEGMENT_FINISHED.
    update = b"\x01\x00" + encode(metadata)[2:47] + (5).to_bytes(4, "big") + (99).to_bytes(8, "big") + b"\x00\x01\x00"
    cache = RemoteLogMetadataCache()
    cache.replay([encode(metadata), update])
    [finished] = cache.state(TIP).copied
    assert (finished.segment_id, finished.broker_id, finished.end_offset) == (metadata.segment_id, 5, 99)


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ([SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED, SegmentState.DELETE_SEGMENT_STARTED,
          SegmentState.DELETE_SEGMENT_FINISHED], True),
        ([SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED], True),
        ([SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_STARTED], True),  # a retry
        ([SegmentState.COPY_SEGMENT_FINISHED], False),
        ([SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED], False),
        ([SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED], False),
    ],
)
def test_segment_states_follow_kafkas_transitions(path, allowed):
    cache = RemoteLogMetadataCache()
    first = segment()

    def walk():
        for state in path:
            cache.apply(first.with_state(state, 1, 0))

    if allowed:
        walk()
    else:
        with pytest.raises(InvalidTransitionError):
            walk()


def test_only_finished_segments_are_read_and_deleted_ones_leave_the_view():
    cache = RemoteLogMetadataCache()
    first, second = segment(0, 99), segment(100, 199)
    for metadata in (first, second, first.with_state(SegmentState.COPY_SEGMENT_FINISHED, 1, 0)):
        cache.apply(metadata)
    state = cache.state(TIP)
    assert state.segment_for(150) is None and state.segment_for(50).segment_id == first.segment_id
    assert state.highest_copied_offset == 99 and state.log_start_offset == 0
    cache.apply(first.with_state(SegmentState.DELETE_SEGMENT_STARTED, 1, 0))
    assert state.copied == [] and state.highest_copied_offset == 99
    cache.apply(first.with_state(SegmentState.DELETE_SEGMENT_FINISHED, 1, 0))
    assert set(state.segments) == {second.segment_id}


def test_replaying_a_compacted_topic_takes_a_segment_from_its_latest_record():
    # Compaction kept only the FINISHED record of the segment: the replay takes it.
    finished = segment(state=SegmentState.COPY_SEGMENT_FINISHED)
    cache = RemoteLogMetadataCache()
    cache.replay([None, encode(finished), b"\x09\x00garbage"])
    assert cache.state(TIP).copied == [finished]


def test_a_finished_partition_deletion_forgets_the_partition():
    cache = RemoteLogMetadataCache()
    cache.apply(segment())
    for state in PartitionDeleteState:
        cache.apply(PartitionDeleteMetadata(TIP, 1, 0, state))
    assert TIP not in cache.partitions
