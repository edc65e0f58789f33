"""Topic changes in cluster mode, written to ZooKeeper as Kafka's AdminZkClient writes them.

- create: /config/topics/<t> (overrides) and /brokers/topics/<t> (replica assignment, topic id)
  in one transaction; the controller sees the new topic, writes the partition states and tells
  the replicas. Replicas are assigned by replication.assignment over the live brokers (with
  their racks) unless the request gives them.
- delete: /admin/delete_topics/<t>; the controller does the rest.
- create partitions: the topic znode with the new partitions' assignment (compare-and-set).
- configs: /config/topics/<t>, then a /config/changes/config_change_<seq> notification that
  every broker follows (broker/cluster.py).

`wait_for_topic` waits for a topic that someone else is creating (another broker's auto-creation
of an internal topic) to reach this broker's metadata cache.

Each call returns once the change has reached this broker's metadata cache, or raises
REQUEST_TIMED_OUT after `timeout_s` (the change still happens, as in Kafka). ZooKeeper failures
are UNKNOWN_SERVER_ERROR.
"""

import functools
import uuid
from collections.abc import Mapping, Sequence

from protocol.errors import ErrorCode, KafkaError
from replication import assignment, znodes
from replication.zk import BadVersionError, NodeExistsError, NoNodeError, Op, ZkClient, ZkError

from broker.metadata_cache import MetadataCache
from broker.topic_store import TopicInfo

_CAS_ATTEMPTS = 5


def _zookeeper_errors_answered(method):
    """A ZooKeeper failure (connection or session lost) is the client's UNKNOWN_SERVER_ERROR."""

    @functools.wraps(method)
    async def guarded(*args, **kwargs):
        try:
            return await method(*args, **kwargs)
        except ZkError as exc:
            raise KafkaError(f"ZooKeeper failed: {exc}", ErrorCode.unknown_server_error) from exc

    return guarded


class ZkTopicAdmin:
    def __init__(self, zk: ZkClient, cache: MetadataCache, timeout_s: float = 30) -> None:
        self._zk = zk
        self._cache = cache
        self._timeout_s = timeout_s

    def _live_brokers(self) -> dict[int, str | None]:
        return {broker_id: node.rack for broker_id, node in self._cache.brokers.items()}

    @_zookeeper_errors_answered
    async def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        assignments: Mapping[int, Sequence[int]],
        configs: Mapping[str, str],
    ) -> TopicInfo:
        if assignments:
            replicas = {p: tuple(r) for p, r in assignments.items()}
        else:
            try:
                replicas = assignment.assign_replicas(partitions, replication_factor, self._live_brokers())
            except KafkaError:
                # A broker whose view of the live brokers is short (just restarted) must not
                # answer an existing topic INVALID_REPLICATION_FACTOR.
                if await self._zk.exists(znodes.topic_path(name)) is not None:
                    raise KafkaError(f"Topic '{name}' already exists.", ErrorCode.topic_already_exists) from None
                raise
        topic_id = uuid.uuid4()
        try:
            await self._zk.multi([
                Op("create", znodes.topic_config_path(name), znodes.encode_topic_config(configs)),
                Op("create", znodes.topic_path(name), znodes.encode_topic(znodes.TopicAssignment(topic_id, replicas))),
            ])
        except NodeExistsError:
            raise KafkaError(f"Topic '{name}' already exists.", ErrorCode.topic_already_exists) from None
        await self._wait(lambda: self._has_leaders(name, len(replicas)), f"creating {name}")
        return TopicInfo(name, topic_id, len(replicas), dict(configs))

    async def wait_for_topic(self, name: str) -> int:
        """The partition count of `name` once its partitions are in this broker's metadata cache
        (the controller sends a new topic's partitions in one UpdateMetadata)."""
        await self._wait(lambda: self._cache.has_topic(name), f"{name} to reach the metadata")
        return len(self._cache.partitions(name))

    def _has_leaders(self, name: str, count: int) -> bool:
        known = self._cache.partitions(name)
        return len(known) >= count and all(info.leader >= 0 for info in known.values())

    @_zookeeper_errors_answered
    async def delete(self, name: str) -> None:
        if not self._cache.has_topic(name):
            # Gone from the metadata, its deletion perhaps still under way: unknown, as to
            # Kafka, which looks the name up in its metadata cache.
            raise KafkaError(f"This server does not host this topic: {name}", ErrorCode.unknown_topic_or_partition)
        try:
            await self._zk.create(znodes.delete_topic_path(name), b"", makepath=True)
        except NodeExistsError:
            pass
        await self._wait(lambda: not self._cache.has_topic(name), f"deleting {name}")

    @_zookeeper_errors_answered
    async def create_partitions(self, name: str, count: int, assignments: Sequence[Sequence[int]] | None) -> None:
        for _ in range(_CAS_ATTEMPTS):
            try:
                data, stat = await self._zk.get(znodes.topic_path(name))
            except NoNodeError:
                raise KafkaError(f"Topic {name} does not exist.", ErrorCode.unknown_topic_or_partition) from None
            current = znodes.decode_topic(data)
            first = len(current.partitions)
            if assignments is not None:
                added = {first + i: tuple(r) for i, r in enumerate(assignments)}
            else:
                replication_factor = len(next(iter(current.partitions.values())))
                added = assignment.assign_replicas(count - first, replication_factor, self._live_brokers(), first)
            grown = znodes.TopicAssignment(
                current.topic_id, {**current.partitions, **added}, current.adding_replicas, current.removing_replicas
            )
            try:
                await self._zk.set(znodes.topic_path(name), znodes.encode_topic(grown), stat.version)
                break
            except BadVersionError:
                continue
        else:
            raise KafkaError(f"Topic {name} kept changing; try again.", ErrorCode.unknown_server_error)
        await self._wait(lambda: self._has_leaders(name, count), f"adding partitions to {name}")

    @_zookeeper_errors_answered
    async def set_configs(self, name: str, configs: Mapping[str, str]) -> None:
        data = znodes.encode_topic_config(configs)
        try:
            await self._zk.set(znodes.topic_config_path(name), data)
        except NoNodeError:
            await self._zk.create(znodes.topic_config_path(name), data, makepath=True)
        await self._zk.create(
            f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}", znodes.encode_config_change(name), sequence=True
        )

    async def _wait(self, condition, what: str) -> None:
        if not await self._cache.wait_until(condition, self._timeout_s):
            raise KafkaError(
                f"Timed out waiting for {what} to reach the metadata; it will complete in the background.",
                ErrorCode.request_timed_out,
            )
