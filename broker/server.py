"""The broker: storage, topics and request handling wired together, serving its listeners.

Start: load the cluster metadata and every log (recovering after a crash), open the partitions,
start the group and transaction coordinators (they load __consumer_offsets and
__transaction_state in the background), then listen.
Stop (SIGTERM/SIGINT or `stop()`): stop accepting, release waiting fetches and group requests,
let in-flight requests finish and their responses go out, close connections, then flush and
checkpoint every log and write the clean-shutdown markers.

With zookeeper.connect set the broker is a cluster member (broker/cluster.py): after the logs
are loaded it listens, joins the cluster (registration, controller election) and serves the
partitions the controller gives it; the metadata cache is filled by the controller. Its clean
stop first asks the controller to move its leaderships away (controlled.shutdown.enable).
Standalone, the broker fills the metadata cache itself and serves every partition.
"""

import asyncio
import functools
import ipaddress
import logging
import resource
import signal
import socket
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.cluster import ClusterMember, resolve_broker_id
from broker.config import TLS_PROTOCOLS, BrokerConfig, ConfigError
from broker import systemd
from broker.dispatch import Dispatcher
from broker.dynamic_config import DynamicBrokerConfig, FileBrokerConfigStore, ZkBrokerConfigStore
from broker.fetch_sessions import FetchSessionCache
from broker.heap import LongLivedObjects
from broker.metadata_cache import BrokerNode, MetadataCache, PartitionInfo
from broker.metrics import BrokerMetrics
from broker.network import Connection, ConnectionQuotas, Listener, PendingSends, RequestMemoryPool, TlsConnection, client_ip
from broker.remote_log import RemoteLog
from broker.replica_manager import ReplicaManager, ReplicationSettings
from broker.replication_quotas import ReplicationQuotas
from broker.security import sasl_clients, sasl_config
from broker.security.sasl_server import SaslAuthenticator
from broker.security.scram_store import FileUserConfigs, ScramCredentialStore
from broker.security.zk_user_configs import ZkUserConfigs
from broker.security import tls
from broker.security.acl_store import FileAclStore, ZkAclStore
from broker.security.authorizer import AclAuthorizer, authorizer_enabled, parse_super_users
from broker.security.quota_store import FileQuotaStore, QuotaConfigs, ZkQuotaStore
from broker.security.quotas import ClientQuotas, WindowConfig
from broker.session import Session
from broker.topic_manager import TopicManager
from broker.topic_store import TopicStore
from broker.txn_markers import ClusterMarkerWriter, LocalMarkerWriter, RemoteMarkerSender
from broker.zk_producer_ids import ZkProducerIdBlockStore
from coordinator.group_coordinator import GroupCoordinator
from coordinator.transaction_coordinator import TransactionCoordinator
from coordinator.producer_ids import FileProducerIdBlockStore, ProducerIdManager
from replication.broker_client import BrokerClients, SaslClientFactory
from replication.fetcher import FetcherSettings, ReplicaQuota
from replication.replica_selector import replica_selector
from storage import descriptor_pool
from storage.cleaner import CleanerConfig
from storage.log_manager import NO_QUOTA, LogManager, LogManagerSettings

if TYPE_CHECKING:
    from broker.http.app import HttpApi

log = logging.getLogger(__name__)

_DRAIN_TIMEOUT_S = 10.0
_QUIET_S = 1.0  # a connection this long without traffic gives its receive buffer up
# A TLS handshake not done this long after the accept closes the connection. Kafka has no such
# bound (only connections.max.idle.ms); 30 s is what Kafka's and librdkafka's clients give
# connection setup themselves (socket.connection.setup.timeout.max.ms), so a client that is
# still trying is not cut off.
_TLS_HANDSHAKE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class BrokerEndpoint:
    """How clients reach a broker: what Metadata and DescribeCluster report."""

    node_id: int
    host: str
    port: int
    rack: str | None


