"""Producing the records of one HTTP request: partitioned, batched, sent as one Produce request.

The records of a request are grouped per partition into one v2 record batch each and sent in
one Produce request (v9) through the loopback, so a request of many small records costs one
append per partition, not one per record. Partitioning is the Java client's default: a record
naming a partition goes there; a keyed record goes to murmur2(key) mod the partition count; the
unkeyed records of one request all go to one partition, the next one round robin per topic
(the sticky partitioner's effect: whole batches). The topic's partition count comes from a
Metadata request (so an unknown or unauthorized topic is answered as Kafka answers it).

Each partition's batch goes to its leader (broker/http/routing.py: one Produce per leader,
sent again on NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, a lost connection ... until the Java
producer's delivery.timeout.ms). With acks=all the batches are idempotent, as the Java
producer's since Kafka 3.0: a producer id and epoch from this broker's InitProducerId handler,
consecutive sequences per partition, one batch per partition in flight, so a batch sent again
is recognised by the leader and written once.
"""

import asyncio
import contextlib
import datetime
import itertools
import time
from dataclasses import dataclass, field

from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from protocol.records import Header, Record, build_batch

from broker.http.errors import RestError, kafka_error
from broker.http.routing import RETRIABLE, RETRY_BACKOFF_S, Router, Unanswered
from broker.partitioner import murmur2
from broker.session import KafkaPrincipal

PRODUCE_TIMEOUT = datetime.timedelta(seconds=30)  # the producer's request.timeout.ms default
DELIVERY_TIMEOUT = datetime.timedelta(minutes=2)  # its delivery.timeout.ms default: retries end there
SEQUENCE_MODULUS = 1 << 31  # sequences wrap past Integer.MAX_VALUE, as Kafka's
# The leader has no state of our producer id, or misses our last batches: start again with a new one.
_PRODUCER_LOST = frozenset({
    ErrorCode.unknown_producer_id, ErrorCode.out_of_order_sequence_number, ErrorCode.invalid_producer_epoch,
})
_Answer = tuple[ErrorCode, str | None, int, int]  # error, message, base offset, log append time


@dataclass(slots=True)
class OutRecord:
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None


@dataclass(slots=True)
class Produced:
    partition: int
    offset: int = -1
    timestamp_ms: int = -1
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass
class _Idempotence:
    """A producer id and epoch from InitProducerId, and the next sequence of each partition."""

    producer_id: int
    epoch: int
    sequences: dict[tuple[str, int], int] = field(default_factory=dict)


