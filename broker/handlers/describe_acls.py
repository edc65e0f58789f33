"""DescribeAcls (api key 29), versions 0-3.

Needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED); without an authorizer the
answer is SECURITY_DISABLED ("No Authorizer is configured on the broker"). Answers every ACL the
filter matches (Kafka's ResourcePatternFilter and AccessControlEntryFilter: ANY, MATCH for the
patterns applying to a name, null name, principal or host for any), grouped by resource pattern.

Version notes: v1 adds pattern types (a v0 filter is LITERAL); v2 is flexible. A filter naming
an UNKNOWN element closes the connection, as Kafka fails to parse it.
"""

import datetime

from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_acls.v3.response import AclDescription, DescribeAclsResource, DescribeAclsResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.handlers.acl_filters import filter_of
from broker.handlers.authorization import cluster_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation


@api(ApiKey.DESCRIBE_ACLS, versions=(0, 3))
@cluster_operation(AclOperation.DESCRIBE)
def handle_describe_acls(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    binding_filter = filter_of(request)
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return DescribeAclsResponse(
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.security_disabled,
            error_message="No Authorizer is configured on the broker",
            resources=(),
        )
    grouped: dict = {}
    for pattern, entry in authorizer.acls(binding_filter):
        grouped.setdefault(pattern, []).append(
            AclDescription(
                principal=entry.principal, host=entry.host, operation=entry.operation, permission_type=entry.permission_type
            )
        )
    return DescribeAclsResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        resources=tuple(
            DescribeAclsResource(
                resource_type=pattern.resource_type,
                resource_name=pattern.name,
                pattern_type=pattern.pattern_type,
                acls=tuple(acls),
            )
            for pattern, acls in grouped.items()
        ),
    )
