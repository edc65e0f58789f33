"""The transaction coordinator inside an in-process broker (no sockets): InitProducerId, the
transactional APIs, what reaches __transaction_state and the partitions, timeouts, and loading
after a restart."""

import asyncio
import datetime
import functools

import pytest

from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest as FindCoordinatorV1
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.txn_offset_commit.v3.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest

from coordinator import transaction_log
from coordinator.group_coordinator import PartitionContents
from coordinator.internal_topic import LoadState
from coordinator.transaction_coordinator import TRANSACTION_STATE_TOPIC
from coordinator.transaction_log import TxnState
from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import iter_batches
from protocol.records import ControlRecordType, Record, build_batch, control_record_type, iter_records
from replication.partition_state import LeaderEndpoint, PartitionState
from storage.topic_partition import TopicPartition
from tests.in_process import Client, running_broker
from tests.kafka_wire import decode_describe_transactions

FAST = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"}
TOPIC = "t"
TP = TopicPartition(TOPIC, 0)
MINUTE = datetime.timedelta(minutes=1)


def in_loop(test):
    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))

    return run


async def init(client, transactional_id="tx", version=4, producer_id=-1, epoch=-1):
    request = InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=MINUTE, producer_id=producer_id, producer_epoch=epoch
    )
    response = await client.call(ApiKey.INIT_PRODUCER_ID, version, request)
    return response.error_code, response.producer_id, response.producer_epoch


async def add_partitions(client, pid, epoch, topic=TOPIC, partitions=(0,), version=3, transactional_id="tx"):
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(AddPartitionsToTxnTopic(name=topic, partitions=partitions),),
    )
    response = await client.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, request)
    return [p.partition_error_code for t in response.results_by_topic_v3_and_below for p in t.results_by_partition]


async def end(client, pid, epoch, commit, version=3):
    request = EndTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=commit)
    return (await client.call(ApiKey.END_TXN, version, request)).error_code


