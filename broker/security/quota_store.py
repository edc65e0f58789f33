"""Where client quotas are kept, and the checks of AlterClientQuotas (Kafka's ZkAdminManager).

Entities are named by their path under /config, as Kafka's AdminZkClient names them: users/<u>,
clients/<c>, users/<u>/clients/<c>, each name sanitized (Kafka's Sanitizer: URL-encoded UTF-8,
%20 for a space, %2A for '*') and <default> for the default entity. An entity's config is a
{key: string} map, as Kafka stores it (LONG quotas as integers, DOUBLE ones as decimals).

- Cluster mode (`ZkQuotaStore`): /config/<entity path> holds {"version":1,"config":{...}},
  and each change is followed by a /config/changes/config_change_<seq> notification naming the
  entity path, so every broker re-reads it (broker/cluster.py). /config/users/<u> also holds the
  user's SCRAM credentials: a quota change keeps every other key of the node. A node left with
  no config and no children is deleted, with its empty parents (AdminZkClient's
  tryCleanQuotaNodes).
- Standalone (`FileQuotaStore`): logway-client-quotas.json in every log dir, {entity path:
  config}, with a generation that grows with each change; at start the readable copy with the
  highest generation wins (as broker/topic_store.py).
"""

import json
import logging
from collections.abc import Iterable, Mapping

from protocol.errors import ErrorCode, KafkaError
from replication import znodes
from replication.zk import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, ZkClient
from storage.mirrored_document import EntityConfigs

from broker.security.quotas import DEFAULT, QUOTA_KEYS, ClientQuotas, Name, QuotaEntity

log = logging.getLogger(__name__)

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
DEFAULT_NAME = "<default>"  # Kafka's ZooKeeperInternals.DEFAULT_STRING

QUOTAS_FILE = "logway-client-quotas.json"
_CAS_ATTEMPTS = 5


def _path_part(name: Name) -> str:
    return DEFAULT_NAME if name is DEFAULT else znodes.sanitize(name)


def _name_of(part: str) -> Name:
    return DEFAULT if part == DEFAULT_NAME else znodes.desanitize(part)


def entity_path(entity: QuotaEntity) -> str:
    """users/<u>, clients/<c> or users/<u>/clients/<c>: where the entity lives under /config."""
    if entity.user is not None and entity.client_id is not None:
        return f"users/{_path_part(entity.user)}/clients/{_path_part(entity.client_id)}"
    if entity.user is not None:
        return f"users/{_path_part(entity.user)}"
    return f"clients/{_path_part(entity.client_id)}"


