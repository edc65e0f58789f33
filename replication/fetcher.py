"""Followers fetching from their leaders (Kafka's ReplicaFetcherManager and ReplicaFetcherThread).

The manager keeps one fetcher per (source broker, fetcher id); a partition goes to fetcher
hash(topic, partition) mod num.replica.fetchers of its leader's broker, so with the default of 1
each leader is fetched from by one task carrying all the partitions this broker follows there.

A fetcher is one asyncio task looping over:
1. Truncation by epoch for the partitions that just became followers (or were told to by a
   diverging epoch): OffsetForLeaderEpoch (v3, replica_id set) asking the leader where the
   follower's latest epoch ends, then truncating (Kafka's getOffsetTruncationState):
   - the leader does not know the epoch (UNDEFINED offset): fall back to the high watermark;
   - it answers the same epoch: truncate to min(its end offset, ours for that epoch) — done;
   - it answers an epoch E we never had: truncate to where our largest epoch below E ends,
     and ask again about that one (the logs may have diverged inside it too); epochs only go
     down, so this ends.
2. A Fetch (v12, replica_id = this broker, replica.fetch.wait.max.ms, replica.fetch.min.bytes,
   replica.fetch.max.bytes per partition, replica.fetch.response.max.bytes in all) from each
   partition's log end offset, with the current leader epoch and the last fetched epoch. Records
   are appended as they come (Log.append_as_follower; the appends are plain writes, flushes stay
   where they are; when flush.messages makes an append flush, the next fetch waits for that
   fsync, so that an acks=all answer counts only fsynced copies, as in Kafka), and the
   follower's HW becomes min(leader HW, log end): consumers reading from this follower
   (KIP-392) read up to it. The follower's log start offset follows the
   leader's (DeleteRecords, retention; up to the HW), and once raised is written to the log
   dir's checkpoint before the next fetch reports it (the leader's low watermark, which a
   DeleteRecords waits for, counts it). A diverging_epoch in the answer truncates there first
   and fetches again. The fetches go in an incremental fetch session (KIP-227,
   replication.fetch_session): after the first, each names only the partitions whose fetch
   offset or other parameters changed, and the answer only those with something new, so an
   idle follower of 10,000 partitions sends and receives a few bytes a fetch. A session error
   makes the next fetch a full one, at once.

Errors: a failed request (connection, timeout) backs the whole fetcher off
replica.fetch.backoff.ms. Per partition, NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH and
UNKNOWN_TOPIC_OR_PARTITION (the leader has not caught up with the controller yet) back that
partition off and retry; FENCED_LEADER_EPOCH (we are behind) and a local storage failure stop
fetching it until the next LeaderAndIsr; OFFSET_OUT_OF_RANGE truncates to the leader's log end
(when we are beyond it) or restarts the log at the leader's log start offset (when behind it).
OFFSET_MOVED_TO_TIERED_STORAGE (a tiered log, our fetch offset below the leader's local log
start) restarts the log from the remote store (`_start_from_remote`, Kafka's
ReplicaFetcherTierStateMachine): the leader's local log start (ListOffsets -4) and log start
(-2), then the leader epochs and producer snapshot of the remote segment holding the offset
before that local start, and the log restarted at that segment's end; a failure there (that
segment's metadata not loaded here yet, the store failing) backs the partition off; without
tiered storage here the partition stops until the next LeaderAndIsr.

Replication quota (FetcherSettings.quota, the broker's follower quota, Kafka's
shouldFollowerThrottle): a partition the quota throttles that has not caught up with its leader
(lag 0 at the last fetch) is left out of the fetch while the quota is exceeded; when that leaves
nothing to fetch the fetcher waits replica.fetch.backoff.ms. The bytes fetched for throttled
partitions are recorded against it.

Everything runs on the event loop; a response is applied only to the partitions still fetched
at the epoch they were asked for.
"""

import asyncio
import logging
import ssl
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.fetch import READ_UNCOMMITTED, FetchRequest, PartitionResult
from storage.checkpoint import CorruptCheckpointError
from storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from storage.log_manager import NO_QUOTA, ByteRateQuota
from storage.remote.manager import RemoteLogAuxState
from storage.topic_partition import TopicPartition

