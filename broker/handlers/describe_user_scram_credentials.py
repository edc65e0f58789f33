"""DescribeUserScramCredentials (api key 50), version 0 (KIP-554).

Names the SCRAM mechanisms and iteration counts each user has credentials for (never the
credentials). No users named (null or empty): every user with a SCRAM credential, sorted by
name. Users named: each once, in request order; an empty name is RESOURCE_NOT_FOUND "Username
must not be empty", a name given twice DUPLICATE_RESOURCE, a user without SCRAM credentials
RESOURCE_NOT_FOUND "Attempt to describe a user credential that does not exist: <user>" (Kafka's
ZkAdminManager messages). Any broker answers, from the credentials it serves: in cluster mode
those of ZooKeeper's /config/users, kept current by the change notifications.

Authorization (with an authorizer): DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

import datetime

from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest
from kio.schema.describe_user_scram_credentials.v0.response import (
    CredentialInfo,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.handlers.authorization import cluster_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation


@api(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, versions=(0, 0))
@cluster_operation(AclOperation.DESCRIBE)
def handle_describe_user_scram_credentials(
    ctx: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    users = None if request.users is None else [user.name for user in request.users]
    described = ctx.broker.scram_credentials.describe(users)
    return DescribeUserScramCredentialsResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(
            DescribeUserScramCredentialsResult(
                user=result.user,
                error_code=result.error,
                error_message=result.message,
                credential_infos=tuple(
                    CredentialInfo(mechanism=mechanism, iterations=iterations)
                    for mechanism, iterations in result.credentials
                ),
            )
            for result in described
        ),
    )