def parse_entity_path(path: str) -> QuotaEntity | None:
    """The entity of a path under /config, or None for one that is not a quota entity."""
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "users":
        return QuotaEntity(_name_of(parts[1]), None)
    if len(parts) == 2 and parts[0] == "clients":
        return QuotaEntity(None, _name_of(parts[1]))
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return QuotaEntity(_name_of(parts[1]), _name_of(parts[3]))
    return None


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of a stored config, as numbers (other keys: SCRAM credentials)."""
    values = {}
    for key, text in config.items():
        if key in QUOTA_KEYS:
            try:
                values[key] = float(text)
            except ValueError:
                log.warning("ignoring the unreadable client quota %s=%r", key, text)
    return values


# ---------------------------------------------------------------------------------- checks


def _invalid(message: str) -> KafkaError:
    return KafkaError(message, ErrorCode.invalid_request)


def entity_of(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The entity an AlterClientQuotas entry names ((entity type, name or None for the default)
    pairs), or INVALID_REQUEST with Kafka's message."""
    found: dict[str, Name] = {}
    for entity_type, name in parts:
        if entity_type in found:
            raise _invalid(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise _invalid(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise _invalid(f"Empty {entity_type} not supported")
        found[entity_type] = DEFAULT if name is None else name
    if not found:
        raise _invalid("Invalid empty client quota entity")
    if IP in found:
        if len(found) > 1:
            raise _invalid("Invalid quota entity combination, IP entity should not be used with user/client ID entity.")
        raise _invalid("logway does not enforce IP quotas (connection_creation_rate)")
    return QuotaEntity(found.get(USER), found.get(CLIENT_ID))


def altered(config: Mapping[str, str], ops: Iterable[tuple[str, float, bool]]) -> dict[str, str]:
    """`config` with the (key, value, remove) operations applied, or INVALID_REQUEST with
    Kafka's message for an unknown key or a bad value. Removing a key that is not set is no
    error, as in Kafka."""
    result = dict(config)
    for key, value, remove in ops:
        if remove:
            result.pop(key, None)
            continue
        key_type = QUOTA_KEYS.get(key)
        if key_type is None:
            raise _invalid(f"Invalid configuration key {key}")
        if not value > 0:  # NaN too
            raise _invalid(f"Quota {key} must be greater than 0")
        if key_type == "DOUBLE":
            result[key] = repr(float(value))
            continue
        epsilon = 1e-6
        integral = int(value + epsilon)
        if abs(integral - value) > epsilon:
            raise _invalid(f"Configuration {key} must be a {key_type} value")
        result[key] = str(integral)
    return result


# ---------------------------------------------------------------------------------- stores


class FileQuotaStore:
    """Standalone: the quotas in a file in every log dir (storage/mirrored_document.py)."""

    def __init__(self, log_dirs: list[str]) -> None:
        self._file = EntityConfigs(log_dirs, QUOTAS_FILE, "the client quotas")

    async def load(self) -> dict[QuotaEntity, dict[str, str]]:
        return {
            entity: config
            for path, config in (await self._file.load()).items()
            if (entity := parse_entity_path(path)) is not None
        }

    async def read(self, entity: QuotaEntity) -> dict[str, str]:
        return self._file.get(entity_path(entity))

    async def write(self, entity: QuotaEntity, config: Mapping[str, str]) -> None:
        await self._file.write(entity_path(entity), config)

    def close(self) -> None:
        self._file.close()


class ZkQuotaStore:
    """Cluster mode: the quotas in ZooKeeper under /config, as Kafka's AdminZkClient keeps them."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    async def load(self) -> dict[QuotaEntity, dict[str, str]]:
        """Every user, client-id and user/client-id config."""
        configs: dict[QuotaEntity, dict[str, str]] = {}
        for user in await self._zk.children_or_empty("/config/users"):
            await self._read_into(configs, f"users/{user}")
            for client in await self._zk.children_or_empty(f"/config/users/{user}/clients"):
                await self._read_into(configs, f"users/{user}/clients/{client}")
        for client in await self._zk.children_or_empty("/config/clients"):
            await self._read_into(configs, f"clients/{client}")
        return configs

    async def _read_into(self, configs: dict[QuotaEntity, dict[str, str]], path: str) -> None:
        entity = parse_entity_path(path)
        if entity is not None:
            configs[entity] = await self.read(entity)

    async def read(self, entity: QuotaEntity) -> dict[str, str]:
        found = await self._zk.get_or_none(f"/config/{entity_path(entity)}")
        return _decode(found[0]) if found else {}

    async def replace(self, entity: QuotaEntity, change) -> dict[str, str]:
        """Apply `change` (config -> new config) to the entity's node with compare-and-set, so a
        concurrent write of other keys (SCRAM credentials) is not lost; then notify every
        broker. Returns the new config."""
        path = f"/config/{entity_path(entity)}"
        for _ in range(_CAS_ATTEMPTS):
            found = await self._zk.get_or_none(path)
            config = change(_decode(found[0]) if found else {})
            try:
                if found is None:
                    if config:
                        await self._zk.create(path, _encode(config), makepath=True)
                elif config or not await self._clean(entity, found[1].version):
                    await self._zk.set(path, _encode(config), found[1].version)
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
        else:
            raise KafkaError(f"The config of {entity} kept changing; try again.", ErrorCode.unknown_server_error)
        await self._zk.create(
            f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
            json.dumps({"version": 2, "entity_path": entity_path(entity)}).encode(),
            sequence=True,
        )
        return config

    async def _clean(self, entity: QuotaEntity, version: int) -> bool:
        """Delete the empty node of `entity` if it has no children, and its parents left empty
        (users/<u>/clients, users/<u> without config); False when it has children."""
        path = f"/config/{entity_path(entity)}"
        if await self._zk.children_or_empty(path):
            return False
        try:
            await self._zk.delete(path, version)
        except NotEmptyError:
            return False
        if entity.user is not None and entity.client_id is not None:
            user_path = f"/config/users/{_path_part(entity.user)}"
            clients_path = f"{user_path}/clients"
            try:
                if not await self._zk.children_or_empty(clients_path):
                    await self._zk.delete(clients_path)
                    user = await self._zk.get_or_none(user_path)
                    if user is not None and not _decode(user[0]) and not await self._zk.children_or_empty(user_path):
                        await self._zk.delete(user_path, user[1].version)
            except (NoNodeError, BadVersionError, NotEmptyError):
                pass  # written meanwhile (a new client, SCRAM credentials): it stays
        return True


def _encode(config: Mapping[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": dict(config)}).encode()


def _decode(data: bytes) -> dict[str, str]:
    if not data:
        return {}
    document = json.loads(data)
    return {k: str(v) for k, v in ((document or {}).get("config") or {}).items()}


class QuotaConfigs:
    """The broker's client quotas: read from their store into the ClientQuotas that enforce
    them, and changed through it (AlterClientQuotas)."""

    def __init__(self, quotas: ClientQuotas, store: FileQuotaStore | ZkQuotaStore) -> None:
        self.quotas = quotas
        self.store = store

    async def load(self) -> None:
        """Read every entity's quotas (at start, and after a new ZooKeeper session)."""
        configs = await self.store.load()
        self.quotas.replace_all({entity: quota_values(config) for entity, config in configs.items()})

    async def reload(self, path: str) -> None:
        """Re-read one entity (users/<u>, clients/<c>, users/<u>/clients/<c>) that a change
        notification named."""
        entity = parse_entity_path(path)
        if entity is not None:
            self.quotas.set_entity(entity, quota_values(await self.store.read(entity)))

    async def alter(self, entity: QuotaEntity, ops: list[tuple[str, float, bool]], validate_only: bool) -> None:
        """Apply the (key, value, remove) operations to the entity's quotas; INVALID_REQUEST for
        a bad one, in which case nothing changes."""
        if validate_only:
            altered(await self.store.read(entity), ops)
            return
        if isinstance(self.store, ZkQuotaStore):
            config = await self.store.replace(entity, lambda current: altered(current, ops))
        else:
            config = altered(await self.store.read(entity), ops)
            await self.store.write(entity, config)
        self.quotas.set_entity(entity, quota_values(config))

    def close(self) -> None:
        if isinstance(self.store, FileQuotaStore):
            self.store.close()
