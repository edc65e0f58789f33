"""Authorization for request handlers, as Kafka's AuthHelper: one place for every check.

Handlers ask through the request context; without an authorizer (authorizer.class.name unset)
everything is allowed and nothing is logged. The decisions come from an `Authorizer`
(broker/security/authorizer.py), never from the rest of the broker.

- `authorized`: may the caller do an operation on one named resource (CLUSTER when no name)?
- `authorized_names`: the subset of names the caller may (Kafka's filterByAuthorized); with
  `log_denied=False` the denials are only traced (filters such as Metadata of all topics).
- `authorized_by_type`: an operation on some resource of a type (authorizeByResourceType).
- `authorized_operations`: the 32-bit field of operations allowed on a resource, for the
  include_*_authorized_operations of Metadata, DescribeGroups and DescribeCluster.
- `requires`, `cluster_operation`, `group_operation`, `cluster_action`: decorators for handlers
  Kafka refuses as a whole without an operation on the cluster or the request's group
  (CLUSTER_ or GROUP_AUTHORIZATION_FAILED everywhere in the answer, as Kafka's getErrorResponse).
"""

import functools
from collections.abc import Iterable
from typing import Final

from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.config_types import ConfigResourceType
from protocol.errors import ErrorCode, KafkaError

from broker.handlers.registry import RequestContext
from broker.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourcePattern, ResourceType
from broker.security.authorizer import Authorizer

AUTHORIZATION_ERRORS: Final = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
}
# Kafka's default for an authorized-operations field the client did not ask for.
OPERATIONS_NOT_REQUESTED: Final = -(2**31)


def _authorizer(ctx: RequestContext) -> Authorizer | None:
    return ctx.services.authorizer


def enabled(ctx: RequestContext) -> bool:
    """Whether requests are authorized at all (for checks that cost something to prepare)."""
    return _authorizer(ctx) is not None


def _request_name(ctx: RequestContext) -> str:
    try:
        return ApiKey(ctx.header.api_key).name
    except ValueError:
        return str(ctx.header.api_key)


def authorized(
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType = ResourceType.CLUSTER,
    name: str = CLUSTER_NAME,
    *,
    log_denied: bool = True,
    log_allowed: bool = True,
) -> bool:
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return True
    return authorizer.authorize(
        ctx.session, operation, ResourcePattern(resource_type, name), request=_request_name(ctx),
        log_if_allowed=log_allowed, log_if_denied=log_denied,
    )


def authorized_names(
    ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, names: Iterable[str], *, log_denied: bool = True
) -> set[str]:
    names = set(names)
    if _authorizer(ctx) is None:
        return names
    return {name for name in names if authorized(ctx, operation, resource_type, name, log_denied=log_denied)}


def authorized_by_type(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(ctx.session, operation, resource_type, request=_request_name(ctx))


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
    """Bit i set when the operation of code i is allowed (Kafka's Utils.to32BitField)."""
    field = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if authorized(ctx, operation, resource_type, name, log_denied=False, log_allowed=False):
            field |= 1 << operation
    return field


def denial(resource_type: ResourceType, message: str = "") -> KafkaError:
    """The authorization failure of a resource type, as a KafkaError to answer with."""
    return KafkaError(message, AUTHORIZATION_ERRORS[resource_type])


def refused(ctx: RequestContext, request, error: ErrorCode):
    """The request answered with `error` everywhere (Kafka's getErrorResponse)."""
    return schemas.error_response(request, schemas.response_type(ctx.header.api_key, ctx.api_version), error)


def requires(operation: AclOperation, resource_type: ResourceType = ResourceType.CLUSTER, name_of=None):
    """Refuse the whole request with the resource type's authorization error (everywhere in
    the answer) unless the caller may do `operation` on the resource: the cluster, or the one
    `name_of(request)` names (the group of JoinGroup, ...)."""

    def decorate(handle):
        @functools.wraps(handle)
        def checked(ctx: RequestContext, request):
            name = CLUSTER_NAME if name_of is None else name_of(request)
            if not authorized(ctx, operation, resource_type, name):
                return refused(ctx, request, AUTHORIZATION_ERRORS[resource_type])
            return handle(ctx, request)

        return checked

    return decorate


def cluster_operation(operation: AclOperation):
    """Kafka's authorizeClusterOperation: CLUSTER_AUTHORIZATION_FAILED unless the caller may do
    `operation` on the cluster."""
    return requires(operation)


def group_operation(operation: AclOperation):
    """GROUP_AUTHORIZATION_FAILED unless the caller may do `operation` on the request's group."""
    return requires(operation, ResourceType.GROUP, lambda request: request.group_id)


# Inter-broker requests (LeaderAndIsr, UpdateMetadata, StopReplica, ControlledShutdown): the
# brokers' own principal must be a super user or hold CLUSTER_ACTION.
cluster_action: Final = cluster_operation(AclOperation.CLUSTER_ACTION)


def check_config_access(ctx: RequestContext, operation: AclOperation, resource_type: int, name: str) -> None:
    """DescribeConfigs (DESCRIBE_CONFIGS) and AlterConfigs (ALTER_CONFIGS): a topic's configs need
    the operation on the topic (TOPIC_AUTHORIZATION_FAILED), a broker's and its loggers' on the
    cluster (CLUSTER_AUTHORIZATION_FAILED); Kafka's messages are empty."""
    if resource_type == ConfigResourceType.TOPIC:
        if not authorized(ctx, operation, ResourceType.TOPIC, name):
            raise denial(ResourceType.TOPIC)
    elif resource_type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER):
        if not authorized(ctx, operation):
            raise denial(ResourceType.CLUSTER)
