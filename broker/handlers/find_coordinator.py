"""FindCoordinator (api key 10), versions 0-4.

Says which broker coordinates a key: for a consumer group (key type 0, GROUP), the leader of the
group's __consumer_offsets partition; for a transactional id (key type 1, TRANSACTION), the leader
of its __transaction_state partition: leaders as the metadata cache knows them (standalone, this
broker). The first request creates the topic (in cluster mode with offsets.topic.replication.factor
or transaction.state.log.replication.factor replicas, capped by the live brokers). Group ids are
not checked here, as Kafka does not check them: the empty id maps to partition 0.

Errors: COORDINATOR_NOT_AVAILABLE when the topic cannot be created, the partition has no live
leader, or the broker is shutting down; INVALID_REQUEST for an empty transactional id and for any
other key type (as Kafka answers share groups' when they are off).

Version notes: v1 adds key_type, throttle time and an error message; v3 is flexible; v4 asks for
several keys at once (coordinator_keys) and answers one coordinator entry per key.

Authorization (with an authorizer, as Kafka's KafkaApis): DESCRIBE on the group or the
transactional id, else GROUP_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

import datetime

from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as SingleKeyRequest
from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse as SingleKeyResponse
from kio.schema.find_coordinator.v4.response import Coordinator, FindCoordinatorResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.schemas import adapt
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized
from broker.handlers.registry import RequestContext, api, as_sent
from broker.security.acl import AclOperation, ResourceType

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
FIRST_BATCHED_VERSION = 4
_MESSAGES = {
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.invalid_request: "Unknown coordinator key type.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
}


# v0-3 name one key, v4 a list of them: copying fields by name cannot map one to the other.
@api(ApiKey.FIND_COORDINATOR, versions=(0, 4), parse=as_sent(ApiKey.FIND_COORDINATOR))
async def handle_find_coordinator(ctx: RequestContext, request):
    if ctx.api_version >= FIRST_BATCHED_VERSION:
        coordinators = [await _find(ctx, request.key_type, key) for key in request.coordinator_keys]
        return FindCoordinatorResponse(throttle_time=datetime.timedelta(0), coordinators=tuple(coordinators))
    request = adapt(request, SingleKeyRequest)
    found = await _find(ctx, request.key_type, request.key)
    return SingleKeyResponse(
        throttle_time=datetime.timedelta(0),
        error_code=found.error_code,
        error_message=found.error_message,
        node_id=found.node_id,
        host=found.host,
        port=found.port,
    )


async def _find(ctx: RequestContext, key_type: int, key: str) -> Coordinator:
    broker = ctx.broker
    if key_type == GROUP_KEY_TYPE and not authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return _error(key, ErrorCode.group_authorization_failed)
    if key_type == TRANSACTION_KEY_TYPE and not authorized(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return _error(key, ErrorCode.transactional_id_authorization_failed)
    if key_type == GROUP_KEY_TYPE:
        error = await broker.group_coordinator.find_coordinator()
        topic = broker.group_coordinator.offsets_topic
    elif key_type == TRANSACTION_KEY_TYPE:
        error = await broker.transaction_coordinator.find_coordinator(key)
        topic = broker.transaction_coordinator.state_topic
    else:
        error = ErrorCode.invalid_request
    if error is not ErrorCode.none:
        return _error(key, error)
    cache = broker.metadata_cache
    leader = cache.leader_of(TopicPartition(topic.name, topic.partition_for(key)))
    endpoint = cache.endpoint(leader, ctx.listener) if leader is not None else None
    if endpoint is None:
        return _error(key, ErrorCode.coordinator_not_available)
    return Coordinator(
        key=key, node_id=leader, host=endpoint[0], port=endpoint[1], error_code=ErrorCode.none, error_message=None
    )


def _error(key: str, error: ErrorCode) -> Coordinator:
    return Coordinator(key=key, node_id=-1, host="", port=-1, error_code=error, error_message=_MESSAGES.get(error))
