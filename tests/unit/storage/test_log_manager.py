import asyncio
import os
import threading
import time

import pytest

import storage.log_manager as log_manager_module
from storage import descriptor_pool
from storage import index as index_module
from storage.checkpoint import OffsetCheckpointFile
from storage.cleaner import CleanerConfig, plan_cleaning
from protocol.record_batch import iter_batches
from protocol.records import iter_records
from storage.index import OffsetIndex
from storage.errors import KafkaStorageError, LogDirNotFoundError, ReplicaNotAvailableError
from storage.log_config import LONG_MAX, LogConfig
from broker.replication_quotas import ReplicationQuotaManager
from broker.security.quotas import WindowConfig
from storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager, LogManagerSettings
from storage.topic_partition import TopicPartition
from tests.compat.test_storage_failure import tmpfs
from tests.unit.storage.conftest import batch


def run(coro):
    return asyncio.run(coro)


def manager(*dirs) -> LogManager:
    return LogManager([str(d) for d in dirs], lambda topic: LogConfig())


def crash(logs: LogManager) -> None:
    """What kill -9 leaves of a manager: no shutdown, no marker, no checkpoint. The writes its
    storage threads had started end (a killed process's would have ended or never begun), and
    nothing of it runs after: a second manager on the same directories in this process must
    not race the first one's threads."""
    logs._stop_threads()


def append(log, value: bytes) -> None:
    log.append_as_leader(memoryview(batch(value)), 0)
    log.high_watermark = log.log_end_offset


def test_new_partitions_go_to_the_dir_with_fewest(tmp_path):
    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        for p in range(4):
            logs.create(TopicPartition("t", p), LogConfig())
        await logs.shutdown()
        return logs

    run(scenario())
    assert sorted(os.listdir(tmp_path / "a")).count("t-0") + sorted(os.listdir(tmp_path / "b")).count("t-0") == 1
    counts = [sum(n.startswith("t-") for n in os.listdir(tmp_path / d)) for d in "ab"]
    assert counts == [2, 2]


def test_clean_shutdown_writes_checkpoints_and_marker_then_startup_removes_it(tmp_path):
    tp = TopicPartition("t", 0)

    async def first():
        logs = manager(tmp_path)
        await logs.startup()
        log = logs.create(tp, LogConfig())
        for i in range(3):
            append(log, b"v%d" % i)
        await logs.shutdown()

    async def second():
        logs = manager(tmp_path)
        await logs.startup()
        assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
        log = logs.get(tp)
        assert log.log_end_offset == 3 and log.recovery_point == 3
        await logs.shutdown()

    run(first())
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint")).read() == {tp: 3}
    assert OffsetCheckpointFile(str(tmp_path / "log-start-offset-checkpoint")).read() == {tp: 0}
    run(second())


@pytest.mark.parametrize("recovery_threads", [1, 3])
def test_a_dirs_logs_load_in_recovery_threads_shares_each_one_log_after_another(tmp_path, monkeypatch, recovery_threads):
    partitions = [TopicPartition("t", p) for p in range(7)]

    async def create():
        logs = manager(tmp_path)
        await logs.startup()
        for tp in partitions:
            logs.create(tp, LogConfig())
        await logs.shutdown()

    run(create())
    real_log = log_manager_module.Log
    lock = threading.Lock()
    loading, most, threads = [0], [0], set()

    def load(*args, **kwargs):
        with lock:
            loading[0] += 1
            most[0] = max(most[0], loading[0])
            threads.add(threading.get_ident())
        time.sleep(0.02)  # long enough for loads begun together to overlap
        try:
            return real_log.load(*args, **kwargs)
        finally:
            with lock:
                loading[0] -= 1

    class CountingLog:  # what the manager calls of Log while it starts
        pass

    CountingLog.load = staticmethod(load)
    monkeypatch.setattr(log_manager_module, "Log", CountingLog)

    async def restart():
        settings = LogManagerSettings(recovery_threads_per_dir=recovery_threads)
        logs = LogManager([str(tmp_path)], lambda topic: LogConfig(), settings)
        await logs.startup()
        loaded = sorted(logs.logs)
        await logs.shutdown()
        return loaded

    assert run(restart()) == partitions
    assert most[0] == recovery_threads and len(threads) == recovery_threads


def test_without_the_marker_startup_recovers_a_torn_tail(tmp_path):
    tp = TopicPartition("t", 0)

    async def write_then_crash():
        logs = manager(tmp_path)
        await logs.startup()
        log = logs.create(tp, LogConfig())
        for i in range(3):
            append(log, b"v%d" % i)
        path = log.active_segment.records.path
        with open(path, "ab") as f:  # the crash: half a batch, no shutdown, no marker
            f.write(bytes(batch(b"x" * 100))[:50])
        crash(logs)

    async def restart():
        logs = manager(tmp_path)
        await logs.startup()
        log = logs.get(tp)
        assert log.log_end_offset == 3
        assert log.active_segment.size == os.path.getsize(log.active_segment.records.path)
        await logs.shutdown()

    run(write_then_crash())
    run(restart())