from replication.broker_client import BrokerClient, BrokerClientError, SaslClientFactory
from replication.fetch_session import FetchSessionClient, Wanted
from replication.partition_state import LeaderEndpoint

if TYPE_CHECKING:
    from replication.partition import Partition
    from storage.log import Log
    from storage.log_manager import LogManager

log: Final = logging.getLogger(__name__)

# TopicPartition(...) runs the NamedTuple's interpreted __new__; tuple.__new__ builds the same
# tuple from C, once per partition answered.
_new_tuple: Final = tuple.__new__

FETCH_VERSION: Final = 12
OFFSET_FOR_LEADER_EPOCH_VERSION: Final = 3
LIST_OFFSETS_VERSION: Final = 7
_EARLIEST: Final = -2
_LATEST: Final = -1
_EARLIEST_LOCAL: Final = -4
_RETRIABLE: Final = (
    ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.replica_not_available,
)


# The follower quota (the broker's follower.replication.throttled.rate and the topics'
# follower.replication.throttled.replicas); NO_QUOTA without one.
ReplicaQuota = ByteRateQuota


@dataclass(frozen=True)
class FetcherSettings:
    num_fetchers: int = 1
    wait_max_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1_048_576
    response_max_bytes: int = 10_485_760
    backoff_ms: int = 1_000
    socket_timeout_ms: int = 30_000
    ssl_context: ssl.SSLContext | None = None  # the inter-broker listener is SSL
    sasl: SaslClientFactory | None = None  # the inter-broker listener's SASL login
    quota: ReplicaQuota = NO_QUOTA


class FetchState:
    """One partition in a fetcher; compared by identity (a response is applied only to the
    state it was asked at)."""

    def __init__(self, leader_epoch: int) -> None:
        self.leader_epoch = leader_epoch
        self.truncating = True
        self.delayed_until = 0.0
        self.failed = False
        # The leader's high watermark minus this log's end after the last fetch (Kafka's
        # FetcherLagMetrics ConsumerLag; the broker's ReplicaFetcherManager MaxLag metric).
        self.lag = 0
        # Caught up with the leader at the last fetch (Kafka's PartitionFetchState.isReplicaInSync:
        # a lag known and 0): never throttled then.
        self.in_sync = False

    def ready(self, now: float) -> bool:
        return not self.failed and self.delayed_until <= now


ClientFactory = Callable[[LeaderEndpoint, str], BrokerClient]


def truncation_for(
    leader_epoch: int,
    leader_end: int,
    epochs: LeaderEpochCache,
    log_end_offset: int,
    high_watermark: int,
) -> tuple[int, bool]:
    """Where a follower truncates once the leader said `leader_epoch` ends at `leader_end`,
    and whether that completes its truncation (Kafka's getOffsetTruncationState)."""
    if leader_end == UNDEFINED_EPOCH_OFFSET:
        return high_watermark, True
    if leader_epoch == UNDEFINED_EPOCH:
        return min(leader_end, log_end_offset), True
    follower_epoch, follower_end = epochs.end_offset_for(leader_epoch, log_end_offset)
    if follower_epoch == UNDEFINED_EPOCH:
        return min(leader_end, log_end_offset), True
    if follower_epoch != leader_epoch:
        # We never had the leader's epoch: cut to where our largest epoch below it ends, and
        # ask again about that one (our latest, then).
        return min(follower_end, log_end_offset), False
    return min(leader_end, follower_end), True


