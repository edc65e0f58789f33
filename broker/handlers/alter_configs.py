"""AlterConfigs (api key 33), versions 0-2.

Replaces a resource's dynamic configs with exactly the set given: keys left out go back to the
broker's value or Kafka's default, and a null value drops its key as well. Per resource type:

- TOPIC (2): the topic's overrides become the given set once it passes Kafka's checks (known
  keys, well-typed values in range); they are persisted with the topic and apply to its logs at
  once. INVALID_CONFIG for a bad key or value, UNKNOWN_TOPIC_OR_PARTITION for a missing topic.
- BROKER (4), naming this broker or "" for the cluster-wide default: the given set becomes
  that level's dynamic broker configs (broker/dynamic_config.py: which keys may change, where
  they are kept, how they take effect); INVALID_CONFIG "Cannot update these configs
  dynamically" for the others, as Kafka. A name other than "" or this broker's id is
  INVALID_REQUEST, as in Kafka.
- anything else, BROKER_LOGGER included (Kafka changes log levels only through
  IncrementalAlterConfigs): INVALID_REQUEST.

A resource named twice, or a key named twice within a resource, is INVALID_REQUEST. With
validate_only nothing changes but the answer is the same.

Version notes: v1 is v0 (its answers may be throttled); v2 is flexible.
IncrementalAlterConfigs shares this module's checks and its topic and broker paths.

Authorization (with an authorizer, as Kafka's KafkaApis; IncrementalAlterConfigs alike):
ALTER_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED) or, for a broker, on the cluster
(else CLUSTER_AUTHORIZATION_FAILED).
"""

import datetime
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kio.schema.alter_configs.v2.request import AlterConfigsRequest, AlterConfigsResource
from kio.schema.alter_configs.v2.response import (
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
)

from protocol.api_keys import ApiKey
from protocol.config_types import ConfigResourceType
from protocol.errors import ErrorCode, KafkaError
from storage.log_config import LogConfig, validate_topic_overrides

from broker.dynamic_config import DEFAULT
from broker.handlers.authorization import check_config_access
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation


@api(ApiKey.ALTER_CONFIGS, versions=(0, 2))
async def handle_alter_configs(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    responses = await alter_each(ctx, request, _alter, AlterConfigsResourceResponse)
    return AlterConfigsResponse(throttle_time=datetime.timedelta(0), responses=responses)


async def _alter(ctx: RequestContext, resource: AlterConfigsResource, validate_only: bool) -> None:
    check_unique_keys(config.name for config in resource.configs)
    if resource.resource_type == ConfigResourceType.TOPIC:
        configs = {config.name: config.value for config in resource.configs}
        await replace_topic_configs(ctx, resource.resource_name, configs, validate_only)
    elif resource.resource_type == ConfigResourceType.BROKER:
        name = resource.resource_name
        configs = {config.name: config.value for config in resource.configs}
        await ctx.broker.dynamic_config.alter(broker_entity(ctx, name), lambda current: configs, name, validate_only)
    else:
        raise KafkaError(f"Unknown resource type {resource.resource_type}", ErrorCode.invalid_request)


# ------------------------------------------------------- shared with IncrementalAlterConfigs


Alter = Callable[[RequestContext, Any, bool], Awaitable[None]]


async def alter_each(ctx: RequestContext, request: Any, alter: Alter, response_type: type) -> tuple:
    """Apply `alter` to each resource of the request, answering each with its own error; a
    resource named twice is INVALID_REQUEST every time it appears."""
    counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
    responses = []
    for resource in request.resources:
        try:
            if counts[resource.resource_type, resource.resource_name] > 1:
                raise KafkaError("Each resource must appear at most once.", ErrorCode.invalid_request)
            check_config_access(ctx, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name)
            await alter(ctx, resource, request.validate_only)
        except KafkaError as exc:
            error_code, message = exc.error_code, str(exc) or None
        else:
            error_code, message = ErrorCode.none, None
        responses.append(
            response_type(
                error_code=error_code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return tuple(responses)


def check_unique_keys(names: Iterable[str]) -> None:
    if any(count > 1 for count in Counter(names).values()):
        raise KafkaError("Error due to duplicate config keys", ErrorCode.invalid_request)


async def replace_topic_configs(
    ctx: RequestContext, topic: str, configs: Mapping[str, str | None], validate_only: bool
) -> None:
    """Make `configs` the topic's overrides; a None value names a key to drop."""
    topics = ctx.broker.topics
    await topics.catch_up(topic)
    existing = topics.get(topic).configs
    validate_topic_overrides(configs)
    topics.check_remote_storage(configs, existing)
    overrides = {name: value for name, value in configs.items() if value is not None}
    # The overrides must also agree with the broker's settings (the compaction lags), or the
    # topic's logs could not be opened at the next start.
    LogConfig.resolve(overrides, ctx.broker.config.explicit_settings)
    if not validate_only:
        await topics.set_configs(topic, overrides)


def broker_entity(ctx: RequestContext, name: str) -> str:
    """The dynamic config entity a BROKER resource names: the cluster default for "", else
    this broker's id (INVALID_REQUEST for another's)."""
    if not name:
        return DEFAULT
    check_own_node_id(ctx, name)
    return name


def check_own_node_id(ctx: RequestContext, name: str) -> None:
    try:
        node_id = int(name)
    except ValueError:
        raise KafkaError(f"Node id must be an integer, but it is: {name}", ErrorCode.invalid_request) from None
    if node_id != ctx.broker.broker_id:
        raise KafkaError(
            f"Unexpected broker id, expected {ctx.broker.broker_id}, but received {name}",
            ErrorCode.invalid_request,
        )
