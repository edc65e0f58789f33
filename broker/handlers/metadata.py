"""Metadata (api key 3), versions 0-12.

Answers with the brokers (their advertised listener), the cluster id, the controller, and the
requested topics (all of them when the request asks for none: an empty list in v0, a null list
from v1) with each partition's leader, leader epoch, replicas and ISR. A partition whose log
dir failed is reported with LEADER_NOT_AVAILABLE, no leader and the replica offline.

A requested topic that does not exist is created when the request allows it (v4+; always before
that) and auto.create.topics.enable is true, with num.partitions partitions and the broker's
default configs; it comes back ready. Otherwise it is UNKNOWN_TOPIC_OR_PARTITION, or
INVALID_TOPIC_EXCEPTION for an illegal name. Topics named by id (v10+) that do not exist are
UNKNOWN_TOPIC_ID.

Version notes: v1 adds controller, racks and is_internal; v2 cluster id; v3 throttle time; v5
offline replicas; v7 leader epochs; v8-10 authorized operations (not computed: no ACLs); v9 is
flexible; v10 topic ids.
"""

import datetime
import uuid

from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError, ProtocolError
from storage.topic_partition import TopicPartition

from broker.handlers.registry import RequestContext, api
from broker.topic_manager import INTERNAL_TOPICS, validate_topic_name
from broker.topic_store import TopicInfo


@api(ApiKey.METADATA, versions=(0, 12))
def handle_metadata(ctx: RequestContext, request: MetadataRequest):
    wanted_all = request.topics is None or (ctx.api_version == 0 and not request.topics)
    if wanted_all:
        return _response(ctx, [_describe(ctx, info) for info in ctx.broker.topics.topics.values()])
    if ctx.api_version < 12 and any(t.name is None for t in request.topics):
        # v10-11 carry topic ids but answer by name: Kafka refuses a request without names.
        raise ProtocolError(f"Metadata v{ctx.api_version} requires topic names (ids need v12)")
    missing = _missing_to_create(ctx, request)
    if missing:
        return _create_then_respond(ctx, request, missing)
    return _response(ctx, [_describe_requested(ctx, t.name, t.topic_id) for t in request.topics])


def _missing_to_create(ctx: RequestContext, request: MetadataRequest) -> list[str]:
    broker = ctx.broker
    allowed = request.allow_auto_topic_creation or ctx.api_version < 4
    if not (allowed and broker.config.get("auto.create.topics.enable")):
        return []
    missing = []
    for topic in request.topics:
        name = topic.name
        if name and name not in broker.topics.topics and name not in INTERNAL_TOPICS and name not in missing:
            try:
                validate_topic_name(name)
            except KafkaError:
                continue
            missing.append(name)
    return missing


async def _create_then_respond(ctx: RequestContext, request: MetadataRequest, missing: list[str]):
    broker = ctx.broker
    failed: dict[str, KafkaError] = {}
    for name in missing:
        if name not in broker.topics.topics:
            try:
                await broker.topics.create(name, broker.config.get("num.partitions"), {})
            except KafkaError as exc:
                failed[name] = exc
    return _response(
        ctx,
        [
            _error_topic(t.name, t.topic_id, failed[t.name])
            if t.name in failed
            else _describe_requested(ctx, t.name, t.topic_id)
            for t in request.topics
        ],
    )


def _describe_requested(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None) -> MetadataResponseTopic:
    topics = ctx.broker.topics
    try:
        if name is None:
            return _describe(ctx, topics.find_by_id(topic_id))
        validate_topic_name(name)
        return _describe(ctx, topics.get(name))
    except KafkaError as exc:
        return _error_topic(name, topic_id, exc)


def _error_topic(name: str | None, topic_id: uuid.UUID | None, exc: KafkaError) -> MetadataResponseTopic:
    return MetadataResponseTopic(
        error_code=exc.error_code,
        name=name,
        topic_id=topic_id,
        is_internal=name in INTERNAL_TOPICS,
        partitions=(),
    )


def _describe(ctx: RequestContext, info: TopicInfo) -> MetadataResponseTopic:
    return MetadataResponseTopic(
        error_code=ErrorCode.none,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.name in INTERNAL_TOPICS,
        partitions=tuple(_partition(ctx, info.name, index) for index in range(info.partitions)),
    )


def _partition(ctx: RequestContext, topic: str, index: int) -> MetadataResponsePartition:
    broker = ctx.broker
    replicas = (broker.broker_id,)
    try:
        partition = broker.replica_manager.get_partition(TopicPartition(topic, index))
    except KafkaError:
        return MetadataResponsePartition(
            error_code=ErrorCode.leader_not_available,
            partition_index=index,
            leader_id=-1,
            replica_nodes=replicas,
            isr_nodes=(),
            offline_replicas=replicas,
        )
    return MetadataResponsePartition(
        error_code=ErrorCode.none,
        partition_index=index,
        leader_id=broker.broker_id,
        leader_epoch=partition.leader_epoch,
        replica_nodes=replicas,
        isr_nodes=replicas,
        offline_replicas=(),
    )


def _response(ctx: RequestContext, topics: list[MetadataResponseTopic]) -> MetadataResponse:
    broker = ctx.broker
    endpoint = broker.endpoint
    return MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=(
            MetadataResponseBroker(
                node_id=endpoint.node_id, host=endpoint.host, port=endpoint.port, rack=endpoint.rack
            ),
        ),
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id,
        topics=tuple(topics),
    )