class Broker:
    def __init__(self, config: BrokerConfig, broker_id: int | None = None) -> None:
        """`broker_id`: the id chosen at start (`serve`), stored or generated in cluster mode;
        else broker.id (standalone, -1 is 0)."""
        self.config = config
        # The SASL exchange of this broker's connections to the others' inter-broker listener.
        self.inter_broker_sasl = (
            None if config.inter_broker_sasl is None else sasl_clients.client_factory(config.inter_broker_sasl)
        )
        self.broker_id = max(config.broker_id, 0) if broker_id is None else broker_id
        self.broker_id_chosen = broker_id is not None or config.broker_id >= 0
        self.started_at_ms = int(time.time() * 1000)
        # TLS contexts are built (keystores read) before anything else: a bad one stops the start.
        self._tls_listeners = {
            listener.name: tls.ListenerTls(config.ssl_settings(listener.name))
            for listener in config.listeners
            if config.security_protocol(listener.name) in TLS_PROTOCOLS
        }
        inter_broker = config.inter_broker_listener_name
        self.inter_broker_ssl_context = (
            tls.client_context(config.ssl_settings(inter_broker))
            if config.security_protocol(inter_broker) in TLS_PROTOCOLS
            else None
        )
        self.topic_store = TopicStore(config.log_dirs)
        self.log_manager = LogManager(
            config.log_dirs, self._log_config_for, _log_manager_settings(config)
        )
        self.metadata_cache = MetadataCache(config.advertised_listeners[0].name)
        self.replication_quotas = ReplicationQuotas(
            self.broker_id,
            WindowConfig(config.get("replication.quota.window.num"), config.get("replication.quota.window.size.seconds") * 1000),
        )
        self.replication_quotas.update_rates(*_replication_rates(config))
        self.log_manager.move_quota = self.replication_quotas.alter_log_dirs
        self.replica_manager = ReplicaManager(
            self.log_manager,
            self.broker_id,
            _replication_settings(
                config, self.inter_broker_ssl_context, self.inter_broker_sasl, self.replication_quotas.follower
            ),
            self.metadata_cache,
        )
        self.topics = TopicManager(
            self.topic_store, self.replica_manager, config.explicit_settings, [self.broker_id],
            self.replication_quotas,
        )
        self.group_coordinator = GroupCoordinator(config, self.topics, self.replica_manager)
        self.topics.on_partitions_deleted.append(self.group_coordinator.on_partitions_deleted)
        self.replica_manager.add_leadership_listener(
            self.group_coordinator.on_become_leader, self.group_coordinator.on_resign
        )
        self.cluster = ClusterMember(self) if config.get("zookeeper.connect") else None
        if self.cluster is None:
            producer_id_blocks = FileProducerIdBlockStore(config.log_dirs)
        else:
            producer_id_blocks = ZkProducerIdBlockStore(self.cluster.zk)
        self.producer_ids = ProducerIdManager(producer_id_blocks, self.broker_id)
        self.scram_credentials = ScramCredentialStore(
            FileUserConfigs(config.log_dirs) if self.cluster is None else ZkUserConfigs(self.cluster.zk)
        )
        self._sasl_mechanisms = {
            listener.name: sasl_config.server_factories(settings, self.scram_credentials.lookup)
            for listener in config.listeners
            if (settings := config.sasl_listener(listener.name)) is not None
        }
        self.client_quotas = ClientQuotas(
            WindowConfig(config.get("quota.window.num"), config.get("quota.window.size.seconds") * 1000)
        )
        self.fetch_sessions = FetchSessionCache(config.get("max.incremental.fetch.session.cache.slots"))
        self.quota_configs = QuotaConfigs(
            self.client_quotas,
            FileQuotaStore(config.log_dirs) if self.cluster is None else ZkQuotaStore(self.cluster.zk),
        )
        self.markers = LocalMarkerWriter(self.replica_manager, self.group_coordinator)
        self.remote_markers: RemoteMarkerSender | None = None
        coordinator_markers: LocalMarkerWriter | ClusterMarkerWriter = self.markers
        if self.cluster is not None:
            self.remote_markers = RemoteMarkerSender(
                self.metadata_cache,
                self.cluster.inter_broker_listener,
                f"broker-{self.broker_id}-txn-markers",
                config.get("controller.socket.timeout.ms") / 1000,
                self.inter_broker_ssl_context,
                sasl=self.inter_broker_sasl,
            )
            coordinator_markers = ClusterMarkerWriter(
                self.broker_id, self.metadata_cache, self.markers, self.remote_markers.send
            )
        self.transaction_coordinator = TransactionCoordinator(
            config, self.topics, self.replica_manager, coordinator_markers, self.producer_ids
        )
        self.replica_manager.add_leadership_listener(
            self.transaction_coordinator.on_become_leader, self.transaction_coordinator.on_resign
        )
        # Tiered storage (KIP-405): only with remote.log.storage.system.enable.
        self.remote_log: RemoteLog | None = None
        if config.get("remote.log.storage.system.enable"):
            remote_log_clients = None
            if self.cluster is not None:  # the metadata partitions are read and written at their leaders
                remote_log_clients = BrokerClients(
                    self.metadata_cache,
                    self.cluster.inter_broker_listener,
                    f"broker-{self.broker_id}-remote-log-metadata",
                    config.get("controller.socket.timeout.ms") / 1000,
                    self.inter_broker_ssl_context,
                    sasl=self.inter_broker_sasl,
                )
            self.remote_log = RemoteLog(
                config, self.broker_id, self.topics, self.replica_manager, remote_log_clients, self.metadata_cache
            )
            self.replica_manager.add_leadership_listener(self.remote_log.on_become_leader, self.remote_log.on_resign)
        self.authorizer = _make_authorizer(config, self.cluster)
        self.dynamic_config = DynamicBrokerConfig(
            config,
            self.broker_id,
            self,
            FileBrokerConfigStore(config.log_dirs) if self.cluster is None else ZkBrokerConfigStore(self.cluster.zk),
        )
        self.endpoint: BrokerEndpoint | None = None
        self._dispatcher = Dispatcher(self)
        # The HTTP API (http.listeners): its requests go through the same dispatcher. Imported
        # only when configured: aiohttp is a fifth of the broker's start-up without it.
        self.http_api: "HttpApi | None" = None
        if config.http_listeners:
            from broker.http.app import HttpApi

            self.http_api = HttpApi(self, self._dispatcher)
        self._listeners: list[Listener] = []
        self._connections: dict[Connection, tuple[str, str]] = {}  # each with its client's ip and listener
        self._quotas: ConnectionQuotas | None = None
        self._sends: PendingSends | None = None  # the connections' answers, sent in rows
        self._advertised_names = {listener.name for listener in config.advertised_listeners}
        self._idle_check: asyncio.TimerHandle | None = None
        queued_bytes = config.get("queued.max.request.bytes")
        self._request_memory = RequestMemoryPool(queued_bytes) if queued_bytes > 0 else None
        self.shutting_down = False
        self._logs_loaded = False
        self.metrics = BrokerMetrics(self)

    @property
    def ready(self) -> bool:
        """Serving: the log dirs are loaded and, in cluster mode, the broker is registered in
        ZooKeeper (what metrics.listener's /health reports); not once it is stopping."""
        if not self._logs_loaded or self.shutting_down:
            return False
        return self.cluster is None or self.cluster.registered

    def _log_config_for(self, topic: str):
        return self.topics.log_config(topic)

    @property
    def dispatcher(self) -> Dispatcher:
        """Serves request frames: the connections', the HTTP API's and those in Envelopes."""
        return self._dispatcher

    @property
    def cluster_id(self) -> str:
        return self.topic_store.cluster_id

    @property
    def controller_id(self) -> int:
        """Standalone, this broker is its own controller."""
        return self.metadata_cache.controller_id

    async def start(self) -> None:
        await self.metrics.start()
        await asyncio.to_thread(self.topic_store.load)
        self._refuse_tiered_topics_without_remote_storage()
        if self.cluster is not None:
            await self.cluster.connect()  # reads the dynamic configs and SCRAM credentials too
            if self.authorizer is not None:
                await self.authorizer.start()
            await self.log_manager.startup()
            self._logs_loaded = True
            self._listen()
            self.replica_manager.set_isr_writer(self.cluster.isr_writer)
            self.replica_manager.start()
            await self.cluster.join()
            self.group_coordinator.start()
            self.transaction_coordinator.start()
            if self.remote_log is not None:
                self.remote_log.start()
        else:
            await self.topic_store.save()
            await self.dynamic_config.load()
            await self.scram_credentials.load()
            if self.authorizer is not None:
                await self.authorizer.start()
            await self.quota_configs.load()
            await self.log_manager.startup()
            self.topics.open_partitions()
            self.replica_manager.start()
            self.group_coordinator.start()
            self.transaction_coordinator.start()
            if self.remote_log is not None:
                self.remote_log.start()
            self._listen()
            self.topics.on_change.append(self._fill_standalone_metadata)
            self._fill_standalone_metadata()
            self._logs_loaded = True
        if self.http_api is not None:
            await self.http_api.start()
        log.info(
            "broker %d of cluster %s serving %s (%s)",
            self.broker_id,
            self.cluster_id,
            ", ".join(f"{l.name}://{l.host}:{p.port}" for l, p in zip(self.config.listeners, self._listeners)),
            _build(),
        )

    def _refuse_tiered_topics_without_remote_storage(self) -> None:
        """Kafka's check: a topic with remote.storage.enable needs the remote storage system."""
        if self.remote_log is not None:
            return
        tiered = sorted(
            name for name, info in self.topic_store.topics.items()
            if str(info.configs.get("remote.storage.enable", "false")).strip().lower() == "true"
        )
        if tiered:
            raise ConfigError(
                "You have to delete all topics with the property remote.storage.enable=true before disabling "
                f"tiered storage cluster-wide (tiered topics: {', '.join(tiered)})"
            )

    def _listen(self) -> None:
        config = self.config
        self._sends = PendingSends(asyncio.get_running_loop())
        self._quotas = ConnectionQuotas(
            config.get("max.connections"),
            config.get("max.connections.per.ip"),
            _resolve_overrides(config.max_connections_per_ip_overrides),
            self.cluster.inter_broker_listener if self.cluster is not None else None,
        )
        for listener_config in config.listeners:
            name = listener_config.name
            self._listeners.append(
                Listener(
                    listener_config.host,
                    listener_config.port,
                    lambda sock, ip, port, name=name: self._accept(name, sock, ip, port),
                    send_buffer=config.get("socket.send.buffer.bytes"),
                    receive_buffer=config.get("socket.receive.buffer.bytes"),
                )
            )
        advertised = config.advertised_listeners[0]
        self.endpoint = BrokerEndpoint(
            self.broker_id, advertised.host, self.bound_port(advertised.name), config.get("broker.rack")
        )
        self._check_idle_connections()

    def bound_port(self, listener_name: str) -> int:
        """The port clients are told for a listener: the advertised one, or when that is 0 (any
        free port) the one actually bound."""
        advertised = next(l for l in self.config.advertised_listeners if l.name == listener_name)
        if advertised.port:
            return advertised.port
        return next(
            bound.port for l, bound in zip(self.config.listeners, self._listeners) if l.name == listener_name
        )

    def require_controller(self) -> None:
        """Cluster mode: refuse (NOT_CONTROLLER) the admin requests only the controller serves."""
        if self.cluster is not None:
            self.cluster.require_controller()

    def _fill_standalone_metadata(self) -> None:
        """Standalone, this broker is the cluster: its only broker, its controller, the leader
        and only replica of every partition."""
        endpoints = {
            listener.name: (listener.host, self.bound_port(listener.name))
            for listener in self.config.advertised_listeners
        }
        node = BrokerNode(self.broker_id, endpoints, self.endpoint.rack)
        replicas = (self.broker_id,)
        self.metadata_cache.update(self.broker_id, 0, [node], {})
        self.metadata_cache.replace_topics({
            info.name: {p: PartitionInfo(self.broker_id, 0, replicas, replicas) for p in range(info.partitions)}
            for info in self.topics.topics.values()
        })

    @property
    def port(self) -> int:
        return self._listeners[0].port

    def _accept(self, listener: str, sock: socket.socket, ip: str, port: int) -> None:
        address = f"{ip}:{port}"
        refused = self._quotas.admit(listener, ip)
        if refused is not None:
            log.info("refused connection from %s on %s: %s", address, listener, refused)
            sock.close()
            return
        # Requests on an advertised listener are answered with brokers' endpoints on it; those
        # on a listener that is not advertised, with the client listener's.
        advertised = listener if listener in self._advertised_names else None
        session = Session(
            address, listener, self.config.security_protocol(listener), advertised, sasl=self._sasl_authenticator(listener)
        )
        connection_args = (
            asyncio.get_running_loop(),
            sock,
            address,
            self._dispatcher.for_session(session),
            self._forget_connection,
        )
        limits = {
            "max_request_bytes": self.config.get("socket.request.max.bytes"),
            "max_queued_requests": self.config.get("queued.max.requests"),
            "pool": self._request_memory,
            "timing": session,
            "sends": self._sends,
            "appends": self.log_manager.deferred_writes,
        }
        tls_listener = self._tls_listeners.get(listener)
        if tls_listener is None:
            connection: Connection = Connection(*connection_args, **limits)
        else:
            connection = TlsConnection(
                *connection_args,
                context=tls_listener.context,
                on_handshake=functools.partial(tls.authenticate, session, tls_listener.mapper),
                handshake_timeout=_TLS_HANDSHAKE_TIMEOUT_S,
                **limits,
            )
        self._connections[connection] = ip, listener
        self.metrics.connection_accepted(listener)

    def _sasl_authenticator(self, listener: str) -> SaslAuthenticator | None:
        """A new connection's SASL exchange, on a SASL listener."""
        mechanisms = self._sasl_mechanisms.get(listener)
        if mechanisms is None:
            return None
        return SaslAuthenticator(mechanisms, self.config.sasl_listener(listener).max_reauth_ms)

    def reconfigure(self, config: BrokerConfig, validate_only: bool) -> None:
        """Put `config` in effect (dynamic broker configs, broker/dynamic_config.py): topic
        defaults reach every log without an override, the cleaner's buffers and backoff its
        next cleanings, connection limits the connections accepted from then on, and every SSL listener whose keystore or truststore settings
        or files changed gets a new context, used by new connections (those open keep theirs,
        as in Kafka; so does the inter-broker client). All or nothing: ConfigError (nothing
        changed) when a store cannot be loaded or replaces the certificate's subject DN or
        names, or a host of max.connections.per.ip.overrides cannot be resolved."""
        rebuilt = {}
        for name, listener_tls in self._tls_listeners.items():
            new = listener_tls.reloaded(config.ssl_settings(name))
            if new is not None:
                rebuilt[name] = new
        try:
            per_ip_overrides = _resolve_overrides(config.max_connections_per_ip_overrides)
        except OSError as exc:
            raise ConfigError(str(exc)) from None
        if validate_only:
            return
        self.config = config
        self._tls_listeners.update(rebuilt)
        for name in rebuilt:
            log.info("listener %s: TLS keystore and truststore reloaded", name)
        self.topics.set_broker_settings(config.explicit_settings)
        self.log_manager.cleaner.reconfigure(_cleaner_config(config))
        self.replication_quotas.update_rates(*_replication_rates(config))
        if self._quotas is not None:
            self._quotas.reconfigure(config.get("max.connections"), config.get("max.connections.per.ip"), per_ip_overrides)

    def _forget_connection(self, connection: Connection) -> None:
        ip, _listener = self._connections.pop(connection)
        self._quotas.release(ip)

    def connections_by_listener(self) -> dict[str, int]:
        """Open client connections per listener name."""
        counts: dict[str, int] = {}
        for _ip, listener in self._connections.values():
            counts[listener] = counts.get(listener, 0) + 1
        return counts

    def _check_idle_connections(self) -> None:
        """Every second: close connections idle for connections.max.idle.ms (negative: never),
        and take the receive buffers of those quiet for a second, so that many idle clients
        cost little memory (the buffer of a busy one is kept for its next requests)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        max_idle_ms = self.config.get("connections.max.idle.ms")
        idle_before = now - max_idle_ms / 1000 if max_idle_ms >= 0 else float("-inf")
        quiet_before = now - _QUIET_S
        for connection in list(self._connections):
            since = connection.idle_since()
            if since is None:
                continue
            if since < idle_before:
                log.debug("closing connection from %s: idle for over %d ms", connection.address, max_idle_ms)
                connection.close("idle")
            elif since < quiet_before:
                connection.trim()
        period = _QUIET_S if max_idle_ms < 0 else min(_QUIET_S, max(max_idle_ms / 10_000, 0.01))
        self._idle_check = loop.call_later(period, self._check_idle_connections)

    async def stop(self) -> None:
        if self.http_api is not None:
            await self.http_api.stop()
        if self.cluster is not None and self.config.get("controlled.shutdown.enable"):
            await self.cluster.controlled_shutdown()
        self.shutting_down = True
        if self._idle_check is not None:
            self._idle_check.cancel()
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        for connection in self._connections:
            connection.stop_reading()
        self.replica_manager.wake_all()
        # Before draining: JoinGroup and SyncGroup requests waiting on their groups get answers.
        await self.group_coordinator.shutdown()
        await self.transaction_coordinator.shutdown()
        if self.remote_log is not None:
            await self.remote_log.shutdown()
        if self.remote_markers is not None:
            await self.remote_markers.close()
        await self._drain_connections()
        for connection in list(self._connections):
            connection.close("broker shutting down")
        await self.replica_manager.shutdown()
        if self.authorizer is not None:
            await self.authorizer.close()
        if self.cluster is not None:
            await self.cluster.stop()
        await self.log_manager.shutdown()
        self.topic_store.close()
        self.quota_configs.close()
        self.dynamic_config.close()
        await self.metrics.stop()
        log.info("broker %d stopped cleanly", self.broker_id)

    async def _drain_connections(self) -> None:
        deadline = time.monotonic() + _DRAIN_TIMEOUT_S
        while any(c.busy for c in self._connections) and time.monotonic() < deadline:
            self.replica_manager.wake_all()
            await asyncio.sleep(0.01)

    async def run_until_signalled(self, started: Callable[[], None] | None = None) -> None:
        """Start, call `started`, and run until SIGTERM or SIGINT."""
        loop = asyncio.get_running_loop()
        stop_requested = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop_requested.set)
        await self.start()
        if started is not None:
            started()
        systemd.notify("READY=1")
        await stop_requested.wait()
        log.info("shutting down")
        systemd.notify("STOPPING=1")
        await self.stop()


async def serve(config: BrokerConfig) -> None:
    """Run a broker until SIGTERM or SIGINT. In cluster mode its id comes first: the one stored
    in its log dirs, the configured one, or a generated one (broker/cluster.py)."""
    raise_open_files_limit()
    broker_id = await resolve_broker_id(config) if config.get("zookeeper.connect") else None
    # No collections while it starts, and what is alive frozen once started, its logs loaded:
    # see broker.heap.
    heap = LongLivedObjects(asyncio.get_running_loop())
    heap.hold()
    await Broker(config, broker_id).run_until_signalled(heap.start)


def _make_authorizer(config: BrokerConfig, cluster: ClusterMember | None) -> AclAuthorizer | None:
    """The ACL authorizer authorizer.class.name asks for, its ACLs in ZooKeeper (cluster mode)
    or in the log dirs (standalone); None without one."""
    if not authorizer_enabled(config.get("authorizer.class.name")):
        return None
    store = FileAclStore(config.log_dirs) if cluster is None else ZkAclStore(cluster.zk)
    return AclAuthorizer(
        store, parse_super_users(config.get("super.users")), config.get("allow.everyone.if.no.acl.found")
    )


def _resolve_overrides(overrides: dict[str, int]) -> dict[str, int]:
    """max.connections.per.ip.overrides by ip: host names are resolved at start, as Kafka does."""
    resolved = {}
    for host, count in overrides.items():
        try:
            ipaddress.ip_address(host)
            addresses = [host]
        except ValueError:
            try:
                addresses = [info[4][0] for info in socket.getaddrinfo(host, None)]
            except socket.gaierror as exc:
                raise OSError(f"max.connections.per.ip.overrides: cannot resolve {host}: {exc}") from None
        for address in addresses:
            resolved[client_ip(address)] = count
    return resolved


def raise_open_files_limit() -> None:
    """Raise the soft limit on open descriptors to the hard one, as the process may (a
    partition holds about one, each connection a socket), and size the pool of open segment
    files to what the limit allows (storage.descriptor_pool)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # a hard limit of "unlimited" beyond fs.nr_open
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, hard, exc)
    raised, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    capacity = descriptor_pool.fit_to_open_files_limit()
    log.info(
        "open files limit: soft %d (was %d), hard %d; at most %d segment files kept open",
        raised,
        soft,
        hard,
        capacity,
    )


