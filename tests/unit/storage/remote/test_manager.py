"""The remote log manager's copy / metadata / delete state machine, crashes at every step
included: a crash is an exception out of a metadata write or a store call, after which a new
manager is built from the metadata records written so far (what a restarted or new leader reads
from __remote_log_metadata) over the same store directory."""

import asyncio
import logging
import os
import time
import uuid
from dataclasses import dataclass

import pytest

from protocol.errors import ErrorCode, KafkaError
from storage.errors import OffsetMovedToTieredStorageError
from storage.log import Log
from storage.log_config import LogConfig
from storage.remote.manager import RemoteLogManager
from storage.remote.metadata import (
    PartitionDeleteMetadata,
    RemoteLogMetadataCache,
    SegmentState,
    TopicIdPartition,
    decode,
    encode,
)
from storage.remote.storage_manager import FsspecRemoteStorageManager, IndexType
from tests.unit.storage.conftest import TP, batch

TIP = TopicIdPartition(uuid.UUID(int=7), TP.topic, TP.partition)
TIERED = LogConfig(remote_storage_enable=True, segment_bytes=300, retention_ms=-1)


class Crash(Exception):
    """The process died here."""


class MemoryTopic:
    """__remote_log_metadata as a list of committed record values, optionally dying before
    the `crash_before`-th write of a record in one of `crash_states`."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.crash_state: SegmentState | None = None

    async def publish(self, metadata) -> None:
        if not isinstance(metadata, PartitionDeleteMetadata) and metadata.state is self.crash_state:
            self.crash_state = None
            raise Crash(f"before writing {metadata.state.name}")
        self.values.append(encode(metadata))

    def is_loaded(self, tip: TopicIdPartition) -> bool:
        return True


class CrashingStore(FsspecRemoteStorageManager):
    """The directory store, dying in the middle of a copy (some files written) or of a delete."""

    crash_in: str | None = None

    def copy_log_segment_data(self, metadata, files) -> None:
        if self.crash_in == "copy":
            self.crash_in = None
            self.fs.makedirs(self.partition_dir(metadata.partition), exist_ok=True)
            with self.fs.open(self._path(metadata, IndexType.OFFSET.value), "wb") as out:
                out.write(b"partial")
            raise Crash("during the copy")
        super().copy_log_segment_data(metadata, files)

    def delete_log_segment_data(self, metadata) -> None:
        if self.crash_in == "delete":
            self.crash_in = None
            raise Crash("during the delete")
        super().delete_log_segment_data(metadata)


@dataclass
class Replica:
    log: Log
    leader_epoch: int = 0
    is_leader: bool = True


def manager_over(topic: MemoryTopic, store_dir, broker_id: int = 0) -> RemoteLogManager:
    """A manager as a restarted leader has it: the metadata replayed from the topic."""
    cache = RemoteLogMetadataCache()
    cache.replay(topic.values)
    store = CrashingStore(f"file://{store_dir}")
    return RemoteLogManager(store, cache, topic, broker_id=broker_id, copier_threads=2, reader_threads=2)


def fill(log: Log, batches: int) -> None:
    for i in range(batches):
        log.append_as_leader(memoryview(batch(b"v" * 40, b"w" * 40, key=b"k%d" % i)), leader_epoch=0)
    log.high_watermark = log.log_end_offset


def run(manager: RemoteLogManager, replica: Replica) -> None:
    async def maintain() -> None:
        try:
            await manager.maintain(TIP, replica)
        finally:
            manager.shutdown()

    asyncio.run(maintain())


def store_segment_ids(store_dir) -> set[uuid.UUID]:
    partition_dir = store_dir / f"{TIP.topic}-{TIP.topic_id}" / str(TIP.partition)
    if not partition_dir.exists():
        return set()
    return {uuid.UUID(name[21:57]) for name in os.listdir(partition_dir)}


def assert_consistent(topic: MemoryTopic, store_dir, log: Log) -> list:
    """What every crash must leave once a leader has run again: the store holds exactly the
    finished segments, whole, and they and the local log cover every offset once."""
    cache = RemoteLogMetadataCache()
    cache.replay(topic.values)
    state = cache.state(TIP)
    copied = state.copied
    assert {s.segment_id for s in state.segments.values()} == {s.segment_id for s in copied}
    assert store_segment_ids(store_dir) == {s.segment_id for s in copied}
    store = FsspecRemoteStorageManager(f"file://{store_dir}")
    for segment in copied:
        assert len(store.fetch_log_segment(segment, 0, segment.size)) == segment.size
        assert store.fetch_index(segment, IndexType.OFFSET) != b"partial"
    for before, after in zip(copied, copied[1:]):
        assert after.start_offset == before.end_offset + 1
    if copied:
        assert copied[-1].end_offset + 1 >= log.local_log_start_offset
        assert copied[0].start_offset <= log.log_start_offset <= copied[0].end_offset
    else:
        assert log.log_start_offset == log.local_log_start_offset
    return copied


def test_rolled_segments_below_the_high_watermark_are_copied_once(open_log, tmp_path):
    log = open_log(TIERED)
    fill(log, 8)
    rolled = [s.base_offset for s in log.segments[:-1]]
    assert len(rolled) >= 3
    topic = MemoryTopic()
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    states = [decode(value).state for value in topic.values]
    assert states == [SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED] * len(rolled)
    copied = assert_consistent(topic, tmp_path / "store", log)
    assert [s.start_offset for s in copied] == rolled
    assert log.highest_remote_offset == log.segments[-1].base_offset - 1
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    assert len(topic.values) == 2 * len(rolled)  # nothing copied twice


class LosingTopic(MemoryTopic):
    """A cluster's metadata topic that lost what it said was read back: every record is taken
    and reported as in the cache, and the cache never gets it."""

    async def publish(self, metadata) -> bool:
        await super().publish(metadata)
        return True


def test_a_copy_the_metadata_lost_is_not_made_again_nor_counted_copied(open_log, tmp_path):
    log = open_log(TIERED)
    fill(log, 8)
    assert len(log.segments) >= 3
    topic = LosingTopic()
    manager = manager_over(topic, tmp_path / "store")

    async def maintain() -> None:
        try:  # bounded: before this was fixed the leader copied the first segment for good
            await asyncio.wait_for(manager.maintain(TIP, Replica(log)), 10)
        finally:
            manager.shutdown()

    asyncio.run(maintain())
    assert [decode(value).state for value in topic.values] == [SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED]
    assert log.highest_remote_offset < log.segments[0].base_offset


def test_segments_above_the_high_watermark_wait(open_log, tmp_path):
    log = open_log(TIERED)
    fill(log, 8)
    log.high_watermark = log.segments[1].base_offset  # only the first segment is committed
    topic = MemoryTopic()
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    assert [s.end_offset for s in assert_consistent(topic, tmp_path / "store", log)] == [log.segments[1].base_offset - 1]


def test_a_follower_copies_nothing(open_log, tmp_path):
    log = open_log(TIERED)
    fill(log, 8)
    topic = MemoryTopic()
    run(manager_over(topic, tmp_path / "store"), Replica(log, is_leader=False))
    assert topic.values == []


def test_a_copy_whose_leader_changed_meanwhile_is_left_unfinished_and_cleaned_up(open_log, tmp_path):
    log = open_log(TIERED)
    fill(log, 8)
    topic = MemoryTopic()
    replica = Replica(log)
    manager = manager_over(topic, tmp_path / "store")
    original = manager.store.copy_log_segment_data

    def copy_then_lose_leadership(metadata, files):
        original(metadata, files)
        replica.leader_epoch = 1  # a new leader was elected while the files were written

    manager.store.copy_log_segment_data = copy_then_lose_leadership
    run(manager, replica)
    assert [decode(v).state for v in topic.values] == [SegmentState.COPY_SEGMENT_STARTED]
    run(manager_over(topic, tmp_path / "store"), Replica(log, leader_epoch=1))
    assert_consistent(topic, tmp_path / "store", log)


@pytest.mark.parametrize(
    "crash",
    [
        SegmentState.COPY_SEGMENT_STARTED,
        "copy",
        SegmentState.COPY_SEGMENT_FINISHED,
        SegmentState.DELETE_SEGMENT_STARTED,
        "delete",
        SegmentState.DELETE_SEGMENT_FINISHED,
    ],
    ids=lambda crash: f"crash before {crash.name}" if isinstance(crash, SegmentState) else f"crash during the {crash}",
)
def test_a_crash_at_any_step_leaves_a_consistent_remote_log_once_a_leader_runs_again(open_log, tmp_path, crash):
    # retention.bytes makes the first run delete the oldest remote segment after copying.
    log = open_log(LogConfig(remote_storage_enable=True, segment_bytes=300, retention_ms=-1, retention_bytes=600))
    fill(log, 10)
    topic = MemoryTopic()
    manager = manager_over(topic, tmp_path / "store")
    if isinstance(crash, SegmentState):
        topic.crash_state = crash
    else:
        manager.store.crash_in = crash
    with pytest.raises(Crash):
        run(manager, Replica(log))
    for _ in range(2):  # the restarted leader: the cleanup, then the copying resumes
        run(manager_over(topic, tmp_path / "store"), Replica(log))
    copied = assert_consistent(topic, tmp_path / "store", log)
    assert copied[-1].end_offset == log.segments[-1].base_offset - 1


def test_files_in_the_store_no_metadata_knows_are_removed(open_log, tmp_path):
    log = open_log(TIERED)
    fill(log, 8)
    topic = MemoryTopic()
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    lost = decode(topic.values.pop())  # the FINISHED record of the last copy never made it
    topic.values.pop()  # nor its STARTED record
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    assert lost.segment_id not in store_segment_ids(tmp_path / "store")
    assert_consistent(topic, tmp_path / "store", log)


def test_files_of_records_kept_nowhere_else_are_kept_though_no_metadata_knows_them(open_log, tmp_path, caplog):
    # The metadata partition was truncated (a wiped broker led it): it lost finished copies whose
    # local segments local retention had deleted. Their files hold the only copy of the records.
    log, topic = copied_and_deleted_locally(open_log, tmp_path)
    stored = store_segment_ids(tmp_path / "store")
    assert stored
    topic.values.clear()
    with caplog.at_level(logging.WARNING, logger="storage.remote.manager"):
        run(manager_over(topic, tmp_path / "store"), Replica(log))
    assert store_segment_ids(tmp_path / "store") == stored
    assert topic.values == []  # nothing copied again: the local log no longer has those segments
    warned = [r.getMessage() for r in caplog.records if "keeping files" in r.getMessage()]
    assert len(warned) == len(stored), warned


def test_local_segments_go_once_copied_and_past_local_retention_and_are_read_from_the_store(open_log, tmp_path):
    log = open_log(LogConfig(remote_storage_enable=True, segment_bytes=300, retention_ms=-1, local_retention_bytes=0))
    fill(log, 8)
    log.apply_retention()
    assert log.segments[0].base_offset == 0  # nothing is copied yet: nothing goes
    topic = MemoryTopic()
    manager = manager_over(topic, tmp_path / "store")
    replica = Replica(log)

    async def copy_delete_read():
        try:
            await manager.maintain(TIP, replica)
            log.apply_retention()
            assert log.log_start_offset == 0
            assert log.local_log_start_offset == log.segments[-1].base_offset
            with pytest.raises(OffsetMovedToTieredStorageError):
                log.read(0, 10_000, log.high_watermark, True)
            offset, found = 0, []
            while offset < log.local_log_start_offset:
                _segment, data = await manager.read(TIP, offset, 10_000, True)
                found.append(data)
                offset = _last_offset(data) + 1
            return b"".join(found)
        finally:
            manager.shutdown()

    remote = asyncio.run(copy_delete_read())
    assert _offsets(remote) == list(range(log.local_log_start_offset))


def copied_and_deleted_locally(open_log, tmp_path) -> tuple[Log, MemoryTopic]:
    """A tiered log whose rolled segments are in the store only."""
    log = open_log(LogConfig(remote_storage_enable=True, segment_bytes=300, retention_ms=-1, local_retention_bytes=0))
    fill(log, 8)
    topic = MemoryTopic()
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    log.apply_retention()
    assert log.local_log_start_offset == log.segments[-1].base_offset > 3
    return log, topic


def test_total_retention_deletes_remote_segments_and_raises_the_log_start(open_log, tmp_path):
    log, topic = copied_and_deleted_locally(open_log, tmp_path)
    log.update_config(LogConfig(remote_storage_enable=True, segment_bytes=300, retention_ms=-1, retention_bytes=700))
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    copied = assert_consistent(topic, tmp_path / "store", log)
    assert log.log_start_offset == copied[0].start_offset > 0


def test_a_log_start_behind_the_remote_log_moves_up_to_it(open_log, tmp_path):
    log, topic = copied_and_deleted_locally(open_log, tmp_path)
    log.update_config(LogConfig(remote_storage_enable=True, segment_bytes=300, retention_ms=-1, retention_bytes=700))
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    remote_start = log.log_start_offset
    assert remote_start > 0
    log.log_start_offset = 0  # the checkpoint a restart found was written before the expiration
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    assert log.log_start_offset == remote_start


def test_delete_records_deletes_the_remote_segments_below(open_log, tmp_path):
    log, topic = copied_and_deleted_locally(open_log, tmp_path)
    log.delete_records_before(3)  # inside the remote log
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    copied = assert_consistent(topic, tmp_path / "store", log)
    assert copied[0].start_offset <= 3 <= copied[0].end_offset
    assert log.log_start_offset == 3


def test_a_deleted_partition_loses_its_remote_data_even_across_a_restart(open_log, tmp_path):
    log = open_log(TIERED)
    fill(log, 8)
    topic = MemoryTopic()
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    manager = manager_over(topic, tmp_path / "store")
    manager.store.crash_in = "delete"  # dies deleting the first segment
    with pytest.raises(Crash):
        asyncio.run(manager.delete_partition(TIP))
    manager.shutdown()
    assert store_segment_ids(tmp_path / "store")
    resume_deletions(manager_over(topic, tmp_path / "store"))
    assert not (tmp_path / "store" / f"{TIP.topic}-{TIP.topic_id}").exists()
    cache = RemoteLogMetadataCache()
    cache.replay(topic.values)
    assert TIP not in cache.partitions
    # Every segment's last record says it is deleted: a compacted topic forgets them all.
    last_state = {}
    for value in topic.values:
        metadata = decode(value)
        if not isinstance(metadata, PartitionDeleteMetadata):
            last_state[metadata.segment_id] = metadata.state
    assert set(last_state.values()) == {SegmentState.DELETE_SEGMENT_FINISHED}


def resume_deletions(manager: RemoteLogManager) -> None:
    async def resume():
        try:
            await manager.resume_deletions()
        finally:
            manager.shutdown()

    asyncio.run(resume())


def _offsets(data: bytes) -> list[int]:
    from protocol.records import iter_records
    from protocol.record_batch import iter_batches

    view = memoryview(data)
    return [r.offset for position, header in iter_batches(view) for r in iter_records(view[position : position + header.size])]


def _last_offset(data: bytes) -> int:
    return _offsets(data)[-1]


def test_a_partition_deletion_is_resumed_only_by_the_broker_that_began_it(open_log, tmp_path):
    # Brokers of a cluster share the metadata: another broker seeing a deletion under way must
    # leave it to the one deleting, or both would delete each segment.
    log = open_log(TIERED)
    fill(log, 8)
    topic = MemoryTopic()
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    manager = manager_over(topic, tmp_path / "store")
    manager.store.crash_in = "delete"
    with pytest.raises(Crash):
        asyncio.run(manager.delete_partition(TIP))
    manager.shutdown()
    written = len(topic.values)

    resume_deletions(manager_over(topic, tmp_path / "store", broker_id=1))
    assert len(topic.values) == written and store_segment_ids(tmp_path / "store")
    resume_deletions(manager_over(topic, tmp_path / "store", broker_id=0))
    assert not (tmp_path / "store" / f"{TIP.topic}-{TIP.topic_id}").exists()


def fill_as_producer(log: Log, batches: int, leader_epoch: int, first_sequence: int) -> None:
    now = int(time.time() * 1000)  # a producer of long ago would have expired
    for i in range(batches):
        records = batch(
            b"v" * 60, b"w" * 60, timestamp=now, producer_id=42, producer_epoch=0, base_sequence=first_sequence + 2 * i
        )
        log.append_as_leader(memoryview(records), leader_epoch=leader_epoch)
    log.high_watermark = log.log_end_offset


def test_a_follower_takes_the_state_of_the_remote_segment_before_its_leaders_local_log_start(open_log, tmp_path):
    leader_log = open_log(TIERED)
    fill_as_producer(leader_log, 4, leader_epoch=0, first_sequence=0)
    fill_as_producer(leader_log, 4, leader_epoch=3, first_sequence=8)
    assert len(leader_log.segments) >= 4
    topic = MemoryTopic()
    run(manager_over(topic, tmp_path / "store"), Replica(leader_log, leader_epoch=3))
    local_start = leader_log.segments[-2].base_offset  # the last rolled segment's, as if local retention left two
    manager = manager_over(topic, tmp_path / "store")

    async def aux_state():
        try:
            return await manager.remote_log_aux_state(TIP, local_start)
        finally:
            manager.shutdown()

    aux = asyncio.run(aux_state())
    assert aux.next_offset == local_start
    assert aux.leader_epochs == [e for e in leader_log.leader_epochs.entries if e.start_offset < local_start]
    assert aux.producer_snapshot is not None

    follower = Log.load(str(tmp_path / "follower" / TP.dir_name), TP, TIERED, scheduler=leader_log.scheduler)
    try:
        follower.truncate_fully_and_start_at(aux.next_offset)
        follower.take_remote_aux_state(0, aux.leader_epochs, aux.producer_snapshot)
        assert (follower.log_start_offset, follower.local_log_start_offset) == (0, local_start)
        assert follower.leader_epochs.entries == tuple(aux.leader_epochs)
        # The producer is known as it was at the segment's end: the follower, a leader later,
        # takes its next batch in sequence.
        # (its sequences are the offsets here: one producer wrote every record).
        assert follower.producer_state.producers[42].last_seq == local_start - 1
    finally:
        follower.close()


def test_no_remote_segment_before_the_local_log_start_answers_replica_not_available(tmp_path):
    manager = manager_over(MemoryTopic(), tmp_path / "store")

    async def aux_state():
        try:
            return await manager.remote_log_aux_state(TIP, 10)
        finally:
            manager.shutdown()

    with pytest.raises(KafkaError) as raised:
        asyncio.run(aux_state())
    assert raised.value.error_code is ErrorCode.replica_not_available


# ---------------------------------------------------------------------- retention by time

DAY_MS = 86_400_000


def fill_stamped(log: Log, batches: int, step_ms: int = 10_000) -> None:
    """Batches stamped 10 s apart from 1_000_000 on (two records each, one ms apart)."""
    for i in range(batches):
        log.append_as_leader(
            memoryview(batch(b"v" * 40, b"w" * 40, key=b"k%d" % i, timestamp=1_000_000 + step_ms * i)), leader_epoch=0
        )
    log.high_watermark = log.log_end_offset


def test_local_retention_ms_deletes_only_copied_segments_older_than_it(open_log, tmp_path):
    log = open_log(LogConfig(remote_storage_enable=True, segment_bytes=300, retention_ms=-1, local_retention_ms=DAY_MS))
    fill_stamped(log, 8)
    rolled = log.segments[:-1]
    assert len(rolled) >= 3
    cut = rolled[2]  # the segments before it are older than local.retention.ms, it and later ones not
    now = cut.largest_timestamp + DAY_MS
    assert now - rolled[1].largest_timestamp > DAY_MS
    log.apply_retention(now_ms=now)
    assert log.local_log_start_offset == 0  # nothing copied yet: nothing goes
    run(manager_over(MemoryTopic(), tmp_path / "store"), Replica(log))
    log.apply_retention(now_ms=now)
    assert log.local_log_start_offset == cut.base_offset
    assert log.log_start_offset == 0  # the rest is read from the store


def test_retention_ms_deletes_remote_segments_past_it_by_their_largest_timestamp(open_log, tmp_path):
    log = open_log(LogConfig(remote_storage_enable=True, segment_bytes=300, retention_ms=-1, local_retention_bytes=0))
    fill_stamped(log, 8)
    topic = MemoryTopic()
    run(manager_over(topic, tmp_path / "store"), Replica(log))
    log.apply_retention()
    before = assert_consistent(topic, tmp_path / "store", log)
    assert len(before) >= 3 and log.local_log_start_offset > before[2].end_offset
    log.update_config(LogConfig(remote_storage_enable=True, segment_bytes=300, retention_ms=DAY_MS, local_retention_bytes=0))
    now = before[2].max_timestamp_ms + DAY_MS  # the first two are past retention.ms, the third not
    manager = manager_over(topic, tmp_path / "store")
    manager._now_ms = lambda: now
    run(manager, Replica(log))
    after = assert_consistent(topic, tmp_path / "store", log)
    assert [s.segment_id for s in after] == [s.segment_id for s in before[2:]]
    assert log.log_start_offset == before[2].start_offset
