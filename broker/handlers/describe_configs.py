"""DescribeConfigs (api key 32), versions 0-4.

Answers with the configs of each resource, all of them or only the keys asked for (a null or
empty key list means all), each with its value, source, type and read-only flag:

- TOPIC (2): every topic config, from the topic's overrides, else the broker keys the operator
  set (in server.properties or as dynamic broker configs, each with its source), else Kafka's
  default (see storage.log_config.describe_topic_configs).
  INVALID_TOPIC_EXCEPTION for an illegal name, UNKNOWN_TOPIC_OR_PARTITION for a missing topic
  (in cluster mode after waiting for this broker's ZooKeeper watch to read a topic the
  controller already announced: TopicManager.catch_up).
- BROKER (4), named by this broker's id: every broker config with the value in effect and its
  source: DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG
  (server.properties) or DEFAULT_CONFIG (broker/dynamic_config.py); read-only unless it can be
  changed at run time. The name "" stands for the cluster-wide dynamic defaults, as in Kafka:
  only the keys set there. Another id is INVALID_REQUEST.
- BROKER_LOGGER (8), named by this broker's id: the level of every Python logger of the process,
  in log4j's names (root first; broker/log_levels.py), which IncrementalAlterConfigs changes.
- anything else: INVALID_REQUEST.

Synonyms (where the value could come from, highest precedence first) only with include_synonyms
(v1+), documentation only with include_documentation (v3+).

Version notes: v0 gives an is_default flag where later versions give the source, and no
synonyms; v1 adds synonyms and sources; v2 is v1; v3 adds types and documentation; v4 is
flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): DESCRIBE_CONFIGS on the topic
(else TOPIC_AUTHORIZATION_FAILED) or, for a broker or its loggers, on the cluster (else
CLUSTER_AUTHORIZATION_FAILED).
"""

import datetime
import re
from collections.abc import Callable

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_configs.v4.response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)

from protocol import legacy
from protocol.api_keys import ApiKey
from protocol.config_types import ConfigEntry, ConfigResourceType, ConfigSource, ConfigType
from protocol.errors import ErrorCode, KafkaError
from storage.log_config import describe_topic_configs

from broker import log_levels
from broker.dynamic_config import DEFAULT
from broker.handlers.authorization import check_config_access
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation
from broker.topic_manager import validate_topic_name

_INTEGER = re.compile(r"-?[0-9]+", re.ASCII)


@api(ApiKey.DESCRIBE_CONFIGS, versions=(0, 4))
async def handle_describe_configs(ctx: RequestContext, request: DescribeConfigsRequest):
    for resource in request.resources:
        if resource.resource_type == ConfigResourceType.TOPIC:
            await ctx.broker.topics.catch_up(resource.resource_name)
    results = tuple(
        _describe(ctx, resource, request.include_synonyms, request.include_documentation)
        for resource in request.resources
    )
    # v0's is_default cannot be copied by name from a config source.
    if ctx.api_version == 0:
        return _as_v0(results)
    return DescribeConfigsResponse(throttle_time=datetime.timedelta(0), results=results)


def _describe(
    ctx: RequestContext,
    resource: DescribeConfigsResource,
    include_synonyms: bool,
    include_documentation: bool,
) -> DescribeConfigsResult:
    try:
        check_config_access(ctx, AclOperation.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name)
        describe = _DESCRIBERS.get(resource.resource_type)
        if describe is None:
            raise KafkaError(
                f"Unsupported resource type: {resource.resource_type}", ErrorCode.invalid_request
            )
        entries = describe(ctx, resource.resource_name, include_synonyms)
    except KafkaError as exc:
        return DescribeConfigsResult(
            error_code=exc.error_code,
            error_message=str(exc) or None,
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            configs=(),
        )
    wanted = resource.configuration_keys
    return DescribeConfigsResult(
        error_code=ErrorCode.none,
        error_message=None,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        configs=tuple(
            _config(entry, include_documentation)
            for entry in entries
            if not wanted or entry.name in wanted
        ),
    )


def _topic_configs(ctx: RequestContext, name: str, include_synonyms: bool) -> list[ConfigEntry]:
    validate_topic_name(name)
    info = ctx.broker.topics.get(name)
    broker = ctx.broker
    return describe_topic_configs(
        info.configs, broker.config.explicit_settings, include_synonyms, broker.dynamic_config.sources()
    )


def _broker_configs(ctx: RequestContext, name: str, include_synonyms: bool) -> list[ConfigEntry]:
    dynamic = ctx.broker.dynamic_config
    if name == "":
        return dynamic.describe(DEFAULT, ctx.broker.config, include_synonyms)
    if _broker_id(name) != ctx.broker.broker_id:
        raise KafkaError(
            f"Unexpected broker id, expected {ctx.broker.broker_id} or empty string, but received {name}",
            ErrorCode.invalid_request,
        )
    return dynamic.describe(name, ctx.broker.config, include_synonyms)


def _logger_levels(ctx: RequestContext, name: str, include_synonyms: bool) -> list[ConfigEntry]:
    if name == "":
        raise KafkaError("Broker id must not be empty", ErrorCode.invalid_request)
    if _broker_id(name) != ctx.broker.broker_id:
        raise KafkaError(
            f"Unexpected broker id, expected {ctx.broker.broker_id} but received {name}",
            ErrorCode.invalid_request,
        )
    return log_levels.describe()


def _broker_id(name: str) -> int:
    if not _INTEGER.fullmatch(name):
        raise KafkaError(f"Broker id must be an integer, but it is: {name}", ErrorCode.invalid_request)
    return int(name)


_DESCRIBERS: dict[int, Callable[[RequestContext, str, bool], list[ConfigEntry]]] = {
    ConfigResourceType.TOPIC: _topic_configs,
    ConfigResourceType.BROKER: _broker_configs,
    ConfigResourceType.BROKER_LOGGER: _logger_levels,
}


def _config(entry: ConfigEntry, include_documentation: bool) -> DescribeConfigsResourceResult:
    return DescribeConfigsResourceResult(
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=entry.source,
        is_sensitive=entry.is_sensitive,
        synonyms=tuple(
            DescribeConfigsSynonym(name=s.name, value=s.value, source=s.source) for s in entry.synonyms
        ),
        config_type=entry.type,
        documentation=entry.documentation if include_documentation else None,
    )


def _as_v0(results: tuple[DescribeConfigsResult, ...]) -> legacy.DescribeConfigsResponseV0:
    return legacy.DescribeConfigsResponseV0(
        throttle_time=datetime.timedelta(0),
        results=tuple(
            legacy.DescribeConfigsResultV0(
                error_code=result.error_code,
                error_message=result.error_message,
                resource_type=result.resource_type,
                resource_name=result.resource_name,
                configs=tuple(
                    legacy.DescribeConfigsResourceResultV0(
                        name=config.name,
                        value=config.value,
                        read_only=config.read_only,
                        is_default=config.config_source == ConfigSource.DEFAULT_CONFIG,
                        is_sensitive=config.is_sensitive,
                    )
                    for config in result.configs
                ),
            )
            for result in results
        ),
    )
