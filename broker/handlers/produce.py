"""Produce (api key 0), versions 0-9.

Each partition's record set must be one record batch of magic v2 (Kafka 0.11+ clients send
nothing else); it is validated per batch (size, CRC, counts; never record by record), given its
offsets in place and appended. Errors are per partition: UNSUPPORTED_FOR_MESSAGE_FORMAT for
magic v0/v1, CORRUPT_MESSAGE for a bad CRC or framing, MESSAGE_TOO_LARGE beyond
max.message.bytes, INVALID_RECORD for an impossible batch, INVALID_TOPIC_EXCEPTION for an illegal name or an
internal topic, KAFKA_STORAGE_ERROR when the log dir fails, NOT_LEADER_OR_FOLLOWER on a replica
that does not lead the partition and on a broker that hosts no replica of a partition its
metadata knows (Kafka's getPartitionOrException), UNKNOWN_TOPIC_OR_PARTITION for a partition
the broker's metadata does not know. acks
outside -1/0/1 gives INVALID_REQUIRED_ACKS for every partition.

Batches of idempotent producers (producer id >= 0) are checked against the partition's producer
state (storage.producer_state): OUT_OF_ORDER_SEQUENCE_NUMBER for a sequence gap or a new epoch
not starting at 0, INVALID_PRODUCER_EPOCH for an older epoch, INVALID_RECORD for a negative
sequence. A retry of one of the producer's last five batches answers NONE with the batch's
original base offset, its timestamp as log_append_time_ms (as Kafka does) and the current log
start offset, and is not appended again (acks=-1 waits for it as for a new batch). Followers
record every batch they copy, so a retry after a leader change is still recognised.
Transactional batches are checked the same way and appended as they are (no transaction
coordinator yet).

acks=0 gets no response at all; acks=1 is answered after the leader's append. An append that
makes its partition flush (flush.messages reached), or a retry of one whose flush is still under
way, is answered once that fsync is done, as Kafka fsyncs in the append itself; KAFKA_STORAGE_ERROR
if the fsync failed (its log dir is then offline). acks=-1 (all) is
refused before appending with NOT_ENOUGH_REPLICAS when the ISR is smaller than the topic's
min.insync.replicas; appended, it is a delayed produce answered once the high watermark passes
the batch (followers' fetches move it; it does not move while the ISR is under
min.insync.replicas, as in Kafka 3.9), with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank
below min.insync.replicas after the HW passed the batch, NOT_LEADER_OR_FOLLOWER if the replica stopped
leading, REQUEST_TIMED_OUT after the request's timeout_ms. Standalone the one replica is the
whole ISR, so acks=-1 is answered at once, like acks=1.

Authorization (with an authorizer, as Kafka's KafkaApis): a request carrying transactional
batches needs WRITE on its transactional id, else every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; each topic needs WRITE, else its partitions answer
TOPIC_AUTHORIZATION_FAILED (checked before the topic's existence, so a denied caller learns
nothing of it).

Version notes: v0-2 have no transactional id; v2 adds log_append_time_ms, v5 log_start_offset,
v8 record_errors and error_message; v9 is flexible. The request is parsed by hand (records stay
views into the request buffer) and the response encoded by hand (protocol.produce).
"""

import asyncio
import functools
from typing import TYPE_CHECKING, Final

from protocol.api_keys import ApiKey
from protocol.errors import CorruptRecordError, ErrorCode, KafkaError, ProtocolError
from protocol.primitives import INT16
from protocol.produce import PartitionResponse, ProduceRequest, encode_produce_response, parse_produce_request
from protocol.record_batch import ATTRIBUTES, MAGIC, TRANSACTIONAL_FLAG
from storage.topic_partition import TopicPartition

from broker.deferred import Deferred
from broker.handlers import authorization
from broker.handlers.authorization import authorized, authorized_names
from broker.handlers.registry import NO_RESPONSE, EncodedResponse, RequestContext, api
from broker.security.acl import AclOperation, ResourceType
from broker.topic_manager import INTERNAL_TOPICS, validate_topic_name

if TYPE_CHECKING:
    from broker.replica_manager import CommitWatch

VALID_ACKS: Final = (-1, 0, 1)
# Bound once: compiled code looks an enum member up at every use.
_NO_ERROR: Final = ErrorCode.none


