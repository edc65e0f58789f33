"""Metadata answers for topics this broker cannot yet describe (broker/handlers/metadata.py)."""

import asyncio

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from broker.metadata_cache import LEADER_DURING_DELETE, BrokerNode, MetadataCache, PartitionInfo
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition
from tests.in_process import Client, running_broker

_NO_AUTO_CREATE = {"auto.create.topics.enable": "false"}


def _topic_errors(broker, *names: str, auto_create: bool = False) -> dict[str, ErrorCode]:
    async def ask():
        request = MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=None, name=name) for name in names),
            allow_auto_topic_creation=auto_create, include_topic_authorized_operations=False,
        )
        response = await Client(broker).call(ApiKey.METADATA, 12, request)
        return {topic.name: ErrorCode(topic.error_code) for topic in response.topics}

    return ask()


def test_a_known_topic_missing_from_the_cache_is_leader_not_available_not_unknown(tmp_path):
    async def main():
        async with running_broker(tmp_path, _NO_AUTO_CREATE) as broker:
            await broker.topics.create("orders", 1, {}, 1)
            # Gone from the cache as on a broker the controller has not told about it yet.
            cache = broker.metadata_cache
            cache.update(cache.controller_id, cache.controller_epoch, cache.brokers.values(),
                         {TopicPartition("orders", 0): PartitionInfo(LEADER_DURING_DELETE, 0, (), ())})
            return await _topic_errors(broker, "orders", "nowhere")

    assert asyncio.run(main()) == {"orders": ErrorCode.leader_not_available,
                                   "nowhere": ErrorCode.unknown_topic_or_partition}


def test_a_broker_no_controller_has_filled_yet_calls_no_topic_unknown(tmp_path):
    async def main():
        async with running_broker(tmp_path, _NO_AUTO_CREATE) as broker:
            broker.metadata_cache = MetadataCache(broker.metadata_cache.listener_name)
            return await _topic_errors(broker, "nowhere")

    assert asyncio.run(main()) == {"nowhere": ErrorCode.leader_not_available}


def test_a_broker_no_controller_has_filled_yet_creates_no_topic(tmp_path):
    # Its view of the live brokers is empty: a creation would answer an existing topic
    # INVALID_REPLICATION_FACTOR, which KafkaJS takes as final (tests/cluster jepsen, j0).
    async def main():
        async with running_broker(tmp_path) as broker:
            broker.metadata_cache = MetadataCache(broker.metadata_cache.listener_name)
            errors = await _topic_errors(broker, "orders", auto_create=True)
            return errors, "orders" in broker.topics.topics

    assert asyncio.run(main()) == ({"orders": ErrorCode.leader_not_available}, False)


def test_a_leader_without_the_requests_listener_is_listener_not_found_and_no_leader(tmp_path):
    """Brokers configured with different listener names: the client must not be sent to a
    leader it has no address for (Kafka: LISTENER_NOT_FOUND from v6, LEADER_NOT_AVAILABLE
    before)."""

    async def main():
        async with running_broker(tmp_path, _NO_AUTO_CREATE) as broker:
            await broker.topics.create("orders", 2, {}, 1)
            cache = broker.metadata_cache
            elsewhere = BrokerNode(2, {"OTHER": ("127.0.0.1", 1)}, None)
            cache.update(cache.controller_id, cache.controller_epoch, [*cache.brokers.values(), elsewhere], {
                TopicPartition("orders", 0): PartitionInfo(broker.broker_id, 3, (broker.broker_id,), (broker.broker_id,)),
                TopicPartition("orders", 1): PartitionInfo(2, 5, (2,), (2,)),
            })
            answers = {}
            for version in (12, 5):
                request = MetadataRequest(
                    topics=(MetadataRequestTopic(topic_id=None, name="orders"),),
                    allow_auto_topic_creation=False, include_topic_authorized_operations=False,
                )
                response = await Client(broker).call(ApiKey.METADATA, version, request)
                answers[version] = sorted(
                    (p.partition_index, ErrorCode(p.error_code), p.leader_id) for p in response.topics[0].partitions
                )
            return broker.broker_id, answers

    own, answers = asyncio.run(main())
    assert answers == {
        12: [(0, ErrorCode.none, own), (1, ErrorCode.listener_not_found, -1)],
        5: [(0, ErrorCode.none, own), (1, ErrorCode.leader_not_available, -1)],
    }
