"""The topic lifecycle against a model (issue 12), for a standalone broker
(tests/property/test_topic_lifecycle.py) and a three-broker cluster
(tests/cluster/test_topic_lifecycle.py).

A hypothesis state machine creates topics (plain or compacted) under a few names, so that names
are deleted and created again all the time; produces (acks=all) and remembers each acknowledged
record at its acknowledged offset; adds partitions; deletes records; lets retention delete
segments; waits for the cleaner and for the delayed file deletions; and restarts the broker
cleanly or with kill -9. After every step it reads every partition of every live topic through a
real socket and checks:
- the log start and end offsets are the model's;
- a plain topic holds exactly the acknowledged records from its log start on, at their offsets;
  a compacted one a subset of them holding each key's latest record (the cleaner may have
  dropped the others); so nothing of a deleted topic of the same name shows (the values carry
  the topic's incarnation);
- a deleted name is unknown, and no broker's log says a log directory went offline.

Deletions and retention run on the broker's own short delays (log.segment.delete.delay.ms,
log.retention.check.interval.ms), which the steps wait past.

A target (`Target`) says how to reach the broker that leads a partition, how to restart, and
what the brokers' logs complain of. In a cluster some things take a moment, which the machine
waits for (bounded): a deleted name can be created again once every replica has deleted its
partition, and answers NOT_LEADER_OR_FOLLOWER (nothing written) are asked again of the leader
the metadata names next. After creations and restarts it waits for full ISRs, so that an acks=all
produce never times out half done.
"""

import datetime
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.delete_topics.v5.request import DeleteTopicsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from protocol.api_keys import ApiKey
from protocol.config_types import ConfigResourceType
from protocol.errors import ErrorCode
from protocol.record_batch import iter_batches
from protocol.records import Record, build_batch, iter_records
from tests.kafka_wire import call

NAMES = ("alpha", "beta")  # few, so that names are deleted and created again
KEYS = (b"k0", b"k1", b"k2")
DELETE_DELAY_MS = 300
RETENTION_CHECK_MS = 200
# What every broker of a target runs with: short delays, so steps can wait past them.
BROKER_SETTINGS = {
    "log.segment.delete.delay.ms": str(DELETE_DELAY_MS),
    "log.retention.check.interval.ms": str(RETENTION_CHECK_MS),
    "log.cleaner.backoff.ms": "100",
    "auto.create.topics.enable": "false",
}
# Small segments: retention, DeleteRecords and the cleaner have whole segments to delete.
PLAIN = {"segment.bytes": "1024"}
COMPACTED = {**PLAIN, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
TIMEOUT = datetime.timedelta(seconds=30)
WAIT_S = 60  # for what a cluster takes a moment to do
EARLIEST, LATEST = -2, -1
_OPS = {"set": 0, "delete": 1}
_ASK_THE_NEW_LEADER = (ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available)
# A leader just elected (or restarted) whose high watermark has not reached its epoch's start:
# asked again, as a client would.
_ASK_AGAIN = (ErrorCode.offset_not_available,)


class Target(Protocol):
    replication_factor: int

    def connection(self, topic: str | None = None, partition: int = 0) -> socket.socket:
        """A connection to the leader of the partition; with no topic, to any broker (the
        controller where admin requests need one)."""

    def restart(self, crash: bool) -> None:
        """Restart a broker (SIGTERM, or SIGKILL with `crash`) and wait until it serves."""

    def reconnect(self) -> None:
        """Forget the connections: a broker closed one, or leaders moved."""

    def problems(self) -> list[str]:
        """Lines of the brokers' logs that must never be there."""


@dataclass
class PartitionModel:
    records: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)  # offset: key, value
    log_start: int = 0
    log_end: int = 0

    def start_at(self, offset: int) -> None:
        self.log_start = offset
        self.records = {o: r for o, r in self.records.items() if o >= offset}


@dataclass
class TopicModel:
    incarnation: int
    compacted: bool
    partitions: list[PartitionModel]