async def produce(client, pid, epoch, seq, *values):
    batch = build_batch(
        [Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(values)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    request = ProduceRequest(
        transactional_id="tx",
        acks=-1,
        timeout=MINUTE,
        topic_data=(TopicProduceData(name=TOPIC, partition_data=(PartitionProduceData(index=0, records=batch),)),),
    )
    response = await client.call(ApiKey.PRODUCE, 9, request)
    return response.responses[0].partition_responses[0].error_code


async def fetch(client, isolation_level):
    request = FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=isolation_level,
        forgotten_topics_data=(),
        topics=(FetchTopic(topic=TOPIC, partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
    )
    response = await client.call(ApiKey.FETCH, 12, request)
    return response.responses[0].partitions[0]


def txn_offset_commit(pid, epoch, offset):
    """TxnOffsetCommit of "tx" for group "g": `offset` for partition 0 of TOPIC."""
    return TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id="g",
        producer_id=pid,
        producer_epoch=epoch,
        topics=(TxnOffsetCommitRequestTopic(name=TOPIC, partitions=(
            TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_metadata=None),
        )),),
    )


async def begun(broker):
    """A topic, and a transaction of "tx" open on its partition: (client, producer id, epoch)."""
    await broker.topics.create(TOPIC, 1, {})
    client = Client(broker)
    _, pid, epoch = await init(client)
    assert await add_partitions(client, pid, epoch) == [ErrorCode.none]
    return client, pid, epoch


async def settled(broker, state: TxnState, transactional_id="tx"):
    """Wait (bounded) for the background markers to bring the transaction to `state`."""
    for _ in range(200):
        description = broker.transaction_coordinator.describe(transactional_id)
        if description is not None and description.state is state:
            return description
        await asyncio.sleep(0.01)
    raise AssertionError(f"{transactional_id} never reached {state.name}")


def batches(broker, tp):
    """(header, records) of every batch of the partition."""
    log = broker.replica_manager.get_partition(tp).log
    found = []
    offset = log.log_start_offset
    while (region := log.read(offset, 1 << 30, log.log_end_offset, True)) is not None:  # a segment at a time
        data = memoryview(region.read())
        for pos, header in iter_batches(data):
            found.append((header, list(iter_records(data[pos : pos + header.size]))))
            offset = header.next_offset
    return found


def state_records(broker, transactional_id="tx"):
    partition = broker.transaction_coordinator.state_topic.partition_for(transactional_id)
    return [
        transaction_log.decode_value(record.value).state
        for _, records in batches(broker, TopicPartition(TRANSACTION_STATE_TOPIC, partition))
        for record in records
    ]


def marker_types(broker, tp=TP):
    """The types of the partition's control records (0 ABORT, 1 COMMIT)."""
    return [control_record_type(records[0]) for header, records in batches(broker, tp) if header.is_control]


@in_loop
async def test_find_coordinator_creates_the_state_topic(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client = Client(broker)
        request = FindCoordinatorRequest(key_type=1, coordinator_keys=("tx", ""))
        response = await client.call(ApiKey.FIND_COORDINATOR, 4, request)
        assert [c.error_code for c in response.coordinators] == [ErrorCode.none, ErrorCode.invalid_request]
        assert broker.topics.topics[TRANSACTION_STATE_TOPIC].partitions == 3
        single = await client.call(ApiKey.FIND_COORDINATOR, 1, FindCoordinatorV1(key="tx", key_type=1))
        assert (single.error_code, single.node_id) == (ErrorCode.none, broker.broker_id)
        assert broker.topics.log_config(TRANSACTION_STATE_TOPIC).cleanup_policy == {"compact"}


@in_loop
async def test_init_gives_epoch_zero_then_bumps_it(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client = Client(broker)
        error, pid, epoch = await init(client)
        assert (error, epoch) == (ErrorCode.none, 0)
        assert await init(client) == (ErrorCode.none, pid, 1)
        assert await init(client, producer_id=pid, epoch=5) == (ErrorCode.producer_fenced, -1, -1)
        assert await init(client, version=3, producer_id=pid, epoch=5) == (ErrorCode.invalid_producer_epoch, -1, -1)
        # A retry of the bump that made epoch 1 (KIP-360) gets epoch 1 again.
        assert await init(client, producer_id=pid, epoch=0) == (ErrorCode.none, pid, 1)
        assert await init(client, producer_id=pid, epoch=1) == (ErrorCode.none, pid, 2)
        assert state_records(broker) == [TxnState.EMPTY] * 3


@in_loop
async def test_a_committed_transaction_writes_markers_and_moves_the_lso(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        await broker.topics.create(TOPIC, 1, {})
        client = Client(broker)
        _, pid, epoch = await init(client)
        assert await add_partitions(client, pid, epoch) == [ErrorCode.none]
        assert await produce(client, pid, epoch, 0, b"a", b"b") is ErrorCode.none
        partition = broker.replica_manager.get_partition(TP)
        assert (partition.last_stable_offset, partition.high_watermark) == (0, 2)
        assert not (await fetch(client, 1)).records
        assert await end(client, pid, epoch, commit=True) is ErrorCode.none
        await settled(broker, TxnState.COMPLETE_COMMIT)
        assert partition.last_stable_offset == partition.high_watermark == 3
        assert marker_types(broker) == [1]  # COMMIT
        assert state_records(broker) == [TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
        assert await end(client, pid, epoch, commit=True) is ErrorCode.none  # a retry
        assert await end(client, pid, epoch, commit=False) is ErrorCode.invalid_txn_state


@in_loop
async def test_an_aborted_transaction_is_listed_to_read_committed_fetches(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client, pid, epoch = await begun(broker)
        await produce(client, pid, epoch, 0, b"a")
        assert await end(client, pid, epoch, commit=False) is ErrorCode.none
        await settled(broker, TxnState.COMPLETE_ABORT)
        committed = await fetch(client, 1)
        assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(pid, 0)]
        assert (await fetch(client, 0)).aborted_transactions is None
        # The records are old enough (by timestamp) to roll the segment: the marker is in the next one.
        assert [p.stat().st_size for p in (tmp_path / f"{TOPIC}-0").glob("*.txnindex")] == [34]


@in_loop
async def test_errors_of_the_transactional_apis(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        await broker.topics.create(TOPIC, 1, {})
        client = Client(broker)
        _, pid, epoch = await init(client)
        assert await add_partitions(client, pid, epoch, topic="nope") == [ErrorCode.unknown_topic_or_partition]
        assert await add_partitions(client, pid + 1, epoch) == [ErrorCode.invalid_producer_id_mapping]
        assert await add_partitions(client, pid, epoch + 1) == [ErrorCode.producer_fenced]
        assert await add_partitions(client, pid, epoch + 1, version=1) == [ErrorCode.invalid_producer_epoch]
        assert await add_partitions(client, pid, epoch, transactional_id="other") == [ErrorCode.invalid_producer_id_mapping]
        assert await end(client, pid, epoch, commit=True) is ErrorCode.invalid_txn_state


@in_loop
async def test_a_new_producer_fences_and_aborts_the_open_transaction(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client, pid, epoch = await begun(broker)
        await produce(client, pid, epoch, 0, b"zombie")
        assert await init(client) == (ErrorCode.concurrent_transactions, -1, -1)
        await settled(broker, TxnState.COMPLETE_ABORT)
        assert await init(client) == (ErrorCode.none, pid, epoch + 2)
        assert marker_types(broker) == [0]  # ABORT
        # The zombie's epoch is fenced on the partition too.
        assert await produce(client, pid, epoch, 1, b"late") is ErrorCode.invalid_producer_epoch


def hold_back_writes(broker, topic: str) -> tuple[asyncio.Event, asyncio.Event]:
    """Coordinator writes to `topic` wait: (set when one waits, to be set to let them go)."""
    writing, written = asyncio.Event(), asyncio.Event()
    append_committed = broker.replica_manager.append_committed

    async def held_back(tp, records):
        if tp.topic == topic:
            writing.set()
            await written.wait()
        return await append_committed(tp, records)

    broker.replica_manager.append_committed = held_back
    return writing, written


@in_loop
@pytest.mark.pure_python
async def test_a_request_cancelled_during_its_write_still_ends_the_transition(tmp_path):
    """A connection that closes cancels its request under way (broker.network). What the request
    began on the transaction must still be written and installed: left pending, every later
    request of the id answered CONCURRENT_TRANSACTIONS for good."""
    async with running_broker(tmp_path, FAST) as broker:
        client, pid, epoch = await begun(broker)
        await broker.topics.create("u", 1, {})
        writing, written = hold_back_writes(broker, TRANSACTION_STATE_TOPIC)
        request = asyncio.create_task(add_partitions(client, pid, epoch, topic="u"))
        await writing.wait()
        request.cancel()
        written.set()
        for _ in range(200):  # CONCURRENT_TRANSACTIONS only while the write is under way
            if (error := await end(client, pid, epoch, commit=True)) is not ErrorCode.concurrent_transactions:
                break
            await asyncio.sleep(0.01)
        assert error is ErrorCode.none
        await settled(broker, TxnState.COMPLETE_COMMIT)
        assert marker_types(broker, TopicPartition("u", 0)) == [1]  # COMMIT: the partition was added


@in_loop
async def test_timed_out_transactions_are_aborted_by_the_coordinator(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client, pid, epoch = await begun(broker)
        coordinator = broker.transaction_coordinator
        now = coordinator.clock()
        coordinator.clock = lambda: now + MINUTE // datetime.timedelta(milliseconds=1) + 1000
        await coordinator.abort_timed_out_transactions()
        description = await settled(broker, TxnState.COMPLETE_ABORT)
        assert description.producer_epoch == epoch + 1
        assert await end(client, pid, epoch, commit=True) is ErrorCode.producer_fenced


@in_loop
@pytest.mark.pure_python
async def test_after_a_timeout_abort_that_could_not_be_written_the_producers_bump_gives_a_new_epoch(tmp_path):
    """The coordinator's timeout abort fails to reach __transaction_state (its ISR below
    min.insync.replicas, as in a Jepsen schedule), the producer aborts, then bumps its epoch as
    librdkafka does after an error that needs one (KIP-360: InitProducerId with its producer id
    and epoch). It must get a new epoch: with the old one back, its sequences restarted at 0
    where its partitions expected more, and every transaction after failed with
    OUT_OF_ORDER_SEQUENCE_NUMBER."""
    async with running_broker(tmp_path, FAST) as broker:
        client, pid, epoch = await begun(broker)
        coordinator = broker.transaction_coordinator
        append_committed = broker.replica_manager.append_committed

        async def not_enough_replicas(tp, records):
            if tp.topic == TRANSACTION_STATE_TOPIC:
                raise KafkaError("1 in-sync replica, min.insync.replicas is 2", ErrorCode.not_enough_replicas)
            return await append_committed(tp, records)

        broker.replica_manager.append_committed = not_enough_replicas
        now = coordinator.clock()
        real_clock = coordinator.clock
        coordinator.clock = lambda: now + MINUTE // datetime.timedelta(milliseconds=1) + 1000
        await coordinator.abort_timed_out_transactions()
        broker.replica_manager.append_committed = append_committed
        coordinator.clock = real_clock
        assert coordinator.describe("tx").state is TxnState.ONGOING  # the abort left no trace

        assert await end(client, pid, epoch, commit=False) is ErrorCode.none
        await settled(broker, TxnState.COMPLETE_ABORT)
        assert await init(client, producer_id=pid, epoch=epoch) == (ErrorCode.none, pid, epoch + 1)


@in_loop
async def test_transactional_offsets_become_visible_on_commit_only(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        await broker.topics.create(TOPIC, 1, {})
        client = Client(broker)

        async def offsets(require_stable=False):
            request = OffsetFetchRequest(
                groups=(OffsetFetchRequestGroup(group_id="g", topics=None),), require_stable=require_stable
            )
            response = await client.call(ApiKey.OFFSET_FETCH, 8, request)
            return {
                p.partition_index: p.committed_offset if p.error_code is ErrorCode.none else p.error_code
                for t in response.groups[0].topics
                for p in t.partitions
            }

        async def commit_offset(pid, epoch, offset, commit):
            request = AddOffsetsToTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch, group_id="g")
            assert (await client.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, request)).error_code is ErrorCode.none
            request = txn_offset_commit(pid, epoch, offset)
            response = await client.call(ApiKey.TXN_OFFSET_COMMIT, 3, request)
            assert response.topics[0].partitions[0].error_code is ErrorCode.none
            committed_before = await offsets()
            assert committed_before in ({}, {0: 7})
            # All partitions (topics null) means those with a committed offset, as in Kafka.
            unstable = {p: ErrorCode.unstable_offset_commit for p in committed_before}
            assert await offsets(require_stable=True) == unstable
            assert await end(client, pid, epoch, commit) is ErrorCode.none
            await settled(broker, TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)

        _, pid, epoch = await init(client)
        await commit_offset(pid, epoch, 7, commit=True)
        assert await offsets(require_stable=True) == {0: 7}
        await commit_offset(pid, epoch, 9, commit=False)
        assert await offsets(require_stable=True) == {0: 7}
    async with running_broker(tmp_path, FAST) as broker:
        client = Client(broker)
        await asyncio.sleep(0.2)  # loading
        assert await offsets() == {0: 7}


@in_loop
@pytest.mark.pure_python
async def test_transactional_offsets_cancelled_during_their_write_still_wait_for_the_marker(tmp_path):
    """TxnOffsetCommit whose connection closes while its offsets are written: they are in the
    log, so the commit marker must make them the group's offsets."""
    async with running_broker(tmp_path, FAST) as broker:
        client, pid, epoch = await begun(broker)
        request = AddOffsetsToTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch, group_id="g")
        assert (await client.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, request)).error_code is ErrorCode.none
        writing, written = hold_back_writes(broker, "__consumer_offsets")
        request = txn_offset_commit(pid, epoch, 5)
        commit = asyncio.create_task(client.call(ApiKey.TXN_OFFSET_COMMIT, 3, request))
        await writing.wait()
        commit.cancel()
        written.set()
        for _ in range(200):  # the write ends; its offsets wait for the marker
            if broker.group_coordinator.unstable_partitions("g"):
                break
            await asyncio.sleep(0.01)
        assert await end(client, pid, epoch, commit=True) is ErrorCode.none
        await settled(broker, TxnState.COMPLETE_COMMIT)
        request = OffsetFetchRequest(groups=(OffsetFetchRequestGroup(group_id="g", topics=None),), require_stable=True)
        response = await client.call(ApiKey.OFFSET_FETCH, 8, request)
        assert [(p.partition_index, p.committed_offset) for t in response.groups[0].topics for p in t.partitions] \
            == [(0, 5)]


@in_loop
async def test_state_survives_a_restart(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client, pid, epoch = await begun(broker)
        await produce(client, pid, epoch, 0, b"open")
    async with running_broker(tmp_path, FAST) as broker:
        description = await settled(broker, TxnState.ONGOING)
        assert (description.producer_id, description.partitions) == (pid, {TP})
        assert broker.replica_manager.get_partition(TP).last_stable_offset == 0
        client = Client(broker)
        assert await end(client, pid, epoch, commit=True) is ErrorCode.none
        await settled(broker, TxnState.COMPLETE_COMMIT)
        assert broker.replica_manager.get_partition(TP).last_stable_offset == 2


@in_loop
async def test_write_txn_markers_appends_to_local_partitions(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        await broker.topics.create(TOPIC, 1, {})
        client = Client(broker)
        await produce(client, 42, 0, 0, b"x")
        request = WriteTxnMarkersRequest(markers=(WritableTxnMarker(
            producer_id=42, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
            topics=(WritableTxnMarkerTopic(name=TOPIC, partition_indexes=(0,)), WritableTxnMarkerTopic(name="nope", partition_indexes=(0,))),
        ),))
        response = await client.call(ApiKey.WRITE_TXN_MARKERS, 1, request)
        errors = [p.error_code for t in response.markers[0].topics for p in t.partitions]
        assert errors == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
        assert marker_types(broker) == [0]
        assert broker.replica_manager.get_partition(TP).last_stable_offset == 2
        legacy = await client.call(ApiKey.WRITE_TXN_MARKERS, 0, schemas.adapt(request, schemas.request_type(ApiKey.WRITE_TXN_MARKERS, 0)))
        assert [p.error_code for t in legacy.markers[0].topics for p in t.partitions] == errors
        assert marker_types(broker) == [0, 0]


@in_loop
async def test_describe_and_list_transactions_and_producers(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client, pid, epoch = await begun(broker)
        await produce(client, pid, epoch, 0, b"a")
        found, missing = await describe_transactions(client, "tx", "unknown")
        start_ms = broker.transaction_coordinator.describe("tx").start_ms
        assert found == (ErrorCode.none, "tx", "Ongoing", 60_000, start_ms, pid, epoch, [(TOPIC, [0])])
        assert missing == (ErrorCode.transactional_id_not_found, "unknown", "", 0, 0, -1, -1, [])
        listed = await client.call(
            ApiKey.LIST_TRANSACTIONS, 0, ListTransactionsRequest(state_filters=("Ongoing", "Bogus"), producer_id_filters=())
        )
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [("tx", "Ongoing")]
        assert listed.unknown_state_filters == ("Bogus",)
        none = await client.call(
            ApiKey.LIST_TRANSACTIONS, 0, ListTransactionsRequest(state_filters=("Empty",), producer_id_filters=())
        )
        assert none.transaction_states == ()
        producers = await client.call(
            ApiKey.DESCRIBE_PRODUCERS, 0, DescribeProducersRequest(topics=(TopicRequest(name=TOPIC, partition_indexes=(0, 5)),))
        )
        active, unknown = producers.topics[0].partitions
        assert [(p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset) for p in active.active_producers] == [
            (pid, epoch, 0, 0)
        ]
        assert unknown.error_code is ErrorCode.unknown_topic_or_partition


async def describe_transactions(client, *transactional_ids):
    """DescribeTransactions v0's entries, read field by field (the start time may be -1)."""
    request = DescribeTransactionsRequest(transactional_ids=transactional_ids)
    return decode_describe_transactions(await client.call_for_frame(ApiKey.DESCRIBE_TRANSACTIONS, 0, request))


@in_loop
async def test_an_id_without_a_transaction_is_described_with_start_time_minus_one(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client = Client(broker)
        _, pid, epoch = await init(client)
        (empty,) = await describe_transactions(client, "tx")
        assert empty == (ErrorCode.none, "tx", "Empty", 60_000, -1, pid, epoch, [])


@in_loop
async def test_list_transactions_v1_filters_by_duration(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client, pid, epoch = await begun(broker)
        await init(client, transactional_id="idle")  # Empty: never began a transaction
        coordinator = broker.transaction_coordinator
        start_ms = coordinator.describe("tx").start_ms
        coordinator.clock = lambda: start_ms + 5_000

        async def listed(version, duration_ms=-1):
            request = ListTransactionsRequest(state_filters=(), producer_id_filters=(), duration_filter=duration_ms)
            response = await client.call(ApiKey.LIST_TRANSACTIONS, version, request)
            assert response.error_code is ErrorCode.none
            return sorted(t.transactional_id for t in response.transaction_states)

        assert await listed(1) == ["idle", "tx"]
        # Running 5 s: listed when the filter is shorter. An id that never began a transaction
        # (start time -1) passes any filter, as in Kafka.
        assert await listed(1, 4_999) == ["idle", "tx"]
        assert await listed(1, 5_000) == ["idle"]
        assert await listed(0, 5_000) == ["idle", "tx"]  # v0 has no duration filter


@in_loop
async def test_list_offsets_read_committed_answers_the_lso(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client, pid, epoch = await begun(broker)
        await produce(client, pid, epoch, 0, b"a", b"b")

        async def latest(isolation_level):
            request = ListOffsetsRequest(
                replica_id=-1,
                isolation_level=isolation_level,
                topics=(ListOffsetsTopic(name=TOPIC, partitions=(ListOffsetsPartition(partition_index=0, timestamp=-1),)),),
            )
            response = await client.call(ApiKey.LIST_OFFSETS, 7, request)
            return response.topics[0].partitions[0].offset

        assert (await latest(0), await latest(1)) == (2, 0)
        await end(client, pid, epoch, commit=True)
        await settled(broker, TxnState.COMPLETE_COMMIT)
        assert (await latest(0), await latest(1)) == (3, 3)


@in_loop
async def test_idle_transactional_ids_expire_with_a_tombstone(tmp_path):
    async with running_broker(tmp_path, {**FAST, "transactional.id.expiration.ms": "1000"}) as broker:
        client = Client(broker)
        await init(client)
        coordinator = broker.transaction_coordinator
        now = coordinator.clock()
        await coordinator.remove_expired_transactional_ids()
        assert coordinator.describe("tx") is not None
        coordinator.clock = lambda: now + 1000
        await coordinator.remove_expired_transactional_ids()
        assert coordinator.describe("tx") is None
        partition = coordinator.state_topic.partition_for("tx")
        (_, last), = batches(broker, TopicPartition(TRANSACTION_STATE_TOPIC, partition))[-1:]
        assert last[0].value is None


@in_loop
async def test_markers_left_unwritten_are_written_after_a_restart(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client, pid, epoch = await begun(broker)
        await produce(client, pid, epoch, 0, b"a")

        async def unreachable(marker, partitions):
            return dict.fromkeys(partitions, ErrorCode.not_leader_or_follower)

        broker.transaction_coordinator._markers.write_markers = unreachable
        assert await end(client, pid, epoch, commit=True) is ErrorCode.none
        await asyncio.sleep(0.3)  # retrying meanwhile
        assert broker.transaction_coordinator.describe("tx").state is TxnState.PREPARE_COMMIT
        assert broker.replica_manager.get_partition(TP).last_stable_offset == 0
    async with running_broker(tmp_path, FAST) as broker:
        await settled(broker, TxnState.COMPLETE_COMMIT)
        assert marker_types(broker) == [ControlRecordType.COMMIT]
        assert broker.replica_manager.get_partition(TP).last_stable_offset == 2


@in_loop
async def test_a_marker_reaching_offsets_while_they_load_completes_them_once_loaded(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client, pid, epoch = await begun(broker)
        request = AddOffsetsToTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch, group_id="g")
        assert (await client.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, request)).error_code is ErrorCode.none
        request = txn_offset_commit(pid, epoch, 3)
        assert (await client.call(ApiKey.TXN_OFFSET_COMMIT, 3, request)).topics[0].partitions[0].error_code is ErrorCode.none
    async with running_broker(tmp_path, FAST) as broker:
        groups = broker.group_coordinator
        partition = groups.partition_for("g")
        await asyncio.sleep(0.3)  # loaded: the offsets are pending, their transaction open
        assert groups.unstable_partitions("g") == {TP}
        # As if the marker came while the partition was loading, its replay not reaching it.
        groups.offsets_topic.partitions[partition] = LoadState.LOADING
        groups.complete_transaction(partition, pid, commit=True)
        assert groups.unstable_partitions("g") == {TP}
        groups._install(partition, PartitionContents())
        groups.offsets_topic.partitions[partition] = LoadState.LOADED
        assert groups.unstable_partitions("g") == set()
        _, offsets = await groups.fetch_offsets("g", None)
        assert {tp: committed.offset for tp, committed in offsets.items()} == {TP: 3}


@in_loop
async def test_state_partitions_load_and_unload_with_leadership(tmp_path):
    async with running_broker(tmp_path, FAST) as broker:
        client = Client(broker)
        _, pid, _ = await init(client)
        coordinator = broker.transaction_coordinator
        state_tp = TopicPartition(TRANSACTION_STATE_TOPIC, coordinator.state_topic.partition_for("tx"))
        replicas = broker.replica_manager

        def state(leader: int, epoch: int) -> PartitionState:
            return PartitionState(state_tp, 1, leader, epoch, (leader,), epoch, (0, 1))

        replicas.become_leader_or_follower(1, [state(1, 1)], {1: LeaderEndpoint(1, "127.0.0.1", 9)}, 0)
        assert coordinator.describe("tx") is None
        assert await init(client) == (ErrorCode.not_coordinator, -1, -1)
        replicas.become_leader_or_follower(1, [state(0, 2)], {}, 0)
        for _ in range(100):
            error, loaded_pid, epoch = await init(client)
            if error is not ErrorCode.coordinator_load_in_progress:
                break
            await asyncio.sleep(0.01)
        assert (error, loaded_pid, epoch) == (ErrorCode.none, pid, 1)  # the id came back from the log
