"""ACL bindings and filters of CreateAcls, DescribeAcls and DeleteAcls requests, read the way
Kafka's request classes read them: a code Kafka does not know is UNKNOWN, and a request naming
an UNKNOWN element is malformed (ProtocolError: the connection closes, as Kafka fails to
parse it)."""

from protocol.errors import ProtocolError

from broker.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)


def _codes(item, resource_type: str, pattern_type: str) -> tuple:
    codes = (
        ResourceType.from_code(getattr(item, resource_type)),
        PatternType.from_code(getattr(item, pattern_type)),
        AclOperation.from_code(item.operation),
        AclPermissionType.from_code(item.permission_type),
    )
    if any(code.name == "UNKNOWN" for code in codes):
        raise ProtocolError(f"the request names UNKNOWN ACL elements: {item}")
    return codes


def binding_of(creation) -> AclBinding:
    resource_type, pattern_type, operation, permission = _codes(creation, "resource_type", "resource_pattern_type")
    return AclBinding(
        ResourcePattern(resource_type, creation.resource_name, pattern_type),
        AccessControlEntry(creation.principal, creation.host, operation, permission),
    )


def filter_of(item) -> AclBindingFilter:
    resource_type, pattern_type, operation, permission = _codes(item, "resource_type_filter", "pattern_type_filter")
    return AclBindingFilter(
        ResourcePatternFilter(resource_type, item.resource_name_filter, pattern_type),
        AccessControlEntryFilter(item.principal_filter, item.host_filter, operation, permission),
    )
