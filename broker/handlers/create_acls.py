"""CreateAcls (api key 30), versions 0-3.

Needs ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED for every creation); without an
authorizer every creation answers SECURITY_DISABLED ("No Authorizer is configured."). Each
creation is checked on its own, as Kafka's AclApis and AclAuthorizer do: INVALID_REQUEST for a
CLUSTER resource not named kafka-cluster ("The only valid name for the CLUSTER resource is
kafka-cluster"), an empty resource name, a name holding '/', an ANY or MATCH pattern, an ANY
operation or permission, or a principal not of the form <type>:<name>. The valid ones are stored
(broker/security/acl_store.py: ZooKeeper in cluster mode, where every broker follows at once)
before the answer.

Version notes: v1 adds the resource pattern type (v0 creations are LITERAL); v2 is flexible.
A request naming an UNKNOWN type, pattern, operation or permission closes the connection, as
Kafka fails to parse it.
"""

import datetime

from kio.schema.create_acls.v3.request import CreateAclsRequest
from kio.schema.create_acls.v3.response import AclCreationResult, CreateAclsResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.handlers.acl_filters import binding_of
from broker.handlers.authorization import cluster_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType


@api(ApiKey.CREATE_ACLS, versions=(0, 3))
@cluster_operation(AclOperation.ALTER)
async def handle_create_acls(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    bindings = [binding_of(creation) for creation in request.creations]
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        results = [_result(ErrorCode.security_disabled, "No Authorizer is configured.") for _ in bindings]
        return CreateAclsResponse(throttle_time=datetime.timedelta(0), results=tuple(results))
    answers: list[AclCreationResult | None] = [None] * len(bindings)
    valid = []
    for index, binding in enumerate(bindings):
        pattern = binding.pattern
        if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
            answers[index] = _result(ErrorCode.invalid_request, f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        elif not pattern.name:
            answers[index] = _result(ErrorCode.invalid_request, "Invalid empty resource name")
        else:
            valid.append(index)
    outcomes = await authorizer.create_acls([bindings[i] for i in valid])
    for index, error in zip(valid, outcomes):
        answers[index] = _result(ErrorCode.none, None) if error is None else _result(error.error_code, str(error) or None)
    return CreateAclsResponse(throttle_time=datetime.timedelta(0), results=tuple(answers))


def _result(error_code: ErrorCode, message: str | None) -> AclCreationResult:
    return AclCreationResult(error_code=error_code, error_message=message)
