"""Every partition log of this broker, spread over the log.dirs (JBOD) (Kafka's LogManager).

Per log dir:
- <topic>-<partition>/                 one directory per partition (storage.log)
- <topic>-<partition>.<id>-delete/      a deleted partition, removed in the background
- <topic>-<partition>.<id>-stray/       a partition of no known topic, set aside at start (kept
                                       for the operator, never loaded again)
- <topic>-<partition>.<id>-future/      a future replica: the copy a move to this dir is making
                                       (AlterReplicaLogDirs; see "Moving a replica" below)
- recovery-point-offset-checkpoint, cleaner-offset-checkpoint
                                       (storage.checkpoint), every
                                       log.flush.offset.checkpoint.interval.ms
- log-start-offset-checkpoint          every log.flush.start.offset.checkpoint.interval.ms
                                       (all three also when DeleteRecords, a deletion, the
                                       cleaner or shutdown need them on disk)
- replication-offset-checkpoint        high watermarks, every
                                       replica.high.watermark.checkpoint.interval.ms; restored
                                       at load, capped at the log end offset
- .kafka_cleanshutdown                 present only while the broker is cleanly stopped

Logs whose cleanup.policy includes compact are compacted by the log cleaner (storage.cleaner),
started with the manager when log.cleaner.enable is set and stopped first at shutdown.

Deleting a partition (topic deletion, StopReplica, reassignment) renames its directory to
<topic>-<partition>.<id>-delete at once, and every path the log holds follows the rename (Kafka's
renameDir); after file.delete.delay.ms that directory is removed whole. Nothing of a deleted
partition is ever removed by its old path: a partition of the same name may have been created
there meanwhile. Work begun on the old paths before the rename (a leader-epoch write, a segment
deletion, a cleaning) is over before a new directory of the name is made, and so is a rewrite
of the dir's checkpoints without the deleted partition's entries, which a crash would otherwise
apply to the new one. Segments removed from a live log (retention, DeleteRecords, the cleaner's
swaps) are renamed to .deleted and unlinked after file.delete.delay.ms, unless their partition
was deleted meanwhile: then they went with its directory, and are only closed.

A new partition goes to the dir an AlterReplicaLogDirs named for it before it existed (Kafka's
preferred dir), else to the online dir holding the fewest partitions. When a dir fails (disk
full, I/O error) it goes offline: its partitions stop serving with KAFKA_STORAGE_ERROR while the
other dirs carry on, and it is skipped by checkpoints and the clean-shutdown marker, so the next
start recovers it.

Moving a replica between dirs (Kafka's future replica and ReplicaAlterLogDirsThread): `move` makes
an empty future log <topic>-<partition>.<id>-future in the target dir, and a task on the loop
copies the current log into it: it takes a region of the current log on the loop, reads its
bytes on its dir's threads, and appends them to the future log back on the loop (as a follower
appends), unless the current log was truncated or the future one changed meanwhile (then the
chunk is read again). A truncation of the current log truncates the future one too; a rising
log start offset is followed. Once the future log's end offset is the current one's (checked and
acted on in one loop callback, so no append comes between), it is swapped in: a marker file is
put into the future dir, which is renamed to <topic>-<partition>, the old directory is renamed
to <topic>-<partition>.<id>-delete (removed after file.delete.delay.ms, as a deleted partition's)
and the marker removed; swap listeners (the replica manager) then point the partition at the new
log. A restart resumes a move whose future dir it finds (the future log is loaded and copying
goes on from its end); a future dir holding the marker was being swapped in: if its old
directory is still there, that one is renamed to -delete and the future dir completes the swap.
A dir that fails takes the futures in it along (the move stops, the current log serves on).
Moves are throttled by `move_quota` (the broker's replica.alter.log.dirs.io.max.bytes.per.second):
while it is exceeded no move copies, each waits move_backoff_ms and looks again; the bytes copied
are recorded against it.

Thread-safety: the event loop owns the manager and its logs. fsync, loading, checkpoint writes and
file deletion run on threads of the log dir whose disk they touch (max(2,
num.recovery.threads.per.data.dir) a dir), and come back with call_soon_threadsafe (via asyncio
futures): a disk that hangs or fails holds up only its own dir's work. At start a dir's logs load
in num.recovery.threads.per.data.dir shares, each on one thread, one log after another. Shutdown
flushes the dirs at once, each on its threads. The cleaner has threads of its own.
"""

import asyncio
import concurrent.futures
import functools
import logging
import os
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from protocol.record_batch import iter_batches
from storage.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CorruptCheckpointError,
    OffsetCheckpointFile,
)
from storage.cleaner import CleanerConfig, LogCleaner
from storage.errors import KafkaStorageError, LogDirNotFoundError, ReplicaNotAvailableError
from storage.leader_epoch import EpochEntry
from storage.log import Log
from storage.log_config import LogConfig
from storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, SnapshotFile
from storage.records_file import DeferredWrites
from storage.segment import LogSegment
from storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
FUTURE_DIR_SUFFIX = "-future"
# In a future dir being swapped in: it holds every record, and is the partition's log even if
# the old directory is still there after a crash.
SWAP_MARKER = ".logway-future-swap"
MOVE_CHUNK_BYTES = 1024 * 1024  # bytes a move copies per step (replica.fetch.max.bytes' default)


class ByteRateQuota(Protocol):
    """A replication quota as the copies see it (Kafka's ReplicaQuota): a follower's
    (replication/fetcher.py), or the one of moves between log dirs (`move_quota`,
    replica.alter.log.dirs.io.max.bytes.per.second), which throttles every move."""

    def is_throttled(self, tp: TopicPartition) -> bool: ...

    def is_quota_exceeded(self) -> bool: ...

    def record(self, value: int) -> None: ...


class NoQuota:
    """No limit: nothing throttled, nothing counted."""

    def is_throttled(self, tp: TopicPartition) -> bool:
        return False

    def is_quota_exceeded(self) -> bool:
        return False

    def record(self, value: int) -> None:
        pass


NO_QUOTA = NoQuota()
_NEVER_MS = 2**31
# The index entries appends make wait in memory (storage.index) at most this long before they
# are written to their files, where readers of the files (dump-log, a copy) find them: long
# enough that a busy partition's entries go out 32 to a write, short beside anything an operator
# does.
_INDEX_WRITE_DELAY_S = 0.1


@dataclass
class LogDir:
    path: str
    online: bool = True
    had_clean_shutdown: bool = False
    logs: set[TopicPartition] = field(default_factory=set)
    futures: set[TopicPartition] = field(default_factory=set)  # future replicas being made here
    # Which checkpoint files the next background write of the three covers: asked for by each
    # caller and taken by the write that snapshots next, so that coalescing writes (see
    # _write_in_background) loses none.
    recovery_points_due: bool = False
    start_offsets_due: bool = False
    # checkpoint file path -> deleted partitions that the file on disk may still list
    stale_entries: dict[str, set[TopicPartition]] = field(default_factory=dict)

    @property
    def checkpoint_path(self) -> str:
        """The recovery points' file, which stands for the three the dir's checkpoints write
        (recovery points, log start offsets, cleaner offsets) as the key of their background
        writes: one at a time, or two would race over a file's temporary copy."""
        return os.path.join(self.path, RECOVERY_POINT_CHECKPOINT)

    @property
    def high_watermark_path(self) -> str:
        return os.path.join(self.path, HIGH_WATERMARK_CHECKPOINT)