@api(ApiKey.PRODUCE, versions=(0, 9), parse=parse_produce_request)
def handle_produce(ctx: RequestContext, request: ProduceRequest) -> EncodedResponse | object:
    # Every produced batch comes through here: the checks that hold for a whole request or
    # topic are made once for it, and names are looked up once.
    services = ctx.services
    replica_manager = services.replica_manager
    topic_stats = services.topic_stats
    authorizing = authorization.enabled(ctx)
    if authorizing and _has_transactional_records(request) and (
        request.transactional_id is None
        or not authorized(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
    ):
        return _refused(ctx, request, ErrorCode.transactional_id_authorization_failed)
    writable = (
        authorized_names(ctx, AclOperation.WRITE, ResourceType.TOPIC, (t.name for t in request.topics))
        if authorizing else None
    )
    acks = request.acks
    responses: list[tuple[str, list[PartitionResponse]]] = []
    waiting: list[tuple[TopicPartition, int, PartitionResponse]] = []
    flushing: list[tuple[asyncio.Future, PartitionResponse]] = []
    for topic in request.topics:
        name = topic.name
        refused = _topic_refusal(ctx, name, acks, writable)
        partitions: list[PartitionResponse] = []
        for data in topic.partitions:
            partition = PartitionResponse(data.index)
            records = data.records
            try:
                if refused is not None:
                    raise refused
                if records is None:
                    raise CorruptRecordError("no record set")
                tp = replica_manager.topic_partition(name, data.index)
                result = replica_manager.append(tp, records, acks)
            except KafkaError as exc:
                _set_error(partition, exc)
                topic_stats.append_failed(name, len(records) if records is not None else 0)
            else:
                first_offset, last_offset = result.first_offset, result.last_offset
                partition.base_offset = first_offset
                partition.log_append_time_ms = result.log_append_time_ms
                partition.log_start_offset = result.log_start_offset
                topic_stats.appended(name, first_offset, last_offset, len(records))
                flush = result.flush
                if flush is not None:
                    flushing.append((flush, partition))
                if acks == -1:
                    waiting.append((tp, last_offset, partition))
            partitions.append(partition)
        responses.append((name, partitions))
    if acks == 0:
        return NO_RESPONSE
    if flushing:
        return _FlushedProduce(ctx, request.timeout_ms, flushing, waiting, responses).answer
    return _answer(ctx, request.timeout_ms, waiting, responses)


def _answer(
    ctx: RequestContext,
    timeout_ms: int,
    waiting: list[tuple[TopicPartition, int, PartitionResponse]],
    responses: list[tuple[str, list[PartitionResponse]]],
) -> EncodedResponse | Deferred[EncodedResponse]:
    """The answer once the appends are on disk as asked: now, or once the acks=all appends
    still `waiting` commit."""
    pending = [w for w in waiting if not _settled(ctx.services.replica_manager, *w)]
    if pending:
        return _DelayedProduce(ctx, timeout_ms, pending, responses).answer
    return _encoded(ctx.api_version, responses)


def _topic_refusal(ctx: RequestContext, name: str, acks: int, writable: set[str] | None) -> KafkaError | None:
    """What every partition of the topic answers, if the request or the topic is refused
    (in Kafka's order: acks, authorization, the topic's name)."""
    try:
        if acks not in VALID_ACKS:
            raise KafkaError(f"acks={acks} is not -1, 0 or 1", ErrorCode.invalid_required_acks)
        if writable is not None and name not in writable:
            raise KafkaError("", ErrorCode.topic_authorization_failed)
        _check_topic(ctx, name)
    except KafkaError as exc:
        return exc
    return None


def _has_transactional_records(request: ProduceRequest) -> bool:
    """Whether a partition's batch is transactional (Kafka's RequestUtils.hasTransactionalRecords)."""
    for topic in request.topics:
        for data in topic.partitions:
            records = data.records
            if records is not None and len(records) > ATTRIBUTES + 1 and records[MAGIC] == 2:
                if INT16.unpack_from(records, ATTRIBUTES)[0] & TRANSACTIONAL_FLAG:
                    return True
    return False


def _refused(ctx: RequestContext, request: ProduceRequest, error: ErrorCode) -> EncodedResponse:
    """Every partition answers `error`; with acks=0 there is no answer to carry it, and the
    connection is closed, as Kafka closes it."""
    if request.acks == 0:
        raise ProtocolError(f"produce with acks=0 refused with {error.name}: closing the connection")
    responses = []
    for topic in request.topics:
        partitions = []
        for data in topic.partitions:
            partition = PartitionResponse(data.index)
            partition.error_code = error
            partitions.append(partition)
        responses.append((topic.name, partitions))
    return EncodedResponse([encode_produce_response(ctx.api_version, responses)])


def _settled(replica_manager, tp: TopicPartition, last_offset: int, partition: PartitionResponse) -> bool:
    """Whether an acks=all append has its answer already (always, standalone)."""
    outcome = replica_manager.commit_status(tp, last_offset)
    if outcome is not None and outcome is not _NO_ERROR:
        partition.error_code = outcome
    return outcome is not None


class _DelayedProduce:
    """An acks=all produce waiting for its appends to commit (Kafka's DelayedProduce): one
    commit watch (ReplicaManager.watch_commits) for all its partitions, with the request's
    timeout. Its `answer` is a Deferred (broker.deferred), resolved by the watch's callback with
    no task or coroutine in between. Cancelling the answer (its connection closed) ends the
    watch."""

    __slots__ = ("version", "pending", "responses", "answer", "_replica_manager", "_watch")

    def __init__(
        self,
        ctx: RequestContext,
        timeout_ms: int,
        pending: list[tuple[TopicPartition, int, PartitionResponse]],
        responses: list[tuple[str, list[PartitionResponse]]],
    ) -> None:
        self.version = ctx.api_version
        self.pending = pending
        self.responses = responses
        self.answer: Deferred[EncodedResponse] = Deferred(self._stop)
        self._replica_manager = ctx.services.replica_manager
        appends = [(tp, last_offset) for tp, last_offset, _ in pending]
        self._watch: CommitWatch | None = self._replica_manager.watch_commits(appends, timeout_ms / 1000, self._committed)

    def _committed(self, outcomes: list[ErrorCode]) -> None:
        self._watch = None
        for (_, _, partition), outcome in zip(self.pending, outcomes):
            if outcome is not _NO_ERROR:
                partition.error_code = outcome
        self.answer.resolve(_encoded(self.version, self.responses))

    def _stop(self) -> None:
        if self._watch is not None:
            self._replica_manager.stop_watching_commits(self._watch)
            self._watch = None


class _FlushedProduce:
    """A produce waiting for the fsyncs its appends asked for (flush.messages reached), then
    answered as any other (`_answer`: at once, or once its acks=all appends commit). A failed
    fsync answers its partition KAFKA_STORAGE_ERROR. Cancelling the answer (its connection
    closed) stops the wait; the fsyncs go on."""

    __slots__ = ("ctx", "timeout_ms", "waiting", "responses", "answer", "_unflushed", "_then")

    def __init__(
        self,
        ctx: RequestContext,
        timeout_ms: int,
        flushing: list[tuple[asyncio.Future, PartitionResponse]],
        waiting: list[tuple[TopicPartition, int, PartitionResponse]],
        responses: list[tuple[str, list[PartitionResponse]]],
    ) -> None:
        self.ctx = ctx
        self.timeout_ms = timeout_ms
        self.waiting = waiting
        self.responses = responses
        self.answer: Deferred[EncodedResponse] = Deferred(self._stop)
        self._then: Deferred[EncodedResponse] | None = None
        self._unflushed = len(flushing)
        for flush, partition in flushing:
            flush.add_done_callback(functools.partial(self._flushed, partition))

    def _flushed(self, partition: PartitionResponse, flush: asyncio.Future) -> None:
        if self.answer.done():
            return
        failure = None if flush.cancelled() else flush.exception()
        if failure is not None:
            partition.error_code = ErrorCode.kafka_storage_error
            partition.error_message = f"cannot fsync the appended records: {failure}"
            partition.base_offset = partition.log_append_time_ms = partition.log_start_offset = -1
            self.waiting = [w for w in self.waiting if w[2] is not partition]
        self._unflushed -= 1
        if self._unflushed:
            return
        answer = _answer(self.ctx, self.timeout_ms, self.waiting, self.responses)
        if isinstance(answer, Deferred):
            self._then = answer
            answer.when_done(self._committed)
        else:
            self.answer.resolve(answer)

    def _committed(self, done: Deferred[EncodedResponse]) -> None:
        self._then = None
        self.answer.resolve(done.result())

    def _stop(self) -> None:
        if self._then is not None:
            self._then.cancel()
            self._then = None


def _encoded(version: int, responses: list[tuple[str, list[PartitionResponse]]]) -> EncodedResponse:
    # throttle_time_ms ends the body, before v9's tagged fields (one byte: none).
    throttle_offset = None if version == 0 else -5 if version >= 9 else -4
    return EncodedResponse([encode_produce_response(version, responses)], throttle_offset)


def _set_error(partition: PartitionResponse, exc: KafkaError) -> None:
    partition.error_code = exc.error_code
    partition.error_message = str(exc) or None


def _check_topic(ctx: RequestContext, name: str) -> None:
    if name not in ctx.services.topic_store.topics:
        validate_topic_name(name)  # existing topics were validated when created
    if name in INTERNAL_TOPICS:
        raise KafkaError(f"Cannot append to internal topic {name}", ErrorCode.invalid_topic_exception)
