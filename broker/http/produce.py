"""Producing the records of one HTTP request: partitioned, batched, sent as one Produce request.

The records of a request are grouped per partition into one v2 record batch each and sent in
one Produce request (v9) through the loopback, so a request of many small records costs one
append per partition, not one per record. Partitioning is the Java client's default: a record
naming a partition goes there; a keyed record goes to murmur2(key) mod the partition count; the
unkeyed records of one request all go to one partition, the next one round robin per topic
(the sticky partitioner's effect: whole batches). The topic's partition count comes from a
Metadata request (so an unknown or unauthorized topic is answered as Kafka answers it).
"""

import datetime
import itertools
import time
from dataclasses import dataclass

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import Header, Record, build_batch

from broker.http.errors import RestError, kafka_error
from broker.http.loopback import Loopback
from broker.session import KafkaPrincipal

PRODUCE_TIMEOUT = datetime.timedelta(seconds=30)  # the producer's request.timeout.ms default


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


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (the default partitioner's hash), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


class Producer:
    def __init__(self, loopback: Loopback) -> None:
        self._loopback = loopback
        self._round_robin: dict[str, itertools.count] = {}

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
        batches = []
        for partition, indexes in by_partition.items():
            batch = build_batch([
                Record(delta, records[i].timestamp_ms if records[i].timestamp_ms is not None else now,
                       records[i].key, records[i].value, records[i].headers)
                for delta, i in enumerate(indexes)
            ])
            batches.append(PartitionProduceData(index=partition, records=batch))
        request = ProduceRequest(
            transactional_id=None, acks=acks, timeout=PRODUCE_TIMEOUT,
            topic_data=(TopicProduceData(name=topic, partition_data=tuple(batches)),),
        )
        response = await self._loopback.send(ApiKey.PRODUCE, 9, request, principal)
        if response is None:  # acks=0: no offsets to tell
            return outcomes
        for answer in response.responses[0].partition_responses:
            for delta, i in enumerate(by_partition[answer.index]):
                outcome = outcomes[i]
                if answer.error_code != ErrorCode.none:
                    outcome.error = ErrorCode(answer.error_code)
                    outcome.message = answer.error_message
                    continue
                outcome.offset = answer.base_offset + delta
                append_time = int(answer.log_append_time.timestamp() * 1000) if answer.log_append_time else -1
                timestamp = records[i].timestamp_ms if records[i].timestamp_ms is not None else now
                outcome.timestamp_ms = append_time if append_time >= 0 else timestamp
        return outcomes


def parse_acks(text: str | None) -> int:
    """The ?acks= query parameter: all/-1 (default), 1, 0."""
    if text is None or text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise RestError(400, 400, f"Invalid acks {text}: expected all, -1, 0 or 1")