def _replication_settings(
    config: BrokerConfig,
    ssl_context: ssl.SSLContext | None = None,
    sasl: SaslClientFactory | None = None,
    quota: ReplicaQuota = NO_QUOTA,
) -> ReplicationSettings:
    return ReplicationSettings(
        replica_lag_time_max_ms=config.get("replica.lag.time.max.ms"),
        commit_timeout_ms=config.get("offsets.commit.timeout.ms"),
        replica_selector=replica_selector(config.get("replica.selector.class")),
        fetcher=FetcherSettings(
            num_fetchers=config.get("num.replica.fetchers"),
            wait_max_ms=config.get("replica.fetch.wait.max.ms"),
            min_bytes=config.get("replica.fetch.min.bytes"),
            max_bytes=config.get("replica.fetch.max.bytes"),
            response_max_bytes=config.get("replica.fetch.response.max.bytes"),
            backoff_ms=config.get("replica.fetch.backoff.ms"),
            socket_timeout_ms=config.get("replica.socket.timeout.ms"),
            ssl_context=ssl_context,
            sasl=sasl,
            quota=quota,
        ),
    )


def _replication_rates(config: BrokerConfig) -> tuple[int, int, int]:
    return (
        config.get("leader.replication.throttled.rate"),
        config.get("follower.replication.throttled.rate"),
        config.get("replica.alter.log.dirs.io.max.bytes.per.second"),
    )