class FollowerReplicas(Protocol):
    """What the fetchers need of this broker's replicas (the broker's ReplicaManager, which
    owns the fetcher manager): replication sits below broker/ and names only this."""

    @property
    def partitions(self) -> dict[TopicPartition, "Partition"]:
        """Read, never changed, by the fetchers (a dict, not a Mapping: compiled code reads a
        dict natively, a Mapping through generic method calls)."""

    @property
    def log_manager(self) -> "LogManager": ...

    def append_as_follower(self, partition: "Partition", records: memoryview, leader_high_watermark: int) -> None: ...

    def follow_high_watermark(self, partition: "Partition", leader_high_watermark: int) -> None: ...

    def follow_log_start(self, partition: "Partition", leader_log_start_offset: int) -> bool:
        """Raise the log start offset to the leader's (up to the HW); whether it moved."""

    def truncate(self, partition: "Partition", offset: int) -> None: ...

    def truncate_fully_and_start_at(self, partition: "Partition", offset: int) -> None: ...

    async def remote_log_aux_state(self, partition: "Partition", leader_local_log_start_offset: int) -> RemoteLogAuxState:
        """A tiered follower's state from the remote store; raises KafkaError."""

    def start_from_remote(self, partition: "Partition", state: RemoteLogAuxState, leader_log_start_offset: int) -> None: ...


