"""Kafka's ACL model: resource patterns, access control entries, bindings and their filters.

The enums carry Kafka's wire codes (org.apache.kafka.common.acl / .resource), and the names
Kafka stores in ZooKeeper (`stored_name`: TOPIC -> "Topic", CLUSTER_ACTION -> "ClusterAction",
ALLOW -> "Allow", as SecurityUtils' Pascal case). Filters match as Kafka's ResourcePatternFilter,
AccessControlEntryFilter and AclBindingFilter do (ANY matches everything, MATCH matches the
patterns that would apply to a resource name; a None name, principal or host matches any).
Pure: no I/O.
"""

import enum
from typing import NamedTuple

CLUSTER_NAME = "kafka-cluster"  # the only name of the CLUSTER resource
WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class _Named(enum.IntEnum):
    @property
    def stored_name(self) -> str:
        """The name Kafka writes in ZooKeeper and in its logs."""
        return _pascal(self.name)

    @classmethod
    def from_code(cls, code: int):
        """UNKNOWN for a code this enum does not know, as Kafka's fromCode."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN

    @classmethod
    def from_name(cls, name: str):
        """Kafka's SecurityUtils lookup: the stored (Pascal case) name, or the enum name in any
        case; UNKNOWN otherwise."""
        for member in cls:
            if name == member.stored_name or name.upper() == member.name:
                return member
        return cls.UNKNOWN


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


# Kafka's AclEntry.supportedOperations: what authorizedOperations can report per resource type.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    }),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset({
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE,
    }),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


class ResourcePattern(NamedTuple):
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        # Kafka's log form: Topic:LITERAL:orders
        return f"{self.resource_type.stored_name}:{self.pattern_type.name}:{self.name}"


class AccessControlEntry(NamedTuple):
    principal: str  # "User:alice", or "User:*" for every principal
    host: str  # an address, or "*" for every host
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (
            f"{self.principal} has {self.permission_type.name} permission for operations: "
            f"{self.operation.name} from hosts: {self.host}"
        )


class AclBinding(NamedTuple):
    pattern: ResourcePattern
    entry: AccessControlEntry


class ResourcePatternFilter(NamedTuple):
    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: the patterns that apply to a resource of this name
        if pattern.pattern_type is PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        return self.name.startswith(pattern.name)

    @property
    def matches_at_most_one(self) -> bool:
        """Kafka's findIndefiniteField() == null: names one resource pattern (or, for ANY, its
        literal and its prefixed pattern)."""
        return (
            self.resource_type not in (ResourceType.ANY, ResourceType.UNKNOWN)
            and self.name is not None
            and self.pattern_type not in (PatternType.MATCH, PatternType.UNKNOWN)
        )


class AccessControlEntryFilter(NamedTuple):
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def matches(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and (self.operation is AclOperation.ANY or self.operation == entry.operation)
            and (self.permission_type is AclPermissionType.ANY or self.permission_type == entry.permission_type)
        )


class AclBindingFilter(NamedTuple):
    pattern: ResourcePatternFilter
    entry: AccessControlEntryFilter

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


MATCH_ALL = AclBindingFilter(
    ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
    AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY),
)
