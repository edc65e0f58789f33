"""AlterUserScramCredentials (api key 51), version 0 (KIP-554).

What `kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users`
and the admin clients' alterUserScramCredentials send: upsertions carry the salt, iteration
count and salted password the client computed; the broker keeps only salt, StoredKey and
ServerKey (broker/security/scram_store.py, which also makes Kafka's per-user checks), in
ZooKeeper's /config/users/<user> with a change notification in cluster mode, in the log dirs
standalone. As in Kafka's ZooKeeper mode only the controller answers: other brokers answer
NOT_CONTROLLER for every user, and the client retries on the controller.

Authorization (with an authorizer), after the controller check as in KafkaApis: ALTER on the
cluster, else CLUSTER_AUTHORIZATION_FAILED for every user.
"""

import datetime

from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest
from kio.schema.alter_user_scram_credentials.v0.response import (
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError

from broker.handlers.authorization import authorized, refused
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation
from broker.security.scram_store import Deletion, Upsertion


@api(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, versions=(0, 0))
async def handle_alter_user_scram_credentials(
    ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    try:
        ctx.broker.require_controller()
    except KafkaError as exc:
        users = dict.fromkeys([*(d.name for d in request.deletions), *(u.name for u in request.upsertions)])
        return _response([
            AlterUserScramCredentialsResult(user=user, error_code=exc.error_code, error_message=str(exc))
            for user in users
        ])
    if not authorized(ctx, AclOperation.ALTER):
        return refused(ctx, request, ErrorCode.cluster_authorization_failed)
    results = await ctx.broker.scram_credentials.alter(
        [Upsertion(u.name, u.mechanism, u.iterations, u.salt, u.salted_password) for u in request.upsertions],
        [Deletion(d.name, d.mechanism) for d in request.deletions],
    )
    return _response([
        AlterUserScramCredentialsResult(user=r.user, error_code=r.error, error_message=r.message) for r in results
    ])


def _response(results: list[AlterUserScramCredentialsResult]) -> AlterUserScramCredentialsResponse:
    return AlterUserScramCredentialsResponse(throttle_time=datetime.timedelta(0), results=tuple(results))
