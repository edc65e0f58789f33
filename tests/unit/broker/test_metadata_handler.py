"""Metadata answers for topics this broker cannot yet describe (broker/handlers/metadata.py)."""

import asyncio

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from broker.metadata_cache import LEADER_DURING_DELETE, MetadataCache, PartitionInfo
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
