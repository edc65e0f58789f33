"""`logway-admin acls`: kafka-acls.sh's flags and output (CreateAcls, DescribeAcls, DeleteAcls).

    --add|--remove (--allow-principal P ... [--allow-host H] | --deny-principal P ... [--deny-host H])
          (--operation OP ... | --producer [--idempotent] | --consumer)
          (--topic T | --group G | --cluster | --transactional-id X | --user-principal U) ...
          [--resource-pattern-type LITERAL|PREFIXED]  (for --remove also ANY, MATCH)
    --list [--topic T | --group G | --cluster | ...] [--principal P] [--resource-pattern-type ...]

Output as Kafka's AclCommand: `Adding ACLs for resource `ResourcePattern(resourceType=TOPIC,
name=orders, patternType=LITERAL)`:` with an entry per line `(principal=User:alice, host=*,
operation=READ, permissionType=ALLOW)`, then the resource's current ACLs. --remove does not ask
for confirmation (Kafka's does unless --force; --force is accepted). Hosts default to *.
"""

import argparse

from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest

from broker.admin.connection import Admin, UsageError, check, failure
from broker.security.acl import CLUSTER_NAME, WILDCARD_HOST, AclOperation, AclPermissionType, PatternType, ResourceType

_RESOURCE_FLAGS = (
    ("topic", ResourceType.TOPIC), ("group", ResourceType.GROUP), ("transactional_id", ResourceType.TRANSACTIONAL_ID),
    ("user_principal", ResourceType.USER), ("delegation_token", ResourceType.DELEGATION_TOKEN),
)


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--add", action="store_true", help="Indicates you are trying to add ACLs.")
    actions.add_argument("--remove", action="store_true", help="Indicates you are trying to remove ACLs.")
    actions.add_argument("--list", action="store_true", help="List ACLs for the specified resource.")
    parser.add_argument("--topic", action="append", default=[])
    parser.add_argument("--group", action="append", default=[])
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--transactional-id", action="append", default=[])
    parser.add_argument("--user-principal", action="append", default=[])
    parser.add_argument("--delegation-token", action="append", default=[])
    parser.add_argument("--resource-pattern-type", default=None, help="ANY, MATCH, LITERAL (default) or PREFIXED")
    parser.add_argument("--operation", action="append", default=[], help="Read, Write, Create, Describe, All ...")
    parser.add_argument("--allow-principal", action="append", default=[], help="User:alice")
    parser.add_argument("--deny-principal", action="append", default=[])
    parser.add_argument("--allow-host", action="append", default=[])
    parser.add_argument("--deny-host", action="append", default=[])
    parser.add_argument("--principal", action="append", default=[], help="with --list: only this principal's ACLs")
    parser.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
    parser.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs")
    parser.add_argument("--idempotent", action="store_true", help="with --producer: idempotent writes too")
    parser.add_argument("--force", action="store_true", help="accepted for Kafka's compatibility: nothing is asked")


def pattern_text(resource_type: int, name: str, pattern_type: int) -> str:
    return (f"ResourcePattern(resourceType={ResourceType.from_code(resource_type).name}, name={name}, "
            f"patternType={PatternType.from_code(pattern_type).name})")


def entry_text(principal: str, host: str, operation: int, permission: int) -> str:
    return (f"(principal={principal}, host={host}, operation={AclOperation.from_code(operation).name}, "
            f"permissionType={AclPermissionType.from_code(permission).name})")


def _pattern_type(args, adding: bool) -> PatternType:
    value = args.resource_pattern_type or ("LITERAL" if adding or not args.list else "ANY")
    pattern = PatternType.from_name(value)
    if pattern == PatternType.UNKNOWN:
        raise UsageError(f"Invalid --resource-pattern-type {value}: ANY, MATCH, LITERAL or PREFIXED")
    if adding and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError(f"A '--resource-pattern-type' value of '{pattern.name}' is not valid when adding acls.")
    return pattern


def resources(args) -> list[tuple[ResourceType, str]]:
    found = [(kind, name) for attribute, kind in _RESOURCE_FLAGS for name in getattr(args, attribute)]
    if args.cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return found


def _operations(names: list[str]) -> list[AclOperation]:
    operations = []
    for name in names:
        operation = AclOperation.from_name(name.strip())
        if operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise UsageError(f"Invalid operation {name}")
        operations.append(operation)
    return operations


def bindings(args) -> dict[tuple[ResourceType, str], list[tuple[str, str, AclOperation, AclPermissionType]]]:
    """What --add or --remove names: per resource, its (principal, host, operation, permission)."""
    targets = resources(args)
    if not targets:
        raise UsageError("You must specify one of: --topic, --cluster, --group, --transactional-id, --user-principal")
    if args.producer or args.consumer:
        per_resource = _role_operations(args, targets)
    else:
        if not args.operation:
            raise UsageError("You must specify --operation, --producer or --consumer")
        operations = _operations(args.operation)
        per_resource = {target: operations for target in targets}
    entries = {}
    for target, operations in per_resource.items():
        acl = []
        for principals, hosts, permission in (
            (args.allow_principal, args.allow_host or [WILDCARD_HOST], AclPermissionType.ALLOW),
            (args.deny_principal, args.deny_host or [WILDCARD_HOST], AclPermissionType.DENY),
        ):
            for principal in principals:
                if ":" not in principal:
                    raise UsageError(f"principal {principal} is not in principalType:name format")
                acl += [(principal, host, operation, permission) for host in hosts for operation in operations]
        if not acl:
            raise UsageError("You must specify one of: --allow-principal, --deny-principal")
        entries[target] = acl
    return entries