@dataclass(frozen=True)
class ReplicaDescription:
    """A log in a log dir, as DescribeLogDirs gives it."""

    topic_partition: TopicPartition
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirDescription:
    path: str
    online: bool
    total_bytes: int = -1
    usable_bytes: int = -1
    replicas: list[ReplicaDescription] = field(default_factory=list)


@dataclass
class _BackgroundWrite:
    """A file written on a dir's threads (`running`), and the write asked for meanwhile, made
    when it is its turn (on the loop, so that it snapshots the state of that moment), with a
    future of its outcome for those who wait for it (`queued_written`)."""

    running: concurrent.futures.Future
    queued: Callable[[], Callable[[], None]] | None = None
    queued_written: asyncio.Future | None = None


@dataclass(frozen=True)
class LogManagerSettings:
    """The broker settings the manager acts on (all in milliseconds)."""

    retention_check_interval_ms: int = 300_000
    flush_check_interval_ms: int = 2**63 - 1
    checkpoint_interval_ms: int = 60_000
    start_offset_checkpoint_interval_ms: int = 60_000
    high_watermark_checkpoint_interval_ms: int = 5_000
    recovery_threads_per_dir: int = 1
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    producer_id_expiration_check_interval_ms: int = 600_000
    cleaner: CleanerConfig = CleanerConfig()
    # How long a move waits while the move quota is exceeded (replica.fetch.backoff.ms, as
    # Kafka's ReplicaAlterLogDirsThread backs off).
    move_backoff_ms: int = 1_000