class Producer:
    def __init__(self, router: Router) -> None:
        self._router = router
        self._loopback = router.loopback
        # Longer than a Produce's own timeout, which the leader answers REQUEST_TIMED_OUT at.
        self._clients = router.clients("producer", PRODUCE_TIMEOUT.total_seconds() + 5)
        self._round_robin: dict[str, itertools.count] = {}
        self._idempotence: _Idempotence | None = None
        self._initializing = asyncio.Lock()
        # One batch of a partition at a time (the retries of one must not pass the next).
        self._partition_locks: dict[tuple[str, int], asyncio.Lock] = {}

    async def close(self) -> None:
        if self._clients is not None:
            await self._clients.close()

    async def partition_count(self, topic: str, principal: KafkaPrincipal) -> int:
        """The topic's partition count; RestError as the proxy answers an unknown topic."""
        response = await self._loopback.send(
            ApiKey.METADATA, 12,
            MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),), allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False),
            principal,
        )
        found = response.topics[0]
        if found.error_code != ErrorCode.none:
            raise kafka_error(found.error_code)
        return len(found.partitions)

    async def _producer_id(self, principal: KafkaPrincipal) -> _Idempotence:
        """The current producer id and epoch, from this broker's InitProducerId handler the
        first time and after a reset."""
        async with self._initializing:
            if self._idempotence is None:
                answer = await self._loopback.send(
                    ApiKey.INIT_PRODUCER_ID, 4,
                    InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(minutes=1),
                                          producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH),
                    principal,
                )
                if answer.error_code != ErrorCode.none:
                    raise kafka_error(answer.error_code)
                self._idempotence = _Idempotence(answer.producer_id, answer.producer_epoch)
            return self._idempotence

    def _reset(self, idempotence: _Idempotence) -> None:
        """Give up `idempotence` (a batch whose fate is unknown, or the broker lost the
        producer's state): the next batch gets a new producer id, its sequences from 0."""
        if self._idempotence is idempotence:
            self._idempotence = None

    async def produce(
        self, topic: str, records: list[OutRecord], principal: KafkaPrincipal, acks: int = -1
    ) -> list[Produced]:
        """Each record's outcome, in the request's order."""
        count = await self.partition_count(topic, principal)
        sticky = next(self._round_robin.setdefault(topic, itertools.count())) % count
        now = int(time.time() * 1000)
        by_partition: dict[int, list[int]] = {}
        outcomes = []
        for index, record in enumerate(records):
            if record.partition is not None:
                partition = record.partition
            elif record.key is not None:
                partition = (murmur2(record.key) & 0x7FFFFFFF) % count
            else:
                partition = sticky
            outcomes.append(Produced(partition))
            if 0 <= partition < count:
                by_partition.setdefault(partition, []).append(index)
            else:
                outcomes[-1].error = ErrorCode.unknown_topic_or_partition
        if not by_partition:
            return outcomes
        timestamps = [r.timestamp_ms if r.timestamp_ms is not None else now for r in records]
        records_of = {
            partition: [Record(delta, timestamps[i], records[i].key, records[i].value, records[i].headers)
                        for delta, i in enumerate(indexes)]
            for partition, indexes in by_partition.items()
        }
        if acks != -1:
            # As the Java producer since Kafka 3.0: idempotent unless acks is not all.
            answers = await self._deliver(topic, {p: build_batch(rs) for p, rs in records_of.items()}, acks, principal)
        else:
            locks = [self._partition_locks.setdefault((topic, p), asyncio.Lock()) for p in sorted(by_partition)]
            async with contextlib.AsyncExitStack() as stack:
                for lock in locks:
                    await stack.enter_async_context(lock)
                answers = await self._deliver_idempotently(topic, records_of, principal)
        for partition, (error, message, base_offset, append_time) in answers.items():
            for delta, i in enumerate(by_partition[partition]):
                outcome = outcomes[i]
                if error != ErrorCode.none:
                    outcome.error, outcome.message = error, message
                    continue
                if base_offset < 0:  # acks=0: no offsets to tell
                    continue
                outcome.offset = base_offset + delta
                outcome.timestamp_ms = append_time if append_time >= 0 else timestamps[i]
        return outcomes

    async def _deliver_idempotently(
        self, topic: str, records_of: dict[int, list[Record]], principal: KafkaPrincipal
    ) -> dict[int, _Answer]:
        """Each partition's batch written once, with the producer id and its next sequence:
        the broker recognises a retry of a batch it has (also after a leader change, as
        followers keep producer state) and answers its offsets again. A broker that lost the
        producer (UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER: its log lost our last
        batches) gets the batch again under a new producer id; a batch still without an answer
        at the deadline leaves its producer id behind (its fate is unknown, so its sequence
        cannot be given to another batch)."""
        deadline = time.monotonic() + DELIVERY_TIMEOUT.total_seconds()
        answers: dict[int, _Answer] = {}
        remaining = dict(records_of)
        while remaining:
            idempotence = await self._producer_id(principal)
            batches = {
                p: build_batch(rs, producer_id=idempotence.producer_id, producer_epoch=idempotence.epoch,
                               base_sequence=idempotence.sequences.get((topic, p), 0))
                for p, rs in remaining.items()
            }
            try:
                delivered = await self._deliver(topic, batches, -1, principal, deadline)
            except BaseException:
                # Cancelled (the HTTP client went away) or failed with batches in flight: their
                # sequences may be in the log, and must not be given to other records.
                self._reset(idempotence)
                raise
            lost_producer = False
            for partition, answer in delivered.items():
                error = answer[0]
                if error == ErrorCode.none:
                    key = (topic, partition)
                    idempotence.sequences[key] = (idempotence.sequences.get(key, 0) + len(remaining[partition])) % SEQUENCE_MODULUS
                elif error in _PRODUCER_LOST and time.monotonic() < deadline:
                    lost_producer = True
                    continue
                elif error in RETRIABLE or error == ErrorCode.unknown_server_error:
                    self._reset(idempotence)
                answers[partition] = answer
                del remaining[partition]
            if lost_producer:
                self._reset(idempotence)
        return answers

    async def _deliver(
        self, topic: str, batches: dict[int, bytes], acks: int, principal: KafkaPrincipal, deadline: float | None = None
    ) -> dict[int, _Answer]:
        """Each partition's (error, message, base offset, log append time; -1 for acks=0), its
        batch sent to its leader in one Produce per leader, again on a retriable answer (a
        leader change) until `deadline` (DELIVERY_TIMEOUT from now)."""
        if deadline is None:
            deadline = time.monotonic() + DELIVERY_TIMEOUT.total_seconds()
        answers: dict[int, _Answer] = {}
        remaining = dict(batches)
        while True:
            by_leader: dict[int, list[int]] = {}
            for partition in remaining:
                leader = self._router.leader(topic, partition)
                if leader is None:
                    answers[partition] = (ErrorCode.leader_not_available, None, -1, -1)
                else:
                    by_leader.setdefault(leader, []).append(partition)
            timeout = min(PRODUCE_TIMEOUT.total_seconds(), max(deadline - time.monotonic(), 0.001))
            sent = await asyncio.gather(*(
                self._send(leader, topic, {p: remaining[p] for p in partitions}, acks, timeout, principal)
                for leader, partitions in by_leader.items()
            ))
            for answer in sent:
                answers.update(answer)
            remaining = {p: b for p, b in remaining.items() if answers[p][0] in RETRIABLE}
            if not remaining or time.monotonic() + RETRY_BACKOFF_S >= deadline:
                return answers
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _send(
        self, leader: int, topic: str, batches: dict[int, bytes], acks: int, timeout_s: float,
        principal: KafkaPrincipal,
    ) -> dict[int, _Answer]:
        remote = leader != self._router.broker_id and self._clients is not None
        # A broker answers a Produce with acks=0 with nothing, which the inter-broker client
        # cannot wait for: a remote leader is asked with acks=1, its answer not told.
        request = ProduceRequest(
            transactional_id=None, acks=1 if remote and acks == 0 else acks,
            timeout=datetime.timedelta(seconds=timeout_s),
            topic_data=(TopicProduceData(name=topic, partition_data=tuple(
                PartitionProduceData(index=p, records=b) for p, b in batches.items())),),
        )
        try:
            response = await self._router.send(leader, ApiKey.PRODUCE, 9, request, principal, self._clients)
        except Unanswered as exc:
            return {p: (exc.error, str(exc), -1, -1) for p in batches}
        if response is None or acks == 0:
            return {p: (ErrorCode.none, None, -1, -1) for p in batches}
        answers = {}
        for answer in response.responses[0].partition_responses:
            append_time = int(answer.log_append_time.timestamp() * 1000) if answer.log_append_time else -1
            answers[answer.index] = (ErrorCode(answer.error_code), answer.error_message, answer.base_offset, append_time)
        return answers


def parse_acks(text: str | None) -> int:
    """The ?acks= query parameter: all/-1 (default), 1, 0."""
    if text is None or text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise RestError(400, 400, f"Invalid acks {text}: expected all, -1, 0 or 1")
