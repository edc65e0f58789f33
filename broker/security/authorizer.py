"""An ACL authorizer with the semantics of Kafka's AclAuthorizer (ZooKeeper mode, Kafka 3.9).

Enabled by `authorizer.class.name` = kafka.security.authorizer.AclAuthorizer (or the alias
`logway.acl`); unset or empty, nothing is authorized (every request allowed, as Kafka without an
authorizer). Any other class name is refused at start (`authorizer_class`).

A request (principal, client host, operation, resource) is decided on the ACLs that apply to
the resource: the literal ACLs of its name, the literal ACLs of the wildcard name `*`, and the
prefixed ACLs whose prefix starts its name. In order:
- a principal listed in `super.users` (semicolon separated) is allowed everything;
- no ACL applies to the resource at all: allowed only with allow.everyone.if.no.acl.found=true;
- a DENY ACL for the principal (or User:*), from the host (or *), for the operation (or ALL)
  denies: DENY wins over any ALLOW;
- else an ALLOW ACL alike allows. DESCRIBE is allowed by an ALLOW for READ, WRITE, DELETE or
  ALTER too, and DESCRIBE_CONFIGS by one for ALTER_CONFIGS (a DENY has no such implication);
- else denied.
`authorize_by_resource_type` (may the principal do the operation on some resource of a type?
used for idempotent producers' WRITE on any topic) follows Kafka's authorizeByResourceType.

Each decision is logged on the logger `kafka.authorizer.logger` in Kafka's words ("Principal =
User:alice is Denied Operation = Read from host = 10.0.0.1 on resource = Topic:LITERAL:orders
for request = FETCH with resourceRefCount = 1"): allowed requests at DEBUG, denied ones at INFO;
as Kafka's Action flags say, a denial that only filters an answer (Metadata of all topics,
ListGroups) and both outcomes of computing authorized operations go to TRACE (DEBUG-5,
broker/logging_setup.py), as in Kafka.

ACLs live in an `AclStore` (broker/security/acl_store.py: a file in standalone mode,
ZooKeeper in cluster mode); the authorizer keeps them all in memory and the store tells it of
changes other brokers make. Changes go through the store first and reach the cache once
written, so a broker never enforces an ACL its store does not hold.
"""

import ipaddress
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from protocol.errors import ErrorCode, KafkaError

from broker.logging_setup import TRACE
from broker.security.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from broker.session import KafkaPrincipal, Session

AUDIT_LOGGER = "kafka.authorizer.logger"
audit_log = logging.getLogger(AUDIT_LOGGER)
log = logging.getLogger(__name__)

ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
ALIAS = "logway.acl"
# kafka.security.auth.SimpleAclAuthorizer left Kafka in 3.0 (KIP-504's deprecation); a 3.9
# broker does not start with it, nor does logway.
_REMOVED = {"kafka.security.auth.SimpleAclAuthorizer": "it was removed in Kafka 3.0; use " + ACL_AUTHORIZER}

# What an ALLOW for each of these operations also allows.
_IMPLIED_BY = {
    AclOperation.DESCRIBE: (
        AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER,
    ),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
}

Acls = frozenset[AccessControlEntry]


def authorizer_enabled(class_name: str | None) -> bool:
    """Whether `authorizer.class.name` asks for the ACL authorizer; ValueError for any class
    logway does not have."""
    name = (class_name or "").strip()
    if not name:
        return False
    if name in (ACL_AUTHORIZER, ALIAS):
        return True
    reason = _REMOVED.get(name, f"logway's only authorizer is {ACL_AUTHORIZER} (alias {ALIAS})")
    raise ValueError(f"Invalid value {name} for configuration authorizer.class.name: {reason}")


def parse_super_users(text: str | None) -> frozenset[KafkaPrincipal]:
    """super.users: principals separated by semicolons ("User:admin;User:broker")."""
    if not text or not text.strip():
        return frozenset()
    try:
        return frozenset(KafkaPrincipal.parse(item.strip()) for item in text.split(";") if item.strip())
    except ValueError as exc:
        raise ValueError(f"Invalid value {text} for configuration super.users: {exc}") from None


