"""DeleteAcls (api key 31), versions 0-3.

Needs ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED for every filter); without an
authorizer every filter answers SECURITY_DISABLED ("No Authorizer is configured."). Each filter
answers the ACLs it deleted (an ACL matched by several filters is reported under the first);
filters match as in DescribeAcls. Deletions are stored (ZooKeeper in cluster mode, where every
broker follows at once) before the answer; a store failure is that ACL's UNKNOWN_SERVER_ERROR.

Version notes: v1 adds pattern types (a v0 filter is LITERAL); v2 is flexible. A filter naming
an UNKNOWN element closes the connection, as Kafka fails to parse it.
"""

import datetime

from kio.schema.delete_acls.v3.request import DeleteAclsRequest
from kio.schema.delete_acls.v3.response import DeleteAclsFilterResult, DeleteAclsMatchingAcl, DeleteAclsResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.handlers.acl_filters import filter_of
from broker.handlers.authorization import cluster_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation


@api(ApiKey.DELETE_ACLS, versions=(0, 3))
@cluster_operation(AclOperation.ALTER)
async def handle_delete_acls(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    filters = [filter_of(item) for item in request.filters]
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        results = tuple(
            DeleteAclsFilterResult(error_code=ErrorCode.security_disabled, error_message="No Authorizer is configured.", matching_acls=())
            for _ in filters
        )
        return DeleteAclsResponse(throttle_time=datetime.timedelta(0), filter_results=results)
    deleted = await authorizer.delete_acls(filters)
    return DeleteAclsResponse(
        throttle_time=datetime.timedelta(0),
        filter_results=tuple(
            DeleteAclsFilterResult(
                error_code=ErrorCode.none,
                error_message=None,
                matching_acls=tuple(
                    DeleteAclsMatchingAcl(
                        error_code=ErrorCode.none if error is None else error.error_code,
                        error_message=None if error is None else str(error) or None,
                        resource_type=pattern.resource_type,
                        resource_name=pattern.name,
                        pattern_type=pattern.pattern_type,
                        principal=entry.principal,
                        host=entry.host,
                        operation=entry.operation,
                        permission_type=entry.permission_type,
                    )
                    for (pattern, entry), error in bindings
                ),
            )
            for bindings in deleted
        ),
    )