def test_a_failing_dir_goes_offline_and_the_others_keep_serving(tmp_path):
    good, bad = TopicPartition("t", 0), TopicPartition("t", 1)

    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        logs.create(good, LogConfig())
        logs.create(bad, LogConfig())
        error = logs.handle_io_error(bad, OSError(28, "No space left on device"))
        assert isinstance(error, KafkaStorageError)
        assert logs.is_offline(bad) and logs.get(bad) is None
        assert not logs.is_offline(good) and logs.get(good) is not None
        failed_dir = next(d for d in logs.dirs.values() if not d.online)
        await logs.shutdown()
        return failed_dir.path

    failed = run(scenario())
    assert not os.path.exists(os.path.join(failed, CLEAN_SHUTDOWN_FILE))


def test_a_deferred_append_that_cannot_be_written_takes_its_dir_offline_and_the_others_keep_serving(tmp_path):
    good, bad = TopicPartition("t", 0), TopicPartition("t", 1)

    async def scenario(small):
        logs = manager(tmp_path / "a", small)
        await logs.startup()
        for tp in (good, bad):  # one in each dir
            logs.create(tp, LogConfig())
        assert logs.log_dir_of(bad) == str(small)
        writes = logs.deferred_writes
        writes.start()
        append(logs.get(good), b"kept")
        for _ in range(2):  # more than the dir holds
            append(logs.get(bad), b"x" * 700_000)
        writes.finish()

        assert writes.failures == 1
        assert logs.is_offline(bad) and logs.get(bad) is None
        assert not logs.is_offline(good)
        assert _values(logs.get(good)) == [b"kept"]
        await logs.shutdown()

    with tmpfs(tmp_path / "small", "1m") as small:
        run(scenario(small))


