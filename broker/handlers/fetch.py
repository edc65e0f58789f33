"""Fetch (api key 1), versions 4-12.

Reads each requested partition from its fetch offset, up to partition_max_bytes and within
max_bytes for the whole response; the first partition that has data returns at least one whole
batch however large (KIP-74), so consumers always make progress. Record data is never copied: each
partition's records are a file region sent with sendfile after the hand-encoded response bytes
(protocol.fetch).

Long poll: when fewer than min_bytes are available and max_wait_ms > 0, the response waits until
an append to one of the partitions brings enough, or max_wait_ms passes.

Consumers (replica_id -1) read below the high watermark, from the leader; with v11+ also from a
follower in the ISR, below the high watermark the leader last sent it (KIP-392; out of the ISR it
answers NOT_LEADER_OR_FOLLOWER, sending the consumer back to the leader). With
replica.selector.class set, the leader answers a v11+ consumer whose rack_id is a follower's rack
with preferred_read_replica (that follower, chosen by broker.replica_manager), no records and at
once. A fetch with no rack_id or before v11 pays for none of this. Followers
(replica_id >= 0, replication.fetcher) read up to the log end offset; their fetch offset is their
log end offset, which the leader records (it may move the high watermark, waking delayed
produces and consumer long polls, or bring the follower back into the ISR). A follower whose
last_fetched_epoch (v12) ends before its fetch offset in the leader's epoch cache gets
diverging_epoch (the leader's largest epoch at or below it, and where that epoch
ends) and no records: it truncates there and fetches again (KIP-595's check).

Per-partition errors, in the order they are checked (Kafka's): TOPIC_AUTHORIZATION_FAILED (with
an authorizer: a consumer needs READ on the topic, a follower CLUSTER_ACTION on the cluster);
KAFKA_STORAGE_ERROR; for a
partition not hosted here NOT_LEADER_OR_FOLLOWER when the broker's metadata knows it,
UNKNOWN_TOPIC_OR_PARTITION when it does not; FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for a
stale or future current_leader_epoch (v9+); NOT_LEADER_OR_FOLLOWER on a replica that does not
lead the partition; OFFSET_OUT_OF_RANGE outside [log start offset, log end offset].

Tiered topics (KIP-405, broker/remote_log.py): a consumer's fetch offset below the local log
start of a tiered log is read from the remote store: the whole response then waits for that read
(on the remote reader threads; the loop goes on meanwhile), and, as in Kafka, only the first such
partition of a request is read remotely (the others answer no records, and the consumer fetches
them again). read_committed reads get the aborted transactions from the remote transaction
indexes (then the local ones, when the search must go on past the remote log). A follower's fetch
below the leader's local start answers OFFSET_MOVED_TO_TIERED_STORAGE, as Kafka's does.

Fetch sessions (KIP-227, broker.fetch_sessions): a v7+ fetch with session_epoch 0 opens one, and
its incremental fetches name only what changed; they read every partition of the session and are
answered with those that have something new. Session errors (FETCH_SESSION_ID_NOT_FOUND,
INVALID_FETCH_SESSION_EPOCH) answer the whole request, with no partitions. read_committed (v4+) stops at the last stable
offset (the first offset of the earliest open transaction, at most the high watermark) and lists the aborted transactions the
answer may span, from the segments' transaction indexes, for the consumer to drop.

Quotas (broker/security/throttling.py): a consumer with a consumer_byte_rate quota fetches at
most what the quota allows in quota.window.num - 1 windows (max_bytes and min_bytes capped, as
Kafka does); a throttled fetch is answered with no partitions. Replication quotas
(broker/replication_quotas.py): a follower out of the ISR fetching a partition of the topic's
leader.replication.throttled.replicas gets no records for it while this broker's
leader.replication.throttled.rate is exceeded; the bytes sent to followers for throttled
partitions are counted against that rate.
"""

import asyncio
import logging
import time
from collections.abc import Sized
from typing import TYPE_CHECKING, Final

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.fetch import (
    FINAL_EPOCH,
    MAX_VERSION,
    MIN_VERSION,
    READ_COMMITTED,
    FetchPartition,
    FetchRequest,
    PartitionResult,
    TopicResult,
    encode_fetch_response,
    parse_fetch_request,
)
from replication.partition import now_ms
from storage.errors import OffsetMovedToTieredStorageError
from storage.topic_partition import TopicPartition

