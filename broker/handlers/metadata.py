"""Metadata (api key 3), versions 0-12.

Answers from the metadata cache (broker/metadata_cache.py) with the live brokers (their
endpoints on the listener the request came in on), the cluster id, the controller, and the requested topics (all of
them when the request asks for none: an empty list in v0, a null list from v1) with each
partition's leader, leader epoch, replicas, ISR and offline replicas. In cluster mode that is the
whole cluster as the controller last told this broker, topics hosted elsewhere included. A
partition without a live leader is LEADER_NOT_AVAILABLE; one led here whose log dir failed is
reported with LEADER_NOT_AVAILABLE, no leader and this replica offline. A partition whose live
leader has no endpoint on the request's listener (brokers configured with different listener
names) is LISTENER_NOT_FOUND (v6+; LEADER_NOT_AVAILABLE before), with no leader, as Kafka's.

A requested topic that does not exist is created when the request allows it (v4+; always before
that) and auto.create.topics.enable is true, with num.partitions partitions and the broker's
default configs; it comes back ready. A broker that has heard from no controller yet creates
nothing (see below). Otherwise it is UNKNOWN_TOPIC_OR_PARTITION, or
INVALID_TOPIC_EXCEPTION for an illegal name. Topics named by id (v10+) that do not exist are
UNKNOWN_TOPIC_ID. A topic this broker knows exists (from ZooKeeper) but whose partitions the
controller has not yet told it about, and any topic asked of a broker that has heard from no
controller yet (just restarted), is LEADER_NOT_AVAILABLE, which clients retry: they take
UNKNOWN_TOPIC_OR_PARTITION for an answer that the topic is gone (librdkafka fails the topic's
messages with "Unknown topic"). Kafka answers such a topic LEADER_NOT_AVAILABLE only when
auto-creation is on (its create finds the topic exists), UNKNOWN_TOPIC_OR_PARTITION otherwise;
an auto-creation that finds the topic exists answers LEADER_NOT_AVAILABLE here too.

A broker that has heard from no controller yet holds a Metadata request until the controller's
first UpdateMetadata, at most WAIT_FOR_CONTROLLER_S, and answers from the filled cache. Kafka
(ZooKeeper mode) answers at once, with no brokers; librdkafka 2.10 and later drop every broker a
Metadata answer leaves out, and with none left a producer stopped for good (librdkafka #5301,
seen in tests/cluster/test_jepsen_idempotent.py after a broker restart).

Authorization (with an authorizer, as Kafka's KafkaApis): a topic the caller may not DESCRIBE
is left out of an all-topics answer, and answered TOPIC_AUTHORIZATION_FAILED (no id, no
partitions; whether it exists is not disclosed) when named. Auto-creation needs CREATE on the
cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED. With include_topic_authorized_operations
(v8+) each described topic carries the operations the caller may do on it, and with
include_cluster_authorized_operations (v8-10) the response the cluster's.

Version notes: v1 adds controller, racks and is_internal; v2 cluster id; v3 throttle time; v5
offline replicas; v7 leader epochs; v8 authorized operations (the cluster's only until v10, 0
without DESCRIBE on the cluster); v9 is flexible; v10 topic ids.
"""

import dataclasses
import datetime
import inspect
import uuid

from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError, ProtocolError
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized, authorized_names, authorized_operations
from broker.handlers.registry import RequestContext, api, as_sent
from broker.security.acl import AclOperation, ResourceType
from broker.metadata_cache import PartitionInfo
from broker.topic_manager import INTERNAL_TOPICS, validate_topic_name


# How long a broker that has heard from no controller yet (just started in cluster mode) holds a
# Metadata request for the controller's first UpdateMetadata, which comes within a second or
# two of its registration; then it answers from what it has (no brokers). Kept well under the
# clients' request timeouts (30 s and more).
WAIT_FOR_CONTROLLER_S = 5.0


# v8-10's include_cluster_authorized_operations is not in the newest version: the request is kept
# as sent to read it, and adapted for the rest.
@api(ApiKey.METADATA, versions=(0, 12), parse=as_sent(ApiKey.METADATA))
def handle_metadata(ctx: RequestContext, sent):
    if not ctx.broker.metadata_cache.filled:
        return _answer_once_filled(ctx, sent)
    return _answer_sent(ctx, sent)


async def _answer_once_filled(ctx: RequestContext, sent):
    cache = ctx.broker.metadata_cache
    await cache.wait_until(lambda: cache.filled, WAIT_FOR_CONTROLLER_S)
    response = _answer_sent(ctx, sent)
    return await response if inspect.isawaitable(response) else response


def _answer_sent(ctx: RequestContext, sent):
    request = schemas.adapt(sent, MetadataRequest)
    response = _answer_request(ctx, request)
    if not getattr(sent, "include_cluster_authorized_operations", False):
        return response
    if inspect.isawaitable(response):
        return _with_cluster_operations(ctx, response)
    return _cluster_operations_added(ctx, response)


async def _with_cluster_operations(ctx: RequestContext, pending):
    return _cluster_operations_added(ctx, await pending)


def _cluster_operations_added(ctx: RequestContext, response: MetadataResponse):
    """v8-10: the operations the caller may do on the cluster (0 without DESCRIBE on it), in the
    response class of the client's version, which has the field."""
    operations = authorized_operations(ctx, ResourceType.CLUSTER) if authorized(ctx, AclOperation.DESCRIBE) else 0
    answer = schemas.adapt(response, schemas.response_type(ApiKey.METADATA, ctx.api_version))
    return dataclasses.replace(answer, cluster_authorized_operations=operations)