def until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.05)


class TopicLifecycle(RuleBasedStateMachine):
    """Subclasses set `target` (made afresh for each run of the machine) in their __init__."""

    target: Target

    def __init__(self) -> None:
        super().__init__()
        self.topics: dict[str, TopicModel] = {}
        self.incarnations = 0

    # ------------------------------------------------------------------------------ rules

    @rule(name=st.sampled_from(NAMES), partitions=st.integers(1, 3), compacted=st.booleans())
    def create_topic(self, name: str, partitions: int, compacted: bool) -> None:
        configs = COMPACTED if compacted else PLAIN
        topic = CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=self.target.replication_factor,
            assignments=(),
            configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
        )
        request = CreateTopicsRequest(topics=(topic,), timeout=TIMEOUT, validate_only=False)
        if name in self.topics:
            (result,) = self._admin(ApiKey.CREATE_TOPICS, 7, request).topics
            assert result.error_code == ErrorCode.topic_already_exists, result
            return

        def created() -> Any:
            (result,) = self._admin(ApiKey.CREATE_TOPICS, 7, request).topics
            # a deletion of the name still under way on some replica
            return None if result.error_code == ErrorCode.topic_already_exists else result

        result = until(created, WAIT_S, f"{name} created again")
        assert result.error_code == ErrorCode.none, result
        self.incarnations += 1
        self.topics[name] = TopicModel(self.incarnations, compacted, [PartitionModel() for _ in range(partitions)])
        self._wait_for_leaders(name)

    @rule(name=st.sampled_from(NAMES))
    def delete_topic(self, name: str) -> None:
        request = DeleteTopicsRequest(topic_names=(name,), timeout=TIMEOUT)
        (result,) = self._admin(ApiKey.DELETE_TOPICS, 5, request).responses
        if name not in self.topics:
            assert result.error_code == ErrorCode.unknown_topic_or_partition, result
            return
        assert result.error_code == ErrorCode.none, result
        del self.topics[name]

    @precondition(lambda self: self.topics)
    @rule(data=st.data(), count=st.integers(1, 30))
    def produce(self, data: st.DataObject, count: int) -> None:
        name, partition, model = self._draw_partition(data, self.topics)
        incarnation = self.topics[name].incarnation
        first = model.log_end
        records = [
            (KEYS[(first + i) % len(KEYS)], f"{name}/{incarnation}/{partition}/{first + i}".encode())
            for i in range(count)
        ]
        batch = build_batch([Record(i, int(time.time() * 1000), k, v) for i, (k, v) in enumerate(records)])
        produced = PartitionProduceData(index=partition, records=batch)
        request = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout=TIMEOUT,
            topic_data=(TopicProduceData(name=name, partition_data=(produced,)),),
        )
        answer = self._ask_leader(name, partition, ApiKey.PRODUCE, 9, request)
        assert answer.error_code == ErrorCode.none, answer
        assert answer.base_offset == first, (answer, model)
        model.records.update((first + i, record) for i, record in enumerate(records))
        model.log_end = first + count

    @precondition(lambda self: self.topics)
    @rule(data=st.data(), added=st.integers(1, 2))
    def create_partitions(self, data: st.DataObject, added: int) -> None:
        name = data.draw(st.sampled_from(sorted(self.topics)))
        topic = self.topics[name]
        count = len(topic.partitions) + added
        request = CreatePartitionsRequest(
            topics=(CreatePartitionsTopic(name=name, count=count, assignments=None),),
            timeout=TIMEOUT,
            validate_only=False,
        )
        (result,) = self._admin(ApiKey.CREATE_PARTITIONS, 3, request).results
        assert result.error_code == ErrorCode.none, result
        topic.partitions += [PartitionModel() for _ in range(added)]
        self._wait_for_leaders(name)

    @precondition(lambda self: self._plain_topics())
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        name, partition, model = self._draw_partition(data, self._plain_topics())
        offset = data.draw(st.integers(model.log_start, model.log_end))
        request = DeleteRecordsRequest(
            topics=(
                DeleteRecordsTopic(
                    name=name, partitions=(DeleteRecordsPartition(partition_index=partition, offset=offset),)
                ),
            ),
            timeout=TIMEOUT,
        )
        result = self._ask_leader(name, partition, ApiKey.DELETE_RECORDS, 2, request)
        assert result.error_code == ErrorCode.none, result
        assert result.low_watermark == offset, result
        model.start_at(offset)

    @precondition(lambda self: self._plain_topics())
    @rule(data=st.data())
    def retention(self, data: st.DataObject) -> None:
        """retention.bytes=1 for a moment: every segment retention may delete goes."""
        name = data.draw(st.sampled_from(sorted(self._plain_topics())))
        self._alter_topic_config(name, "retention.bytes", "set", "1")
        time.sleep(RETENTION_CHECK_MS * 3 / 1000)
        self._alter_topic_config(name, "retention.bytes", "delete", None)
        for partition, model in enumerate(self.topics[name].partitions):
            start = self._offset(name, partition, EARLIEST)
            assert model.log_start <= start <= model.log_end, (name, partition, start, model)
            model.start_at(start)

    @rule()
    def wait_for_the_cleaner(self) -> None:
        time.sleep(0.3)

    @rule()
    def wait_past_the_delete_delays(self) -> None:
        time.sleep(DELETE_DELAY_MS * 1.5 / 1000)

    @rule(crash=st.booleans())
    def restart(self, crash: bool) -> None:
        self.target.restart(crash)
        for name in self.topics:
            self._wait_for_leaders(name)

    # -------------------------------------------------------------------------- the check

    @invariant()
    def every_acknowledged_record_is_readable(self) -> None:
        assert self.target.problems() == []
        for name in NAMES:
            if name not in self.topics:
                until(
                    lambda n=name: self._metadata(n).error_code == ErrorCode.unknown_topic_or_partition,
                    WAIT_S,
                    f"{name} deleted",
                )
        for name, topic in self.topics.items():
            described = self._metadata(name)
            assert described.error_code == ErrorCode.none, described
            assert len(described.partitions) == len(topic.partitions), described
            for partition, model in enumerate(topic.partitions):
                self._check_partition(name, partition, model, topic.compacted)

    def _check_partition(self, name: str, partition: int, model: PartitionModel, compacted: bool) -> None:
        where = f"{name}-{partition}"
        assert self._offset(name, partition, EARLIEST) == model.log_start, (where, model)
        assert self._offset(name, partition, LATEST) == model.log_end, (where, model)
        read = self._read(name, partition, model.log_start, model.log_end)
        for offset, record in read.items():
            assert model.records.get(offset) == record, (where, offset, record, model.records.get(offset))
        if not compacted:
            assert read == model.records, (where, sorted(set(model.records) ^ set(read))[:10])
            return
        latest = {key: offset for offset, (key, _) in sorted(model.records.items())}
        missing = sorted(set(latest.values()) - set(read))
        assert not missing, (where, "latest records of their keys missing", missing)

    # ---------------------------------------------------------------------------- helpers

    def _plain_topics(self) -> dict[str, TopicModel]:
        return {name: topic for name, topic in self.topics.items() if not topic.compacted}

    @staticmethod
    def _draw_partition(data: st.DataObject, topics: dict[str, TopicModel]) -> tuple[str, int, PartitionModel]:
        name = data.draw(st.sampled_from(sorted(topics)))
        partition = data.draw(st.integers(0, len(topics[name].partitions) - 1))
        return name, partition, topics[name].partitions[partition]

    def _admin(self, api_key: int, version: int, request: Any) -> Any:
        """The answer of the controller, asked again while it moves."""

        def answer() -> Any:
            response = call(self.target.connection(), api_key, version, request)
            results = next((getattr(response, f) for f in ("topics", "responses", "results") if hasattr(response, f)), ())
            if any(getattr(r, "error_code", None) == ErrorCode.not_controller for r in results):
                self.target.reconnect()
                return None
            return response

        return until(answer, WAIT_S, "an answer from the controller")

    def _ask_leader(self, name: str, partition: int, api_key: int, version: int, request: Any) -> Any:
        """The partition's answer from its leader, asked again while the leader moves."""

        def answer() -> Any:
            response = call(self.target.connection(name, partition), api_key, version, request)
            answered = _partition_answer(api_key, response)
            if answered.error_code in _ASK_THE_NEW_LEADER:
                self.target.reconnect()
                return None
            if answered.error_code in _ASK_AGAIN:
                return None
            return answered

        return until(answer, WAIT_S, f"an answer from the leader of {name}-{partition}")

    def _alter_topic_config(self, name: str, key: str, operation: str, value: str | None) -> None:
        resource = AlterConfigsResource(
            resource_type=ConfigResourceType.TOPIC,
            resource_name=name,
            configs=(AlterableConfig(name=key, config_operation=_OPS[operation], value=value),),
        )
        request = IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)
        (result,) = self._admin(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request).responses
        assert result.error_code == ErrorCode.none, result

    def _metadata(self, name: str) -> Any:
        request = MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=name),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        (described,) = self._admin(ApiKey.METADATA, 12, request).topics
        return described

    def _wait_for_leaders(self, name: str) -> None:
        """Until every partition has a leader and its whole ISR."""

        def led() -> bool:
            described = self._metadata(name)
            count = len(self.topics[name].partitions)
            return (
                described.error_code == ErrorCode.none
                and len(described.partitions) == count
                and all(
                    p.leader_id >= 0
                    and p.error_code == ErrorCode.none
                    and len(p.isr_nodes) == self.target.replication_factor
                    for p in described.partitions
                )
            )

        until(led, WAIT_S, f"leaders and full ISRs of {name}")
        self.target.reconnect()

    def _offset(self, name: str, partition: int, timestamp: int) -> int:
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=(
                ListOffsetsTopic(
                    name=name, partitions=(ListOffsetsPartition(partition_index=partition, timestamp=timestamp),)
                ),
            ),
        )
        answer = self._ask_leader(name, partition, ApiKey.LIST_OFFSETS, 7, request)
        assert answer.error_code == ErrorCode.none, (name, partition, answer)
        return answer.offset

    def _read(self, name: str, partition: int, start: int, end: int) -> dict[int, tuple[bytes, bytes]]:
        """Every record of [start, end), by offset."""
        read: dict[int, tuple[bytes, bytes]] = {}
        offset = start
        while offset < end:
            wanted = FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)
            request = FetchRequest(
                max_wait=datetime.timedelta(0),
                min_bytes=0,
                topics=(FetchTopic(topic=name, partitions=(wanted,)),),
                forgotten_topics_data=(),
                rack_id="",
            )
            answer = self._ask_leader(name, partition, ApiKey.FETCH, 12, request)
            assert answer.error_code == ErrorCode.none, (name, partition, offset, answer.error_code)
            data = answer.records or b""
            batches = list(iter_batches(data))
            assert batches, f"{name}-{partition}: nothing at {offset} below the log end {end}"
            for position, header in batches:
                for record in iter_records(data[position : position + header.size]):
                    if offset <= record.offset < end:
                        read[record.offset] = (record.key, record.value)
                offset = max(offset, header.next_offset)
        return read


def _partition_answer(api_key: int, response: Any) -> Any:
    """The one partition's part of a response to a request naming one partition."""
    if api_key == ApiKey.PRODUCE:
        return response.responses[0].partition_responses[0]
    if api_key == ApiKey.FETCH:
        return response.responses[0].partitions[0]
    return response.topics[0].partitions[0]  # ListOffsets, DeleteRecords