from broker.deferred import Deferred
from broker.fetch_sessions import FetchContext
from broker.handlers import authorization
from broker.handlers.authorization import authorized, authorized_names
from broker.handlers.registry import EncodedResponse, RequestContext, api
from broker.security.acl import AclOperation, ResourceType
from broker.security.throttling import fetch_max_bytes

if TYPE_CHECKING:
    from replication.partition import Partition

    from broker.replica_manager import AppendWatch, ReplicaManager

log: Final = logging.getLogger(__name__)

# Bound once: compiled code looks a module's attribute up at every use, an enum member too.
_monotonic: Final = time.monotonic
_NO_ERROR: Final = ErrorCode.none


# Plain classes with their own __init__, which compiled code calls directly
# (tests/unit/test_compiled_modules.py); nothing compares or prints them.


class _RemoteRead:
    """A partition whose fetch offset is only in the remote store, to be read from there."""

    __slots__ = ("tp", "offset", "max_bytes", "min_one_batch", "read_committed", "result")

    def __init__(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        min_one_batch: bool,
        read_committed: bool,
        result: PartitionResult,
    ) -> None:
        self.tp = tp
        self.offset = offset
        self.max_bytes = max_bytes
        self.min_one_batch = min_one_batch
        self.read_committed = read_committed
        self.result = result


class _Read:
    __slots__ = ("topics", "total_bytes", "answer_now", "remote", "partitions", "settled")

    def __init__(
        self,
        topics: list[TopicResult],
        total_bytes: int,
        answer_now: bool,
        remote: list[_RemoteRead],
        partitions: list[TopicPartition],
        settled: bool,
    ) -> None:
        self.topics = topics
        self.total_bytes = total_bytes
        self.answer_now = answer_now
        self.remote = remote
        self.partitions = partitions  # the request's, in its order: a long poll watches them
        # Read again, it would answer the same until one of its partitions changes (what wakes
        # a long poll's watch): it found no records, and none were held back by a quota.
        self.settled = settled


@api(ApiKey.FETCH, versions=(MIN_VERSION, MAX_VERSION), parse=parse_fetch_request)
def handle_fetch(ctx: RequestContext, request: FetchRequest):
    context: FetchContext | None = None
    if request.session_id != 0 or request.session_epoch != FINAL_EPOCH:
        # In a fetch session. librdkafka's fetches (sessionless) skip the calls into the
        # interpreted session cache: they were 6 % of a tailed record's instructions.
        found = ctx.services.fetch_sessions.context(request)
        if not isinstance(found, FetchContext):
            return _response(ctx, [], found)  # a session error
        context = found
        request = context.request  # an incremental fetch reads every partition of its session
    denied = _denied_topics(ctx, request)
    max_bytes = request.max_bytes
    services = ctx.services
    if request.replica_id < 0 and services.client_quotas.fetch.enabled:
        # Checked here as well: throttling is not compiled, and calling it costs more.
        max_bytes = fetch_max_bytes(services.client_quotas, ctx, max_bytes)
    min_bytes = min(request.min_bytes, max_bytes)
    replica_manager = services.replica_manager
    read = _read(ctx, replica_manager, request, denied, max_bytes, context.partitions if context is not None else None)
    max_wait_s = request.max_wait_ms / 1000
    # As Kafka, a fetch naming no partition is answered at once: no append could end its wait.
    wants_nothing = not any(topic.partitions for topic in request.topics)
    if read.remote:
        return _answer_with_remote(ctx, request, context, read)
    if read.total_bytes >= min_bytes or max_wait_s <= 0 or read.answer_now or wants_nothing:
        return _answer(ctx, request, context, read.topics)
    return _LongPoll(ctx, replica_manager, request, context, denied, max_wait_s, min_bytes, max_bytes, read).answer


def _denied_topics(ctx: RequestContext, request: FetchRequest) -> set[str]:
    """The topics this fetch may not read: a follower needs CLUSTER_ACTION on the cluster, a
    consumer READ on each topic."""
    if not authorization.enabled(ctx):
        return set()  # and no enum member looked up, which compiled code does generically
    names = {topic.topic for topic in request.topics}
    if request.replica_id >= 0:
        return set() if authorized(ctx, AclOperation.CLUSTER_ACTION) else names
    return names - authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, names)


