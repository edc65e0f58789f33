"""Dynamic broker configs: keys changed at run time through IncrementalAlterConfigs and
AlterConfigs on BROKER resources, as Kafka's DynamicBrokerConfig (ZooKeeper mode).

Two levels over server.properties, highest precedence first: this broker's own ("1", Kafka's
DYNAMIC_BROKER_CONFIG), the cluster-wide default ("", DYNAMIC_DEFAULT_BROKER_CONFIG), then
server.properties (STATIC_BROKER_CONFIG) and Kafka's defaults (DEFAULT_CONFIG). The config in
effect is a BrokerConfig of all of them merged, checked as at start; the broker swaps it in
(Broker.reconfigure) and applies what changed.

Keys that can change (logway applies each at once; `reconfigurable`):
- the broker-wide defaults of topic configs: log.retention.*, log.segment.bytes, log.roll.*,
  log.cleanup.policy, log.cleaner.min.cleanable.ratio and the other log.cleaner.* topic
  defaults, message.max.bytes, compression.type, min.insync.replicas, unclean.leader.election.enable
  and the rest of storage.log_config's broker synonyms: every log of a topic without its own
  override takes the new value (broker/topic_manager.py);
- log.cleaner.dedupe.buffer.size, log.cleaner.io.buffer.size, log.cleaner.backoff.ms: for the
  cleanings started, and the waits begun, from then on;
- max.connections, max.connections.per.ip, max.connections.per.ip.overrides: for connections
  accepted from then on;
- this broker's keystore and truststore (ssl.keystore.*, ssl.truststore.*, ssl.key.password,
  plain or listener.name.<l>.*), per broker only as in Kafka: SSL listeners get new contexts.
Any other key, Kafka's static ones and the dynamic ones logway cannot apply while running
(listeners, num.*.threads, log.cleaner.threads, num.replica.fetchers ...), is
INVALID_CONFIG "Cannot update these configs dynamically: Set(...)", as Kafka answers for its
static keys.

Where they are kept:
- cluster mode (`ZkBrokerConfigStore`): /config/brokers/<id> and /config/brokers/<default>
  ({"version": 1, "config": {...}}), each write followed by a /config/changes notification
  naming brokers/<id> or brokers/<default>, which every broker follows (broker/cluster.py) and
  answers by reading the node again (`reload`).
- standalone (`FileBrokerConfigStore`): logway-broker-configs.json in every log dir
  (storage/mirrored_document.py), {"entities": {"<default>": {...}, "<id>": {...}}}.
Both are read at start before the logs load, so the values are in effect again after a restart.
Passwords (keystore passwords, inline keys) are kept as given: Kafka encrypts them with
password.encoder.secret, logway has no such key, so keep the log dirs and ZooKeeper private.
"""

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from protocol.config_types import ConfigEntry, ConfigSource, ConfigType
from protocol.errors import ErrorCode, KafkaError
from replication import znodes
from replication.zk import NoNodeError, NodeExistsError, ZkClient
from storage.log_config import TOPIC_CONFIGS, InvalidConfigError
from storage.mirrored_document import EntityConfigs

from broker.config import BROKER_CONFIGS, BrokerConfig, ConfigError
from broker.security import tls

log = logging.getLogger(__name__)

DEFAULT = znodes.BROKER_CONFIG_DEFAULT
CONFIG_FILE = "logway-broker-configs.json"

