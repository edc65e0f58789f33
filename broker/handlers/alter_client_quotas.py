"""AlterClientQuotas (api key 49), versions 0-1 (KIP-546).

Sets or removes quotas (producer_byte_rate, consumer_byte_rate, request_percentage) of user,
client-id and user/client-id entities, a null name meaning the <default> entity, as Kafka's
ZooKeeper-mode broker does (ZkAdminManager.alterClientQuotas): each entry is applied on its own
and answered with its own error. Stored in ZooKeeper (/config/users, /config/clients, with a
change notification that every broker follows) or, standalone, in a file in the log dirs
(broker/security/quota_store.py); they apply to this broker's clients at once.

Errors, per entry, INVALID_REQUEST with Kafka's messages: an empty entity, an entity type named
twice, an unknown entity type, an empty name, an unknown key ("Invalid configuration key ...",
the SCRAM keys included: they are changed by AlterUserScramCredentials), a value not above 0
(KRaft's check; ZooKeeper-mode Kafka stores such values), a byte rate that is not an integer.
An ip entity is refused: logway has no connection_creation_rate quota. Removing a key that is
not set is no error. With validate_only nothing changes but the answers are the same.

Version notes: v1 is flexible.

Authorization (with an authorizer): ALTER_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED
for every entry, as Kafka's KafkaApis.
"""

import datetime

from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest
from kio.schema.alter_client_quotas.v1.response import AlterClientQuotasResponse, EntityData, EntryData

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError

from broker.handlers.authorization import cluster_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation
from broker.security.quota_store import entity_of


@api(ApiKey.ALTER_CLIENT_QUOTAS, versions=(0, 1))
@cluster_operation(AclOperation.ALTER_CONFIGS)
async def handle_alter_client_quotas(
    ctx: RequestContext, request: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    results = []
    for entry in request.entries:
        try:
            entity = entity_of((part.entity_type, part.entity_name) for part in entry.entity)
            ops = [(op.key, op.value, op.remove) for op in entry.ops]
            await ctx.broker.quota_configs.alter(entity, ops, request.validate_only)
        except KafkaError as exc:
            error_code, message = exc.error_code, str(exc) or None
        else:
            error_code, message = ErrorCode.none, None
        results.append(
            EntryData(
                error_code=error_code,
                error_message=message,
                entity=tuple(
                    EntityData(entity_type=part.entity_type, entity_name=part.entity_name) for part in entry.entity
                ),
            )
        )
    return AlterClientQuotasResponse(throttle_time=datetime.timedelta(0), entries=tuple(results))
