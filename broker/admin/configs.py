"""`logway-admin configs`: kafka-configs.sh's flags and output.

    --describe|--alter --entity-type topics|brokers|broker-loggers|users|clients
               (--entity-name NAME | --entity-default)     or the shortcuts
               --topic T, --broker ID, --broker-defaults, --broker-logger ID,
               --user U, --user-defaults, --client C, --client-defaults
    --alter --add-config 'k1=v1,k2=[a,b]' --add-config-file F --delete-config k1,k2
    --describe --all        (every config of a topic or broker, not only the dynamic ones)

Topics, brokers and broker loggers are DescribeConfigs / IncrementalAlterConfigs resources
(SET and DELETE operations); a broker resource goes to that broker, the default ("" via
--entity-default) to any. describe prints, as Kafka's ConfigCommand:

    Dynamic configs for topic orders are:
      retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, ...}

Users and clients are quotas (DescribeClientQuotas / AlterClientQuotas; users and clients may be
given together for a user's client) and, for users, SCRAM credentials
(DescribeUserScramCredentials / AlterUserScramCredentials, the salted password computed here
as Kafka's tool does: --add-config 'SCRAM-SHA-256=[iterations=8192,password=secret]').

Kafka 3.9's tool alters a broker's configs with the legacy AlterConfigs (it sends every dynamic
config again); this one uses IncrementalAlterConfigs for brokers as for topics, which changes
only the keys named.
"""

import argparse
import os

from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest
from kio.schema.alter_client_quotas.v1.request import EntityData as AlterEntity
from kio.schema.alter_client_quotas.v1.request import EntryData as AlterEntry
from kio.schema.alter_client_quotas.v1.request import OpData
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)

from broker.admin.connection import Admin, AdminError, UsageError, check
from broker.config import parse_properties
from broker.security import scram
from protocol.api_keys import ApiKey

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE = 0, 1
SOURCES = {
    0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG",
}
ENTITY_TYPES = ("topics", "brokers", "broker-loggers", "users", "clients")
_RESOURCE_TYPES = {"topics": TOPIC, "brokers": BROKER, "broker-loggers": BROKER_LOGGER}
_DYNAMIC_SOURCE = {"topics": 1, "brokers": 2}
_QUOTA_ENTITY = {"users": "user", "clients": "client-id"}
_QUOTA_NAMES = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
DEFAULT_ITERATIONS = 4096


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true", help="List configs for the given entity.")
    actions.add_argument("--alter", action="store_true", help="Alter the configuration for the entity.")
    parser.add_argument("--entity-type", action="append", default=[], choices=ENTITY_TYPES)
    parser.add_argument("--entity-name", action="append", dest="entity_names", default=[])
    parser.add_argument("--entity-default", action="append_const", dest="entity_names", const="")
    for flag, entity_type in (("--topic", "topics"), ("--broker", "brokers"), ("--broker-logger", "broker-loggers"),
                              ("--user", "users"), ("--client", "clients")):
        parser.add_argument(flag, action=_Shortcut, entity_type=entity_type, metavar="NAME")
    for flag, entity_type in (("--broker-defaults", "brokers"), ("--user-defaults", "users"), ("--client-defaults", "clients")):
        parser.add_argument(flag, action=_Shortcut, entity_type=entity_type, nargs=0)
    parser.add_argument("--add-config", help="k1=v1,k2=[v1,v2,v2],k3=v3")
    parser.add_argument("--add-config-file", help="a properties file of configs to add")
    parser.add_argument("--delete-config", help="config keys to remove: k1,k2")
    parser.add_argument("--all", action="store_true", help="with --describe: all configs, not only the dynamic ones")


class _Shortcut(argparse.Action):
    """--topic T and the like: an entity type and name at once (nargs=0: the default entity)."""

    def __init__(self, option_strings, dest, entity_type: str, **kwargs) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.entity_type = entity_type

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        namespace.shortcuts = [*getattr(namespace, "shortcuts", []), (self.entity_type, values if values != [] else "")]


