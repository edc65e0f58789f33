"""CreateTopics (api key 19), versions 0-7.

Creates each topic after Kafka's checks, with per-topic errors: INVALID_TOPIC_EXCEPTION (illegal
name, or one colliding with an existing topic over '.' and '_'), TOPIC_ALREADY_EXISTS,
INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR (more replicas than live brokers),
INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG (unknown key or bad value), INVALID_REQUEST (a topic
named twice, or both a partition count and an assignment). -1 partitions or replication factor
take num.partitions / default.replication.factor (v4+). With validate_only (v1+) nothing is
created but the answer is the same.

Version notes: v1 adds validate_only and error messages; v2 throttle time; v5 answers with the
topic's partition count, replication factor and full config (each key with its source); v5 is
flexible; v7 adds topic ids.

Cluster mode: served by the controller only (others answer NOT_CONTROLLER, as Kafka's ZooKeeper
mode does): the topic is written to ZooKeeper with its replicas assigned over the live brokers
(broker/cluster_admin.py), and the answer waits until every partition has a leader in the
metadata (REQUEST_TIMED_OUT after 30 s; the topic is still created).

Authorization (with an authorizer, as Kafka's KafkaApis): CREATE on the cluster or on the
topic, else TOPIC_AUTHORIZATION_FAILED ("Authorization failed."); without DESCRIBE_CONFIGS on
the topic a created topic's configs are left out (v5+: topic_config_error_code
TOPIC_AUTHORIZATION_FAILED).
"""

import dataclasses
import datetime
from collections import Counter

from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.create_topics.v7.response import (
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsResponse,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from storage.log_config import describe_topic_configs

from broker.handlers.authorization import authorized, authorized_names
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType


@api(ApiKey.CREATE_TOPICS, versions=(0, 7))
async def handle_create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    counts = Counter(topic.name for topic in request.topics)
    names = {topic.name for topic in request.topics if counts[topic.name] == 1}
    if authorized(ctx, AclOperation.CREATE, log_denied=False):
        creatable = names
    else:
        creatable = authorized_names(ctx, AclOperation.CREATE, ResourceType.TOPIC, names)
    configs_visible = authorized_names(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names, log_denied=False)
    results = []
    for topic in request.topics:
        try:
            ctx.broker.require_controller()
        except KafkaError as exc:
            results.append(_error(topic.name, exc))
            continue
        if counts[topic.name] > 1:
            results.append(_error(topic.name, KafkaError("Duplicate topic in request.", ErrorCode.invalid_request)))
            continue
        if topic.name not in creatable:
            results.append(_error(topic.name, KafkaError("Authorization failed.", ErrorCode.topic_authorization_failed)))
            continue
        try:
            result = await _create(ctx, topic, request.validate_only)
            if topic.name not in configs_visible:
                result = dataclasses.replace(
                    result, configs=(), topic_config_error_code=ErrorCode.topic_authorization_failed
                )
            results.append(result)
        except KafkaError as exc:
            results.append(_error(topic.name, exc))
    return CreateTopicsResponse(throttle_time=datetime.timedelta(0), topics=tuple(results))


async def _create(ctx: RequestContext, topic: CreatableTopic, validate_only: bool) -> CreatableTopicResult:
    broker = ctx.broker
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    assignments = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
    partitions, replication_factor = broker.topics.check_new_topic(
        topic.name,
        topic.num_partitions,
        topic.replication_factor,
        assignments,
        configs,
        default_partitions=broker.config.get("num.partitions"),
        default_replication_factor=broker.config.get("default.replication.factor"),
    )
    topic_id = None
    if not validate_only:
        created = await broker.topics.create(topic.name, partitions, configs, replication_factor, assignments)
        topic_id = created.topic_id
    return CreatableTopicResult(
        name=topic.name,
        topic_id=topic_id,
        error_code=ErrorCode.none,
        error_message=None,
        num_partitions=partitions,
        replication_factor=replication_factor,
        configs=tuple(
            CreatableTopicConfigs(
                name=entry.name,
                value=entry.value,
                read_only=entry.read_only,
                config_source=entry.source,
                is_sensitive=entry.is_sensitive,
            )
            for entry in describe_topic_configs(configs, broker.config.explicit_settings, include_synonyms=False)
        ),
    )


def _error(name: str, exc: KafkaError) -> CreatableTopicResult:
    return CreatableTopicResult(
        name=name,
        topic_id=None,
        error_code=exc.error_code,
        error_message=str(exc) or None,
        configs=None,
    )
