"""This broker as a member of a ZooKeeper cluster (`zookeeper.connect` set).

The broker id comes before the broker is built (`resolve_broker_id`, Kafka's
getOrGenerateBrokerId): the one stored in the log dirs' meta.properties (broker/meta_properties.py),
else broker.id, else a generated one (broker.id.generation.enable): reserved.broker.max.id + the
version of a write to /brokers/seqid, which ZooKeeper hands out once.

Start, in two steps. `connect` (before the logs load): check the broker id against
meta.properties (a different stored id stops the start, as Kafka's InconsistentBrokerIdException),
connect to ZooKeeper (chroot created if missing), create the persistent paths, agree on the
cluster id (/cluster/id, created by the first broker; a broker whose log dirs already belong to
another cluster refuses to start, as Kafka's InconsistentClusterIdException), read the dynamic
broker configs and SCRAM credentials, then write meta.properties to every log dir. `join` (once
listening): follow the topics (below), register /brokers/ids/<id> (ephemeral; the broker epoch is
its czxid), then run for controller. The ZooKeeper work of either step starts over in the new
session when the session expires midway (a broker paused while it starts). A
registration of the same id by another session is waited out for 1.5 session timeouts (a broker
restarted right after a crash finds its old one until that session expires; Kafka refuses to
start at once), then stops the start.

Client quotas (broker/security/quota_store.py): read from /config/users and /config/clients
once changes are followed, and an entity re-read when a /config/changes notification names it.
Dynamic broker configs (broker/dynamic_config.py) likewise from /config/brokers/<id> and
/config/brokers/<default>; the controller's unclean leader election follows the broker's
unclean.leader.election.enable in effect for topics without an override.

Topics: every broker keeps the topic manager's topics as ZooKeeper has them: /brokers/topics
(children, and each topic's partition count and id) and /config/topics (overrides), re-read
when a /config/changes notification names the topic. Notifications older than 15 minutes
(`config_change_expiration_ms`) are deleted as the notifications are read, as Kafka does. Partitions are served on the
controller's LeaderAndIsr requests.

Session: EXPIRED ends the controllership and every leadership of this broker: once ZooKeeper
has dropped the session, the controller takes this broker for dead and moves its leaderships
(or marks the partitions offline), so what this broker still leads is stale. It answers
NOT_LEADER_OR_FOLLOWER for them until the controller's LeaderAndIsr says otherwise, rather than
serve clients from a stale log (an idempotent producer sent there is told its next sequence is
out of order, which librdkafka takes as fatal). Kafka's ZooKeeper-mode brokers keep leading
until the controller's request comes. The CONNECTED that follows (a new session) re-registers
the broker (new broker epoch), which makes the controller send it LeaderAndIsr for all its
partitions, re-reads the topics and re-arms the watches, and runs for controller again.

Stop: with controlled.shutdown.enable, ask the controller to move this broker's leaderships
away (ControlledShutdown, up to controlled.shutdown.max.retries more times while partitions
remain, controlled.shutdown.retry.backoff.ms apart), then leave ZooKeeper (the registration
goes with the session).

Inter-broker requests arriving here are fenced by `check_epochs`: an older controller epoch
than the newest seen is STALE_CONTROLLER_EPOCH; a broker epoch older than this broker's
registration is STALE_BROKER_EPOCH.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.legacy import ControlledShutdownRequest
from replication import znodes
from replication.broker_client import BrokerClient, BrokerClientError
from replication.controller import Controller, ControllerSettings
from replication.zk import NodeExistsError, NoNodeError, SessionEvent, WatchEvent, ZkClient, ZkError
from replication.zk_isr_writer import ZkIsrWriter

from broker import meta_properties
from broker.cluster_admin import ZkTopicAdmin
from broker.security.zk_user_configs import ZkUserConfigs
from broker.topic_store import TopicInfo

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.server import Broker

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN_VERSION = 2
_REGISTRATION_WAIT_FACTOR = 1.5  # times the session timeout
_REGISTRATION_RETRY_S = 0.25
CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's ZkNodeChangeNotificationListener default


class ClusterStartError(Exception):
    """The broker cannot join the cluster; it must not start."""


async def resolve_broker_id(config: "BrokerConfig") -> int:
    """This broker's id (Kafka's getOrGenerateBrokerId): the one in its log dirs'
    meta.properties, else broker.id, else reserved.broker.max.id + the version of a write to
    /brokers/seqid (broker.id.generation.enable), which no other broker gets."""
    stored = await asyncio.to_thread(meta_properties.read_broker_id, config.log_dirs)
    chosen = meta_properties.choose_broker_id(config.broker_id, stored, config.get("broker.id.generation.enable"))
    if chosen is not None:
        return chosen
    zk = ZkClient(config.get("zookeeper.connect"), config.get("zookeeper.session.timeout.ms"),
                  config.get("zookeeper.connection.timeout.ms"))
    try:
        await zk.start()
        try:
            stat = await zk.set(znodes.BROKER_SEQUENCE_ID, b"")
        except NoNodeError:
            await zk.ensure_path(znodes.BROKER_SEQUENCE_ID)
            stat = await zk.set(znodes.BROKER_SEQUENCE_ID, b"")
    except ZkError as exc:
        raise ClusterStartError(f"cannot generate a broker.id: {exc}") from exc
    finally:
        await zk.close()
    broker_id = config.get("reserved.broker.max.id") + stat.version
    log.info("generated broker.id %d", broker_id)
    return broker_id


class ClusterMember:
    def __init__(self, broker: "Broker") -> None:
        config = broker.config
        self.broker = broker
        self.broker_id = broker.broker_id
        self.zk = ZkClient(
            config.get("zookeeper.connect"),
            config.get("zookeeper.session.timeout.ms"),
            config.get("zookeeper.connection.timeout.ms"),
        )
        self.inter_broker_listener = config.inter_broker_listener_name
        self.broker_epoch = -1
        self.controller_epoch = 0  # the newest seen in a controller request
        self.controller = Controller(
            self.zk,
            ControllerSettings(
                broker_id=self.broker_id,
                inter_broker_listener=self.inter_broker_listener,
                unclean_leader_election=config.get("unclean.leader.election.enable"),
                auto_leader_rebalance=config.get("auto.leader.rebalance.enable"),
                rebalance_interval_s=config.get("leader.imbalance.check.interval.seconds"),
                imbalance_percentage=config.get("leader.imbalance.per.broker.percentage"),
                request_timeout_s=config.get("controller.socket.timeout.ms") / 1000,
                ssl_context=broker.inter_broker_ssl_context,
                sasl=broker.inter_broker_sasl,
            ),
            self._topic_unclean_election,
        )
        self.admin = ZkTopicAdmin(self.zk, broker.metadata_cache)
        self.isr_writer = ZkIsrWriter(self.zk, self.broker_id, lambda: self.controller_epoch)
        self._registered = False
        self._joined = False
        self._session_expired = False
        self._rejoining: asyncio.Task | None = None
        self._last_config_change = ""
        self.config_change_expiration_ms = CONFIG_CHANGE_EXPIRATION_MS
        self._watched_topics: set[str] = set()
        self._watches: dict[str, Callable[[WatchEvent], None]] = {}
        self._stopping = False
        self._log_dir_events: set[asyncio.Task] = set()
        broker.log_manager.add_offline_listener(self._on_log_dir_failure)

    # ------------------------------------------------------------------ start and stop

    async def connect(self) -> None:
        """Connect to ZooKeeper and agree on the cluster id (before the logs load, as Kafka);
        raises ClusterStartError when this broker must not start."""
        if not self.broker.broker_id_chosen:
            raise ClusterStartError("cluster mode needs a broker.id: configured, or chosen at start (resolve_broker_id)")
        log_dirs = self.broker.config.log_dirs
        stored = await asyncio.to_thread(meta_properties.read_broker_id, log_dirs)
        try:
            meta_properties.choose_broker_id(self.broker_id, stored, False)
        except meta_properties.BrokerMetadataError as exc:
            raise ClusterStartError(str(exc)) from exc
        try:
            await self.zk.start()
        except ZkError as exc:
            raise ClusterStartError(str(exc)) from exc
        self.zk.add_session_listener(self._on_session_event)
        try:
            await self.zk.in_one_session(self._prepare)
        except ZkError as exc:
            raise ClusterStartError(f"cannot prepare ZooKeeper: {exc}") from exc
        await asyncio.to_thread(meta_properties.write_broker_id, log_dirs, self.broker_id)

    async def _prepare(self) -> None:
        for path in znodes.PERSISTENT_PATHS:
            await self.zk.ensure_path(path)
        await self._agree_on_cluster_id()
        # The dynamic configs before the logs load (log dir settings among them).
        await self.broker.dynamic_config.load()
        await self.broker.scram_credentials.load()

    async def join(self) -> None:
        """Follow the topics, register and run for controller (once listening). A session that
        expires midway (the broker paused, say) takes the watches and the registration made so
        far with it: the steps start over in the new session."""
        topics = self.broker.topics
        topics.cluster_admin = self.admin
        topics.live_brokers = self.broker.metadata_cache.live_broker_ids
        topics.in_metadata = self.broker.metadata_cache.has_topic
        topics.marked_for_deletion = self.controller.marked_for_deletion
        try:
            await self.zk.in_one_session(self._join_session)
        except ZkError as exc:
            raise ClusterStartError(f"cannot join the cluster: {exc}") from exc
        self._joined = True  # from now on a new session is joined by _rejoin
        self.isr_writer.start()
        self.controller.start()

    async def _join_session(self) -> None:
        await self._follow_topics()
        await self._follow_config_changes(initial=True)
        # Read again now that changes are followed: none made since the start is missed.
        await self.broker.dynamic_config.load()
        await self.broker.quota_configs.load()
        await self.broker.scram_credentials.load()
        await self._register()

    async def _agree_on_cluster_id(self) -> None:
        store = self.broker.topic_store
        local = store.cluster_id if store.loaded_from_disk else None
        found = await self.zk.get_or_none(znodes.CLUSTER_ID)
        if found is None:
            cluster_id = local or store.cluster_id
            try:
                await self.zk.create(znodes.CLUSTER_ID, znodes.encode_cluster_id(cluster_id), makepath=True)
            except NodeExistsError:
                found = await self.zk.get(znodes.CLUSTER_ID)
        if found is not None:
            cluster_id = znodes.decode_cluster_id(found[0])
        if local is not None and local != cluster_id:
            raise ClusterStartError(
                f"The cluster ID {cluster_id} in ZooKeeper does not match the cluster ID {local} stored "
                f"in the log dirs ({', '.join(self.broker.config.log_dirs)}): these log dirs belong to "
                "another cluster"
            )
        store.cluster_id = cluster_id
        store.topics.clear()  # ZooKeeper holds the topics now (_follow_topics)
        await store.save()

    async def _register(self) -> None:
        broker = self.broker
        registration = znodes.BrokerRegistration(
            self.broker_id,
            tuple(
                znodes.EndPoint(listener.name, listener.host, broker.bound_port(listener.name))
                for listener in broker.config.advertised_listeners
            ),
            broker.config.get("broker.rack"),
        )
        loop = asyncio.get_running_loop()
        # A broker restarted right after a crash finds its old registration until the old
        # session expires: wait that long (Kafka would refuse to start at once).
        deadline = loop.time() + self.zk.session_timeout_ms / 1000 * _REGISTRATION_WAIT_FACTOR
        while True:
            try:
                stat = await self.zk.create_with_stat(
                    znodes.broker_path(self.broker_id), znodes.encode_broker(registration), ephemeral=True
                )
                break
            except NodeExistsError:
                found = await self.zk.get_or_none(znodes.broker_path(self.broker_id))
            if found is not None and found[1].ephemeral_owner == (self.zk.session_id or (0,))[0]:
                stat = found[1]  # ours: a create retried after a connection loss
                break
            if loop.time() >= deadline:
                raise ClusterStartError(
                    f"broker id {self.broker_id} is registered by another live broker "
                    f"({znodes.broker_path(self.broker_id)} exists)"
                )
            await asyncio.sleep(_REGISTRATION_RETRY_S)
        self.broker_epoch = stat.czxid
        self._registered = True
        log.info("broker %d registered in ZooKeeper with broker epoch %d", self.broker_id, self.broker_epoch)

    async def stop(self) -> None:
        self._stopping = True
        await self.isr_writer.close()
        await self.controller.stop()
        await self.zk.close()

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away (before the broker stops
        serving); gives up after the configured retries."""
        config = self.broker.config
        attempts = config.get("controlled.shutdown.max.retries") + 1
        backoff_s = config.get("controlled.shutdown.retry.backoff.ms") / 1000
        for attempt in range(attempts):
            error, remaining = await self._ask_controller_to_shut_down()
            if error is ErrorCode.none and not remaining:
                log.info("controlled shutdown done: this broker leads no partition")
                return
            log.info("controlled shutdown attempt %d: %s, %d partition(s) still led here",
                     attempt + 1, error.name, remaining)
            if attempt + 1 < attempts:
                await asyncio.sleep(backoff_s)
        log.warning("controlled shutdown incomplete; stopping anyway")

    async def _ask_controller_to_shut_down(self) -> tuple[ErrorCode, int]:
        cache = self.broker.metadata_cache
        endpoint = cache.endpoint(cache.controller_id, self.inter_broker_listener)
        if endpoint is None:
            return ErrorCode.not_controller, 0
        client = BrokerClient(
            endpoint[0], endpoint[1], f"broker-{self.broker_id}-shutdown", 5, 30,
            ssl_context=self.broker.inter_broker_ssl_context, sasl=self.broker.inter_broker_sasl,
        )
        try:
            response = await client.send(
                ApiKey.CONTROLLED_SHUTDOWN,
                CONTROLLED_SHUTDOWN_VERSION,
                ControlledShutdownRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch),
            )
        except BrokerClientError as exc:
            log.info("controlled shutdown request failed: %s", exc)
            return ErrorCode.network_exception, 0
        finally:
            await client.close()
        return ErrorCode(response.error_code), len(response.remaining_partitions)

    @property
    def registered(self) -> bool:
        """Whether /brokers/ids/<id> holds this broker's registration (of the current session)."""
        return self._registered

    # ------------------------------------------------------------------ session

    def _on_session_event(self, event: SessionEvent) -> None:
        if self._stopping:
            return
        if event is SessionEvent.EXPIRED:
            self._registered = False
            self._session_expired = True
            self._watched_topics.clear()
            self.controller.on_session_expired()
            self.broker.replica_manager.resign_leaderships("its ZooKeeper session expired")
            self.broker.metadata_cache.forget_leaderships_of(self.broker_id)
        elif event is SessionEvent.CONNECTED and self._session_expired:
            self._session_expired = False
            # Before joined, join() starts over itself; a rejoin under way does likewise.
            if self._joined and (self._rejoining is None or self._rejoining.done()):
                self._rejoining = asyncio.get_running_loop().create_task(self._rejoin())

    async def _rejoin(self) -> None:
        try:
            await self.zk.in_one_session(self._rejoin_session)
        except ZkError as exc:
            log.error("cannot rejoin the cluster after session expiry: %s", exc)
            return
        self.controller.on_new_session()

    async def _rejoin_session(self) -> None:
        # Registered first: the controller takes this broker for dead until it is.
        await self._register()
        await self._follow_topics()
        await self._follow_config_changes()
        await self.broker.dynamic_config.load()
        await self.broker.quota_configs.load()
        await self.broker.scram_credentials.load()

    # ------------------------------------------------------------------ log dir failures

    def _on_log_dir_failure(self, path: str) -> None:
        """Tell the controller through a log dir event notification (Kafka's
        propagateLogDirEvent): it asks this broker about its replicas and moves leaderships and
        ISR places off those in the failed dir."""
        if not self._stopping:
            task = asyncio.get_running_loop().create_task(self._propagate_log_dir_event(path))
            self._log_dir_events.add(task)
            task.add_done_callback(self._log_dir_events.discard)

    async def _propagate_log_dir_event(self, path: str) -> None:
        try:
            await self.zk.create(
                f"{znodes.LOG_DIR_EVENT_NOTIFICATION}/{znodes.LOG_DIR_EVENT_PREFIX}",
                znodes.encode_log_dir_event(self.broker_id),
                sequence=True,
                makepath=True,
            )
        except ZkError as exc:
            log.error("cannot tell the controller that log directory %s failed: %s", path, exc)

    # ------------------------------------------------------------------ epochs

    def check_epochs(self, controller_epoch: int, broker_epoch: int) -> None:
        """Fence requests from deposed controllers and requests meant for an earlier
        registration of this broker."""
        if controller_epoch < self.controller_epoch:
            raise KafkaError(
                f"controller epoch {controller_epoch} is older than {self.controller_epoch}",
                ErrorCode.stale_controller_epoch,
            )
        if broker_epoch != -1 and broker_epoch < self.broker_epoch:
            raise KafkaError(
                f"broker epoch {broker_epoch} is older than this broker's {self.broker_epoch}",
                ErrorCode.stale_broker_epoch,
            )
        self.controller_epoch = controller_epoch

    def require_controller(self) -> None:
        if not self.controller.active:
            raise KafkaError("This is not the correct controller for this cluster.", ErrorCode.not_controller)

    # ------------------------------------------------------------------ topics

    def _watch(self, key: str, handler: Callable[[], Awaitable[None]]) -> Callable[[WatchEvent], None]:
        """One watch function per key, so re-arming does not add watchers."""
        watch = self._watches.get(key)
        if watch is None:

            def watch(event: WatchEvent) -> None:
                if not self._stopping:
                    asyncio.get_running_loop().create_task(self._guarded(handler))

            self._watches[key] = watch
        return watch

    async def _guarded(self, handler: Callable[[], Awaitable[None]]) -> None:
        try:
            await handler()
        except ZkError as exc:
            log.warning("ZooKeeper read failed (%s); it is retried on the next session event", exc)

    async def _follow_topics(self) -> None:
        names = set(await self.zk.get_children(znodes.BROKER_TOPICS, self._watch("topics", self._follow_topics)))
        topics = self.broker.topics
        for gone in set(topics.topics) - names:
            topics.uninstall(gone)
            self._watched_topics.discard(gone)
            self._watches.pop(f"topic {gone}", None)  # else one watch function per topic ever seen
        for name in sorted(names):
            if name not in topics.topics or name not in self._watched_topics:
                await self._read_topic(name)

    async def _read_topic(self, name: str) -> None:
        watch = None
        if name not in self._watched_topics:
            self._watched_topics.add(name)
            watch = self._watch(f"topic {name}", lambda: self._reread_topic(name))
        found = await self.zk.get_or_none(znodes.topic_path(name), watch)
        if found is None:
            self._watched_topics.discard(name)
            return
        config = await self.zk.get_or_none(znodes.topic_config_path(name))
        configs = znodes.decode_topic_config(config[0]) if config else {}
        assignment = znodes.decode_topic(found[0])
        self.broker.topics.install(TopicInfo(name, assignment.topic_id, len(assignment.partitions), configs))

    async def _reread_topic(self, name: str) -> None:
        self._watched_topics.discard(name)
        await self._read_topic(name)

    async def _follow_config_changes(self, initial: bool = False) -> None:
        names = sorted(await self.zk.get_children(
            znodes.CONFIG_CHANGES, self._watch("config changes", self._follow_config_changes)
        ))
        fresh = [n for n in names if n > self._last_config_change]
        if names:
            self._last_config_change = names[-1]
        if not initial:  # else the topics were just read with their configs
            for name in fresh:
                found = await self.zk.get_or_none(f"{znodes.CONFIG_CHANGES}/{name}")
                if found is None:
                    continue
                entity_type, name = znodes.decode_config_change(found[0])
                if entity_type == "topics":
                    await self._read_topic(name)
                elif entity_type == "brokers":  # dynamic broker configs: this broker's or the default
                    await self.broker.dynamic_config.reload(name)
                elif entity_type in ("users", "clients"):  # client quotas; a user's SCRAM credentials
                    await self.broker.quota_configs.reload(f"{entity_type}/{name}")
                    if entity_type == "users":
                        await self._read_user(name)
        await self._purge_obsolete_config_changes(names)

    async def _read_user(self, sanitized_user: str) -> None:
        """A user's config changed (SCRAM credentials): serve the new one at once."""
        config = await ZkUserConfigs(self.zk).read(sanitized_user)
        self.broker.scram_credentials.update_user(znodes.desanitize(sanitized_user), config)

    async def _purge_obsolete_config_changes(self, names: list[str]) -> None:
        """Kafka's purgeObsoleteNotifications: a notification older than the expiry
        (changeExpirationMs, 15 minutes) has been read by every live broker, and a broker
        starting reads the configs themselves, so it goes."""
        oldest_kept_ms = time.time() * 1000 - self.config_change_expiration_ms
        for name in names:
            path = f"{znodes.CONFIG_CHANGES}/{name}"
            stat = await self.zk.exists(path)
            if stat is not None and stat.ctime_ms < oldest_kept_ms:
                try:
                    await self.zk.delete(path)
                except NoNodeError:
                    pass  # another broker purged it first

    async def _topic_unclean_election(self, topic: str) -> bool | None:
        found = await self.zk.get_or_none(znodes.topic_config_path(topic))
        value = znodes.decode_topic_config(found[0]).get("unclean.leader.election.enable") if found else None
        if value is None:  # the broker's setting in effect, which dynamic broker configs change
            return self.broker.config.get("unclean.leader.election.enable")
        return value.strip().lower() == "true"