def _role_operations(args, targets) -> dict:
    """Kafka's --producer and --consumer conveniences."""
    per_resource: dict = {}
    for kind, name in targets:
        if kind == ResourceType.TOPIC:
            if args.producer:
                per_resource.setdefault((kind, name), []).extend(
                    [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE])
            if args.consumer:
                per_resource.setdefault((kind, name), []).extend([AclOperation.READ, AclOperation.DESCRIBE])
        elif kind == ResourceType.GROUP and args.consumer:
            per_resource.setdefault((kind, name), []).append(AclOperation.READ)
        elif kind == ResourceType.TRANSACTIONAL_ID and args.producer:
            per_resource.setdefault((kind, name), []).extend([AclOperation.WRITE, AclOperation.DESCRIBE])
    if args.producer and args.idempotent:
        per_resource[(ResourceType.CLUSTER, CLUSTER_NAME)] = [AclOperation.IDEMPOTENT_WRITE]
    if args.consumer and not any(k == ResourceType.GROUP for k, _ in targets):
        raise UsageError("With --consumer you must specify a --group")
    return {k: list(dict.fromkeys(v)) for k, v in per_resource.items()}


async def run(args: argparse.Namespace, admin: Admin) -> int:
    if args.list:
        return await list_acls(admin, args)
    pattern = _pattern_type(args, adding=args.add)
    wanted = bindings(args)
    if args.add:
        creations = []
        for (kind, name), acl in wanted.items():
            print(f"Adding ACLs for resource `{pattern_text(kind, name, pattern)}`: \n "
                  + "\n".join("\t" + entry_text(*entry) for entry in acl) + " \n")
            creations += [AclCreation(resource_type=kind, resource_name=name, resource_pattern_type=pattern,
                                      principal=p, host=h, operation=o, permission_type=perm) for p, h, o, perm in acl]
        response = await admin.send(CreateAclsRequest(creations=tuple(creations)), min_version=1)
        for result in response.results:
            check(result.error_code, "Error while adding ACLs", result.error_message)
    else:
        filters = []
        for (kind, name), acl in wanted.items():
            print(f"Removing ACLs for resource `{pattern_text(kind, name, pattern)}`: \n "
                  + "\n".join("\t" + entry_text(*entry) for entry in acl) + " \n")
            filters += [DeleteAclsFilter(resource_type_filter=kind, resource_name_filter=name, pattern_type_filter=pattern,
                                         principal_filter=p, host_filter=h, operation=o, permission_type=perm)
                        for p, h, o, perm in acl]
        response = await admin.send(DeleteAclsRequest(filters=tuple(filters)), min_version=1)
        for result in response.filter_results:
            check(result.error_code, "Error while removing ACLs", result.error_message)
    for kind, name in wanted:
        await _print_current(admin, kind, name, pattern)
    return 0


async def describe(admin: Admin, kind: int, name: str | None, pattern: int, principal: str | None = None) -> dict:
    """(resource type, name, pattern type) -> [(principal, host, operation, permission)]."""
    response = await admin.send(DescribeAclsRequest(
        resource_type_filter=kind, resource_name_filter=name, pattern_type_filter=pattern,
        principal_filter=principal, host_filter=None, operation=AclOperation.ANY, permission_type=AclPermissionType.ANY,
    ), min_version=1)
    if response.error_code:
        raise failure(response.error_code, "DescribeAcls", response.error_message)
    return {
        (r.resource_type, r.resource_name, r.pattern_type): sorted(
            (a.principal, a.host, a.operation, a.permission_type) for a in r.acls
        )
        for r in response.resources
    }


async def _print_current(admin: Admin, kind: int, name: str, pattern: int) -> None:
    found = await describe(admin, kind, name, pattern)
    for (resource_type, resource_name, pattern_type), acl in sorted(found.items()):
        print(f"Current ACLs for resource `{pattern_text(resource_type, resource_name, pattern_type)}`: \n "
              + "\n".join("\t" + entry_text(*entry) for entry in acl) + " \n")


async def list_acls(admin: Admin, args) -> int:
    pattern = _pattern_type(args, adding=False)
    targets = resources(args) or [(ResourceType.ANY, None)]
    principals = args.principal or [None]
    for principal in principals:
        if principal is not None:
            print(f"ACLs for principal `{principal}`")
        for kind, name in targets:
            found = await describe(admin, kind, name, pattern, principal)
            for (resource_type, resource_name, pattern_type), acl in sorted(found.items()):
                print(f"Current ACLs for resource `{pattern_text(resource_type, resource_name, pattern_type)}`: \n "
                      + "\n".join("\t" + entry_text(*entry) for entry in acl) + " \n")
    return 0