class ReplicaFetcherManager:
    def __init__(
        self,
        replica_manager: FollowerReplicas,
        broker_id: int,
        settings: FetcherSettings,
        client_factory: ClientFactory | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        self.broker_id = broker_id
        self.settings = settings
        self._client_factory = client_factory or self._default_client
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self.partitions: dict[TopicPartition, ReplicaFetcher] = {}
        self._stopping: set[asyncio.Task] = set()  # fetchers told to stop, until their loop ends
        # Bytes of record batches appended from leaders since start (Kafka's
        # ReplicationBytesInPerSec).
        self.bytes_appended = 0

    def max_lag(self) -> int:
        """The largest lag (leader high watermark minus log end) over the followed partitions."""
        return max((state.lag for fetcher in self.fetchers.values() for state in fetcher.states.values()), default=0)

    def _default_client(self, source: LeaderEndpoint, client_id: str) -> BrokerClient:
        timeout_s = (self.settings.socket_timeout_ms + self.settings.wait_max_ms) / 1000
        return BrokerClient(
            source.host, source.port, client_id, self.settings.socket_timeout_ms / 1000, timeout_s,
            ssl_context=self.settings.ssl_context, sasl=self.settings.sasl,
        )

    def fetcher_id(self, tp: TopicPartition) -> int:
        return zlib.crc32(f"{tp.topic}-{tp.partition}".encode()) % self.settings.num_fetchers

    def add_partitions(self, partitions: dict[TopicPartition, tuple[LeaderEndpoint, int]]) -> None:
        """Fetch each partition from its leader's endpoint at the given leader epoch, starting
        with truncation by epoch."""
        for tp, (source, leader_epoch) in partitions.items():
            self._remove(tp)
            key = (source.broker_id, self.fetcher_id(tp))
            fetcher = self.fetchers.get(key)
            if fetcher is not None and fetcher.source != source:
                self._stop(key)  # the broker moved: a fresh connection for the new address
                fetcher = None
            if fetcher is None:
                client = self._client_factory(source, f"broker-{self.broker_id}-fetcher-{key[1]}")
                fetcher = self.fetchers[key] = ReplicaFetcher(self, source, client)
                fetcher.start()
            fetcher.add(tp, FetchState(leader_epoch))
            self.partitions[tp] = fetcher

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._remove(tp)
        for key in [k for k, f in self.fetchers.items() if not f.states]:
            self._stop(key)

    def _remove(self, tp: TopicPartition) -> None:
        fetcher = self.partitions.pop(tp, None)
        if fetcher is not None:
            fetcher.remove(tp)

    def _stop(self, key: tuple[int, int]) -> None:
        fetcher = self.fetchers.pop(key)
        for tp in list(fetcher.states):
            self.partitions.pop(tp, None)
        fetcher.stop()
        # Held until its loop has ended and its connection is closed: a cancelled task nothing
        # refers to can be collected while still pending, and its connection would stay open.
        stopping = asyncio.ensure_future(fetcher.stopped())
        self._stopping.add(stopping)
        stopping.add_done_callback(self._stopping.discard)

    async def shutdown(self) -> None:
        for key in list(self.fetchers):
            self._stop(key)
        await asyncio.gather(*self._stopping, return_exceptions=True)


class ReplicaFetcher:
    def __init__(self, manager: ReplicaFetcherManager, source: LeaderEndpoint, client: BrokerClient) -> None:
        self.manager = manager
        self.source = source
        self.client = client
        self.states: dict[TopicPartition, FetchState] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._session = FetchSessionClient()

    @property
    def settings(self) -> FetcherSettings:
        return self.manager.settings

    @property
    def _replicas(self) -> FollowerReplicas:
        return self.manager.replica_manager

    def add(self, tp: TopicPartition, state: FetchState) -> None:
        self.states[tp] = state
        self._changed.set()

    def remove(self, tp: TopicPartition) -> None:
        self.states.pop(tp, None)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        # The flag ends the loop even if the cancellation is lost on the way (Python 3.11's
        # asyncio.wait_for drops one that arrives as the awaited event fires).
        self._stopping = True
        self._changed.set()
        if self._task is not None:
            self._task.cancel()

    async def stopped(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        await self.client.close()

    # ------------------------------------------------------------------------- the loop

    async def _run(self) -> None:
        while not self._stopping:
            try:
                worked = await self.do_work()
            except BrokerClientError as exc:
                log.warning("fetching from broker %d failed: %s", self.source.broker_id, exc)
                await asyncio.sleep(self.settings.backoff_ms / 1000)
                continue
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not stop replication for good: log it, back off
                log.exception("the fetcher from broker %d failed", self.source.broker_id)
                await asyncio.sleep(self.settings.backoff_ms / 1000)
                continue
            if not worked:
                await self._idle()

    async def _idle(self, at_most_s: float | None = None) -> None:
        """Wait for a partition to be added or a delayed one to become ready (or `at_most_s`)."""
        self._changed.clear()
        delays = [s.delayed_until for s in self.states.values() if not s.failed]
        timeout = max(min(delays) - time.monotonic(), 0.001) if delays else None
        if at_most_s is not None:
            timeout = at_most_s if timeout is None else min(timeout, at_most_s)
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            pass

    async def do_work(self) -> bool:
        """One round: truncate what needs it, else fetch. False when nothing was ready."""
        now = time.monotonic()
        quota = self.settings.quota
        any_ready = False
        truncating: dict[TopicPartition, FetchState] = {}
        wanted: dict[TopicPartition, FetchState] = {}
        # One pass: an idle follower of thousands of partitions makes a round every
        # replica.fetch.wait.max.ms, and each pass over them costs.
        for tp, state in self.states.items():
            if not state.ready(now):
                continue
            any_ready = True
            if state.truncating:
                truncating[tp] = state
            elif not truncating and not self._throttled(quota, tp, state):
                wanted[tp] = state
        if truncating:
            await self._truncate(truncating)
            return True
        if any_ready:
            if not wanted:
                # Everything ready is throttled: wait as Kafka's fetcher does with an empty
                # fetch (replica.fetch.backoff.ms, or until a partition is added).
                await self._idle(self.settings.backoff_ms / 1000)
                return True
            await self._fetch(wanted)
            return True
        return False

    @staticmethod
    def _throttled(quota: ReplicaQuota, tp: TopicPartition, state: FetchState) -> bool:
        """Left out of this fetch (Kafka's shouldFollowerThrottle)."""
        return not state.in_sync and quota.is_throttled(tp) and quota.is_quota_exceeded()

    # ------------------------------------------------------------------------ truncation

    async def _truncate(self, states: dict[TopicPartition, FetchState]) -> None:
        asked = {}
        for tp, state in states.items():
            partition = self._partition(tp, state)
            if partition is None:
                continue
            epoch = partition.log.leader_epochs.latest_epoch
            if epoch == UNDEFINED_EPOCH:
                self._locally(state, self._truncate_to_high_watermark, partition, state)
                continue
            asked[tp] = (state, epoch)
        if not asked:
            return
        request = OffsetForLeaderEpochRequest(
            replica_id=BrokerId(self.manager.broker_id),
            topics=tuple(
                OffsetForLeaderTopic(
                    topic=TopicName(topic),
                    partitions=tuple(
                        OffsetForLeaderPartition(
                            partition=i32(tp.partition),
                            current_leader_epoch=i32(state.leader_epoch),
                            leader_epoch=i32(epoch),
                        )
                        for tp, (state, epoch) in asked.items()
                        if tp.topic == topic
                    ),
                )
                for topic in sorted({tp.topic for tp in asked})
            ),
        )
        response = await self.client.send(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, request)
        for topic in response.topics:
            for answer in topic.partitions:
                tp = TopicPartition(topic.topic, answer.partition)
                found = asked.get(tp)
                if found is None:
                    continue
                state = found[0]
                partition = self._still_fetched(tp, state)
                if partition is None:
                    continue
                if answer.error_code != ErrorCode.none:
                    self._partition_error(tp, state, ErrorCode(answer.error_code))
                    continue
                self._locally(state, self._apply_epoch_end, partition, state, answer.leader_epoch, answer.end_offset)

    def _apply_epoch_end(self, partition: "Partition", state: FetchState, leader_epoch: int, leader_end: int) -> None:
        """Truncate after the leader said where `leader_epoch` ends."""
        log_ = partition.log
        offset, complete = truncation_for(
            leader_epoch, leader_end, log_.leader_epochs, log_.log_end_offset, log_.high_watermark
        )
        self._replicas.truncate(partition, offset)
        state.truncating = not complete

    def _truncate_to_high_watermark(self, partition: "Partition", state: FetchState) -> None:
        self._replicas.truncate(partition, partition.log.high_watermark)
        state.truncating = False

    # ----------------------------------------------------------------------------- fetch

    async def _fetch(self, states: dict[TopicPartition, FetchState]) -> None:
        wanted = {}
        max_bytes = self.settings.max_bytes
        # Looked up once a round, not once a partition: each is a generic lookup through the
        # FollowerReplicas protocol, and LogManager.get an interpreted call.
        replicas = self._replicas
        partitions, logs = replicas.partitions, replicas.log_manager.logs
        session = self._session
        for tp, state in states.items():
            partition = _followed(partitions, logs, tp, state)
            if partition is not None:
                log_ = partition.log
                wanted[tp] = session.wanted(
                    tp, state, log_.log_end_offset, state.leader_epoch, log_.leader_epochs.latest_epoch,
                    log_.log_start_offset, max_bytes,
                )
        if not wanted:
            return
        request = self._fetch_request(wanted)
        try:
            response = await self.client.send(ApiKey.FETCH, FETCH_VERSION, request)
        except BaseException:
            session.start_over()  # the leader may have moved the session's epoch on
            raise
        if not session.answered(response.error_code, response.session_id):
            log.info(
                "fetch session %d with broker %d: %s; fetching every partition again",
                request.session_id, self.source.broker_id, ErrorCode(response.error_code).name,
            )
            return
        if response.error_code != ErrorCode.none:
            raise BrokerClientError(f"fetch answered {ErrorCode(response.error_code).name}")
        raised_starts: list[TopicPartition] = []
        flushing: list[asyncio.Future] = []
        for topic in response.topics:
            for result in topic.partitions:
                tp = _new_tuple(TopicPartition, (topic.topic, result.partition_index))
                asked = wanted.get(tp)
                if asked is None:
                    session.start_over()  # see replication.fetch_session
                    continue
                state = cast(FetchState, asked.state)
                partition = self._still_fetched(tp, state)
                if partition is None or partition.log.log_end_offset != asked.fetch_offset:
                    session.start_over()
                    continue
                try:
                    if await self._apply(partition, state, result):
                        raised_starts.append(tp)
                except KafkaError as exc:
                    self._local_failure(tp, state, exc)
                flush = partition.log.flush_covering(partition.log.log_end_offset - 1)
                if flush is not None:
                    flushing.append(flush)
        if raised_starts:
            await self._save_log_starts(raised_starts)
        if flushing:
            # flush.messages reached: the next fetch reports the new offsets once they are on
            # disk, as Kafka's fetcher fsyncs in the append (a failed fsync has taken its dir
            # offline, and its partitions out of the fetch). Shielded: a stopped fetcher must
            # not cancel an fsync that a produce or the next flush waits for too.
            await asyncio.gather(*map(asyncio.shield, flushing), return_exceptions=True)

    async def _save_log_starts(self, partitions: list[TopicPartition]) -> None:
        """Write the checkpoints holding the log start offsets just raised before the next
        fetch reports them: the leader answers a DeleteRecords once every follower has, and a
        follower restarted after a crash must not hold the deleted records again. A failed
        write takes its log dir offline (and its partitions out of the fetch)."""
        try:
            await self._replicas.log_manager.write_checkpoints_of(partitions)
        except KafkaError as exc:
            log.error("cannot save the log start offsets of %s: %s", partitions, exc)

    def _fetch_request(self, wanted: dict[TopicPartition, Wanted]) -> FetchRequest:
        """The fetch of `wanted`: in the fetch session, only what changed since the last."""
        session = self._session.request(wanted)
        settings = self.settings
        # protocol.fetch's request, which the client encodes by hand: kio took 21-31 us to
        # build and encode one, a fetch or two a record at acks=all (benchmarks/RESULTS.md).
        return FetchRequest(
            self.manager.broker_id, settings.wait_max_ms, settings.min_bytes, settings.response_max_bytes,
            READ_UNCOMMITTED, session.topics, session.session_id, "", session.session_epoch, session.forgotten,
        )

    async def _apply(self, partition: "Partition", state: FetchState, result: PartitionResult) -> bool:
        """Act on one partition's answer; True when our log start offset rose to the leader's."""
        tp = partition.topic_partition
        if result.error_code == ErrorCode.offset_out_of_range:
            await self._handle_out_of_range(partition, state)
            return False
        if result.error_code == ErrorCode.offset_moved_to_tiered_storage:
            await self._start_from_remote(partition, state)
            return False
        if result.error_code != ErrorCode.none:
            self._partition_error(tp, state, ErrorCode(result.error_code))
            return False
        if result.diverging_epoch is not None:
            epoch, end_offset = result.diverging_epoch
            self._apply_epoch_end(partition, state, epoch, end_offset)
            return False
        # A memoryview of the response frame (replication.broker_client); the field is typed
        # Sized because the broker's encoder also takes file regions there.
        records: Any = result.records
        if records:
            quota = self.settings.quota
            if quota.is_throttled(tp):
                quota.record(len(records))
            self._replicas.append_as_follower(partition, memoryview(records), result.high_watermark)
            self.manager.bytes_appended += len(records)
        else:
            self._replicas.follow_high_watermark(partition, result.high_watermark)
        state.lag = max(result.high_watermark - partition.log.log_end_offset, 0)
        state.in_sync = state.lag == 0
        return self._replicas.follow_log_start(partition, result.log_start_offset)

    async def _handle_out_of_range(self, partition: "Partition", state: FetchState) -> None:
        """Our fetch offset is outside the leader's log: beyond its end (an unclean election
        left it shorter) we cut back to it; below its start we restart at its start."""
        tp = partition.topic_partition
        leader_end = await self._leader_offset(tp, state, _LATEST)
        log_ = partition.log
        if leader_end is None:
            return
        if log_.log_end_offset > leader_end:
            log.warning("%s: our log end %d is beyond the leader's %d", tp, log_.log_end_offset, leader_end)
            self._replicas.truncate(partition, leader_end)
            return
        leader_start = await self._leader_offset(tp, state, _EARLIEST)
        if leader_start is not None and log_.log_end_offset < leader_start:
            self._replicas.truncate_fully_and_start_at(partition, leader_start)

    async def _start_from_remote(self, partition: "Partition", state: FetchState) -> None:
        """Our fetch offset is below the leader's local log start, in the remote store (Kafka's
        ReplicaFetcherTierStateMachine): take the leader's local and whole log starts
        (ListOffsets -4 and -2), the state of the remote segment before the local start from
        the store, and restart the log at that segment's end, so only the leader's local tail
        is fetched. A store or metadata not ready yet backs the partition off."""
        tp = partition.topic_partition
        leader_local_start = await self._leader_offset(tp, state, _EARLIEST_LOCAL)
        if leader_local_start is None:
            return
        leader_start = await self._leader_offset(tp, state, _EARLIEST)
        if leader_start is None:
            return
        try:
            aux = await self._replicas.remote_log_aux_state(partition, leader_local_start)
        except KafkaError as exc:
            if exc.error_code is ErrorCode.offset_moved_to_tiered_storage:  # no tiered storage here
                self._partition_error(tp, state, exc.error_code)
                return
            # Metadata not loaded yet, a store failure: Kafka's fetcher retries such a partition.
            log.info("%s: cannot start from the remote store yet (%s); retrying in %d ms", tp, exc, self.settings.backoff_ms)
            state.delayed_until = time.monotonic() + self.settings.backoff_ms / 1000
            return
        except CorruptCheckpointError as exc:
            log.warning("%s: the remote segment's leader epochs are unreadable (%s); retrying", tp, exc)
            state.delayed_until = time.monotonic() + self.settings.backoff_ms / 1000
            return
        if self._still_fetched(tp, state) is None or partition.log.log_end_offset >= aux.next_offset:
            return  # moved on meanwhile
        self._locally(state, self._replicas.start_from_remote, partition, aux, leader_start)
        state.truncating = False

    async def _leader_offset(self, tp: TopicPartition, state: FetchState, timestamp: int) -> int | None:
        request = ListOffsetsRequest(
            replica_id=BrokerId(self.manager.broker_id),
            isolation_level=i8(0),
            topics=(
                ListOffsetsTopic(
                    name=TopicName(tp.topic),
                    partitions=(
                        ListOffsetsPartition(
                            partition_index=i32(tp.partition),
                            current_leader_epoch=i32(state.leader_epoch),
                            timestamp=i64(timestamp),
                        ),
                    ),
                ),
            ),
        )
        response = await self.client.send(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, request)
        answer = response.topics[0].partitions[0]
        if answer.error_code != ErrorCode.none:
            self._partition_error(tp, state, ErrorCode(answer.error_code))
            return None
        return answer.offset

    def _locally(self, state: FetchState, change: Callable, partition: "Partition", *args) -> None:
        """Run a change of the local log; a failure (its log dir) stops fetching the partition."""
        try:
            change(partition, *args)
        except KafkaError as exc:
            self._local_failure(partition.topic_partition, state, exc)

    @staticmethod
    def _local_failure(tp: TopicPartition, state: FetchState, exc: KafkaError) -> None:
        log.error("%s: cannot replicate: %s", tp, exc)
        state.failed = True

    def _partition_error(self, tp: TopicPartition, state: FetchState, error: ErrorCode) -> None:
        if error in _RETRIABLE:
            log.info("%s: the leader answered %s; retrying in %d ms", tp, error.name, self.settings.backoff_ms)
            state.delayed_until = time.monotonic() + self.settings.backoff_ms / 1000
        else:
            log.warning("%s: the leader answered %s; not fetching until the controller says", tp, error.name)
            state.failed = True

    def _still_fetched(self, tp: TopicPartition, state: FetchState | None) -> "Partition | None":
        """The partition, if `tp` is still fetched at `state` (the state it was asked at)."""
        if state is None or self.states.get(tp) is not state:
            return None
        return self._partition(tp, state)

    def _partition(self, tp: TopicPartition, state: FetchState) -> "Partition | None":
        """The partition, if this broker still follows it at the state's epoch."""
        replicas = self._replicas
        return _followed(replicas.partitions, replicas.log_manager.logs, tp, state)


def _followed(
    partitions: dict[TopicPartition, "Partition"], logs: "dict[TopicPartition, Log]", tp: TopicPartition, state: FetchState
) -> "Partition | None":
    """The partition, if this broker still follows it at the state's epoch (`partitions`: the
    replica manager's; `logs`: the log manager's, which holds no log of a failed log dir)."""
    partition = partitions.get(tp)
    if partition is None or partition.is_leader or partition.leader_epoch != state.leader_epoch:
        return None
    if partition.log is not logs.get(tp):  # its log dir failed
        state.failed = True
        return None
    return partition
