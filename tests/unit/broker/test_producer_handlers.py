"""InitProducerId, idempotent Produce, and Produce answered after the fsyncs flush.messages asks
for, through the dispatcher of an in-process broker."""

import asyncio
import datetime
import errno
import functools
import os
import threading

import pytest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from coordinator.producer_ids import BLOCK_FILE
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import Record, build_batch
from storage.topic_partition import TopicPartition
from tests.in_process import Client, running_broker

TIMEOUT = datetime.timedelta(minutes=1)


def in_loop(test):
    """Run an async test function in a new event loop."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))

    return run


def init_request(transactional_id=None, timeout=TIMEOUT, producer_id=-1, epoch=-1):
    return InitProducerIdRequest(
        transactional_id=transactional_id,
        transaction_timeout=timeout,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


async def init_producer_id(client, version=4, **kwargs):
    response = await client.call(ApiKey.INIT_PRODUCER_ID, version, init_request(**kwargs))
    return response.error_code, response.producer_id, response.producer_epoch


@in_loop
async def test_idempotent_producers_get_new_ids_with_epoch_zero_at_every_version(tmp_path):
    async with running_broker(tmp_path) as broker:
        client = Client(broker)
        answers = [await init_producer_id(client, version) for version in range(5)]
        # A producer bumping its epoch (KIP-360) gets a fresh id, as Kafka answers.
        answers.append(await init_producer_id(client, producer_id=1, epoch=0))
    assert answers == [(ErrorCode.none, i, 0) for i in range(6)]


@in_loop
async def test_producer_ids_are_never_reused_after_a_restart(tmp_path):
    async with running_broker(tmp_path) as broker:
        first = await init_producer_id(Client(broker))
    async with running_broker(tmp_path) as broker:
        second = await init_producer_id(Client(broker))
    assert (first, second) == ((ErrorCode.none, 0, 0), (ErrorCode.none, 1000, 0))


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(producer_id=5), ErrorCode.invalid_request),
        (dict(epoch=3), ErrorCode.invalid_request),
        (dict(transactional_id=""), ErrorCode.invalid_request),
        (dict(transactional_id="tx", timeout=datetime.timedelta(0)), ErrorCode.invalid_transaction_timeout),
        (dict(transactional_id="tx", timeout=datetime.timedelta(minutes=16)), ErrorCode.invalid_transaction_timeout),
    ],
)
@in_loop
async def test_refusals(tmp_path, kwargs, error):
    async with running_broker(tmp_path) as broker:
        assert await init_producer_id(Client(broker), **kwargs) == (error, -1, -1)


@in_loop
async def test_no_block_of_ids_is_retriable(tmp_path):
    async with running_broker(tmp_path) as broker:
        (tmp_path / BLOCK_FILE).mkdir()  # the block file cannot be written
        assert await init_producer_id(Client(broker)) == (ErrorCode.coordinator_load_in_progress, -1, -1)
        (tmp_path / BLOCK_FILE).rmdir()
        assert await init_producer_id(Client(broker)) == (ErrorCode.none, 0, 0)


def produce_request(topic, records, acks=-1):
    return ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=records),)),),
    )


def idempotent_batch(producer_id, seq, *values, epoch=0, timestamp=1_700_000_000_000):
    records = [Record(i, timestamp, None, v) for i, v in enumerate(values)]
    return build_batch(records, producer_id=producer_id, producer_epoch=epoch, base_sequence=seq)


async def produce(client, version, records, topic="t"):
    response = await client.call(ApiKey.PRODUCE, version, produce_request(topic, records))
    (partition,) = response.responses[0].partition_responses
    return partition


@pytest.mark.parametrize("version", [3, 9])
@in_loop
async def test_a_retried_batch_gets_its_original_offsets(tmp_path, version):
    async with running_broker(tmp_path) as broker:
        await broker.topics.create("t", 1, {})
        client = Client(broker)
        _, pid, _ = await init_producer_id(client)
        first = await produce(client, version, idempotent_batch(pid, 0, b"a", b"b"))
        await produce(client, version, idempotent_batch(pid, 2, b"c"))
        retried = await produce(client, version, idempotent_batch(pid, 0, b"a", b"b"))
        assert (first.error_code, first.base_offset) == (retried.error_code, retried.base_offset) == (ErrorCode.none, 0)
        assert retried.log_append_time == datetime.datetime.fromtimestamp(1_700_000_000, datetime.UTC)
        if version >= 5:
            assert retried.log_start_offset == 0
        assert broker.replica_manager.get_partition(("t", 0)).log.log_end_offset == 3


@in_loop
async def test_sequence_and_epoch_errors_per_partition(tmp_path):
    async with running_broker(tmp_path) as broker:
        await broker.topics.create("t", 1, {})
        client = Client(broker)
        await produce(client, 9, idempotent_batch(9, 0, b"a", epoch=2))
        gap = await produce(client, 9, idempotent_batch(9, 2, b"b", epoch=2))
        fenced = await produce(client, 9, idempotent_batch(9, 1, b"b", epoch=1))
        new_epoch = await produce(client, 9, idempotent_batch(9, 5, b"b", epoch=3))
        negative = await produce(client, 9, idempotent_batch(10, -2, b"b"))
        errors = [p.error_code for p in (gap, fenced, new_epoch, negative)]
        assert errors == [
            ErrorCode.out_of_order_sequence_number,
            ErrorCode.invalid_producer_epoch,
            ErrorCode.out_of_order_sequence_number,
            ErrorCode.invalid_record,
        ]
        assert all(p.base_offset == -1 for p in (gap, fenced, new_epoch, negative))
        assert (await produce(client, 9, idempotent_batch(9, 1, b"b", epoch=2))).base_offset == 1


class FsyncsOf:
    """os.fsync for descriptors under one directory held until released, or failing with EIO;
    every other fsync goes through."""

    def __init__(self, directory: str, monkeypatch, failing: bool = False) -> None:
        self.released = threading.Event()
        self.began = threading.Event()  # an fsync of the directory was called
        real_fsync = os.fsync

        def fsync(descriptor: int) -> None:
            if os.readlink(f"/proc/self/fd/{descriptor}").startswith(directory):
                self.began.set()
                if failing:
                    raise OSError(errno.EIO, "Input/output error")
                self.released.wait(30)
            real_fsync(descriptor)

        monkeypatch.setattr(os, "fsync", fsync)


def plain_batch(*values):
    return build_batch([Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(values)])


@pytest.mark.parametrize("acks", [1, -1])
@in_loop
async def test_an_append_that_reaches_flush_messages_is_answered_once_its_fsync_is_done(tmp_path, monkeypatch, acks):
    async with running_broker(tmp_path) as broker:
        await broker.topics.create("t", 1, {"flush.messages": "1"})
        partition_log = broker.replica_manager.get_partition(("t", 0)).log
        disk = FsyncsOf(partition_log.directory, monkeypatch)
        request = produce_request("t", plain_batch(b"a", b"b"), acks=acks)
        answer = asyncio.ensure_future(Client(broker).call(ApiKey.PRODUCE, 9, request))
        try:
            assert await asyncio.to_thread(disk.began.wait, 5), "the append's fsync never began"
            await asyncio.sleep(0.2)
            assert not answer.done() and partition_log.recovery_point == 0
        finally:
            disk.released.set()  # also when it failed: the broker's stop fsyncs
        (partition,) = (await answer).responses[0].partition_responses
        assert (partition.error_code, partition.base_offset) == (ErrorCode.none, 0)
        assert partition_log.recovery_point == 2


@in_loop
async def test_an_append_below_flush_messages_is_answered_without_waiting_for_an_fsync(tmp_path, monkeypatch):
    async with running_broker(tmp_path) as broker:
        await broker.topics.create("t", 1, {"flush.messages": "3"})
        partition_log = broker.replica_manager.get_partition(("t", 0)).log
        disk = FsyncsOf(partition_log.directory, monkeypatch)
        try:
            partition = await asyncio.wait_for(produce(Client(broker), 9, plain_batch(b"a", b"b")), 5)
            assert (partition.error_code, partition.base_offset) == (ErrorCode.none, 0)
            assert partition_log.recovery_point == 0
        finally:
            disk.released.set()


@in_loop
async def test_an_append_whose_fsync_fails_is_answered_kafka_storage_error(tmp_path, monkeypatch):
    async with running_broker(tmp_path) as broker:
        await broker.topics.create("t", 1, {"flush.messages": "1"})
        partition_log = broker.replica_manager.get_partition(("t", 0)).log
        FsyncsOf(partition_log.directory, monkeypatch, failing=True)
        partition = await produce(Client(broker), 9, plain_batch(b"a"))
        assert (partition.error_code, partition.base_offset) == (ErrorCode.kafka_storage_error, -1)
        assert broker.log_manager.is_offline(TopicPartition("t", 0))