def acl_host(client_host: str) -> str:
    """The client address as Kafka's ACLs name it (Java's getHostAddress): IPv4 dotted, an
    IPv4 client of a dual-stack listener as IPv4, IPv6 as eight uncompressed hex groups."""
    try:
        address = ipaddress.ip_address(client_host.split("%", 1)[0])
    except ValueError:
        return client_host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        packed = address.packed
        return ":".join(f"{int.from_bytes(packed[i:i + 2], 'big'):x}" for i in range(0, 16, 2))
    return str(address)


class Authorizer(Protocol):
    """What request handlers need of an authorizer."""

    def authorize(
        self, session: Session, operation: AclOperation, resource: ResourcePattern,
        *, request: str = "", log_if_allowed: bool = True, log_if_denied: bool = True,
    ) -> bool: ...

    def authorize_by_resource_type(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, *, request: str = ""
    ) -> bool: ...


class AclStore(Protocol):
    """Where the ACLs are kept. `update` applies a change to one resource's ACLs (retrying it
    on a concurrent writer's newer version) and returns what is stored now; `watch` asks to be
    told of changes others make."""

    async def load(self) -> dict[ResourcePattern, Acls]: ...

    async def update(self, resource: ResourcePattern, change: Callable[[Acls], Acls]) -> Acls: ...

    def watch(self, on_change: Callable[[ResourcePattern, Acls], None]) -> None: ...

    async def close(self) -> None: ...


class InvalidAclError(KafkaError):
    error_code = ErrorCode.invalid_request