class _LongPoll:
    """A fetch that read less than min_bytes, waiting for appends to its partitions (Kafka's
    DelayedFetch): each time one of them changes it reads again, and answers once it has enough,
    at max_wait_ms, or when the broker shuts down. Its `answer` is a Deferred (broker.deferred):
    the callbacks run in the turn after the append that woke it, so the answer joins that turn's
    send row, with no task or coroutine in between. Cancelling the answer (its connection
    closed) stops the watch.

    At max_wait_ms, a wait whose last read was settled (no records, none held back by a quota)
    and that nothing woke since answers with that read, where Kafka's DelayedFetch reads again:
    no partition got records, a new high watermark or a new leader meanwhile, so a second read
    would find the same. An idle follower's fetch of thousands of partitions then reads them once
    a wait instead of twice. The one field that may be older is a log start offset raised by
    retention meanwhile, which the next fetch carries."""

    __slots__ = (
        "ctx", "replica_manager", "context", "request", "denied", "deadline", "min_bytes", "max_bytes", "watched", "answer",
        "_watch", "_remote", "_settled",
    )

    def __init__(
        self,
        ctx: RequestContext,
        replica_manager: "ReplicaManager",
        request: FetchRequest,
        context: FetchContext | None,
        denied: set[str],
        max_wait_s: float,
        min_bytes: int,
        max_bytes: int,
        read: _Read,
    ) -> None:
        self.ctx = ctx
        self.replica_manager = replica_manager
        self.context = context
        self.request = request
        self.denied = denied
        self.deadline = _monotonic() + max_wait_s
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.watched = read.partitions
        self.answer: Deferred[EncodedResponse] = Deferred(self._stop)
        self._remote: asyncio.Future | None = None
        self._settled: _Read | None = read if read.settled else None
        self._watch: AppendWatch | None = replica_manager.watch_appends(self.watched, max_wait_s, self._woken)

    def _woken(self, changed: bool) -> None:
        """`changed`: one of the partitions changed; otherwise max_wait_ms is up."""
        self._watch = None
        if self.answer.done():
            return
        ctx, request = self.ctx, self.request
        try:
            settled = self._settled
            if settled is not None and not changed:
                self.answer.resolve(_answer(ctx, request, self.context, settled.topics))
                return
            read = _read(ctx, self.replica_manager, request, self.denied, self.max_bytes, self.watched, False)
            if read.remote:
                remote = self._remote = asyncio.ensure_future(_answer_with_remote(ctx, request, self.context, read))
                remote.add_done_callback(self._remote_read)
                return
            remaining = self.deadline - _monotonic()
            if read.total_bytes >= self.min_bytes or read.answer_now or remaining <= 0 or ctx.broker.shutting_down:
                self.answer.resolve(_answer(ctx, request, self.context, read.topics))
            else:
                self._settled = read if read.settled else None
                self._watch = self.replica_manager.watch_appends(self.watched, remaining, self._woken)
        except Exception as exc:
            self.answer.fail(exc)

    def _remote_read(self, remote: asyncio.Future) -> None:
        self._remote = None
        if remote.cancelled():
            return
        exc = remote.exception()
        if exc is not None:
            self.answer.fail(exc)
        else:
            self.answer.resolve(remote.result())

    def _stop(self) -> None:
        if self._watch is not None:
            self.replica_manager.stop_watching(self._watch)
            self._watch = None
        if self._remote is not None:
            self._remote.cancel()