def entities(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """(entity type, name: "" the default, None all) pairs the flags name, in order."""
    shortcuts = getattr(args, "shortcuts", [])
    if shortcuts and (args.entity_type or args.entity_names):
        raise UsageError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    if shortcuts:
        return list(shortcuts)
    if not args.entity_type:
        raise UsageError("Must specify --entity-type or one of --topic, --broker, --user, --client ...")
    if len(args.entity_names) > len(args.entity_type):
        raise UsageError("More entity names specified than entity types")
    names = args.entity_names + [None] * (len(args.entity_type) - len(args.entity_names))
    return list(zip(args.entity_type, names))


async def run(args: argparse.Namespace, admin: Admin) -> int:
    targets = entities(args)
    types = [t for t, _ in targets]
    if len(targets) > 1 and sorted(types) != ["clients", "users"]:
        raise UsageError("Only 'users' and 'clients' entity types may be specified together")
    entity_type, name = targets[0]
    if args.describe:
        if entity_type in _RESOURCE_TYPES:
            await describe_resource(admin, entity_type, name, args.all)
        else:
            await describe_quotas(admin, targets)
        return 0
    if any(n is None for _, n in targets):
        raise UsageError(f"an entity name must be specified with --alter of {','.join(types)}")
    to_add = parse_add_config(args.add_config or "")
    if args.add_config_file:
        try:
            with open(args.add_config_file, encoding="utf-8") as file:
                to_add.update(parse_properties(file.read()))
        except OSError as exc:
            raise UsageError(f"cannot read {args.add_config_file}: {exc.strerror}") from None
    to_delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if not to_add and not to_delete:
        raise UsageError("At least one of --add-config, --add-config-file or --delete-config must be specified with --alter")
    if entity_type in _RESOURCE_TYPES:
        await alter_resource(admin, entity_type, name, to_add, to_delete)
    else:
        await alter_user_or_client(admin, targets, to_add, to_delete)
    if name:
        print(f"Completed updating config for {entity_type[:-1]} {name}.")
    else:
        print(f"Completed updating default config for {entity_type} in the cluster.")
    return 0


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's --add-config: k=v pairs by comma, a value in [...] keeping its commas."""
    configs: dict[str, str] = {}
    position = 0
    text = text.strip()
    while position < len(text):
        equals = text.find("=", position)
        if equals < 0:
            raise UsageError(f"Invalid --add-config {text!r}: expected k1=v1,k2=[v1,v2]")
        key = text[position:equals].strip()
        if text.startswith("[", equals + 1):
            end = text.find("]", equals)
            if end < 0:
                raise UsageError(f"Invalid --add-config {text!r}: unclosed [")
            value, position = text[equals + 2:end], end + 1
        else:
            end = text.find(",", equals)
            end = len(text) if end < 0 else end
            value, position = text[equals + 1:end], end
        if position < len(text) and text[position] == ",":
            position += 1
        if not key:
            raise UsageError(f"Invalid --add-config {text!r}: empty key")
        configs[key] = value.strip()
    return configs


async def describe_configs(admin: Admin, resources: list[tuple[int, str]], synonyms: bool = False, node: int | None = None):
    """(resource type, name) -> the DescribeConfigs entries, for resources on one broker."""
    request = DescribeConfigsRequest(
        resources=tuple(DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=None) for t, n in resources),
        include_synonyms=synonyms, include_documentation=False,
    )
    response = await admin.send(request, node=node)
    found = {}
    for result in response.results:
        check(result.error_code, f"DescribeConfigs of {result.resource_name}", result.error_message)
        found[(result.resource_type, result.resource_name)] = list(result.configs)
    return found


async def describe_resource(admin: Admin, entity_type: str, name: str | None, describe_all: bool) -> None:
    if name is None:
        if entity_type == "topics":
            names = sorted(t.name for t in (await admin.metadata(None)).topics)
        else:
            names = [str(b) for b in sorted(admin.broker_addresses)] + [""]
    else:
        names = [name]
    for entity in names:
        entries = await _resource_entries(admin, entity_type, entity, describe_all)
        if entity == "":
            print(f"Default configs for {entity_type} in the cluster are:")
        else:
            print(f"{'All' if describe_all else 'Dynamic'} configs for {entity_type[:-1]} {entity} are:")
        for line in entry_lines(entries):
            print(line)