def _log_manager_settings(config: BrokerConfig) -> LogManagerSettings:
    flush_interval = config.get("log.flush.interval.ms")
    if flush_interval is None:
        flush_interval = config.get("log.flush.scheduler.interval.ms")
    return LogManagerSettings(
        retention_check_interval_ms=config.get("log.retention.check.interval.ms"),
        flush_check_interval_ms=flush_interval,
        checkpoint_interval_ms=config.get("log.flush.offset.checkpoint.interval.ms"),
        start_offset_checkpoint_interval_ms=config.get("log.flush.start.offset.checkpoint.interval.ms"),
        high_watermark_checkpoint_interval_ms=config.get("replica.high.watermark.checkpoint.interval.ms"),
        recovery_threads_per_dir=config.get("num.recovery.threads.per.data.dir"),
        producer_id_expiration_ms=config.get("producer.id.expiration.ms"),
        producer_id_expiration_check_interval_ms=config.get(
            "producer.id.expiration.check.interval.ms"
        ),
        cleaner=_cleaner_config(config),
        move_backoff_ms=config.get("replica.fetch.backoff.ms"),
    )


def _cleaner_config(config: BrokerConfig) -> CleanerConfig:
    return CleanerConfig(
        enable=config.get("log.cleaner.enable"),
        threads=config.get("log.cleaner.threads"),
        dedupe_buffer_size=config.get("log.cleaner.dedupe.buffer.size"),
        io_buffer_size=config.get("log.cleaner.io.buffer.size"),
        backoff_ms=config.get("log.cleaner.backoff.ms"),
    )


_PACKAGES = ("broker", "protocol", "storage", "replication", "coordinator")


def _build() -> str:
    """Which build runs: how many of logway's modules are C extensions (setup.py compiles the
    request path with mypyc when LOGWAY_COMPILE=1 and a C compiler is there; otherwise they all
    run as Python)."""
    compiled = sum(
        1
        for name, module in list(sys.modules.items())
        if name.partition(".")[0] in _PACKAGES and (getattr(module, "__file__", None) or "").endswith(".so")
    )
    return f"{compiled} modules compiled with mypyc" if compiled else "pure Python"