class LogManager:
    def __init__(
        self,
        log_dirs: Iterable[str],
        config_for_topic: Callable[[str], LogConfig],
        settings: LogManagerSettings = LogManagerSettings(),
    ) -> None:
        self.dirs = {path: LogDir(os.path.abspath(path)) for path in log_dirs}
        self.dirs_by_path = {d.path: d for d in self.dirs.values()}
        self.logs: dict[TopicPartition, Log] = {}
        self._log_dir_of: dict[TopicPartition, LogDir] = {}
        self._unplaced: set[TopicPartition] = set()  # see mark_unplaced
        # Whether a dir has failed (dirs never come back): a plain attribute, as every Produce and
        # Fetch asks it (ReplicaManager.get_partition), and `is_offline` is needed only when it is
        # set, since partitions are unplaced only while a dir is offline. Set by _take_offline.
        self.has_offline_dirs = False
        # Future replicas (see "Moving a replica"), the dir of each, and the tasks copying them
        self.future_logs: dict[TopicPartition, Log] = {}
        self._future_dir_of: dict[TopicPartition, LogDir] = {}
        self._moves: dict[TopicPartition, asyncio.Task] = {}
        self._preferred_dir: dict[TopicPartition, LogDir] = {}  # see move
        self._swap_listeners: list[Callable[[TopicPartition, Log], None]] = []
        # Every move shares it (replica.alter.log.dirs.io.max.bytes.per.second); the broker sets it.
        self.move_quota: ByteRateQuota = NO_QUOTA
        self._offline_listeners: list[Callable[[str], None]] = []
        # The connections' deferred appends (storage.records_file), for the logs served here.
        self.deferred_writes = DeferredWrites(self._deferred_write_failed)
        self._config_for_topic = config_for_topic
        self._settings = settings
        # Each dir's disk work on threads of its own (Kafka sizes its recovery pools per dir
        # too): a disk that hangs or fails holds up only its own dir's flushes, loads,
        # deletions and checkpoints. At least two, so that one long fsync does not hold the
        # dir's checkpoint writes.
        threads_per_dir = max(2, settings.recovery_threads_per_dir)
        self._threads = {
            log_dir.path: concurrent.futures.ThreadPoolExecutor(threads_per_dir, f"logway-storage-{number}")
            for number, log_dir in enumerate(self.dirs.values())
        }
        self._pending: dict[str, set[asyncio.Future]] = {path: set() for path in self._threads}  # by dir
        # Files being written in the background, by a dir's checkpoint path or a log (its
        # leader epochs): two writes of one file at once would race over its temporary file,
        # and the loser's rename would fail.
        self._writing: dict[object, _BackgroundWrite] = {}
        # Thread-pool work on a live log's files by path, and that of deleted logs not yet
        # waited for (see create)
        self._path_work: dict[TopicPartition, set[concurrent.futures.Future]] = {}
        self._draining: dict[TopicPartition, set[concurrent.futures.Future]] = {}
        self._shutting_down = False  # shutdown writes the last checkpoints itself
        self._index_writes: list[Log] = []  # logs that asked for write_index_entries_soon
        self._periodic: list[asyncio.Task] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.cleaner = LogCleaner(self, settings.cleaner)
        # Told the seconds each flush of a log took (the broker's LogFlushRateAndTimeMs).
        self.on_flush: Callable[[float], None] = lambda seconds: None

    # ----------------------------------------------------------------------------- startup

    async def startup(self) -> None:
        """Open every log dir and load its partitions; then start the periodic tasks."""
        self._loop = asyncio.get_running_loop()
        for log_dir in self.dirs.values():
            try:
                await self._run_blocking(log_dir, _prepare_dir, log_dir)
            except OSError as exc:
                self._take_offline(log_dir, exc)
        scans = {}
        for log_dir in self.dirs.values():
            if log_dir.online:
                try:
                    scans[log_dir.path] = await self._run_blocking(log_dir, _scan_dir, log_dir)
                except OSError as exc:
                    self._take_offline(log_dir, exc)
        await self._complete_interrupted_swaps(scans)
        loads = [self._load_dir(d, *scans[d.path]) for d in self.dirs.values() if d.online and d.path in scans]
        await asyncio.gather(*loads)
        if not self.has_online_dirs:
            raise KafkaStorageError("no log directory is usable")
        schedule = [
            (self._settings.retention_check_interval_ms, self.apply_retention),
            (self._settings.flush_check_interval_ms, self._flush_by_time),
            (self._settings.checkpoint_interval_ms, functools.partial(self.checkpoint, start_offsets=False)),
            (
                self._settings.start_offset_checkpoint_interval_ms,
                functools.partial(self.checkpoint, recovery_points=False),
            ),
            (
                self._settings.producer_id_expiration_check_interval_ms,
                self.remove_expired_producers,
            ),
            (self._settings.high_watermark_checkpoint_interval_ms, self.checkpoint_high_watermarks),
        ]
        # Kafka's "never" for these intervals is Long.MAX_VALUE; asyncio cannot sleep that long.
        self._periodic = [
            asyncio.ensure_future(self._every(interval, fn))
            for interval, fn in schedule
            if interval < _NEVER_MS
        ]
        self.cleaner.startup()
        for tp in self.future_logs:
            if tp in self.logs:
                self._start_move(tp)

    async def _complete_interrupted_swaps(self, scans: dict[str, tuple[list, list]]) -> None:
        """A future dir holding the swap marker was being swapped in when the broker stopped: it
        holds every record of the partition, so the old directory, if still there, goes the way
        of a deleted one, and the future dir takes the partition's name."""
        for path, (_currents, futures) in scans.items():
            log_dir = self.dirs_by_path[path]
            for tp, name, marked in list(futures):
                if not marked:
                    continue
                for other_path, (other_currents, _) in scans.items():
                    if tp in other_currents:
                        other_currents.remove(tp)
                        other_dir = self.dirs_by_path[other_path]
                        try:
                            await self._run_blocking(other_dir, _set_aside_for_deletion, other_path, tp)
                        except OSError as exc:
                            self._take_offline(other_dir, exc)
                try:
                    await self._run_blocking(log_dir, _finish_swap, log_dir.path, name, tp)
                except OSError as exc:
                    self._take_offline(log_dir, exc)
                    continue
                log.info("%s: completed the swap of its future replica in %s", tp, log_dir.path)
                futures.remove((tp, name, marked))
                scans[path][0].append(tp)

    async def _load_dir(
        self, log_dir: LogDir, partition_dirs: list[TopicPartition], futures: list[tuple[TopicPartition, str, bool]]
    ) -> None:
        try:
            recovery_points, start_offsets, cleaner_offsets, high_watermarks = await self._run_blocking(
                log_dir, _read_checkpoints, log_dir
            )
        except (OSError, CorruptCheckpointError) as exc:
            self._take_offline(log_dir, exc)
            return
        # num.recovery.threads.per.data.dir jobs, each loading its share one log after another
        # (Kafka's recovery threads). Before, each log was a job of its own on the dir's two
        # threads: the two took turns at the interpreter lock, every job woke the loop, and a
        # restart of 10,000 partitions took twice as long (benchmarks/RESULTS.md).
        jobs = max(1, self._settings.recovery_threads_per_dir)
        loads = [
            (
                tp,
                functools.partial(
                    Log.load,
                    os.path.join(log_dir.path, tp.dir_name),
                    tp,
                    self._config_for_topic(tp.topic),
                    log_start_offset=start_offsets.get(tp, 0),
                    recovery_point=recovery_points.get(tp, 0),
                    had_clean_shutdown=log_dir.had_clean_shutdown,
                    high_watermark=high_watermarks.get(tp, 0),
                    scheduler=self,
                    producer_id_expiration_ms=self._settings.producer_id_expiration_ms,
                ),
            )
            for tp in partition_dirs
        ]
        shares = await asyncio.gather(
            *(self._run_blocking(log_dir, _load_one_by_one, loads[job::jobs]) for job in range(jobs)),
            return_exceptions=True,
        )
        loaded_logs: dict[TopicPartition, Log] = {}
        for share in shares:
            if isinstance(share, OSError):
                self._take_offline(log_dir, share)
                return
            if isinstance(share, BaseException):
                raise share
            loaded_logs.update(share)
        for tp in partition_dirs:
            self._register(tp, loaded_logs[tp], log_dir)
        for tp, name, _ in futures:
            try:
                future = await self._run_blocking(
                    log_dir,
                    Log.load,
                    os.path.join(log_dir.path, name),
                    tp,
                    self._config_for_topic(tp.topic),
                    had_clean_shutdown=log_dir.had_clean_shutdown,
                    scheduler=self,
                    producer_id_expiration_ms=self._settings.producer_id_expiration_ms,
                )
            except OSError as exc:
                self._take_offline(log_dir, exc)
                return
            if tp in self.future_logs:
                raise KafkaStorageError(
                    f"{tp} has a future replica in both {self._future_dir_of[tp].path} and {log_dir.path}; "
                    "remove one before starting"
                )
            self._register_future(tp, future, log_dir)
        self.cleaner.load_checkpoint(
            {tp: offset for tp, offset in cleaner_offsets.items() if tp in self.logs}
        )
        await self._run_blocking(log_dir, _remove_clean_shutdown_marker, log_dir)

    def _register(self, tp: TopicPartition, loaded: Log, log_dir: LogDir) -> None:
        other = self._log_dir_of.get(tp)
        if other is not None and other is not log_dir:
            # Two copies of one partition: which holds the acknowledged records cannot be told,
            # so, as Kafka does, refuse to guess.
            raise KafkaStorageError(
                f"{tp} has a directory in both {other.path} and {log_dir.path}; "
                "remove the stale one before starting"
            )
        loaded.deferred_writes = self.deferred_writes
        self.logs[tp] = loaded
        self._log_dir_of[tp] = log_dir
        log_dir.logs.add(tp)

    def _register_future(self, tp: TopicPartition, future: Log, log_dir: LogDir) -> None:
        self.future_logs[tp] = future
        self._future_dir_of[tp] = log_dir
        log_dir.futures.add(tp)

    # ------------------------------------------------------------------- partitions come and go

    def get(self, tp: TopicPartition) -> Log | None:
        return self.logs.get(tp)

    def config_for(self, topic: str) -> LogConfig:
        return self._config_for_topic(topic)

    def is_offline(self, tp: TopicPartition) -> bool:
        """Whether the partition's log lived in a directory that has failed."""
        if tp in self._unplaced:
            return True
        log_dir = self._log_dir_of.get(tp)
        return log_dir is not None and not log_dir.online

    @property
    def has_online_dirs(self) -> bool:
        return any(d.online for d in self.dirs.values())

    def mark_unplaced(self, tp: TopicPartition) -> None:
        """An existing partition whose log is in no online dir while a dir is offline: it may
        well be in that dir, so it counts as offline instead of being created afresh."""
        offline = ", ".join(d.path for d in self.dirs.values() if not d.online)
        log.warning("%s is in no online log directory; offline, as its log may be in %s", tp, offline)
        self._unplaced.add(tp)

    def create(self, tp: TopicPartition, config: LogConfig) -> Log:
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        online = [d for d in self.dirs.values() if d.online]
        if not online:
            raise KafkaStorageError("no online log directory to create a partition in")
        preferred = self._preferred_dir.pop(tp, None)
        log_dir = preferred if preferred is not None and preferred.online else min(online, key=lambda d: len(d.logs))
        self._settle_deleted(tp, log_dir)
        created = self._new_log(log_dir, tp.dir_name, tp, config)
        self._register(tp, created, log_dir)
        return created

    def _new_log(self, log_dir: LogDir, name: str, tp: TopicPartition, config: LogConfig, **offsets) -> Log:
        """A new log of `tp` in the directory `name` of `log_dir`; an I/O error takes the dir
        offline and raises KafkaStorageError."""
        try:
            return Log.load(
                os.path.join(log_dir.path, name),
                tp,
                config,
                scheduler=self,
                producer_id_expiration_ms=self._settings.producer_id_expiration_ms,
                **offsets,
            )
        except OSError as exc:
            self._take_offline(log_dir, exc)
            raise KafkaStorageError(f"cannot create {name} in {log_dir.path}: {exc}") from exc

    def _settle_deleted(self, tp: TopicPartition, log_dir: LogDir) -> None:
        """Before `tp` gets a directory in `log_dir`: wait for work still under way on the old
        paths of a deleted `tp`, and rewrite the dir's checkpoints if they may still list it.
        Both block the loop, for about one fsync, and only when a name is created again soon
        after its deletion."""
        draining = self._draining.pop(tp, None)
        if draining:
            concurrent.futures.wait(draining)
        if any(tp in stale for stale in log_dir.stale_entries.values()):
            self._write_checkpoints_now(log_dir)

    def delete(self, tp: TopicPartition) -> None:
        """Remove a partition: its directory is renamed at once and removed after
        file.delete.delay.ms (see the module docstring)."""
        self._unplaced.discard(tp)
        self._preferred_dir.pop(tp, None)
        self.remove_future(tp)
        cleaning = self.cleaner.forget(tp)
        removed = self.logs.pop(tp, None)
        log_dir = self._log_dir_of.pop(tp, None)
        if removed is None or log_dir is None:
            return
        log_dir.logs.discard(tp)
        if log_dir.online:
            self._retire(tp, removed, log_dir, cleaning)

    def _retire(
        self, tp: TopicPartition, removed: Log, log_dir: LogDir, cleaning: concurrent.futures.Future | None
    ) -> None:
        """Rename the directory of `removed`, a log of `tp` no longer used (deleted, or replaced
        by its future replica), to -delete, and remove it after file.delete.delay.ms."""
        draining = self._path_work.pop(tp, set()) | ({cleaning} if cleaning is not None else set())
        if draining:  # an empty entry would stay for every deleted name never created again
            self._draining.setdefault(tp, set()).update(draining)
        if self._delete_dir_of(removed, log_dir, f"{removed.directory}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"):
            self._checkpoint_without(log_dir, tp)

    def _delete_dir_of(self, removed: Log, log_dir: LogDir, doomed: str) -> bool:
        """Rename the directory of `removed` to `doomed` (every path of the log follows it) and
        remove that after file.delete.delay.ms. False when the rename failed (the dir is then
        offline)."""
        epochs_write = self._writing.get(removed)
        if epochs_write is not None:
            epochs_write.queued = None
        try:
            os.rename(removed.directory, doomed)
        except OSError as exc:
            self._take_offline(log_dir, exc)
            return False
        removed.update_parent_dir(doomed)
        delay = removed.config.file_delete_delay_ms / 1000
        self._later(delay, self._run_blocking, log_dir, _delete_partition_dir, removed, doomed)
        return True

    def _checkpoint_without(self, log_dir: LogDir, tp: TopicPartition) -> None:
        """`tp` left `log_dir`: its checkpoints are written again without it, and until that is
        done a partition of the name made there waits for it (_settle_deleted)."""
        for path in (log_dir.checkpoint_path, log_dir.high_watermark_path):
            log_dir.stale_entries.setdefault(path, set()).add(tp)
        self._checkpoint_dir(log_dir)
        self._checkpoint_high_watermarks_of(log_dir)

    def set_aside(self, tp: TopicPartition) -> str | None:
        """Rename a partition that belongs to no known topic out of the way (Kafka's stray
        logs): a topic created later under its name must not find its records, and a lost
        topic list must not cost them either. Returns the new directory."""
        self.remove_future(tp)
        stray = self.logs.pop(tp, None)
        log_dir = self._log_dir_of.pop(tp, None)
        if stray is None or log_dir is None:
            return None
        log_dir.logs.discard(tp)
        self.cleaner.forget(tp)  # not started yet: set aside before anything is served
        aside = f"{stray.directory}.{uuid.uuid4().hex}{STRAY_DIR_SUFFIX}"
        stray.close()
        try:
            os.rename(stray.directory, aside)
        except OSError as exc:
            self._take_offline(log_dir, exc)
            return None
        self._checkpoint_without(log_dir, tp)
        return aside

    def truncate_to(self, tp: TopicPartition, offset: int) -> bool:
        """Truncate the partition's log (Log.truncate_to), calling off a cleaning of it under
        way: what the cleaner read may be gone, and appends after the cut could make the log
        look unchanged to its swap. Its first dirty offset is capped at the new log end."""
        truncated_log = self.logs[tp]
        if truncated_log.log_end_offset <= offset:
            # No record goes, so no cleaning to call off; the log still drops leader epochs
            # begun past `offset` (a leader that wrote nothing in its epoch, now following).
            return truncated_log.truncate_to(offset)
        self.cleaner.abort(tp)
        truncated = truncated_log.truncate_to(offset)
        self.cleaner.cap_first_dirty_offset(tp, truncated_log.log_end_offset)
        self._truncate_future(tp, lambda future: future.truncate_to(truncated_log.log_end_offset))
        return truncated

    def truncate_fully_and_start_at(self, tp: TopicPartition, offset: int) -> None:
        truncated_log = self.logs[tp]
        self.cleaner.abort(tp)
        truncated_log.truncate_fully_and_start_at(offset)
        self.cleaner.cap_first_dirty_offset(tp, offset)
        self._truncate_future(tp, lambda future: future.truncate_fully_and_start_at(offset))

    def _truncate_future(self, tp: TopicPartition, truncate: Callable[[Log], object]) -> None:
        """The current log was cut: so is the copy a move is making of it (a prefix of it)."""
        future = self.future_logs.get(tp)
        if future is None:
            return
        try:
            truncate(future)
        except OSError as exc:
            self._take_offline(self._future_dir_of[tp], exc)

    def handle_io_error(self, tp: TopicPartition, exc: OSError) -> KafkaStorageError:
        """A write to the partition's log failed: take its whole directory offline."""
        log_dir = self._log_dir_of.get(tp)
        if log_dir is not None:
            self._take_offline(log_dir, exc)
        return KafkaStorageError(f"log directory of {tp} failed: {exc}")

    def _deferred_write_failed(self, path: str, exc: OSError) -> None:
        """Appends a connection deferred failed to reach `path` (a segment's .log): its log dir
        goes offline, as when an append fails at once."""
        partition_dir = os.path.dirname(os.path.abspath(path))
        for log_dir in self.dirs.values():
            if os.path.dirname(partition_dir) == log_dir.path:
                self._take_offline(log_dir, exc)
                return

    def _take_offline(self, log_dir: LogDir, exc: BaseException) -> None:
        if not log_dir.online:
            return
        log.error("log directory %s is offline: %s", log_dir.path, exc)
        log_dir.online = False
        self.has_offline_dirs = True
        for tp in list(log_dir.logs):
            self.logs.pop(tp, None)
            self._stop_move(tp)
        for tp in list(log_dir.futures):
            self._stop_move(tp)
            self.future_logs.pop(tp, None)
            self._future_dir_of.pop(tp, None)
        log_dir.futures.clear()
        for listener in self._offline_listeners:
            listener(log_dir.path)

    # ------------------------------------------------------------- log dirs, for operators

    def add_offline_listener(self, listener: Callable[[str], None]) -> None:
        """`listener(path)` is called on the loop when a log dir goes offline (an I/O error),
        after its partitions stopped serving."""
        self._offline_listeners.append(listener)

    @property
    def offline_dir_count(self) -> int:
        """Log dirs that have failed (Kafka's OfflineLogDirectoryCount)."""
        return sum(not d.online for d in self.dirs.values())

    def log_dir_of(self, tp: TopicPartition) -> str | None:
        """The path of the dir holding the partition's current log."""
        log_dir = self._log_dir_of.get(tp)
        return None if log_dir is None else log_dir.path

    async def describe_dirs(self, partitions: set[TopicPartition] | None) -> list[LogDirDescription]:
        """Each log dir with its volume's total and usable bytes and, per log of `partitions`
        (every log when None) it holds, the size, offset lag and whether it is a future replica
        (Kafka's describeLogDirs): a current log's lag is how far its end is below the high
        watermark, a future's how far it is behind the current log."""
        descriptions = []
        for log_dir in self.dirs.values():
            if not log_dir.online:
                descriptions.append(LogDirDescription(log_dir.path, online=False))
                continue
            try:
                total, usable = await self._run_blocking(log_dir, _volume_bytes, log_dir.path)
            except OSError as exc:
                self._take_offline(log_dir, exc)
                descriptions.append(LogDirDescription(log_dir.path, online=False))
                continue
            replicas = []
            for tp in sorted(log_dir.logs):
                current = self.logs.get(tp)
                if current is not None and (partitions is None or tp in partitions):
                    lag = max(current.high_watermark - current.log_end_offset, 0)
                    replicas.append(ReplicaDescription(tp, current.size_in_bytes, lag, False))
            for tp in sorted(log_dir.futures):
                future = self.future_logs.get(tp)
                if future is not None and (partitions is None or tp in partitions):
                    current = self.logs.get(tp)
                    lag = -1 if current is None else current.log_end_offset - future.log_end_offset
                    replicas.append(ReplicaDescription(tp, future.size_in_bytes, lag, True))
            descriptions.append(LogDirDescription(log_dir.path, True, total, usable, replicas))
        return descriptions

    # ------------------------------------------------------------------ moving a replica

    def add_swap_listener(self, listener: Callable[[TopicPartition, Log], None]) -> None:
        """`listener(tp, log)` is called on the loop when a moved replica's future log has
        replaced the current one: `log` is the partition's log from then on."""
        self._swap_listeners.append(listener)

    def move(self, tp: TopicPartition, path: str) -> bool:
        """Move the partition's log to the log dir at `path` (AlterReplicaLogDirs, Kafka's
        alterReplicaLogDirs on the log side). Raises LogDirNotFoundError for a path that is not
        a log dir, KafkaStorageError when that dir is offline. A move to another dir under way
        is given up first. Without a log of `tp` here, the dir is remembered for its creation
        and ReplicaNotAvailableError raised. No move is made to the dir holding the log; a
        future log is created otherwise (KafkaStorageError while any dir is offline, as the
        partition might have a log there). True when a move started."""
        target = self.dirs_by_path.get(os.path.normpath(path)) if os.path.isabs(path) else None
        if target is None:
            raise LogDirNotFoundError(f"Log dir {path} is not found in the config.")
        if not target.online:
            raise KafkaStorageError(f"Log directory {target.path} is offline")
        if self.is_offline(tp):
            raise KafkaStorageError(f"Partition {tp} is offline")
        if self._future_dir_of.get(tp, target) is not target:
            self.remove_future(tp)
        current = self.logs.get(tp)
        if current is None:
            self._preferred_dir[tp] = target
            raise ReplicaNotAvailableError(f"Replica of {tp} is not available on this broker")
        if self._log_dir_of[tp] is target:
            log.info("%s is already in %s: no move", tp, target.path)
            self.remove_future(tp)
            return False
        if tp in self.future_logs:
            return False
        if self.has_offline_dirs:
            offline = ",".join(d.path for d in self.dirs.values() if not d.online)
            raise KafkaStorageError(f"Can not create log for {tp} because log directories {offline} are offline")
        name = f"{tp.dir_name}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"
        future = self._new_log(target, name, tp, current.config, log_start_offset=current.log_start_offset)
        self._register_future(tp, future, target)
        log.info("%s: moving from %s to %s", tp, self._log_dir_of[tp].path, target.path)
        self._start_move(tp)
        return True

    def remove_future(self, tp: TopicPartition) -> None:
        """Give up the partition's move: its future log goes the way of a deleted log."""
        self._stop_move(tp)
        future = self.future_logs.pop(tp, None)
        log_dir = self._future_dir_of.pop(tp, None)
        if future is None or log_dir is None:
            return
        log_dir.futures.discard(tp)
        if log_dir.online:  # <topic>-<partition>.<id>-future becomes <topic>-<partition>.<id>-delete
            self._delete_dir_of(future, log_dir, f"{future.directory[: -len(FUTURE_DIR_SUFFIX)]}{DELETE_DIR_SUFFIX}")

    def _start_move(self, tp: TopicPartition) -> None:
        self._stop_move(tp)
        task = self._moves[tp] = asyncio.ensure_future(self._copy_into_future(tp, self.future_logs[tp]))
        task.add_done_callback(functools.partial(self._move_done, tp))

    def _stop_move(self, tp: TopicPartition) -> None:
        task = self._moves.pop(tp, None)
        if task is not None:
            task.cancel()

    def _move_done(self, tp: TopicPartition, task: asyncio.Task) -> None:
        if self._moves.get(tp) is task:
            del self._moves[tp]
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: the move to another log dir failed", tp, exc_info=task.exception())

    async def _copy_into_future(self, tp: TopicPartition, future: Log) -> None:
        """Copy the current log into `future` until it has caught up, then swap it in."""
        future_dir = self._future_dir_of[tp]
        while self.future_logs.get(tp) is future and not self._shutting_down:
            current = self.logs.get(tp)
            if current is None:
                return  # the current log's dir failed: the future stays, idle
            try:
                self._follow_log_start(current, future)
            except OSError as exc:
                self._take_offline(future_dir, exc)
                return
            if future.log_end_offset >= current.log_end_offset:
                epochs_write = self._writing.get(future)
                if epochs_write is None:
                    self._swap_in(tp, current, future)
                    return
                # It writes by the future dir's path, which the swap renames: let it end first.
                await asyncio.wait([asyncio.wrap_future(epochs_write.running)])
                continue
            if self.move_quota.is_quota_exceeded():
                await asyncio.sleep(self._settings.move_backoff_ms / 1000)
                continue
            end, truncations = future.log_end_offset, current.truncations
            try:
                region = current.read(end, MOVE_CHUNK_BYTES, current.log_end_offset, True)
                chunk = b"" if region is None else await self._run_blocking(self._dir_holding(current), region.read)
            except OSError as exc:
                if self.logs.get(tp) is current:
                    self.handle_io_error(tp, exc)
                return
            if (
                self.future_logs.get(tp) is not future
                or self.logs.get(tp) is not current
                or future.log_end_offset != end
                or current.truncations != truncations
            ):
                continue  # changed while read: read again what is there now
            try:
                first = next(iter_batches(chunk), None)
                if first is not None and first[1].base_offset < end == future.log_start_offset:
                    # The current log starts inside this batch (DeleteRecords): the copy starts
                    # with the whole batch, as Kafka's future replica does.
                    future.truncate_fully_and_start_at(first[1].base_offset)
                future.append_as_follower(memoryview(chunk))
            except OSError as exc:
                self._take_offline(future_dir, exc)
                return
            self.move_quota.record(len(chunk))
            future.high_watermark = min(current.high_watermark, future.log_end_offset)

    @staticmethod
    def _follow_log_start(current: Log, future: Log) -> None:
        """Records below the current log's start (retention, DeleteRecords) are not copied, and
        those already copied go from the future log too. A tiered log's copy starts at its local
        log start and keeps its (remote) log start."""
        start = current.local_log_start_offset
        if future.log_end_offset < start:
            future.truncate_fully_and_start_at(start)
        elif future.local_log_start_offset < start:
            future.high_watermark = max(future.high_watermark, min(start, future.log_end_offset))
            future.delete_records_before(start)
        if future.config.remote_storage_enable:
            future.log_start_offset = min(current.log_start_offset, future.local_log_start_offset)
            future.highest_remote_offset = current.highest_remote_offset

    def _swap_in(self, tp: TopicPartition, current: Log, future: Log) -> None:
        """The future log holds every record of the current one: it becomes the partition's
        log, in one loop callback (no append can come between the check and the swap)."""
        source, target = self._log_dir_of[tp], self._future_dir_of[tp]
        self._settle_deleted(tp, target)
        directory = os.path.join(target.path, tp.dir_name)
        try:
            _mark_swap(future.directory)
            os.rename(future.directory, directory)
        except OSError as exc:
            self._take_offline(target, exc)
            return
        future.update_parent_dir(directory)
        future.high_watermark = current.high_watermark
        future.take_leader_epochs(current.leader_epochs.entries)  # written by the new path
        del self.future_logs[tp], self._future_dir_of[tp]
        target.futures.discard(tp)
        cleaning = self.cleaner.forget(tp)
        source.logs.discard(tp)
        future.deferred_writes = self.deferred_writes
        self.logs[tp] = future
        self._log_dir_of[tp] = target
        target.logs.add(tp)
        for listener in self._swap_listeners:
            listener(tp, future)
        self._retire(tp, current, source, cleaning)
        try:
            os.unlink(os.path.join(directory, SWAP_MARKER))
        except OSError as exc:
            self._take_offline(target, exc)
            return
        log.info("%s: moved from %s to %s", tp, source.path, target.path)
        self._checkpoint_dir(target)

    # ------------------------------------------------------------ LogScheduler, for the logs

    def flush(self, flushed_log: Log, up_to_offset: int) -> asyncio.Future:
        files = flushed_log.files_to_flush(up_to_offset)
        truncations = flushed_log.truncations
        future = self._run_blocking(self._dir_holding(flushed_log), _flush_files, files)

        def done(f: asyncio.Future) -> None:
            if f.cancelled():
                return
            exc = f.exception()
            tp = flushed_log.topic_partition
            if isinstance(exc, OSError) and self.logs.get(tp) is flushed_log:
                self.handle_io_error(tp, exc)
            elif exc is None:
                self.on_flush(f.result())
                flushed_log.mark_flushed(up_to_offset, truncations)

        future.add_done_callback(done)  # before any other: the log is marked flushed first
        return future

    def delete_segments(self, owner: Log, segments: list[LogSegment]) -> None:
        delay = owner.config.file_delete_delay_ms / 1000
        self._later(delay, self._delete_segments_now, owner, segments)

    def _delete_segments_now(self, owner: Log, segments: list[LogSegment]) -> None:
        tp = owner.topic_partition
        if self.logs.get(tp) is owner:
            self._submit(self._dir_holding(owner), _delete_segment_files, segments, path_of=tp)
        else:
            # The partition was deleted (the files went with its directory) or its dir failed
            # (the next load removes .deleted files): unlinking by path could hit a new
            # partition of the name.
            self._run_blocking(self._dir_holding(owner), _release_segments, segments)

    def write_leader_epochs(self, owner: Log, entries: list[EpochEntry]) -> None:
        tp = owner.topic_partition

        def failed(exc: OSError) -> None:
            if self.logs.get(tp) is owner:  # a deleted partition's file may be gone: no matter
                self.handle_io_error(tp, exc)

        # The file's writer is taken from the Log here, on the loop: the thread touches no Log.
        write = functools.partial(owner.leader_epochs.write, entries)
        self._write_in_background(self._dir_holding(owner), owner, lambda: write, failed, path_of=tp)

    def write_index_entries_soon(self, owner: Log) -> None:
        # One timer for every log that asks in its window, not one per log.
        if not self._index_writes:
            self._later(_INDEX_WRITE_DELAY_S, self._write_index_entries)
        self._index_writes.append(owner)

    def _write_index_entries(self) -> None:
        owners, self._index_writes = self._index_writes, []
        for owner in owners:
            try:
                owner.write_pending_index_entries()
            except OSError as exc:
                tp = owner.topic_partition
                if self.logs.get(tp) is owner:
                    self.handle_io_error(tp, exc)
                elif self.future_logs.get(tp) is owner:
                    self._take_offline(self._future_dir_of[tp], exc)

    # ----------------------------------------------------------------------- periodic work

    def apply_retention(self) -> None:
        for tp, partition_log in list(self.logs.items()):
            try:
                deleted = partition_log.apply_retention()
            except OSError as exc:
                self.handle_io_error(tp, exc)
                continue
            if deleted:
                log.info("%s: retention deleted %d segment(s)", tp, deleted)

    def remove_expired_producers(self) -> None:
        now_ms = int(time.time() * 1000)
        for tp, partition_log in self.logs.items():
            expired = partition_log.producer_state.remove_expired_producers(now_ms)
            if expired:
                log.info("%s: %d producer id(s) expired", tp, expired)

    def _flush_by_time(self) -> None:
        now = time.time() * 1000
        for partition_log in self.logs.values():
            if now - partition_log.last_flush_ms >= partition_log.config.flush_ms:
                partition_log.flush()

    def checkpoint(self, recovery_points: bool = True, start_offsets: bool = True) -> None:
        """Write the recovery points (with the cleaner offsets) and the log start offsets of
        every online dir, or only one of the two."""
        for log_dir in self.dirs.values():
            self._checkpoint_dir(log_dir, recovery_points, start_offsets)

    def checkpoint_dir_of(self, tp: TopicPartition) -> None:
        """Write the checkpoints of the dir holding `tp` (the cleaner moved its offset)."""
        log_dir = self._log_dir_of.get(tp)
        if log_dir is not None:
            self._checkpoint_dir(log_dir)

    async def write_checkpoints_of(self, partitions: Iterable[TopicPartition]) -> None:
        """Write the checkpoints of the dirs holding `partitions` and return once they are on
        disk (DeleteRecords answers then: a crash must not bring deleted records back).
        KafkaStorageError when a write failed (its dir is then offline)."""
        dirs = {id(d): d for tp in partitions if (d := self._log_dir_of.get(tp)) is not None}
        failures = await asyncio.gather(*(self._checkpoint_dir(d) for d in dirs.values()))
        failed = [failure for failure in failures if failure is not None]
        if failed:
            raise KafkaStorageError(f"cannot write the checkpoints: {failed[0]}")

    def checkpoint_high_watermarks(self) -> None:
        for log_dir in self.dirs.values():
            self._checkpoint_high_watermarks_of(log_dir)

    def _checkpoint_high_watermarks_of(self, log_dir: LogDir) -> None:
        if not log_dir.online or self._shutting_down:
            return
        path = log_dir.high_watermark_path

        def snapshot() -> Callable[[], None]:
            high_watermarks = self._high_watermarks(log_dir)
            return self._forgetting_stale(log_dir, path, lambda: OffsetCheckpointFile(path).write(high_watermarks))

        self._write_in_background(log_dir, path, snapshot, lambda exc: self._take_offline(log_dir, exc))

    def _checkpoint_dir(
        self, log_dir: LogDir, recovery_points: bool = True, start_offsets: bool = True
    ) -> asyncio.Future:
        """Write the dir's checkpoints (the recovery points with the cleaner offsets, the log
        start offsets, or both); a future of the outcome (see _write_in_background)."""
        if not log_dir.online or self._shutting_down:  # shutdown writes them itself
            outcome = (self._loop or asyncio.get_running_loop()).create_future()
            outcome.set_result(None if log_dir.online else OSError(f"{log_dir.path} is offline"))
            return outcome
        path = log_dir.checkpoint_path
        log_dir.recovery_points_due |= recovery_points
        log_dir.start_offsets_due |= start_offsets

        def snapshot() -> Callable[[], None]:
            recovery, start = log_dir.recovery_points_due, log_dir.start_offsets_due
            log_dir.recovery_points_due = log_dir.start_offsets_due = False
            offsets = self._checkpoint_snapshot(log_dir, recovery, start)
            write = functools.partial(_write_checkpoints, log_dir, *offsets)
            if recovery and start:  # a deleted partition has left the files once all are written
                return self._forgetting_stale(log_dir, path, write)
            return write

        return self._write_in_background(log_dir, path, snapshot, lambda exc: self._take_offline(log_dir, exc))

    def _forgetting_stale(self, log_dir: LogDir, path: str, write: Callable[[], None]) -> Callable[[], None]:
        """`write` of the checkpoint file at `path`, a snapshot of this moment: once it is done,
        the partitions deleted before now are no longer listed in it."""
        forgotten = set(log_dir.stale_entries.get(path, ()))
        loop = self._loop or asyncio.get_running_loop()

        def write_then_forget() -> None:
            write()
            if forgotten:
                loop.call_soon_threadsafe(lambda: log_dir.stale_entries.get(path, set()).difference_update(forgotten))

        return write_then_forget

    def _write_checkpoints_now(self, log_dir: LogDir) -> None:
        """Write the dir's checkpoints on the loop, after the background writes under way and in
        place of those queued."""
        paths = (log_dir.checkpoint_path, log_dir.high_watermark_path)
        for path in paths:
            write = self._writing.get(path)
            if write is not None:
                concurrent.futures.wait([write.running])
                write.queued = None
        try:
            _write_checkpoints(log_dir, *self._checkpoint_snapshot(log_dir))
            OffsetCheckpointFile(log_dir.high_watermark_path).write(self._high_watermarks(log_dir))
        except OSError as exc:
            self._take_offline(log_dir, exc)
            raise KafkaStorageError(f"cannot write the checkpoints of {log_dir.path}: {exc}") from exc
        log_dir.stale_entries.clear()

    def _checkpoint_snapshot(
        self, log_dir: LogDir, recovery_points: bool = True, start_offsets: bool = True
    ) -> tuple[dict | None, dict | None, dict | None]:
        """The offsets `_write_checkpoints` writes: recovery points, log start offsets and
        cleaner offsets, None for a file not written this time."""
        logs = {tp: self.logs[tp] for tp in log_dir.logs if tp in self.logs}
        return (
            {tp: partition_log.recovery_point for tp, partition_log in logs.items()} if recovery_points else None,
            {tp: partition_log.log_start_offset for tp, partition_log in logs.items()} if start_offsets else None,
            self.cleaner.checkpoint_offsets(set(logs)) if recovery_points else None,
        )

    def _high_watermarks(self, log_dir: LogDir) -> dict[TopicPartition, int]:
        return {tp: self.logs[tp].high_watermark for tp in log_dir.logs if tp in self.logs}

    def _write_in_background(
        self,
        log_dir: LogDir,
        key: object,
        snapshot: Callable[[], Callable[[], None]],
        on_error: Callable[[OSError], None],
        path_of: TopicPartition | None = None,
    ) -> asyncio.Future:
        """Run the write that `snapshot()` makes on `log_dir`'s threads, after the write under way
        for `key` if there is one (a slow fsync): then only the latest of the writes asked for
        meanwhile runs, snapshotting when it starts. Returns a future of the first write to
        snapshot after this call: its result is the OSError that failed it, or None."""
        loop = self._loop or asyncio.get_running_loop()
        under_way = self._writing.get(key)
        if under_way is not None:
            under_way.queued = snapshot
            if under_way.queued_written is None:
                under_way.queued_written = loop.create_future()
            return under_way.queued_written
        written = loop.create_future()
        self._start_write(log_dir, key, snapshot, on_error, path_of, written)
        return written

    def _start_write(
        self,
        log_dir: LogDir,
        key: object,
        snapshot: Callable[[], Callable[[], None]],
        on_error: Callable[[OSError], None],
        path_of: TopicPartition | None,
        written: asyncio.Future,
    ) -> None:
        work, future = self._submit(log_dir, snapshot(), path_of=path_of)
        self._writing[key] = _BackgroundWrite(work)

        def done(f: asyncio.Future) -> None:
            failure = None if f.cancelled() else f.exception()
            if isinstance(failure, OSError):
                on_error(failure)
            if not written.done():
                written.set_result(failure)
            finished = self._writing.pop(key, None)
            if finished is None or finished.queued_written is None:
                return
            if finished.queued is not None:
                self._start_write(log_dir, key, finished.queued, on_error, path_of, finished.queued_written)
            elif not finished.queued_written.done():  # written meanwhile on the loop
                finished.queued_written.set_result(None)

        future.add_done_callback(done)

    # ---------------------------------------------------------------------------- shutdown

    async def shutdown(self) -> None:
        """Stop the cleaner; flush everything, checkpoint, close, and mark each online dir
        cleanly shut down."""
        await self.cleaner.shutdown()
        self._shutting_down = True
        for tp in list(self._moves):
            self._stop_move(tp)
        for task in self._periodic:
            task.cancel()
        await asyncio.gather(*self._periodic, return_exceptions=True)
        # Each dir on its own threads, all at once: a slow disk does not hold the others.
        await asyncio.gather(*(self._shut_down_dir(log_dir) for log_dir in self.dirs.values()))
        self._stop_threads()

    async def _shut_down_dir(self, log_dir: LogDir) -> None:
        """Let the dir's work under way end; then, if the dir is online, flush and close its logs,
        write its checkpoints and its clean-shutdown marker."""
        pending = self._pending[log_dir.path]
        while pending:  # a finished write may start the one queued behind it
            await asyncio.gather(*list(pending), return_exceptions=True)
        if not log_dir.online:
            return
        logs = [self.logs[tp] for tp in log_dir.logs if tp in self.logs]
        futures = [self.future_logs[tp] for tp in log_dir.futures if tp in self.future_logs]
        try:
            snapshots = []
            for future in futures:  # flushed and closed; a restart goes on copying into them
                await self._run_blocking(log_dir, _flush_logs_fully, [future], [])
                future.close()
            flushed = []
            for partition_log in logs:
                partition_log.take_producer_snapshot()
                end = partition_log.log_end_offset
                snapshots += partition_log.producer_state.pop_unflushed(end)
                flushed.append((partition_log, end, partition_log.truncations))
            await self._run_blocking(log_dir, _flush_logs_fully, logs, snapshots)
            for partition_log, end, truncations in flushed:
                partition_log.mark_flushed(end, truncations)
            await self._run_blocking(log_dir, _write_checkpoints, log_dir, *self._checkpoint_snapshot(log_dir))
            await self._run_blocking(
                log_dir,
                OffsetCheckpointFile(log_dir.high_watermark_path).write,
                self._high_watermarks(log_dir),
            )
            for partition_log in logs:
                partition_log.close()
            await self._run_blocking(log_dir, _write_clean_shutdown_marker, log_dir)
        except OSError as exc:
            self._take_offline(log_dir, exc)

    def _stop_threads(self) -> None:
        """Let the work given to the dirs' threads end, and stop them."""
        for threads in self._threads.values():
            threads.shutdown(wait=True)

    # ----------------------------------------------------------------------------- helpers

    def _run_blocking(self, log_dir: LogDir, fn: Callable, *args, **kwargs) -> asyncio.Future:
        return self._submit(log_dir, fn, *args, **kwargs)[1]

    def _submit(
        self, log_dir: LogDir, fn: Callable, *args, path_of: TopicPartition | None = None, **kwargs
    ) -> tuple[concurrent.futures.Future, asyncio.Future]:
        """Run `fn` on `log_dir`'s threads (its disk's work): the work, and a future of it on
        the loop. `path_of`: it works on that partition's files by their paths, and a deletion
        of the partition must let it finish before a new directory of the name is made."""
        loop = self._loop or asyncio.get_running_loop()
        work = self._threads[log_dir.path].submit(lambda: fn(*args, **kwargs))
        future = asyncio.wrap_future(work, loop=loop)
        pending = self._pending[log_dir.path]
        pending.add(future)
        future.add_done_callback(pending.discard)
        if path_of is not None:
            self._path_work.setdefault(path_of, set()).add(work)
            future.add_done_callback(lambda _: self._forget_path_work(path_of, work))
        return work, future

    def _dir_holding(self, owner: Log) -> LogDir:
        """The dir whose disk holds `owner`'s files, a current, future or deleted log alike: its
        directory (renamed or not) is always right under the dir's path."""
        return self.dirs_by_path[os.path.dirname(owner.directory)]

    def _forget_path_work(self, tp: TopicPartition, work: concurrent.futures.Future) -> None:
        for registry in (self._path_work, self._draining):
            works = registry.get(tp)
            if works is not None:
                works.discard(work)
                if not works:
                    del registry[tp]

    def _later(self, delay_s: float, fn: Callable[..., Awaitable], *args) -> None:
        loop = self._loop or asyncio.get_running_loop()
        loop.call_later(delay_s, lambda: fn(*args))

    @staticmethod
    async def _every(interval_ms: int, fn: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            fn()


# ------------------------------------------------------ blocking work, on a dir's threads


def _prepare_dir(log_dir: LogDir) -> None:
    os.makedirs(log_dir.path, exist_ok=True)
    probe = os.path.join(log_dir.path, ".logway-write-probe")
    with open(probe, "w") as f:
        f.write("ok")
    os.unlink(probe)
    log_dir.had_clean_shutdown = os.path.exists(os.path.join(log_dir.path, CLEAN_SHUTDOWN_FILE))


def _load_one_by_one(loads: list[tuple[TopicPartition, Callable[[], Log]]]) -> list[tuple[TopicPartition, Log]]:
    """On a dir's thread: the logs, loaded in turn; the first failure ends the share (raised)."""
    return [(tp, load()) for tp, load in loads]


def _read_checkpoints(log_dir: LogDir) -> tuple[dict, dict, dict, dict]:
    return (
        OffsetCheckpointFile(os.path.join(log_dir.path, RECOVERY_POINT_CHECKPOINT)).read(),
        OffsetCheckpointFile(os.path.join(log_dir.path, LOG_START_OFFSET_CHECKPOINT)).read(),
        _read_cleaner_checkpoint(log_dir),
        OffsetCheckpointFile(os.path.join(log_dir.path, HIGH_WATERMARK_CHECKPOINT)).read(),
    )


def _read_cleaner_checkpoint(log_dir: LogDir) -> dict:
    """A corrupt cleaner checkpoint is only a loss of work: cleaning starts over from the log
    start, which is always safe."""
    path = os.path.join(log_dir.path, CLEANER_OFFSET_CHECKPOINT)
    try:
        return OffsetCheckpointFile(path).read()
    except CorruptCheckpointError as exc:
        log.warning("ignoring %s: %s", path, exc)
        return {}


def _write_checkpoints(
    log_dir: LogDir, recovery_points: dict | None, start_offsets: dict | None, cleaner_offsets: dict | None
) -> None:
    for name, offsets in (
        (RECOVERY_POINT_CHECKPOINT, recovery_points),
        (LOG_START_OFFSET_CHECKPOINT, start_offsets),
        (CLEANER_OFFSET_CHECKPOINT, cleaner_offsets),
    ):
        if offsets is not None:
            OffsetCheckpointFile(os.path.join(log_dir.path, name)).write(offsets)


def _scan_dir(log_dir: LogDir) -> tuple[list[TopicPartition], list[tuple[TopicPartition, str, bool]]]:
    """The partition directories to load, and the future replicas (partition, directory name,
    whether it holds the swap marker, as does a partition directory a crash left mid-swap);
    leftovers of deletions are removed on the way."""
    found, futures = [], []
    for name in sorted(os.listdir(log_dir.path)):
        path = os.path.join(log_dir.path, name)
        if not os.path.isdir(path):
            continue
        if name.endswith(DELETE_DIR_SUFFIX):
            shutil.rmtree(path, ignore_errors=True)
            continue
        if name.endswith(STRAY_DIR_SUFFIX):
            continue
        if name.endswith(FUTURE_DIR_SUFFIX):
            partition_name, dot, _unique = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
            tp = TopicPartition.from_dir_name(partition_name) if dot else None
            if tp is not None:
                futures.append((tp, name, os.path.exists(os.path.join(path, SWAP_MARKER))))
            continue
        tp = TopicPartition.from_dir_name(name)
        if tp is not None and os.path.exists(os.path.join(path, SWAP_MARKER)):
            futures.append((tp, name, True))  # renamed already; the old directory may be left
        elif tp is not None:
            found.append(tp)
    return found, futures


def _mark_swap(directory: str) -> None:
    with open(os.path.join(directory, SWAP_MARKER), "w"):
        pass


def _finish_swap(log_dir_path: str, future_name: str, tp: TopicPartition) -> None:
    """Complete a swap a crash interrupted: the future dir takes the partition's name (if it has
    not yet)."""
    directory = os.path.join(log_dir_path, tp.dir_name)
    if future_name != tp.dir_name:
        os.rename(os.path.join(log_dir_path, future_name), directory)
    os.unlink(os.path.join(directory, SWAP_MARKER))


def _set_aside_for_deletion(log_dir_path: str, tp: TopicPartition) -> None:
    """The old directory of a partition whose swap a crash interrupted: renamed, then removed."""
    doomed = os.path.join(log_dir_path, f"{tp.dir_name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
    os.rename(os.path.join(log_dir_path, tp.dir_name), doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _volume_bytes(path: str) -> tuple[int, int]:
    """Total and usable bytes of the file system holding `path` (Java's FileStore)."""
    stats = os.statvfs(path)
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


def _remove_clean_shutdown_marker(log_dir: LogDir) -> None:
    """From now on a crash must be noticed by the next start."""
    try:
        os.unlink(os.path.join(log_dir.path, CLEAN_SHUTDOWN_FILE))
    except FileNotFoundError:
        pass


def _write_clean_shutdown_marker(log_dir: LogDir) -> None:
    with open(os.path.join(log_dir.path, CLEAN_SHUTDOWN_FILE), "w"):
        pass


def _flush_files(files: list[LogSegment | SnapshotFile]) -> float:
    """Flush the files; return how long it took (s)."""
    started = time.monotonic()
    for file in files:
        file.flush()
    return time.monotonic() - started


def _flush_logs_fully(logs: list[Log], snapshots: list[SnapshotFile]) -> None:
    for partition_log in logs:
        _flush_files(partition_log.segments)
    _flush_files(snapshots)


def _delete_segment_files(segments: list[LogSegment]) -> None:
    for segment in segments:
        segment.delete()


def _release_segments(segments: list[LogSegment]) -> None:
    for segment in segments:
        segment.release()


def _delete_partition_dir(removed: Log, directory: str) -> None:
    """Remove a deleted partition's renamed directory, touching nothing outside it (a leftover
    is removed by the next start)."""
    removed.release()
    shutil.rmtree(directory, ignore_errors=True)