def _read(
    ctx: RequestContext,
    replica_manager: "ReplicaManager",
    request: FetchRequest,
    denied: set[str],
    max_bytes: int,
    known: list[TopicPartition] | None = None,
    first_read: bool = True,
) -> _Read:
    """The request's partitions read; `known`: their TopicPartitions, not built again (kept by
    a fetch session, or from an earlier read of the same request: a long poll's). A follower's
    fetch offsets are recorded by the `first_read` only, as Kafka's DelayedFetch reads again
    without updating the follower's state: the offsets are the same, and an idle follower's
    long poll would record every partition twice."""
    read_committed = request.isolation_level == READ_COMMITTED
    replica_id = request.replica_id
    follower_id = replica_id if replica_id >= 0 else None
    reader = _consumer_reader(ctx, replica_manager, request) if follower_id is None else None
    # A follower's fetch time, read once for all its partitions as Kafka reads it once a fetch
    # (ReplicaManager.updateFollowerFetchState): a clock call per partition was about 450
    # instructions of an idle partition's read. Only the first read records it: -1.
    fetch_time_ms = now_ms() if follower_id is not None and first_read else -1
    remaining = max_bytes
    min_one_batch = True
    total = 0
    answer_now = False
    topics = []
    remote: list[_RemoteRead] = []
    partitions = known if known is not None else []
    index = 0
    for topic in request.topics:
        results = []
        for wanted in topic.partitions:
            if known is None:
                tp = replica_manager.topic_partition(topic.topic, wanted.partition)
                partitions.append(tp)
            else:
                tp = known[index]
            index += 1
            max_bytes = min(wanted.partition_max_bytes, remaining)
            if topic.topic in denied:
                result = PartitionResult(wanted.partition, error_code=ErrorCode.topic_authorization_failed, records=b"")
            else:
                result = _read_partition(
                    ctx, replica_manager, tp, wanted, follower_id, reader, max_bytes, min_one_batch, read_committed,
                    remote, fetch_time_ms,
                )
            if (
                result.error_code != _NO_ERROR
                or result.diverging_epoch is not None
                or result.preferred_read_replica >= 0
            ):
                answer_now = True
            else:
                size = _size(result.records)
                if size:
                    remaining = max(remaining - size, 0)
                    total += size
                    min_one_batch = False
            results.append(result)
        topics.append(TopicResult(topic.topic, results))
    settled = total == 0 and (follower_id is None or not ctx.broker.replication_quotas.leader.throttles_any)
    return _Read(topics, total, answer_now, remote, partitions, settled)


class _ConsumerReader:
    """A consumer's Fetch v11+ (KIP-392): it may read followers, and `rack` (its client.rack,
    when replica.selector.class is set) lets the leader send it to one."""

    __slots__ = ("rack",)

    def __init__(self, rack: str | None) -> None:
        self.rack = rack


def _consumer_reader(
    ctx: RequestContext, replica_manager: "ReplicaManager", request: FetchRequest
) -> _ConsumerReader | None:
    if ctx.api_version < 11:
        return None
    rack = request.rack_id if replica_manager.settings.replica_selector is not None else None
    return _ConsumerReader(rack or None)


def _read_partition(
    ctx: RequestContext,
    replica_manager: "ReplicaManager",
    tp: TopicPartition,
    wanted: FetchPartition,
    follower_id: int | None,
    reader: _ConsumerReader | None,
    max_bytes: int,
    min_one_batch: bool,
    read_committed: bool,
    remote: list[_RemoteRead],
    fetch_time_ms: int,
) -> PartitionResult:
    """One partition of a fetch read; a follower's fetch recorded at `fetch_time_ms` (-1: not
    recorded)."""
    result = PartitionResult(wanted.partition, records=b"")
    fetch_offset = wanted.fetch_offset
    try:
        partition = replica_manager.partition_at_epoch(tp, wanted.current_leader_epoch, leader_only=reader is None)
        if follower_id is not None:
            result.diverging_epoch = partition.diverging_epoch(wanted.last_fetched_epoch, fetch_offset)
        elif reader is not None:
            if not partition.is_leader:
                replica_manager.check_follower_read(partition)
            elif reader.rack is not None:
                preferred = replica_manager.preferred_read_replica(partition, reader.rack, fetch_offset, ctx.listener)
                if preferred is not None:
                    result.preferred_read_replica = preferred
        if result.diverging_epoch is None and result.preferred_read_replica < 0 and not (
            follower_id is not None and _leader_throttles(ctx, partition, follower_id)
        ):
            try:
                region = replica_manager.read(
                    partition,
                    fetch_offset,
                    max_bytes,
                    min_one_batch,
                    read_committed,
                    for_follower=follower_id is not None,
                )
            except OffsetMovedToTieredStorageError:
                if follower_id is not None or ctx.broker.remote_log is None:
                    raise
                region = None
                if not remote:  # Kafka reads one partition of a fetch remotely
                    remote.append(_RemoteRead(tp, fetch_offset, max_bytes, min_one_batch, read_committed, result))
            if region is not None:
                result.records = region
            if follower_id is not None and fetch_time_ms >= 0:
                replica_manager.record_follower_fetch(
                    partition, follower_id, fetch_offset, wanted.log_start_offset, fetch_time_ms
                )
    except KafkaError as exc:
        result.error_code = exc.error_code
        result.records = b""
        return result
    result.high_watermark = partition.high_watermark
    result.last_stable_offset = partition.last_stable_offset
    result.log_start_offset = partition.log.log_start_offset
    if read_committed:
        result.aborted_transactions = (
            replica_manager.aborted_transactions(partition, fetch_offset) if _size(result.records) else []
        )
    return result


