"""Topics as Kafka's admin APIs see them: validation, the topic store, and the partitions.

Every path that creates, grows, reconfigures or deletes a topic goes through here (CreateTopics,
auto-creation by Metadata, CreatePartitions, AlterConfigs, DeleteTopics), so Kafka's rules and
error messages live in one place.

Standalone, the topic store is the record and this broker serves every partition. In cluster
mode (`cluster_admin` set) the changes go to ZooKeeper through it, the controller decides where
partitions live, and `install`/`uninstall` keep the topics here in step with ZooKeeper's
(broker/cluster.py); partitions are served on the controller's LeaderAndIsr requests.
"""

import asyncio
import logging
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from protocol.errors import ErrorCode, KafkaError
from storage.errors import KafkaStorageError
from storage.log_config import LogConfig, validate_remote_storage, validate_topic_overrides
from storage.topic_partition import TopicPartition

from broker.replica_manager import ReplicaManager
from broker.replication_quotas import ReplicationQuotas
from broker.topic_store import TopicInfo, TopicStore

log = logging.getLogger(__name__)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
# How long an admin request waits for this broker's ZooKeeper watch to read a topic its metadata
# already has (TopicManager.catch_up): well within clients' request timeouts (30 s).
CATCH_UP_S = 10.0


def validate_topic_name(name: str) -> None:
    def invalid(reason: str) -> KafkaError:
        return KafkaError(reason, ErrorCode.invalid_topic_exception)

    if not name:
        raise invalid("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise invalid('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise invalid(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
            f"characters, topic name: {name}"
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise invalid(
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'"
        )


class ClusterTopicAdmin(Protocol):
    """Topic changes in cluster mode (broker/cluster_admin.py)."""

    async def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        assignments: Mapping[int, Sequence[int]],
        configs: Mapping[str, str],
    ) -> TopicInfo: ...

    async def delete(self, name: str) -> None: ...

    async def create_partitions(self, name: str, count: int, assignments: Sequence[Sequence[int]] | None) -> None: ...

    async def set_configs(self, name: str, configs: Mapping[str, str]) -> None: ...

    async def wait_for_topic(self, name: str) -> int: ...


def _collision_key(name: str) -> str:
    """Kafka's metric names turn '.' into '_', so two topics differing only there collide."""
    return name.replace(".", "_")