TOPIC_DEFAULT_KEYS = frozenset(
    synonym.name for definition in TOPIC_CONFIGS.values() for synonym in definition.synonyms
    if synonym.name in BROKER_CONFIGS
)
CONNECTION_KEYS = frozenset({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"})
CLEANER_KEYS = frozenset({"log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size", "log.cleaner.backoff.ms"})


def is_tls_key(key: str) -> bool:
    """A keystore or truststore key, plain or for one listener (listener.name.<l>.<key>)."""
    return _base_key(key) in tls.RECONFIGURABLE


def _base_key(key: str) -> str:
    """listener.name.<l>.<key> -> <key>."""
    return key[len("listener.name."):].partition(".")[2] if key.startswith("listener.name.") else key


def reconfigurable(key: str) -> bool:
    return key in TOPIC_DEFAULT_KEYS or key in CONNECTION_KEYS or key in CLEANER_KEYS or is_tls_key(key)


def _scala_set(names) -> str:
    return "Set(" + ", ".join(sorted(names)) + ")"


class Reconfigurable(Protocol):
    """What the broker offers: take a new config in effect (validate_only: only check it)."""

    def reconfigure(self, config: BrokerConfig, validate_only: bool) -> None: ...


class FileBrokerConfigStore(EntityConfigs):
    """Standalone: every entity's dynamic config in a file in every log dir."""

    def __init__(self, log_dirs: list[str]) -> None:
        super().__init__(log_dirs, CONFIG_FILE, "the dynamic broker configs")

    async def read_all(self) -> dict[str, dict[str, str]]:
        return await self.load()

    async def read(self, entity: str) -> dict[str, str]:
        return self.get(entity)


class ZkBrokerConfigStore:
    """Cluster mode: /config/brokers/<entity>, as Kafka's AdminZkClient.changeBrokerConfig."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    async def read_all(self) -> dict[str, dict[str, str]]:
        return {entity: await self.read(entity) for entity in await self._zk.children_or_empty("/config/brokers")}

    async def read(self, entity: str) -> dict[str, str]:
        found = await self._zk.get_or_none(znodes.broker_config_path(entity))
        return znodes.decode_topic_config(found[0]) if found and found[0] else {}

    async def write(self, entity: str, config: Mapping[str, str]) -> None:
        path = znodes.broker_config_path(entity)
        data = znodes.encode_topic_config(config)
        try:
            await self._zk.set(path, data)
        except NoNodeError:
            try:
                await self._zk.create(path, data, makepath=True)
            except NodeExistsError:
                await self._zk.set(path, data)
        await self._zk.create(
            f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
            znodes.encode_broker_config_change(entity),
            sequence=True,
        )

    def close(self) -> None:
        pass


class DynamicBrokerConfig:
    """This broker's layers of configuration and the config in effect."""

    def __init__(
        self,
        static: BrokerConfig,
        broker_id: int,
        broker: Reconfigurable,
        store: FileBrokerConfigStore | ZkBrokerConfigStore,
    ) -> None:
        self.static = static
        self.broker_id = broker_id
        self._broker = broker
        self.store = store
        self.default: dict[str, str] = {}  # the cluster-wide default
        self.own: dict[str, str] = {}  # this broker's

    # ------------------------------------------------------------------ reading

    async def load(self) -> None:
        """Read both levels and put them in effect (at start, before the logs load, and after
        a new ZooKeeper session). A stored value the config no longer accepts is logged and
        left out, so that the broker still starts."""
        stored = await self.store.read_all()
        self._install(stored.get(DEFAULT, {}), stored.get(str(self.broker_id), {}))

    async def reload(self, entity: str) -> None:
        """A change notification named brokers/<entity>: read it again if it is ours."""
        if entity == DEFAULT:
            self._install(await self.store.read(DEFAULT), self.own)
        elif entity == str(self.broker_id):
            self._install(self.default, await self.store.read(entity))

    def _install(self, default: dict[str, str], own: dict[str, str], force: bool = False) -> None:
        """Put the levels in effect; unless `force`d, only when they changed (a keystore
        file replaced in place is read again when its location is set again, as in Kafka)."""
        if not force and (default, own) == (self.default, self.own):
            return
        try:
            config = self._effective(default, own)
            self._broker.reconfigure(config, validate_only=False)
        except (ConfigError, KafkaError) as exc:
            log.error(
                "ignoring dynamic broker configs %s (this broker) and %s (default): %s",
                _loggable(own), _loggable(default), exc,
            )
            return
        self.default, self.own = dict(default), dict(own)
        log.info("dynamic broker configs in effect: %s (this broker), %s (default)", _loggable(own), _loggable(default))

    def _effective(self, default: Mapping[str, str], own: Mapping[str, str]) -> BrokerConfig:
        return BrokerConfig({**self.static.explicit_settings, **default, **own})

    # ------------------------------------------------------------------ DescribeConfigs

    def describe(self, entity: str, config: BrokerConfig, include_synonyms: bool) -> list[ConfigEntry]:
        """Every key for this broker (entity = its id), with its source and synonyms; for the
        cluster default (entity = DEFAULT) only the keys it sets, as Kafka."""
        layers = (
            (self.own, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static.explicit_settings, ConfigSource.STATIC_BROKER_CONFIG),
        )
        entries = config.describe(include_synonyms=True, layers=layers)
        result = []
        for entry in entries:
            synonyms = entry.synonyms
            if entity == DEFAULT:
                if entry.name not in self.default:
                    continue
                synonyms = tuple(s for s in synonyms if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
                value = None if entry.is_sensitive else self.default[entry.name]
                entry = dataclasses.replace(entry, value=value, source=ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            result.append(
                dataclasses.replace(entry, read_only=not reconfigurable(entry.name), synonyms=synonyms if include_synonyms else ())
            )
        return result

    def sources(self) -> dict[str, ConfigSource]:
        """The source of each key set dynamically, for the broker synonyms of topic configs."""
        return {
            **{key: ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG for key in self.default},
            **{key: ConfigSource.DYNAMIC_BROKER_CONFIG for key in self.own},
        }

    # ------------------------------------------------------------------ changes

    async def alter(
        self,
        entity: str,
        change: Callable[[dict[str, str]], dict[str, str]],
        resource_name: str,
        validate_only: bool,
    ) -> None:
        """Give `entity` (DEFAULT or this broker's id) the config `change` makes of its current
        one: checked as Kafka checks it, stored, then in effect here (other brokers follow the
        store's notification). KafkaError (INVALID_CONFIG) when refused; nothing changes then."""
        current = self.default if entity == DEFAULT else self.own
        new = {key: value for key, value in change(dict(current)).items() if value is not None}
        touched = {key for key in set(current) | set(new) if current.get(key) != new.get(key)}
        _check_keys(touched, entity == DEFAULT, resource_name)
        default, own = (new, self.own) if entity == DEFAULT else (self.default, new)
        try:
            config = self._effective(default, own)
            self._broker.reconfigure(config, validate_only=True)
        except ConfigError as exc:
            raise InvalidConfigError(_invalid(resource_name, str(exc))) from None
        if validate_only:
            return
        await self.store.write(entity, new)
        log.info("Updating %s with new configuration : %s", "brokers" if entity == DEFAULT else f"broker {entity}", _loggable(new))
        # The other level as it is now: a notification may have changed it during the write.
        if entity == DEFAULT:
            self._install(new, self.own, force=True)
        else:
            self._install(self.default, new, force=True)

    def close(self) -> None:
        self.store.close()


def _check_keys(keys: set[str], cluster_default: bool, resource_name: str) -> None:
    static = {key for key in keys if not reconfigurable(key)}
    if static:
        raise InvalidConfigError(_invalid(resource_name, f"Cannot update these configs dynamically: {_scala_set(static)}"))
    if cluster_default:
        per_broker = {key for key in keys if is_tls_key(key)}
        if per_broker:
            raise InvalidConfigError(
                _invalid(
                    resource_name,
                    "Cannot update these configs at default cluster level, broker id must be specified: "
                    + _scala_set(per_broker),
                )
            )


def _invalid(resource_name: str, message: str) -> str:
    return f"Invalid config value for resource ConfigResource(type=BROKER, name='{resource_name}'): {message}"


def _loggable(config: Mapping[str, str]) -> dict[str, str]:
    """Passwords hidden, as Kafka logs them."""
    return {key: "[hidden]" if _is_password(key) else value for key, value in config.items()}


def _is_password(key: str) -> bool:
    definition = BROKER_CONFIGS.get(_base_key(key))
    return definition is not None and definition.type is ConfigType.PASSWORD