async def _answer_with_remote(
    ctx: RequestContext, request: FetchRequest, context: FetchContext | None, read: _Read
) -> EncodedResponse:
    """Answer once the remote read of the first partition below its local log start is done."""
    wanted = read.remote[0]
    result = wanted.result
    remote_log = ctx.broker.remote_log
    assert remote_log is not None, "_read_partition reads remotely only with a remote log"
    try:
        result.records, aborted = await remote_log.read(
            wanted.tp, wanted.offset, wanted.max_bytes, wanted.min_one_batch, wanted.read_committed
        )
        if wanted.read_committed:
            result.aborted_transactions = aborted
    except KafkaError as exc:
        log.warning("%s: reading offset %d from the remote store failed: %s", wanted.tp, wanted.offset, exc)
        result.error_code = exc.error_code
        result.records = b""
    return _answer(ctx, request, context, read.topics)


def _leader_throttles(ctx: RequestContext, partition: "Partition", follower_id: int) -> bool:
    """A follower out of the ISR fetching a throttled partition while the leader replication
    quota is exceeded gets no records (Kafka's shouldLeaderThrottle). The ISR is asked first:
    it holds the follower of nearly every read, and the quota's checks are interpreted calls
    (about 1,600 instructions a partition of an idle follower's fetch)."""
    if follower_id in partition.isr:
        return False
    quota = ctx.broker.replication_quotas.leader
    return quota.is_throttled(partition.topic_partition) and quota.is_quota_exceeded()


def _answer(
    ctx: RequestContext, request: FetchRequest, context: FetchContext | None, topics: list[TopicResult]
) -> EncodedResponse:
    """The response to a consumer's or follower's fetch; a consumer's counted per topic and
    partition (BrokerTopicMetrics: bytes out, fetch requests and failures), a follower's bytes
    of throttled partitions against the leader replication quota. An incremental fetch answers
    only the partitions its client must see (broker.fetch_sessions); every partition read
    counts, as in Kafka. The records answered to a follower count in the replication bytes out
    (as Kafka counts the partitions of its answer: an idle follower's incremental fetch answers
    none)."""
    stats = ctx.services.topic_stats
    if request.replica_id < 0:
        for topic in topics:
            for result in topic.partitions:
                stats.fetched(topic.topic, _size(result.records), result.error_code != _NO_ERROR)
    else:
        quota = ctx.broker.replication_quotas.leader
        if quota.throttles_any:
            throttled = sum(
                _size(result.records)
                for topic in topics
                for result in topic.partitions
                if quota.is_throttled(TopicPartition(topic.topic, result.partition_index))
            )
            if throttled:
                quota.record(throttled)
    if context is None:
        if request.replica_id >= 0:
            stats.replication_bytes_out += _records_bytes(topics)
        return _response(ctx, topics)
    error_code, session_id, topics = context.answer(topics)
    if request.replica_id >= 0:
        stats.replication_bytes_out += _records_bytes(topics)
    return _response(ctx, topics, error_code, session_id)


def _records_bytes(topics: list[TopicResult]) -> int:
    return sum(_size(result.records) for topic in topics for result in topic.partitions)


def _size(records: Sized | None) -> int:
    return 0 if records is None else len(records)


def _response(
    ctx: RequestContext, topics: list[TopicResult], error_code: ErrorCode = ErrorCode.none, session_id: int = 0
) -> EncodedResponse:
    # throttle_time_ms opens the body (v1+).
    return EncodedResponse(
        encode_fetch_response(ctx.api_version, topics, error_code=error_code, session_id=session_id), throttle_offset=0
    )