class TopicManager:
    def __init__(
        self,
        store: TopicStore,
        replica_manager: ReplicaManager,
        broker_settings: Mapping[str, str],
        broker_ids: Sequence[int],
        replication_quotas: ReplicationQuotas | None = None,
    ) -> None:
        self.store = store
        # Follows each topic's throttled replica lists (leader/follower.replication.throttled.replicas).
        self._replication_quotas = replication_quotas
        self.replica_manager = replica_manager
        self._broker_settings = broker_settings
        fixed_ids = list(broker_ids)
        self.live_brokers: Callable[[], Sequence[int]] = lambda: fixed_ids
        self.cluster_admin: ClusterTopicAdmin | None = None
        # Cluster mode: whether the controller's UpdateMetadata named the topic (catch_up).
        self.in_metadata: Callable[[str], bool] = lambda name: False
        # Cluster mode: the controller's topics whose deletion waits for their replicas.
        self.marked_for_deletion: Callable[[str], bool] = lambda name: False
        self.on_change: list[Callable[[], None]] = []
        # Told of partitions whose topic was deleted (standalone: here; cluster mode: by the
        # controller's UpdateMetadata): the group coordinator drops their committed offsets.
        self.on_partitions_deleted: list[Callable[[list[TopicPartition]], None]] = []
        # Told of each topic deleted here, once its partitions are gone (the remote log).
        self.on_delete: list[Callable[[TopicInfo], None]] = []
        self._log_configs: dict[str, LogConfig] = {}
        self._install_waiters: dict[str, list[asyncio.Future[None]]] = {}

    @property
    def topics(self) -> dict[str, TopicInfo]:
        return self.store.topics

    @property
    def live_broker_count(self) -> int:
        return len(self.live_brokers())

    @property
    def is_local(self) -> bool:
        """Standalone: this broker holds every partition of every topic."""
        return self.cluster_admin is None

    def log_config(self, topic: str) -> LogConfig:
        config = self._log_configs.get(topic)
        if config is None:
            info = self.store.topics.get(topic)
            overrides = info.configs if info else {}
            config = self._log_configs[topic] = LogConfig.resolve(overrides, self._broker_settings)
            if self._replication_quotas is not None and info is not None:
                self._replication_quotas.update_topic(topic, config)
        return config

    def open_partitions(self) -> None:
        """Serve every partition of every known topic (at start, after the logs are loaded)."""
        for info in self.store.topics.values():
            self._open(info, range(info.partitions), is_new=False)
        known = {tp for tp in self.replica_manager.partitions}
        log_manager = self.replica_manager.log_manager
        for tp in [tp for tp in log_manager.logs if tp not in known]:
            # A crash between saving a deletion and applying it leaves such a partition.
            aside = log_manager.set_aside(tp)
            log.warning("%s is on disk but belongs to no known topic; set aside as %s", tp, aside)

    def _open(self, info: TopicInfo, partitions: range, is_new: bool = True) -> None:
        config = self.log_config(info.name)
        for partition in partitions:
            self.replica_manager.add_partition(TopicPartition(info.name, partition), config, is_new)

    # ----------------------------------------------------------------------------- creation

    def check_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Mapping[int, Sequence[int]],
        configs: Mapping[str, str],
        default_partitions: int,
        default_replication_factor: int,
    ) -> tuple[int, int]:
        """Kafka's checks on a new topic; returns its (partition count, replication factor)."""
        validate_topic_name(name)
        if self.marked_for_deletion(name):
            raise KafkaError(f"Topic '{name}' is marked for deletion.", ErrorCode.topic_already_exists)
        if name in self.store.topics:
            raise KafkaError(f"Topic '{name}' already exists.", ErrorCode.topic_already_exists)
        self._check_collision(name)
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                raise KafkaError(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                    ErrorCode.invalid_request,
                )
            num_partitions, replication_factor = self._check_assignments(assignments)
        num_partitions = default_partitions if num_partitions == -1 else num_partitions
        replication_factor = (
            default_replication_factor if replication_factor == -1 else replication_factor
        )
        if num_partitions <= 0:
            raise KafkaError("Number of partitions must be larger than 0.", ErrorCode.invalid_partitions)
        self._check_replication_factor(replication_factor)
        validate_topic_overrides(configs)
        self.check_remote_storage(configs)
        return num_partitions, replication_factor

    @property
    def remote_storage_system_enabled(self) -> bool:
        """remote.log.storage.system.enable (checked by BrokerConfig)."""
        return str(self._broker_settings.get("remote.log.storage.system.enable", "false")).strip().lower() == "true"

    def check_remote_storage(self, configs: Mapping[str, str | None], existing: Mapping[str, str] | None = None) -> None:
        """Kafka's checks of remote.storage.enable and the local retention (INVALID_CONFIG);
        `existing`: the overrides being replaced (remote storage cannot be turned off)."""
        validate_remote_storage(configs, self._broker_settings, self.remote_storage_system_enabled, existing)

    def _check_collision(self, name: str) -> None:
        key = _collision_key(name)
        for existing in self.store.topics:
            if _collision_key(existing) == key:
                raise KafkaError(
                    f"Topic '{name}' collides with existing topic: {existing}",
                    ErrorCode.invalid_topic_exception,
                )

    def _check_replication_factor(self, replication_factor: int) -> None:
        if replication_factor <= 0:
            raise KafkaError(
                "Replication factor must be larger than 0.", ErrorCode.invalid_replication_factor
            )
        if replication_factor > self.live_broker_count:
            raise KafkaError(
                f"Replication factor: {replication_factor} larger than available brokers: "
                f"{self.live_broker_count}.",
                ErrorCode.invalid_replication_factor,
            )

    def _check_assignments(self, assignments: Mapping[int, Sequence[int]]) -> tuple[int, int]:
        if sorted(assignments) != list(range(len(assignments))):
            raise KafkaError(
                "Partitions must be numbered consecutively from 0.",
                ErrorCode.invalid_replica_assignment,
            )
        for partition, replicas in assignments.items():
            self._check_replicas(partition, replicas)
        sizes = {len(replicas) for replicas in assignments.values()}
        if len(sizes) != 1:
            raise KafkaError(
                "All partitions must have the same number of replicas.",
                ErrorCode.invalid_replica_assignment,
            )
        return len(assignments), sizes.pop()

    def _check_replicas(self, partition: int, replicas: Sequence[int]) -> None:
        def invalid(reason: str) -> KafkaError:
            return KafkaError(reason, ErrorCode.invalid_replica_assignment)

        if not replicas:
            raise invalid(f"Partition {partition} has no replicas.")
        if len(set(replicas)) != len(replicas):
            raise invalid(f"Duplicate brokers in the assignment of partition {partition}.")
        unknown = set(replicas) - set(self.live_brokers())
        if unknown:
            raise invalid(f"Unknown broker(s) {sorted(unknown)} for partition {partition}.")

    async def create(
        self,
        name: str,
        num_partitions: int,
        configs: Mapping[str, str],
        replication_factor: int = 1,
        assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Create a checked topic (`check_new_topic`); in cluster mode return once every
        partition has a leader in this broker's metadata."""
        if self.cluster_admin is not None:
            return await self.cluster_admin.create(name, num_partitions, replication_factor, assignments or {}, configs)
        if not self.replica_manager.log_manager.has_online_dirs:
            raise KafkaStorageError(f"cannot create {name}: no log directory is online")
        info = TopicInfo(name, uuid.uuid4(), num_partitions, dict(configs))
        self.store.topics[name] = info
        await self._save_then_apply(lambda: self._open(info, range(num_partitions)))
        log.info("created topic %s with %d partition(s)", name, num_partitions)
        return info

    async def _save_then_apply(self, apply: Callable[[], None]) -> None:
        """Persist the store, then make the change live. Shielded: a client that disconnects
        mid-request cancels its handler, and a change saved but never applied would be half done
        until a restart (a topic without leaders, partitions counted but not served)."""

        async def save_then_apply() -> None:
            await self.store.save()
            apply()
            self._changed()

        await asyncio.shield(save_then_apply())

    # ------------------------------------------------------------------------ other changes

    def get(self, name: str) -> TopicInfo:
        info = self.store.topics.get(name)
        if info is None:
            raise KafkaError(
                f"This server does not host this topic: {name}",
                ErrorCode.unknown_topic_or_partition,
            )
        return info

    async def catch_up(self, name: str) -> None:
        """Cluster mode: wait, at most CATCH_UP_S, for this broker's ZooKeeper watch to install
        a topic its metadata already has (`in_metadata`: the controller's UpdateMetadata named
        it). The watch's read can lag behind the controller's word, as across a ZooKeeper
        reconnect, and the admin requests that read a topic's configs or id from here (Kafka's
        read ZooKeeper) would answer UNKNOWN_TOPIC_OR_PARTITION for a topic just created."""
        if name in self.store.topics or not self.in_metadata(name):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._install_waiters.setdefault(name, [])
        waiters.append(waiter)
        try:
            await asyncio.wait((waiter,), timeout=CATCH_UP_S)
        finally:
            waiter.cancel()
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters and self._install_waiters.get(name) is waiters:
                del self._install_waiters[name]

    def find_by_id(self, topic_id: uuid.UUID) -> TopicInfo:
        for info in self.store.topics.values():
            if info.topic_id == topic_id:
                return info
        raise KafkaError(f"Unknown topic id {topic_id}", ErrorCode.unknown_topic_id)

    def _changed(self) -> None:
        for listener in self.on_change:
            listener()

    def partitions_deleted(self, partitions: list[TopicPartition]) -> None:
        if partitions:
            for listener in self.on_partitions_deleted:
                listener(partitions)

    async def delete(self, name: str) -> None:
        if self.cluster_admin is not None:
            self.get(name)
            await self.cluster_admin.delete(name)
            return
        info = self.get(name)
        del self.store.topics[name]
        self._forget_config(name)

        def remove_partitions() -> None:
            for partition in range(info.partitions):
                self.replica_manager.remove_partition(TopicPartition(name, partition))

        await self._save_then_apply(remove_partitions)
        self.partitions_deleted([TopicPartition(name, partition) for partition in range(info.partitions)])
        for listener in self.on_delete:
            listener(info)
        log.info("deleted topic %s", name)

    def check_new_partition_count(
        self, name: str, count: int, assignments: Sequence[Sequence[int]] | None
    ) -> TopicInfo:
        info = self.get(name)
        if count <= info.partitions:
            raise KafkaError(
                f"Topic currently has {info.partitions} partitions, which is higher than or "
                f"equal to the requested {count}.",
                ErrorCode.invalid_partitions,
            )
        if assignments is not None:
            if len(assignments) != count - info.partitions:
                raise KafkaError(
                    f"Increasing the number of partitions by {count - info.partitions} but "
                    f"{len(assignments)} assignments provided.",
                    ErrorCode.invalid_replica_assignment,
                )
            for partition, replicas in enumerate(assignments, start=info.partitions):
                self._check_replicas(partition, replicas)
        return info

    async def create_partitions(self, name: str, count: int, assignments: Sequence[Sequence[int]] | None = None) -> None:
        if self.cluster_admin is not None:
            await self.cluster_admin.create_partitions(name, count, assignments)
            return
        info = self.get(name)
        added = range(info.partitions, count)
        info.partitions = count
        await self._save_then_apply(lambda: self._open(info, added))

    async def set_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace the topic's overrides (validated by the caller) and apply them to its logs."""
        info = self.get(name)
        if self.cluster_admin is not None:
            await self.cluster_admin.set_configs(name, configs)
        else:
            info.configs = dict(configs)
            await self._save_then_apply(lambda: self._apply_configs(info))

    def set_broker_settings(self, settings: Mapping[str, str]) -> None:
        """The broker's settings changed at run time (dynamic broker configs): topics without
        an override of a changed default get it, their open logs at once."""
        if dict(settings) == dict(self._broker_settings):
            return
        self._broker_settings = settings
        for info in list(self.store.topics.values()):
            self._apply_configs(info)

    def _apply_configs(self, info: TopicInfo) -> None:
        self._log_configs.pop(info.name, None)
        config = self.log_config(info.name)
        for partition in range(info.partitions):
            self.replica_manager.update_log_config(TopicPartition(info.name, partition), config)

    # --------------------------------------------------------------------- cluster mode

    async def wait_for_topic(self, name: str) -> int:
        """The partition count of `name` once this broker's metadata has its partitions: in
        cluster mode a topic created elsewhere (or by a racing creation that won) is served only
        then; standalone a topic is served as soon as it exists."""
        if self.cluster_admin is None:
            return self.get(name).partitions
        return await self.cluster_admin.wait_for_topic(name)

    def install(self, info: TopicInfo) -> None:
        """Cluster mode: take a topic as ZooKeeper has it (new, grown or reconfigured)."""
        previous = self.store.topics.get(info.name)
        self.store.topics[info.name] = info
        if previous is None or previous.configs != info.configs:
            self._apply_configs(info)
        for waiter in self._install_waiters.pop(info.name, ()):
            if not waiter.done():
                waiter.set_result(None)

    def uninstall(self, name: str) -> None:
        """Cluster mode: the topic is gone from ZooKeeper (its replicas are stopped and deleted
        by the controller's StopReplica)."""
        self.store.topics.pop(name, None)
        self._forget_config(name)

    def _forget_config(self, name: str) -> None:
        self._log_configs.pop(name, None)
        if self._replication_quotas is not None:
            self._replication_quotas.remove_topic(name)
