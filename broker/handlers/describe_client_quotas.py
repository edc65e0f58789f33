"""DescribeClientQuotas (api key 48), versions 0-1 (KIP-546).

Answers the quotas set on every entity (user, client-id, or both; <default> entities have a
null name) that passes the filter, as Kafka's ZooKeeper-mode broker does (ZkAdminManager):
each component names an entity type and how to match it: 0 exactly `match`, 1 the default
entity, 2 any entity of that type that is named. An entity with a part of a type no component
names passes only when the filter is not strict. Only entities with a quota set are listed.

Errors are the response's: INVALID_REQUEST for an empty entity type, an entity type named twice,
an unknown match type, an exact match without a name, or ip combined with user or client-id;
UNSUPPORTED_VERSION for another entity type ("Custom entity type ... not supported"). logway
has no IP quotas, so a filter on ip lists nothing.

Version notes: v1 is flexible.

Authorization (with an authorizer): DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED
for every entry, as Kafka's KafkaApis.
"""

import datetime

from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.describe_client_quotas.v1.response import (
    DescribeClientQuotasResponse,
    EntityData,
    EntryData,
    ValueData,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError

from broker.handlers.authorization import cluster_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation
from broker.security.quota_store import CLIENT_ID, IP, USER
from broker.security.quotas import DEFAULT, Name, QuotaEntity

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_ANY = object()  # a component matching any named entity of its type


@api(ApiKey.DESCRIBE_CLIENT_QUOTAS, versions=(0, 1))
@cluster_operation(AclOperation.DESCRIBE_CONFIGS)
def handle_describe_client_quotas(
    ctx: RequestContext, request: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    try:
        wanted = _components(request.components)
    except KafkaError as exc:
        return DescribeClientQuotasResponse(
            throttle_time=datetime.timedelta(0), error_code=exc.error_code, error_message=str(exc), entries=None
        )
    entries = []
    if IP not in wanted:
        for entity, values in ctx.broker.client_quotas.configs.items():
            if values and _passes(wanted.get(USER), entity.user, request.strict) and _passes(
                wanted.get(CLIENT_ID), entity.client_id, request.strict
            ):
                entries.append(_entry(entity, values))
    return DescribeClientQuotasResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, error_message=None, entries=tuple(entries)
    )


def _components(components: tuple[ComponentData, ...]) -> dict[str, object]:
    """{entity type: the name wanted, DEFAULT or _ANY}, checked as Kafka checks the filter."""
    wanted: dict[str, object] = {}
    for component in components:
        entity_type = component.entity_type
        if entity_type == "":
            raise KafkaError("Unexpected empty filter component entity type", ErrorCode.invalid_request)
        if entity_type not in (USER, CLIENT_ID, IP):
            raise KafkaError(f"Custom entity type '{entity_type}' not supported", ErrorCode.unsupported_version)
        if entity_type in wanted:
            name = "client" if entity_type == CLIENT_ID else entity_type
            raise KafkaError(f"Duplicate {name} filter component entity type", ErrorCode.invalid_request)
        if component.match_type == MATCH_EXACT:
            if component.match is None:
                raise KafkaError(f"No name to match exactly for entity type {entity_type}", ErrorCode.invalid_request)
            wanted[entity_type] = component.match
        elif component.match_type == MATCH_DEFAULT:
            wanted[entity_type] = DEFAULT
        elif component.match_type == MATCH_SPECIFIED:
            wanted[entity_type] = _ANY
        else:
            raise KafkaError(f"Unexpected match type: {component.match_type}", ErrorCode.invalid_request)
    if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
        raise KafkaError(
            "Invalid entity filter component combination, IP filter component should not be used with "
            "user or clientId filter component.",
            ErrorCode.invalid_request,
        )
    return wanted


def _passes(wanted: object | None, name: Name | None, strict: bool) -> bool:
    if wanted is None:
        return name is None or not strict
    if wanted is _ANY:
        return name is not None
    return name == wanted


def _entry(entity: QuotaEntity, values: dict[str, float]) -> EntryData:
    parts = []
    if entity.user is not None:
        parts.append(EntityData(entity_type=USER, entity_name=None if entity.user is DEFAULT else entity.user))
    if entity.client_id is not None:
        parts.append(
            EntityData(entity_type=CLIENT_ID, entity_name=None if entity.client_id is DEFAULT else entity.client_id)
        )
    return EntryData(
        entity=tuple(parts), values=tuple(ValueData(key=k, value=v) for k, v in sorted(values.items()))
    )