def test_unusable_dir_is_offline_at_startup_and_no_usable_dir_fails(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")

    async def one_good():
        logs = manager(tmp_path / "good", not_a_dir)
        await logs.startup()
        assert [d.online for d in logs.dirs.values()] == [True, False]
        await logs.shutdown()

    async def none_good():
        logs = manager(not_a_dir)
        with pytest.raises(KafkaStorageError):
            await logs.startup()

    run(one_good())
    run(none_good())


def test_deleted_partition_directory_goes_away_in_the_background(tmp_path):
    tp = TopicPartition("t", 0)

    async def scenario():
        logs = manager(tmp_path)
        await logs.startup()
        log = logs.create(tp, LogConfig(file_delete_delay_ms=0))
        append(log, b"v")
        logs.delete(tp)
        assert logs.get(tp) is None
        assert not (tmp_path / "t-0").exists()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if not any(n.endswith("-delete") for n in os.listdir(tmp_path)):
                break
        await logs.shutdown()

    run(scenario())
    assert not any(n.startswith("t-0") for n in os.listdir(tmp_path))


def test_a_partition_in_two_dirs_refuses_to_start(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name / "t-0").mkdir(parents=True)

    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        with pytest.raises(KafkaStorageError, match="both"):
            await logs.startup()

    run(scenario())


def test_a_checkpoint_asked_for_while_one_is_written_follows_it(tmp_path, monkeypatch):
    real_write = log_manager_module._write_checkpoints
    writes, running, release = [], [], threading.Event()

    def slow_write(*args):
        running.append(True)
        assert len(running) == 1, "two checkpoint writes at once"
        release.wait(10)
        writes.append(args)
        running.pop()
        real_write(*args)

    monkeypatch.setattr(log_manager_module, "_write_checkpoints", slow_write)

    async def scenario():
        logs = manager(tmp_path)
        await logs.startup()
        tp = TopicPartition("t", 0)
        log = logs.create(tp, LogConfig())
        append(log, b"v")
        logs.checkpoint()
        log.delete_records_before(1)
        logs.checkpoint()  # the first write is still under way: this one follows it
        await asyncio.sleep(0.1)
        release.set()
        for _ in range(100):
            if len(writes) == 2:
                break
            await asyncio.sleep(0.01)
        assert [start_offsets for _, _, start_offsets, _ in writes] == [{tp: 0}, {tp: 1}]
        await logs.shutdown()

    run(scenario())


NEVER_MS = 2**63 - 1


@pytest.mark.parametrize("periodic", ["recovery points", "log start offsets"])
def test_recovery_points_and_log_start_offsets_are_checkpointed_each_at_its_interval(tmp_path, periodic):
    # log.flush.offset.checkpoint.interval.ms and log.flush.start.offset.checkpoint.interval.ms
    tp = TopicPartition("t", 0)
    settings = LogManagerSettings(
        checkpoint_interval_ms=20 if periodic == "recovery points" else NEVER_MS,
        start_offset_checkpoint_interval_ms=20 if periodic == "log start offsets" else NEVER_MS,
    )

    async def scenario():
        logs = LogManager([str(tmp_path)], lambda topic: LogConfig(), settings)
        await logs.startup()
        log = logs.create(tp, LogConfig())
        for value in (b"a", b"b", b"c"):
            append(log, value)
        log.flush()
        log.delete_records_before(2)
        await asyncio.sleep(0.2)
        recovery_points = OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint")).read()
        start_offsets = OffsetCheckpointFile(str(tmp_path / "log-start-offset-checkpoint")).read()
        await logs.shutdown()
        return recovery_points, start_offsets

    recovery_points, start_offsets = run(scenario())
    if periodic == "recovery points":
        assert (recovery_points, start_offsets) == ({tp: 3}, {})
    else:
        assert (recovery_points, start_offsets) == ({}, {tp: 2})


def test_checkpoints_asked_for_while_one_is_written_are_all_in_the_write_that_follows(tmp_path, monkeypatch):
    real_write = log_manager_module._write_checkpoints
    writes, release = [], threading.Event()

    def slow_write(*args):
        release.wait(10)
        writes.append(args)
        real_write(*args)

    monkeypatch.setattr(log_manager_module, "_write_checkpoints", slow_write)

    async def scenario():
        logs = manager(tmp_path)
        await logs.startup()
        tp = TopicPartition("t", 0)
        append(logs.create(tp, LogConfig()), b"v")
        logs.checkpoint()
        logs.checkpoint(start_offsets=False)
        logs.checkpoint(recovery_points=False)  # replaces the write queued above, covering it
        await asyncio.sleep(0.1)
        release.set()
        for _ in range(100):
            if len(writes) == 2:
                break
            await asyncio.sleep(0.01)
        await logs.shutdown()
        return tp

    tp = run(scenario())
    _, recovery_points, start_offsets, cleaner_offsets = writes[1]
    assert (recovery_points, start_offsets, cleaner_offsets) == ({tp: 0}, {tp: 0}, {})


def test_producer_state_is_snapshotted_and_fsynced_at_shutdown_and_expires_periodically(tmp_path, monkeypatch):
    tp = TopicPartition("t", 0)
    fsynced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        fsynced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def produce(log, seq, timestamp):
        records = batch(b"v", timestamp=timestamp, producer_id=5, producer_epoch=0, base_sequence=seq)
        log.append_as_leader(memoryview(records), 0)

    async def first():
        settings = log_manager_module.LogManagerSettings(producer_id_expiration_check_interval_ms=50)
        logs = LogManager([str(tmp_path)], lambda topic: LogConfig(), settings)
        await logs.startup()
        log = logs.create(tp, LogConfig())
        now = int(time.time() * 1000)
        produce(log, 0, now)
        produce(log, 1, now)
        monkeypatch.setattr(os, "fsync", recording_fsync)
        await logs.shutdown()

    async def second():
        settings = log_manager_module.LogManagerSettings(producer_id_expiration_check_interval_ms=50)
        logs = LogManager([str(tmp_path)], lambda topic: LogConfig(), settings)
        await logs.startup()
        state = logs.get(tp).producer_state
        assert state.producers[5].last_seq == 1
        state.producer_id_expiration_ms = 1
        deadline = time.monotonic() + 5
        while state.producers and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert state.producers == {}
        await logs.shutdown()

    run(first())
    snapshot = str(tmp_path / tp.dir_name / f"{2:020d}.snapshot")
    assert snapshot in fsynced
    assert fsynced.index(snapshot) < len(fsynced) - 3  # before the checkpoints
    run(second())

def test_high_watermarks_are_checkpointed_and_restored_capped_at_the_log_end(tmp_path):
    tp, other = TopicPartition("t", 0), TopicPartition("t", 1)

    async def first_run():
        logs = manager(tmp_path)
        await logs.startup()
        for partition in (tp, other):
            log = logs.create(partition, LogConfig())
            for value in (b"a", b"b", b"c"):
                log.append_as_leader(memoryview(batch(value)), 0)
        logs.logs[tp].high_watermark = 2
        logs.logs[other].high_watermark = 3
        await logs.shutdown()

    run(first_run())
    path = tmp_path / "replication-offset-checkpoint"
    assert OffsetCheckpointFile(str(path)).read() == {tp: 2, other: 3}
    OffsetCheckpointFile(str(path)).write({tp: 2, other: 99})

    async def second_run():
        logs = manager(tmp_path)
        await logs.startup()
        restored = logs.logs[tp].high_watermark, logs.logs[other].high_watermark
        await logs.shutdown()
        return restored

    assert run(second_run()) == (2, 3)


def test_truncation_makes_the_truncated_range_dirty_again_for_the_cleaner(tmp_path):
    async def scenario():
        logs = manager(tmp_path)
        await logs.startup()
        tp = TopicPartition("t", 0)
        log = logs.create(tp, LogConfig())
        for value in (b"a", b"b", b"c"):
            append(log, value)
        logs.cleaner.load_checkpoint({tp: 3})
        assert logs.truncate_to(tp, 1)
        assert logs.cleaner.checkpoint_offsets({tp}) == {tp: 1}
        assert log.truncations == 1
        await logs.shutdown()

    run(scenario())


def test_a_truncation_at_the_log_end_still_drops_epochs_begun_there(tmp_path):
    """A broker that led an epoch without writing in it, then follows: its latest epoch must go,
    or the leader answers every fetch with a diverging epoch and the follower never fetches."""

    async def scenario():
        logs = manager(tmp_path)
        await logs.startup()
        tp = TopicPartition("t", 0)
        log = logs.create(tp, LogConfig())
        append(log, b"a")
        log.assign_epoch_start(1, log.log_end_offset)  # became leader of epoch 1, wrote nothing
        assert not logs.truncate_to(tp, log.log_end_offset)
        assert [entry.epoch for entry in log.leader_epochs.entries] == [0]
        await logs.shutdown()

    run(scenario())


# ------------------------------------------------------------ a name deleted and created again


def _segment_files(directory) -> set[str]:
    # Segment files only: the leader-epoch checkpoint is written in the background, when it is.
    return {name for name in os.listdir(directory) if name[:20].isdigit() and not name.endswith(".snapshot")}


async def _sleep_past(delay_ms: int) -> None:
    await asyncio.sleep(delay_ms / 1000 + 0.2)


def test_the_old_deletions_leave_a_partition_recreated_under_the_name_alone(tmp_path):
    """The deleted partition's directory and its segments pending deletion (DeleteRecords)
    are removed after the delay; the new partition's files, its own .deleted ones among them,
    all stay."""
    tp = TopicPartition("t", 0)
    short, long = LogConfig(file_delete_delay_ms=50), LogConfig(file_delete_delay_ms=60_000)

    def fill_and_trim(log) -> None:
        for value in (b"a", b"b", b"c"):
            append(log, value)
            log.roll()
        log.delete_records_before(2)  # the segments at 0 and 1 become .deleted

    async def scenario():
        logs = manager(tmp_path)
        await logs.startup()
        fill_and_trim(logs.create(tp, short))
        logs.delete(tp)
        recreated = logs.create(tp, long)
        fill_and_trim(recreated)
        files = _segment_files(tmp_path / "t-0")
        assert f"{0:020d}.log.deleted" in files and f"{2:020d}.log" in files

        await _sleep_past(short.file_delete_delay_ms)

        assert _segment_files(tmp_path / "t-0") == files
        assert not any(name.endswith("-delete") for name in os.listdir(tmp_path))
        assert b"c" in recreated.read(2, 1 << 20, recreated.log_end_offset, True).read()
        assert logs.get(tp) is recreated and not logs.has_offline_dirs
        await logs.shutdown()

    run(scenario())


def test_a_crash_after_a_name_is_created_again_applies_none_of_the_deleted_partitions_offsets(tmp_path):
    tp = TopicPartition("t", 0)

    async def scenario():
        logs = manager(tmp_path)
        await logs.startup()
        old = logs.create(tp, LogConfig())
        for value in (b"a", b"b", b"c", b"d"):
            append(old, value)
        old.delete_records_before(3)
        logs.checkpoint()
        await asyncio.sleep(0.2)  # written: the file lists t-0 at log start 3, HW 4
        assert OffsetCheckpointFile(str(tmp_path / "log-start-offset-checkpoint")).read() == {tp: 3}
        logs.delete(tp)
        recreated = logs.create(tp, LogConfig())
        append(recreated, b"new-0")
        append(recreated, b"new-1")
        crash(logs)  # kill -9 now: no shutdown, no further checkpoint

        after_crash = manager(tmp_path)
        await after_crash.startup()
        loaded = after_crash.get(tp)
        assert (loaded.log_start_offset, loaded.log_end_offset, loaded.high_watermark) == (0, 2, 0)
        await after_crash.shutdown()

    run(scenario())


def test_a_cleaning_under_way_is_over_before_a_new_directory_of_the_name_is_made(tmp_path, monkeypatch):
    """A cleaning writes its .cleaned files by the directory's path: one still running when its
    partition is deleted must not write them into a recreated partition's directory."""
    tp = TopicPartition("t", 0)
    release = threading.Event()

    def clean_slowly(_cleaner, job, abort):
        release.wait(10)
        with open(os.path.join(job.directory, f"{0:020d}.log.cleaned"), "wb"):
            pass  # the first file of the cleaned segment
        raise AssertionError("not reached: the directory was renamed")

    monkeypatch.setattr(log_manager_module.LogCleaner, "grab_filthiest_log", _plan_any_compacted_log)
    monkeypatch.setattr("storage.cleaner.Cleaner.clean", clean_slowly)

    async def scenario():
        settings = LogManagerSettings(cleaner=CleanerConfig(enable=False))  # cleanings asked for here
        logs = LogManager([str(tmp_path)], lambda topic: LogConfig(), settings)
        await logs.startup()
        append(logs.create(tp, LogConfig(cleanup_policy=("compact",))), b"v")
        cleaning = asyncio.ensure_future(logs.cleaner.clean_once())
        await asyncio.sleep(0.05)
        logs.delete(tp)
        threading.Timer(0.2, release.set).start()
        logs.create(tp, LogConfig())  # waits for the cleaning's thread
        assert await cleaning == tp
        assert _segment_files(tmp_path / "t-0") == {
            f"{0:020d}{suffix}" for suffix in (".log", ".index", ".timeindex")
        }
        await logs.shutdown()

    run(scenario())


def _plan_any_compacted_log(cleaner):
    for tp, partition_log in cleaner._log_manager.logs.items():
        if partition_log.config.compact and tp not in cleaner._in_progress:
            return plan_cleaning(partition_log, None, int(time.time() * 1000))
    return None



@pytest.mark.parametrize("bound", [None, 64])
def test_many_partitions_hold_about_one_descriptor_each_and_no_more_than_the_bound(tmp_path, bound):
    partitions = 300

    async def scenario():
        logs = manager(tmp_path)
        await logs.startup()
        before = len(os.listdir("/proc/self/fd"))
        for p in range(partitions):
            append(logs.create(TopicPartition("t", p), LogConfig()), b"v")
        held = len(os.listdir("/proc/self/fd")) - before
        await logs.shutdown()
        return held

    if bound is not None:
        descriptor_pool.set_capacity(bound)
    try:
        held = run(scenario())
    finally:
        descriptor_pool.fit_to_open_files_limit()
    # Three a partition before (.log and a map of each index); now the index maps keep none.
    assert held <= (partitions if bound is None else bound) + 10


# ------------------------------------------------------------------------- moving replicas


def _values(log) -> list[bytes]:
    """Every record value of `log`, from its start to its end, segment by segment."""
    values, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        region = log.read(offset, 1 << 20, log.log_end_offset, True)
        data = region.read()
        for position, header in iter_batches(data):
            values += [record.value for record in iter_records(data[position : position + header.size])]
            offset = header.next_offset
    return values


async def _until(condition, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within 5 s: {what}")


def _dir_of(logs: LogManager, tp: TopicPartition, other: bool = False):
    current = logs.log_dir_of(tp)
    return next(d.path for d in logs.dirs.values() if (d.path != current) == other)


def test_a_moved_replica_takes_every_record_to_the_target_dir_while_appends_go_on(tmp_path):
    tp = TopicPartition("t", 0)
    swapped = []

    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        logs.add_swap_listener(lambda moved_tp, moved: swapped.append((moved_tp, moved)))
        config = LogConfig(segment_bytes=2048, file_delete_delay_ms=0)
        current = logs.create(tp, config)
        for i in range(200):
            append(current, b"before-%d" % i)
        source, target = logs.log_dir_of(tp), _dir_of(logs, tp, other=True)
        assert logs.move(tp, target)
        for i in range(50):  # appends to the current log while the copy is made
            append(current, b"during-%d" % i)
            await asyncio.sleep(0)
        await _until(lambda: logs.log_dir_of(tp) == target, "the swap")
        moved = logs.get(tp)
        assert swapped == [(tp, moved)] and moved is not current
        assert tp not in logs.future_logs
        append(moved, b"after")
        assert _values(moved) == [b"before-%d" % i for i in range(200)] + [b"during-%d" % i for i in range(50)] + [b"after"]
        assert moved.high_watermark == moved.log_end_offset == 251
        await _until(lambda: not any(n.startswith("t-0") for n in os.listdir(source)), "the old dir removed")
        await logs.shutdown()
        return target

    target = run(scenario())
    assert sorted(n for n in os.listdir(target) if n.startswith("t-0")) == ["t-0"]
    assert not os.path.exists(os.path.join(target, "t-0", log_manager_module.SWAP_MARKER))


def test_a_move_copies_nothing_while_the_move_quota_is_exceeded_and_records_what_it_copies(tmp_path):
    tp = TopicPartition("t", 0)
    # The broker's quota (replica.alter.log.dirs.io.max.bytes.per.second) on a clock that stands
    # still: its rate is then everything recorded, over one window (1 s).
    quota = ReplicationQuotaManager(WindowConfig(samples=11, window_ms=1000), clock=lambda: 1_000_000)
    quota.update_quota(1)
    quota.record(1000)

    async def scenario():
        logs = LogManager(
            [str(tmp_path / "a"), str(tmp_path / "b")], lambda topic: LogConfig(), LogManagerSettings(move_backoff_ms=10)
        )
        await logs.startup()
        logs.move_quota = quota
        current = logs.create(tp, LogConfig())
        for i in range(20):
            append(current, b"record-%d" % i)
        target = _dir_of(logs, tp, other=True)
        assert logs.move(tp, target)
        await asyncio.sleep(0.1)  # several backoffs
        held = logs.future_logs[tp].log_end_offset
        quota.update_quota(LONG_MAX)
        await _until(lambda: logs.log_dir_of(tp) == target, "the swap")
        size = logs.get(tp).size_in_bytes
        await logs.shutdown()
        return held, size

    held, size = run(scenario())
    assert held == 0
    quota.update_quota(1000 + size - 1)
    assert quota.is_quota_exceeded()  # the copy's bytes were recorded
    quota.update_quota(1000 + size)
    assert not quota.is_quota_exceeded()  # and nothing else


def test_a_move_is_refused_as_kafka_refuses_it(tmp_path):
    tp, later = TopicPartition("t", 0), TopicPartition("t", 1)

    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        logs.create(tp, LogConfig())
        current_dir, other_dir = logs.log_dir_of(tp), _dir_of(logs, tp, other=True)
        with pytest.raises(LogDirNotFoundError):
            logs.move(tp, str(tmp_path / "elsewhere"))
        with pytest.raises(LogDirNotFoundError):
            logs.move(tp, "b")  # a relative path names no log dir
        assert logs.move(tp, current_dir) is False  # already there
        # No replica here yet: the dir is remembered and the partition created there later.
        with pytest.raises(ReplicaNotAvailableError):
            logs.move(later, current_dir)
        logs.create(later, LogConfig())
        assert logs.log_dir_of(later) == current_dir
        logs.handle_io_error(later, OSError(5, "Input/output error"))
        with pytest.raises(KafkaStorageError):
            logs.move(tp, current_dir)  # the target is offline
        await logs.shutdown()
        return other_dir

    run(scenario())


def test_log_dirs_are_described_with_sizes_lags_future_replicas_and_offline_dirs(tmp_path):
    tp, other = TopicPartition("t", 0), TopicPartition("t", 1)

    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        current = logs.create(tp, LogConfig())
        logs.create(other, LogConfig())
        for i in range(3):
            append(current, b"v%d" % i)
        current.high_watermark = 1
        target = _dir_of(logs, tp, other=True)
        logs.move(tp, target)
        logs._stop_move(tp)  # hold the copy where it is: an empty future log
        described = {d.path: d for d in await logs.describe_dirs(None)}
        only_tp = {d.path: d for d in await logs.describe_dirs({tp})}
        logs.handle_io_error(other, OSError(5, "Input/output error"))
        after_failure = {d.path: d for d in await logs.describe_dirs(None)}
        count = logs.offline_dir_count
        await logs.shutdown()
        return logs.log_dir_of(tp), target, described, only_tp, after_failure, count

    source, target, described, only_tp, after_failure, count = run(scenario())
    current = next(r for r in described[source].replicas if r.topic_partition == tp)
    future = next(r for r in described[target].replicas if r.topic_partition == tp)
    assert (current.is_future, current.offset_lag) == (False, 0)  # its end is past the HW
    assert current.size > 0
    assert (future.is_future, future.offset_lag, future.size) == (True, 3, 0)
    assert described[source].online and described[source].total_bytes >= described[source].usable_bytes > 0
    assert [r.topic_partition for d in only_tp.values() for r in d.replicas] == [tp, tp]
    assert count == 1
    failed = next(d for d in after_failure.values() if not d.online)
    assert (failed.total_bytes, failed.replicas) == (-1, [])


def test_a_follower_behind_its_high_watermark_shows_that_lag(tmp_path):
    tp = TopicPartition("t", 0)

    async def scenario():
        logs = manager(tmp_path)
        await logs.startup()
        follower = logs.create(tp, LogConfig())
        append(follower, b"v")
        follower.high_watermark = 1
        logs.truncate_to(tp, 0)  # the HW goes down with the log end: no lag
        described = await logs.describe_dirs(None)
        await logs.shutdown()
        return described

    [described] = run(scenario())
    assert [r.offset_lag for r in described.replicas] == [0]


def test_a_truncation_of_the_current_log_truncates_its_future_copy(tmp_path):
    tp = TopicPartition("t", 0)

    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        current = logs.create(tp, LogConfig())
        for i in range(5):
            append(current, b"v%d" % i)
        logs.move(tp, _dir_of(logs, tp, other=True))
        logs._stop_move(tp)
        future = logs.future_logs[tp]
        future.append_as_follower(memoryview(current.read(0, 1 << 20, 5, True).read()))
        logs.truncate_to(tp, 2)
        end_after_cut = future.log_end_offset
        logs.truncate_fully_and_start_at(tp, 7)
        result = end_after_cut, future.log_start_offset, future.log_end_offset
        await logs.shutdown()
        return result

    assert run(scenario()) == (2, 7, 7)


def test_a_restart_mid_move_resumes_the_copy_from_the_future_log(tmp_path):
    tp = TopicPartition("t", 0)

    async def first():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        current = logs.create(tp, LogConfig())
        for i in range(20):
            append(current, b"v%d" % i)
        target = _dir_of(logs, tp, other=True)
        logs.move(tp, target)
        logs._stop_move(tp)
        future = logs.future_logs[tp]
        future.append_as_follower(memoryview(current.read(0, 100, 20, True).read()))  # some copied
        crash(logs)
        return target

    async def second():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        await _until(lambda: logs.log_dir_of(tp) == target, "the resumed move")
        values = _values(logs.get(tp))
        await logs.shutdown()
        return values

    target = run(first())
    assert any(n.endswith("-future") for n in os.listdir(target))
    assert run(second()) == [b"v%d" % i for i in range(20)]
    assert [n for n in os.listdir(target) if n.startswith("t-0")] == ["t-0"]


@pytest.mark.parametrize("step", ["marked", "renamed"])
def test_a_restart_completes_a_swap_a_crash_interrupted(tmp_path, step):
    """The swap (marker, rename of the future dir, rename of the old dir) runs in one loop
    callback; a kill -9 between its steps leaves a marked future dir, or a marked partition
    dir beside the old one. Either holds every record and becomes the partition's log."""
    tp = TopicPartition("t", 0)

    async def first():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        current = logs.create(tp, LogConfig())
        for i in range(5):
            append(current, b"v%d" % i)
        source, target = logs.log_dir_of(tp), _dir_of(logs, tp, other=True)
        logs.move(tp, target)
        logs._stop_move(tp)
        future = logs.future_logs[tp]
        future.append_as_follower(memoryview(current.read(0, 1 << 20, 5, True).read()))
        log_manager_module._mark_swap(future.directory)
        if step == "renamed":
            os.rename(future.directory, os.path.join(target, "t-0"))
        crash(logs)
        return source, target

    async def second():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        assert logs.log_dir_of(tp) == target and tp not in logs.future_logs
        values = _values(logs.get(tp))
        await logs.shutdown()
        return values

    source, target = run(first())
    assert run(second()) == [b"v%d" % i for i in range(5)]
    assert not any(n.startswith("t-0") for n in os.listdir(source))
    assert [n for n in os.listdir(target) if n.startswith("t-0")] == ["t-0"]
    assert not os.path.exists(os.path.join(target, "t-0", log_manager_module.SWAP_MARKER))


def test_deleting_a_partition_mid_move_deletes_its_future_log_too(tmp_path):
    tp = TopicPartition("t", 0)

    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        logs.create(tp, LogConfig(file_delete_delay_ms=0))
        target = _dir_of(logs, tp, other=True)
        logs.move(tp, target)
        logs._stop_move(tp)
        logs.delete(tp)
        assert tp not in logs.future_logs
        await _until(lambda: not os.listdir(target) or all(not n.startswith("t-0") for n in os.listdir(target)), "removal")
        await logs.shutdown()

    run(scenario())


def test_a_dir_going_offline_is_told_to_the_offline_listeners(tmp_path):
    tp = TopicPartition("t", 0)
    told = []

    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        logs.add_offline_listener(told.append)
        logs.create(tp, LogConfig())
        failed = logs.log_dir_of(tp)
        logs.handle_io_error(tp, OSError(5, "Input/output error"))
        logs.handle_io_error(tp, OSError(5, "Input/output error"))  # told once
        await logs.shutdown()
        return failed

    assert told == [run(scenario())]


def test_a_log_starting_inside_a_batch_is_moved_whole(tmp_path):
    """DeleteRecords can put the log start inside a batch: the copy starts with that batch, as
    Kafka's future replica does."""
    tp = TopicPartition("t", 0)

    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        current = logs.create(tp, LogConfig())
        current.append_as_leader(memoryview(batch(b"v0", b"v1", b"v2", b"v3")), 0)
        current.high_watermark = current.log_end_offset
        current.delete_records_before(2)
        target = _dir_of(logs, tp, other=True)
        logs.move(tp, target)
        await _until(lambda: logs.log_dir_of(tp) == target, "the move")
        moved = logs.get(tp)
        result = moved.log_start_offset, moved.log_end_offset, _values(moved)
        await logs.shutdown()
        return result

    assert run(scenario()) == (2, 4, [b"v0", b"v1", b"v2", b"v3"])


def test_a_tiered_log_is_moved_from_its_local_start_and_keeps_its_remote_start(tmp_path):
    """Segments of a tiered log that are in the remote store only are not copied, and the moved
    log still starts where the remote log does."""
    tp = TopicPartition("t", 0)

    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        config = LogConfig(remote_storage_enable=True, segment_bytes=300, local_retention_bytes=0, retention_ms=-1)
        current = logs.create(tp, config)
        for i in range(12):
            append(current, b"value-%d" % i)
        current.highest_remote_offset = current.segments[-1].base_offset - 1  # all rolled ones copied
        current.apply_retention()
        local_start = current.local_log_start_offset
        assert local_start > 0 and current.log_start_offset == 0
        target = _dir_of(logs, tp, other=True)
        logs.move(tp, target)
        await _until(lambda: logs.log_dir_of(tp) == target, "the move")
        moved = logs.get(tp)
        result = moved.log_start_offset, moved.local_log_start_offset == local_start, moved.log_end_offset
        await logs.shutdown()
        return result

    assert run(scenario()) == (0, True, 12)



def _entries_on_disk(log) -> int:
    segment = log.active_segment
    return OffsetIndex(segment.offset_index.path, segment.base_offset, 0, writable=False).entries


def test_index_entries_reach_their_files_shortly_after_the_appends_without_a_flush(tmp_path):
    tp = TopicPartition("t", 0)

    async def scenario():
        logs = manager(tmp_path)
        await logs.startup()
        partition_log = logs.create(tp, LogConfig(index_interval_bytes=1))
        for value in (b"a", b"b", b"c", b"d"):
            append(partition_log, value)
        assert partition_log.active_segment.offset_index.entries == 3
        assert _entries_on_disk(partition_log) == 0  # in memory, to go out together

        await _until(lambda: _entries_on_disk(partition_log) == 3, "the entries written")
        append(partition_log, b"e")  # a later append asks for its own write
        await _until(lambda: _entries_on_disk(partition_log) == 4, "the next entry written")
        await logs.shutdown()

    run(scenario())


def test_a_failed_index_write_takes_only_its_dir_offline(tmp_path, monkeypatch):
    failing, healthy = TopicPartition("t", 0), TopicPartition("t", 1)

    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        failing_log = logs.create(failing, LogConfig(index_interval_bytes=1))
        healthy_log = logs.create(healthy, LogConfig(index_interval_bytes=1))
        for value in (b"a", b"b"):
            append(failing_log, value)
        real_pwrite = index_module.os.pwrite

        def pwrite(fd, data, position):
            if os.readlink(f"/proc/self/fd/{fd}").startswith(failing_log.directory):
                raise OSError(5, "Input/output error")
            return real_pwrite(fd, data, position)

        monkeypatch.setattr(index_module.os, "pwrite", pwrite)
        for value in (b"a", b"b"):
            append(healthy_log, value)

        await _until(lambda: logs.is_offline(failing), "the failing log's dir offline")
        await _until(lambda: _entries_on_disk(healthy_log) == 1, "the healthy log's entry written")
        assert not logs.is_offline(healthy) and logs.get(healthy) is healthy_log
        monkeypatch.undo()
        await logs.shutdown()

    run(scenario())


class HangingDisk:
    """os.fsync that hangs, as a dying disk's does, for descriptors under one directory, until
    released; every other fsync goes through."""

    def __init__(self, directory, monkeypatch) -> None:
        self.directory = str(directory)
        self.released = threading.Event()
        self.hanging = 0  # fsyncs that have waited
        real_fsync = os.fsync

        def fsync(descriptor: int) -> None:
            if os.readlink(f"/proc/self/fd/{descriptor}").startswith(self.directory):
                self.hanging += 1
                self.released.wait(30)
            real_fsync(descriptor)

        monkeypatch.setattr(os, "fsync", fsync)


def _one_log_per_dir(logs: LogManager) -> dict[str, TopicPartition]:
    """Partitions created until each dir holds one: dir path -> its partition."""
    held = {}
    for p in range(len(logs.dirs)):
        tp = TopicPartition("t", p)
        logs.create(tp, LogConfig())
        held[logs.log_dir_of(tp)] = tp
    assert len(held) == len(logs.dirs)
    return held


def test_a_hanging_disk_holds_up_only_its_own_dirs_flushes_and_checkpoints(tmp_path, monkeypatch):
    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b", tmp_path / "c")
        await logs.startup()
        held = _one_log_per_dir(logs)
        hanging_log = logs.get(held.pop(str(tmp_path / "a")))
        for value in (b"x", b"y"):
            append(hanging_log, value)
        disk = HangingDisk(tmp_path / "a", monkeypatch)
        # As many stuck flushes as the storage pool the dirs shared before had threads
        for _ in range(2 * len(logs.dirs)):
            logs.flush(hanging_log, hanging_log.log_end_offset)
        await _until(lambda: disk.hanging >= 2, "the hanging dir's threads stuck")
        for tp in held.values():
            append(logs.get(tp), b"v")
            logs.flush(logs.get(tp), 1)
        await _until(lambda: all(logs.get(tp).recovery_point == 1 for tp in held.values()), "the other dirs' flushes")
        await asyncio.wait_for(logs.write_checkpoints_of(held.values()), 5)
        for path, tp in held.items():
            assert OffsetCheckpointFile(os.path.join(path, "recovery-point-offset-checkpoint")).read() == {tp: 1}
        assert hanging_log.recovery_point == 0 and not logs.has_offline_dirs
        disk.released.set()
        await logs.shutdown()
        assert hanging_log.recovery_point == 2

    run(scenario())


def test_shutdown_marks_the_other_dirs_clean_while_one_disk_hangs(tmp_path, monkeypatch):
    async def scenario():
        logs = manager(tmp_path / "a", tmp_path / "b")
        await logs.startup()
        for tp in _one_log_per_dir(logs).values():
            append(logs.get(tp), b"v")
        disk = HangingDisk(tmp_path / "a", monkeypatch)
        stopping = asyncio.ensure_future(logs.shutdown())
        await _until(lambda: (tmp_path / "b" / CLEAN_SHUTDOWN_FILE).exists(), "the healthy dir marked clean")
        assert disk.hanging and not (tmp_path / "a" / CLEAN_SHUTDOWN_FILE).exists() and not stopping.done()
        disk.released.set()
        await stopping
        assert (tmp_path / "a" / CLEAN_SHUTDOWN_FILE).exists()

    run(scenario())


def test_a_flush_queued_behind_another_when_its_partition_is_deleted_ends_with_no_dir_offline(tmp_path, monkeypatch):
    # The appends made while a flush.messages fsync runs share the next (Log.flush), started by
    # the loop when the first ends: by then the partition may be gone. Its files stay open in
    # the renamed directory until file.delete.delay.ms, so that fsync goes through.
    async def scenario():
        logs = LogManager([str(tmp_path / "a")], lambda topic: LogConfig(flush_messages=1))
        await logs.startup()
        tp = TopicPartition("t", 0)
        partition_log = logs.create(tp, LogConfig(flush_messages=1))
        disk = HangingDisk(tmp_path / "a", monkeypatch)
        first = partition_log.append_as_leader(memoryview(batch(b"a")), 0)
        second = partition_log.append_as_leader(memoryview(batch(b"b")), 0)
        assert second.flush is not None and second.flush is not first.flush
        await _until(lambda: disk.hanging >= 1, "the first fsync under way")
        logs.delete(tp)
        disk.released.set()
        await asyncio.wait_for(asyncio.gather(first.flush, second.flush), 5)
        assert partition_log.recovery_point == 2 and not logs.has_offline_dirs
        await logs.shutdown()

    run(scenario())