async def _resource_entries(admin: Admin, entity_type: str, name: str, describe_all: bool):
    resource_type = _RESOURCE_TYPES[entity_type]
    node = _broker_node(entity_type, name)
    found = await describe_configs(admin, [(resource_type, name)], synonyms=True, node=node)
    entries = found[(resource_type, name)]
    if not describe_all:
        wanted = 3 if entity_type == "brokers" and name == "" else _DYNAMIC_SOURCE.get(entity_type)
        if wanted is not None:
            entries = [e for e in entries if e.config_source == wanted]
    return sorted(entries, key=lambda e: e.name)


def _broker_node(entity_type: str, name: str) -> int | None:
    if entity_type not in ("brokers", "broker-loggers") or name == "":
        return None
    try:
        return int(name)
    except ValueError:
        raise UsageError(f"The entity name for {entity_type} must be a valid integer broker id, found: {name}") from None


def entry_lines(entries) -> list[str]:
    lines = []
    for entry in entries:
        synonyms = ", ".join(f"{SOURCES.get(s.source, s.source)}:{s.name}={_value(s.value)}" for s in entry.synonyms)
        lines.append(f"  {entry.name}={_value(entry.value)} sensitive={str(entry.is_sensitive).lower()} synonyms={{{synonyms}}}")
    return lines


def _value(value: str | None) -> str:
    return "null" if value is None else value


async def alter_resource(admin: Admin, entity_type: str, name: str, to_add: dict[str, str], to_delete: list[str]) -> None:
    resource_type = _RESOURCE_TYPES[entity_type]
    node = _broker_node(entity_type, name)
    if to_delete and entity_type != "broker-loggers":
        current = {e.name for e in await _resource_entries(admin, entity_type, name, describe_all=False)}
        missing = [k for k in to_delete if k not in current]
        if missing:
            raise AdminError(f"Invalid config(s): {','.join(missing)}: INVALID_CONFIG")
    operations = tuple(AlterableConfig(name=k, config_operation=SET, value=v) for k, v in to_add.items()) + tuple(
        AlterableConfig(name=k, config_operation=DELETE, value=None) for k in to_delete
    )
    response = await admin.send(
        IncrementalAlterConfigsRequest(
            resources=(AlterConfigsResource(resource_type=resource_type, resource_name=name, configs=operations),),
            validate_only=False,
        ),
        node=node,
    )
    for result in response.responses:
        check(result.error_code, f"cannot alter the configs of {entity_type[:-1]} {name or '<default>'}", result.error_message)


def _components(targets: list[tuple[str, str | None]]):
    """DescribeClientQuotas components: match_type 0 a name, 1 the default, 2 any."""
    components = []
    for entity_type, name in targets:
        kind = _QUOTA_ENTITY[entity_type]
        if name is None:
            components.append(ComponentData(entity_type=kind, match_type=2, match=None))
        elif name == "":
            components.append(ComponentData(entity_type=kind, match_type=1, match=None))
        else:
            components.append(ComponentData(entity_type=kind, match_type=0, match=name))
    return tuple(components)


async def describe_quotas(admin: Admin, targets: list[tuple[str, str | None]]) -> None:
    response = await admin.send(DescribeClientQuotasRequest(components=_components(targets), strict=True))
    check(response.error_code, "DescribeClientQuotas", response.error_message)
    for line in quota_lines(response.entries or ()):
        print(line)
    types = [t for t, _ in targets]
    names = [n for _, n in targets]
    scram_served = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS in await admin.api_versions()
    if scram_served and "clients" not in types and "" not in names:
        users = tuple(UserName(name=n) for n in names if n is not None) or None
        scram_response = await admin.send(DescribeUserScramCredentialsRequest(users=users))
        if scram_response.error_code == 0:
            for result in scram_response.results:
                if result.error_code == 0:
                    infos = ", ".join(f"{_mechanism_name(i.mechanism)}=iterations={i.iterations}" for i in result.credential_infos)
                    print(f"SCRAM credential configs for user-principal '{result.user}' are {infos}")
                elif names != [None]:
                    print(f"Error retrieving SCRAM credential configs for user-principal '{result.user}': "
                          f"{result.error_message or ''}")