class AclAuthorizer:
    def __init__(self, store: AclStore, super_users: Iterable[KafkaPrincipal] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self._store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, Acls] = {}

    async def start(self) -> None:
        """Load every ACL, then follow the store's changes."""
        self._store.watch(self._update_cache)
        for resource, acls in (await self._store.load()).items():
            self._update_cache(resource, acls)

    async def close(self) -> None:
        await self._store.close()

    def _update_cache(self, resource: ResourcePattern, acls: Acls) -> None:
        if acls:
            self._acls[resource] = acls
        else:
            self._acls.pop(resource, None)

    # ------------------------------------------------------------------ decisions

    def authorize(
        self, session: Session, operation: AclOperation, resource: ResourcePattern,
        *, request: str = "", log_if_allowed: bool = True, log_if_denied: bool = True,
    ) -> bool:
        """Whether the session's principal may do `operation` on the (literal) resource.
        As Kafka's Action: `log_if_allowed` when an allowance grants access (logged at DEBUG,
        else TRACE), `log_if_denied` when the caller asked for this resource (a denial logged at
        INFO, else TRACE: the answer only filters what the caller sees)."""
        if resource.pattern_type is not PatternType.LITERAL:
            raise ValueError(f"Only literal resources are supported. Got: {resource.pattern_type.name}")
        principal = session.principal
        host = acl_host(session.client_host)
        allowed = principal in self.super_users or self._acls_allow(str(principal), host, operation, resource)
        self._audit(session, host, operation, resource, allowed, request, log_if_allowed if allowed else log_if_denied)
        return allowed

    def _acls_allow(self, principal: str, host: str, operation: AclOperation, resource: ResourcePattern) -> bool:
        acls = self._matching_acls(resource.resource_type, resource.name)
        if not acls:
            audit_log.debug(
                "No acl found for resource %s, authorized = %s", resource, self.allow_everyone_if_no_acl_found
            )
            return self.allow_everyone_if_no_acl_found
        if _any_match(acls, principal, host, (operation,), AclPermissionType.DENY):
            return False
        return _any_match(acls, principal, host, _IMPLIED_BY.get(operation, (operation,)), AclPermissionType.ALLOW)

    def _matching_acls(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        acls = self._acls
        found: list[AccessControlEntry] = []
        for pattern in (
            ResourcePattern(resource_type, name, PatternType.LITERAL),
            ResourcePattern(resource_type, WILDCARD_RESOURCE, PatternType.LITERAL),
        ):
            found.extend(acls.get(pattern, ()))
        for end in range(1, len(name) + 1):
            found.extend(acls.get(ResourcePattern(resource_type, name[:end], PatternType.PREFIXED), ()))
        return found

    def authorize_by_resource_type(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, *, request: str = ""
    ) -> bool:
        """Whether the principal may do `operation` on at least one resource of the type, as
        Kafka's authorizeByResourceType: a DENY on the wildcard literal refuses; else (with
        allow.everyone.if.no.acl.found) allowed; else allowed when some ALLOW literal or prefix
        is not covered by a DENY of the same or a shorter prefix (or the same literal)."""
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or operation in (
            AclOperation.ANY, AclOperation.UNKNOWN
        ):
            raise ValueError(f"authorize_by_resource_type needs a concrete type and operation, got {resource_type.name} {operation.name}")
        principal = session.principal
        host = acl_host(session.client_host)
        allowed = principal in self.super_users or self._type_allows(str(principal), host, operation, resource_type)
        if principal not in self.super_users:
            pattern = ResourcePattern(resource_type, "NONE", PatternType.UNKNOWN)
            self._audit(session, host, operation, pattern, allowed, request, True)
        return allowed

    def _type_allows(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        names: dict[tuple[AclPermissionType, PatternType], set[str]] = {}
        for pattern, acls in self._acls.items():
            if pattern.resource_type != resource_type:
                continue
            for entry in acls:
                if _entry_matches(entry, principal, host, (operation,)):
                    names.setdefault((entry.permission_type, pattern.pattern_type), set()).add(pattern.name)
        deny_literals = names.get((AclPermissionType.DENY, PatternType.LITERAL), set())
        if WILDCARD_RESOURCE in deny_literals:
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = names.get((AclPermissionType.DENY, PatternType.PREFIXED), set())

        def dominated(name: str) -> bool:
            return any(name[:end] in deny_prefixes for end in range(1, len(name) + 1))

        allow_prefixes = names.get((AclPermissionType.ALLOW, PatternType.PREFIXED), set())
        allow_literals = names.get((AclPermissionType.ALLOW, PatternType.LITERAL), set())
        return any(not dominated(prefix) for prefix in allow_prefixes) or any(
            literal == WILDCARD_RESOURCE or (literal not in deny_literals and not dominated(literal))
            for literal in allow_literals
        )

    def _audit(
        self, session: Session, host: str, operation: AclOperation, resource: ResourcePattern,
        allowed: bool, request: str, loud: bool,
    ) -> None:
        level = (logging.DEBUG if allowed else logging.INFO) if loud else TRACE
        if audit_log.isEnabledFor(level):
            audit_log.log(
                level,
                "Principal = %s is %s Operation = %s from host = %s on resource = %s for request = %s "
                "with resourceRefCount = 1",
                session.principal, "Allowed" if allowed else "Denied", operation.stored_name, host,
                resource, request or "unknown",
            )

    # ------------------------------------------------------------------ administration

    def acls(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        """Every ACL binding the filter matches."""
        return [
            AclBinding(pattern, entry)
            for pattern, entries in sorted(self._acls.items(), key=lambda item: _pattern_order(item[0]))
            for entry in sorted(entries)
            if binding_filter.matches(AclBinding(pattern, entry))
        ]

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[KafkaError | None]:
        """Store the bindings; per binding None or the error that kept it out. Bindings with
        unknown elements, ANY/MATCH patterns, a malformed principal or a '/' in the resource
        name (it would be a ZooKeeper path) are INVALID_REQUEST, as Kafka's ZooKeeper authorizer."""
        results: list[KafkaError | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for index, binding in enumerate(bindings):
            try:
                _validate(binding)
            except InvalidAclError as exc:
                results[index] = exc
                continue
            by_pattern.setdefault(binding.pattern, []).append(index)
        for pattern, indexes in by_pattern.items():
            new = frozenset(bindings[i].entry for i in indexes)
            try:
                self._update_cache(pattern, await self._store.update(pattern, lambda current: current | new))
            except Exception as exc:  # the store failed: every binding of this resource fails
                log.error("cannot store ACLs of %s: %s", pattern, exc)
                for i in indexes:
                    results[i] = KafkaError(str(exc), ErrorCode.unknown_server_error)
        return results

    async def delete_acls(
        self, filters: Sequence[AclBindingFilter]
    ) -> list[list[tuple[AclBinding, KafkaError | None]]]:
        """Per filter, the bindings it deleted, each with None or the error that kept it. A
        binding matched by several filters is reported for the first."""
        candidates = set(self._acls)
        for binding_filter in filters:
            pattern_filter = binding_filter.pattern
            if pattern_filter.matches_at_most_one:
                types = (PatternType.LITERAL, PatternType.PREFIXED) if pattern_filter.pattern_type is PatternType.ANY else (pattern_filter.pattern_type,)
                candidates.update(ResourcePattern(pattern_filter.resource_type, pattern_filter.name, t) for t in types)
        deleted: dict[AclBinding, int] = {}
        errors: dict[AclBinding, KafkaError] = {}
        for pattern in sorted(candidates, key=_pattern_order):
            matching = [(i, f) for i, f in enumerate(filters) if f.pattern.matches(pattern)]
            if not matching:
                continue
            removing: dict[AclBinding, int] = {}

            def change(current: Acls, pattern=pattern, matching=matching, removing=removing) -> Acls:
                removing.clear()
                kept = set()
                for entry in current:
                    index = next((i for i, f in matching if f.entry.matches(entry)), None)
                    if index is None:
                        kept.add(entry)
                    else:
                        removing[AclBinding(pattern, entry)] = index
                return frozenset(kept)

            try:
                self._update_cache(pattern, await self._store.update(pattern, change))
            except Exception as exc:
                log.error("cannot delete ACLs of %s: %s", pattern, exc)
                for binding in removing:
                    errors.setdefault(binding, KafkaError(str(exc), ErrorCode.unknown_server_error))
            for binding, index in removing.items():
                deleted.setdefault(binding, index)
        results: list[list[tuple[AclBinding, KafkaError | None]]] = [[] for _ in filters]
        for binding, index in deleted.items():
            results[index].append((binding, errors.get(binding)))
        return results


def _entry_matches(entry: AccessControlEntry, principal: str, host: str, operations: Sequence[AclOperation]) -> bool:
    return (
        (entry.principal == principal or entry.principal == WILDCARD_PRINCIPAL)
        and (entry.operation in operations or entry.operation is AclOperation.ALL)
        and (entry.host == host or entry.host == WILDCARD_HOST)
    )


def _any_match(
    acls: Iterable[AccessControlEntry], principal: str, host: str,
    operations: Sequence[AclOperation], permission: AclPermissionType,
) -> bool:
    for entry in acls:
        if entry.permission_type == permission and _entry_matches(entry, principal, host, operations):
            audit_log.debug("%s is %s based on acl = %s", principal, permission.stored_name, entry)
            return True
    return False


def _pattern_order(pattern: ResourcePattern) -> tuple:
    return (pattern.resource_type, pattern.pattern_type, pattern.name)


def _validate(binding: AclBinding) -> None:
    pattern, entry = binding
    if (
        pattern.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN)
        or pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED)
        or entry.operation in (AclOperation.ANY, AclOperation.UNKNOWN)
        or entry.permission_type in (AclPermissionType.ANY, AclPermissionType.UNKNOWN)
    ):
        raise InvalidAclError("Failed to create ACL: ACL binding contains unknown elements")
    if "/" in pattern.name:
        raise InvalidAclError(f"Failed to create ACL: ACL binding contains invalid resource name: {pattern.name}")
    try:
        KafkaPrincipal.parse(entry.principal)
    except ValueError as exc:
        raise InvalidAclError(f"Failed to create ACL: {exc}") from None
