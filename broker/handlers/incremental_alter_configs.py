"""IncrementalAlterConfigs (api key 44), versions 0-1.

Changes the named keys of a resource's dynamic configs and leaves the others alone. Operations:
SET (0) gives a key a value; DELETE (1) drops its override; APPEND (2) and SUBTRACT (3) add items
to or remove items from a LIST config (INVALID_CONFIG for other types), starting from the value
in effect (the override, else the broker's setting, else the default). The result must pass the
same checks as AlterConfigs (INVALID_CONFIG otherwise) and applies to every key of the resource
or to none. Per resource type:

- TOPIC (2): the topic's overrides; UNKNOWN_TOPIC_OR_PARTITION for a missing topic.
- BROKER (4), naming this broker or "" for the cluster-wide default: its dynamic broker configs
  (broker/dynamic_config.py), kept in ZooKeeper (cluster mode) or the log dirs and in effect at
  once; APPEND and SUBTRACT on LIST keys start from the value in effect. Keys that cannot
  change at run time are INVALID_CONFIG "Cannot update these configs dynamically", as are
  keystore keys for "", and a value the config refuses; another broker's id is
  INVALID_REQUEST.
- BROKER_LOGGER (8), naming this broker: SET or DELETE of a logger's level, as Kafka's
  RuntimeLoggerManager (broker/log_levels.py): INVALID_CONFIG for a logger that does not exist or
  a level that is not TRACE, DEBUG, INFO, WARN, ERROR or FATAL; INVALID_REQUEST for DELETE of
  "root", APPEND, SUBTRACT, an unknown operation, or another broker's id. In memory only, as in
  Kafka.
- anything else: INVALID_REQUEST.

INVALID_REQUEST also for a resource named twice, a key named twice within a resource, an unknown
operation, or a null value for an operation other than DELETE. With validate_only nothing
changes but the answer is the same.

Version notes: v1 is flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): ALTER_CONFIGS on the topic (else
TOPIC_AUTHORIZATION_FAILED) or, for a broker or its loggers, on the cluster (else
CLUSTER_AUTHORIZATION_FAILED); checked in alter_configs.alter_each.
"""

import datetime
import enum

from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.incremental_alter_configs.v1.response import (
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsResponse,
)

from protocol.api_keys import ApiKey
from protocol.config_types import ConfigResourceType, ConfigType
from protocol.errors import ErrorCode, KafkaError
from storage.log_config import TOPIC_CONFIGS, InvalidConfigError, describe_topic_configs, parse_value

from broker import log_levels
from broker.config import BROKER_CONFIGS
from broker.handlers.alter_configs import (
    alter_each,
    check_own_node_id,
    check_unique_keys,
    broker_entity,
    replace_topic_configs,
)
from broker.handlers.registry import RequestContext, api


class ConfigOperation(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@api(ApiKey.INCREMENTAL_ALTER_CONFIGS, versions=(0, 1))
async def handle_incremental_alter_configs(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    responses = await alter_each(ctx, request, _alter, AlterConfigsResourceResponse)
    return IncrementalAlterConfigsResponse(throttle_time=datetime.timedelta(0), responses=responses)


async def _alter(ctx: RequestContext, resource: AlterConfigsResource, validate_only: bool) -> None:
    check_unique_keys(config.name for config in resource.configs)
    if resource.resource_type == ConfigResourceType.BROKER_LOGGER:
        # Before the generic checks: Kafka's RuntimeLoggerManager has its own messages.
        check_own_node_id(ctx, resource.resource_name)
        changes = [(config.name, config.config_operation, config.value) for config in resource.configs]
        log_levels.check(changes)
        if not validate_only:
            log_levels.apply(changes)
        return
    operations = [(config, _operation(config)) for config in resource.configs]
    missing = [config.name for config, op in operations if op != ConfigOperation.DELETE and config.value is None]
    if missing:
        raise KafkaError("Null value not supported for : " + ", ".join(missing), ErrorCode.invalid_request)
    if resource.resource_type == ConfigResourceType.TOPIC:
        name = resource.resource_name
        await ctx.broker.topics.catch_up(name)
        current = ctx.broker.topics.get(name).configs
        defaults = {entry.name: entry.value for entry in describe_topic_configs({}, ctx.broker.config.explicit_settings, False)}
        changes = {
            config.name: _new_value(TOPIC_CONFIGS.get(config.name), current.get(config.name, defaults.get(config.name)), config, op)
            for config, op in operations
        }
        await replace_topic_configs(ctx, name, {**current, **changes}, validate_only)
    elif resource.resource_type == ConfigResourceType.BROKER:
        name = resource.resource_name
        entity = broker_entity(ctx, name)
        in_effect = ctx.broker.config

        def change(current: dict[str, str]) -> dict[str, str]:
            for config, op in operations:
                definition = BROKER_CONFIGS.get(config.name)
                start = current.get(config.name)
                if start is None and definition is not None:
                    start = definition.format(in_effect.get(config.name))
                current[config.name] = _new_value(definition, start, config, op)
            return current

        await ctx.broker.dynamic_config.alter(entity, change, name, validate_only)
    else:
        raise KafkaError(f"Unknown resource type {resource.resource_type}", ErrorCode.invalid_request)


def _operation(config: AlterableConfig) -> ConfigOperation:
    try:
        return ConfigOperation(config.config_operation)
    except ValueError:
        raise KafkaError(
            f"Unknown operation type {config.config_operation}", ErrorCode.invalid_request
        ) from None


def _new_value(definition, start: str | None, config: AlterableConfig, op: ConfigOperation) -> str | None:
    """The key's new value (`definition`: its topic or broker config; `start`: the value in
    effect); None drops the override."""
    if op == ConfigOperation.SET:
        return config.value
    if op == ConfigOperation.DELETE:
        return None
    if definition is None or definition.type is not ConfigType.LIST:
        raise InvalidConfigError(f"Can't {op.name} to key {config.name} because its type is not LIST.")
    items = parse_value(ConfigType.LIST, start or "")
    given = parse_value(ConfigType.LIST, config.value)
    if op == ConfigOperation.SUBTRACT:
        return ",".join(item for item in items if item not in given)
    for item in given:
        if item not in items:
            items.append(item)
    return ",".join(items)
