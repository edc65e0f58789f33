"""Metadata (api key 3), versions 0-12.

Answers from the metadata cache (broker/metadata_cache.py) with the live brokers (their
endpoints on the listener the request came in on), the cluster id, the controller, and the requested topics (all of
them when the request asks for none: an empty list in v0, a null list from v1) with each
partition's leader, leader epoch, replicas, ISR and offline replicas. In cluster mode that is the
whole cluster as the controller last told this broker, topics hosted elsewhere included. A
partition without a live leader is LEADER_NOT_AVAILABLE; one led here whose log dir failed is
reported with LEADER_NOT_AVAILABLE, no leader and this replica offline.

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
from broker.metadata_cache import PartitionInfo
from broker.topic_manager import INTERNAL_TOPICS, validate_topic_name


@api(ApiKey.METADATA, versions=(0, 12))
def handle_metadata(ctx: RequestContext, request: MetadataRequest):
    wanted_all = request.topics is None or (ctx.api_version == 0 and not request.topics)
    if wanted_all:
        return _response(ctx, [_describe(ctx, name) for name in ctx.broker.metadata_cache.topic_names()])
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
        known = name in broker.topics.topics or broker.metadata_cache.has_topic(name or "")
        if name and not known and name not in INTERNAL_TOPICS and name not in missing:
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
                await broker.topics.create(
                    name, broker.config.get("num.partitions"), {}, broker.config.get("default.replication.factor")
                )
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
    try:
        if name is None:
            name = ctx.broker.topics.find_by_id(topic_id).name
        else:
            validate_topic_name(name)
        if not ctx.broker.metadata_cache.has_topic(name):
            raise KafkaError(
                f"This server does not host this topic: {name}", ErrorCode.unknown_topic_or_partition
            )
        return _describe(ctx, name)
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


_NO_TOPIC_ID = uuid.UUID(int=0)


def _describe(ctx: RequestContext, name: str) -> MetadataResponseTopic:
    info = ctx.broker.topics.topics.get(name)
    return MetadataResponseTopic(
        error_code=ErrorCode.none,
        name=name,
        topic_id=info.topic_id if info else _NO_TOPIC_ID,
        is_internal=name in INTERNAL_TOPICS,
        partitions=tuple(
            _partition(ctx, name, index, partition)
            for index, partition in ctx.broker.metadata_cache.partitions(name).items()
        ),
    )


def _partition(ctx: RequestContext, topic: str, index: int, info: PartitionInfo) -> MetadataResponsePartition:
    broker = ctx.broker
    leader = broker.metadata_cache.leader_of(TopicPartition(topic, index))
    if leader == broker.broker_id:
        try:
            broker.replica_manager.get_partition(TopicPartition(topic, index))
        except KafkaError:
            return MetadataResponsePartition(
                error_code=ErrorCode.leader_not_available,
                partition_index=index,
                leader_id=-1,
                replica_nodes=info.replicas,
                isr_nodes=tuple(r for r in info.isr if r != leader),
                offline_replicas=tuple(sorted({*info.offline_replicas, leader})),
            )
    return MetadataResponsePartition(
        error_code=ErrorCode.none if leader is not None else ErrorCode.leader_not_available,
        partition_index=index,
        leader_id=leader if leader is not None else -1,
        leader_epoch=info.leader_epoch,
        replica_nodes=info.replicas,
        isr_nodes=info.isr,
        offline_replicas=info.offline_replicas,
    )


def _response(ctx: RequestContext, topics: list[MetadataResponseTopic]) -> MetadataResponse:
    broker = ctx.broker
    return MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=tuple(
            MetadataResponseBroker(node_id=node_id, host=host, port=port, rack=rack)
            for node_id, host, port, rack in broker.metadata_cache.alive_nodes(ctx.listener)
        ),
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id,
        topics=tuple(topics),
    )