def quota_lines(entries) -> list[str]:
    lines = []
    for entry in entries:
        parts = []
        for kind in ("user", "client-id", "ip"):
            for entity in entry.entity:
                if entity.entity_type == kind:
                    label = _QUOTA_NAMES[kind]
                    parts.append(f"{label} '{entity.entity_name}'" if entity.entity_name is not None else f"the default {label}")
        values = ", ".join(f"{v.key}={float(v.value)!r}" for v in entry.values)
        lines.append(f"Quota configs for {', '.join(parts)} are {values}")
    return lines


def _mechanism_name(code: int) -> str:
    return next((name for name, c in SCRAM_MECHANISMS.items() if c == code), f"UNKNOWN({code})")


async def alter_user_or_client(admin: Admin, targets, to_add: dict[str, str], to_delete: list[str]) -> None:
    scram_add = {k: v for k, v in to_add.items() if k in SCRAM_MECHANISMS}
    scram_delete = [k for k in to_delete if k in SCRAM_MECHANISMS]
    quota_add = {k: v for k, v in to_add.items() if k not in SCRAM_MECHANISMS}
    quota_delete = [k for k in to_delete if k not in SCRAM_MECHANISMS]
    if scram_add or scram_delete:
        if len(targets) != 1 or targets[0][0] != "users":
            raise UsageError("Only quota configs can be added for 'clients' using --bootstrap-server")
        if targets[0][1] == "":
            raise UsageError("The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials using --bootstrap-server.")
        if quota_add or quota_delete:
            raise UsageError("Cannot alter both quota and SCRAM credential configs simultaneously for 'users' using --bootstrap-server.")
        await _alter_scram(admin, targets[0][1], scram_add, scram_delete)
        return
    ops = []
    for key, value in quota_add.items():
        try:
            ops.append(OpData(key=key, value=float(value), remove=False))
        except ValueError:
            raise UsageError(f"Cannot parse quota configuration value for {key}: {value}") from None
    ops += [OpData(key=key, value=0.0, remove=True) for key in quota_delete]
    entity = tuple(AlterEntity(entity_type=_QUOTA_ENTITY[t], entity_name=n or None) for t, n in targets)
    response = await admin.send(AlterClientQuotasRequest(entries=(AlterEntry(entity=entity, ops=tuple(ops)),), validate_only=False))
    for entry in response.entries:
        check(entry.error_code, "AlterClientQuotas", entry.error_message)


async def _alter_scram(admin: Admin, user: str, to_add: dict[str, str], to_delete: list[str]) -> None:
    upsertions = []
    for mechanism_name, spec in to_add.items():
        fields = dict(item.split("=", 1) for item in spec.split(",") if "=" in item)
        if "password" not in fields:
            raise UsageError(f"Invalid credential property {mechanism_name}={spec}")
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        if iterations < scram.MIN_ITERATIONS:
            raise UsageError(f"Iterations {iterations} is less than the minimum {scram.MIN_ITERATIONS} required for {mechanism_name}")
        salt = os.urandom(32)
        salted = scram.salted_password(scram.MECHANISMS[mechanism_name], fields["password"], salt, iterations)
        upsertions.append(ScramCredentialUpsertion(
            name=user, mechanism=SCRAM_MECHANISMS[mechanism_name], iterations=iterations, salt=salt, salted_password=salted
        ))
    deletions = tuple(ScramCredentialDeletion(name=user, mechanism=SCRAM_MECHANISMS[m]) for m in to_delete)
    response = await admin.send(AlterUserScramCredentialsRequest(deletions=deletions, upsertions=tuple(upsertions)))
    for result in response.results:
        check(result.error_code, f"cannot alter the SCRAM credentials of {result.user}", result.error_message)