def _answer_request(ctx: RequestContext, request: MetadataRequest):
    wanted_all = request.topics is None or (ctx.api_version == 0 and not request.topics)
    if wanted_all:
        names = ctx.broker.metadata_cache.topic_names()
        visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names, log_denied=False)
        return _response(ctx, request, [_describe(ctx, name) for name in names if name in visible])
    if ctx.api_version < 12 and any(t.name is None for t in request.topics):
        # v10-11 carry topic ids but answer by name: Kafka refuses a request without names.
        raise ProtocolError(f"Metadata v{ctx.api_version} requires topic names (ids need v12)")
    named = {name for name in (_requested_name(ctx, t) for t in request.topics) if name is not None}
    denied = named - authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, named)
    missing = _missing_to_create(ctx, request, denied)
    if missing and not authorized(ctx, AclOperation.CREATE, log_denied=False):
        creatable = authorized_names(ctx, AclOperation.CREATE, ResourceType.TOPIC, missing)
        denied |= set(missing) - creatable
        missing = [name for name in missing if name in creatable]
    if missing:
        return _create_then_respond(ctx, request, missing, denied)
    return _response(ctx, request, [_answer(ctx, t, {}, denied) for t in request.topics])


def _requested_name(ctx: RequestContext, topic) -> str | None:
    if topic.name is not None:
        return topic.name
    try:
        return ctx.broker.topics.find_by_id(topic.topic_id).name
    except KafkaError:
        return None


def _answer(ctx: RequestContext, topic, failed: dict[str, KafkaError], denied: set[str]) -> MetadataResponseTopic:
    name = _requested_name(ctx, topic)
    if name is not None and name in denied:
        # Kafka answers by name without an id, or (asked by id: ids are not secret) by id
        return MetadataResponseTopic(
            error_code=ErrorCode.topic_authorization_failed,
            name=topic.name,
            topic_id=topic.topic_id if topic.name is None else _NO_TOPIC_ID,
            is_internal=False,
            partitions=(),
        )
    if topic.name in failed:
        return _error_topic(topic.name, topic.topic_id, failed[topic.name])
    return _describe_requested(ctx, topic.name, topic.topic_id)


def _missing_to_create(ctx: RequestContext, request: MetadataRequest, denied: set[str]) -> list[str]:
    broker = ctx.broker
    allowed = request.allow_auto_topic_creation or ctx.api_version < 4
    if not (allowed and broker.config.get("auto.create.topics.enable")):
        return []
    if not broker.metadata_cache.filled:
        # Heard from no controller yet (just restarted): a topic missing here may well exist, and
        # creating it would answer from a view of no live broker (INVALID_REPLICATION_FACTOR,
        # which clients take as final). It is answered LEADER_NOT_AVAILABLE and asked again.
        return []
    missing = []
    for topic in request.topics:
        name = topic.name
        known = name in broker.topics.topics or broker.metadata_cache.has_topic(name or "")
        if name and not known and name not in INTERNAL_TOPICS and name not in missing and name not in denied:
            try:
                validate_topic_name(name)
            except KafkaError:
                continue
            missing.append(name)
    return missing


async def _create_then_respond(ctx: RequestContext, request: MetadataRequest, missing: list[str], denied: set[str]):
    broker = ctx.broker
    failed: dict[str, KafkaError] = {}
    for name in missing:
        if name not in broker.topics.topics:
            try:
                await broker.topics.create(
                    name, broker.config.get("num.partitions"), {}, broker.config.get("default.replication.factor")
                )
            except KafkaError as exc:
                if exc.error_code == ErrorCode.topic_already_exists:  # created meanwhile, elsewhere
                    exc = KafkaError(str(exc), ErrorCode.leader_not_available)
                failed[name] = exc
    return _response(ctx, request, [_answer(ctx, t, failed, denied) for t in request.topics])


def _describe_requested(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None) -> MetadataResponseTopic:
    try:
        if name is None:
            name = ctx.broker.topics.find_by_id(topic_id).name
        else:
            validate_topic_name(name)
        cache = ctx.broker.metadata_cache
        if not cache.has_topic(name):
            if name in ctx.broker.topics.topics or not cache.filled:
                raise KafkaError(f"{name}: its partitions are not known here yet", ErrorCode.leader_not_available)
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
    error_code = ErrorCode.none
    if leader is None:
        error_code = ErrorCode.leader_not_available
    elif broker.metadata_cache.endpoint(leader, ctx.listener) is None:
        # A live leader without this listener (brokers configured with different listener
        # names): Kafka's v6+ answer, so the client is not sent to a broker it cannot reach.
        error_code = ErrorCode.listener_not_found if ctx.api_version >= 6 else ErrorCode.leader_not_available
        leader = None
    return MetadataResponsePartition(
        error_code=error_code,
        partition_index=index,
        leader_id=leader if leader is not None else -1,
        leader_epoch=info.leader_epoch,
        replica_nodes=info.replicas,
        isr_nodes=info.isr,
        offline_replicas=info.offline_replicas,
    )


def _response(ctx: RequestContext, request: MetadataRequest, topics: list[MetadataResponseTopic]) -> MetadataResponse:
    broker = ctx.broker
    if ctx.api_version >= 8 and request.include_topic_authorized_operations:
        topics = [
            topic if topic.error_code == ErrorCode.topic_authorization_failed or topic.name is None
            else dataclasses.replace(
                topic, topic_authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, topic.name)
            )
            for topic in topics
        ]
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
