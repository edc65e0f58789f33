"""The broker's metrics as Prometheus families, built when the registry is read (on the loop).

Names are those the Prometheus JMX exporter's example Kafka rules (kafka-2_0_0.yml, lower-case
output names) give Kafka's MBeans, so dashboards and alerts written for Kafka apply:
kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions becomes
kafka_server_replicamanager_underreplicatedpartitions, a meter's count (...PerSec) becomes
<name>_total, a gauge's extra key properties become labels (topic, partition, request...).
Kafka's timers (RequestMetrics, LogFlushStats, ZooKeeperRequestLatencyMs) are Prometheus
histograms here (_bucket, _sum, _count, in ms) rather than the exporter's quantile gauges;
their _count is the exporter's. Kafka's group and transaction coordinator MBeans
(kafka.coordinator.group...) match no rule of the exporter; they follow the same scheme.
Consumer lag is named as kafka-exporter names it (kafka_consumergroup_lag...).

Gauges are computed from the state that exists (partitions, logs, groups, the controller's
context) each time they are read; counters come from broker/metrics/stats.py and from the
counts the storage, replication and cluster code keep.

Reading happens in two steps, so that a broker with many partitions does not hold its event
loop for the whole of a scrape: `BrokerCollector.snapshot()`, on the loop, reads the state into
plain rows (and builds the few families of single values at once); `families(snapshot)` then
builds the per-partition, per-topic and per-request families from those rows, on any thread.
"""

import functools
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Final, Union

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from broker.metrics.stats import BrokerTopicStats, Histogram, RequestStats
from coordinator.group import GroupState
from coordinator.transaction_log import TxnState

if TYPE_CHECKING:
    from broker.metrics import BrokerMetrics
    from broker.server import Broker


# A family, or what builds families from rows already read (anywhere: it reads no broker state).
Part = Union[Metric, Callable[[], Iterable[Metric]]]


class BrokerCollector:
    """Every family of one broker; registered in the broker's own registry (where `collect`
    reads and builds at once, on the loop)."""

    def __init__(self, broker: "Broker", metrics: "BrokerMetrics") -> None:
        self._broker = broker
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # families vary with the broker's state: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        return families(self.snapshot())

    def snapshot(self) -> list[Part]:
        """On the loop: the broker's state read."""
        return list(self._parts())

    def _parts(self) -> Iterator[Part]:
        broker, metrics = self._broker, self._metrics
        metrics.topics.retain(broker.topics.topics)
        yield broker_topic_part(metrics.topics, broker.replica_manager.fetchers.bytes_appended)
        yield request_part(metrics.requests)
        yield broker_state_family(broker)
        yield from replica_manager_families(broker)
        yield from fetch_session_families(broker)
        yield from controller_families(broker)
        yield from controller_event_families(broker, metrics)
        yield from log_families(broker)
        yield histogram_family(
            "kafka_log_logflushstats_logflushrateandtimems",
            "Time a log flush (fsync of a log's segments) took, in ms.",
            metrics.flush_times,
        )
        yield from cleaner_families(broker)
        yield from network_families(broker, metrics)
        yield from group_families(broker)
        yield from consumer_lag_families(broker)
        yield from transaction_families(broker)
        yield from quota_families(broker)
        yield from zookeeper_families(broker, metrics)


class Built:
    """Families made by `build` when read: what prometheus_client's encoders and graphite bridge
    take for a registry, on the thread that reads them."""

    def __init__(self, build: Callable[[], Iterable[Metric]]) -> None:
        self._build = build

    def collect(self) -> Iterable[Metric]:
        return self._build()


def families(snapshot: Iterable[Part]) -> Iterator[Metric]:
    """The families of a snapshot, the deferred ones built now."""
    for part in snapshot:
        if isinstance(part, Metric):
            yield part
        else:
            yield from part()


# ------------------------------------------------------------------------------ helpers


def counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def histogram_family(
    name: str, documentation: str, histogram: Histogram, labels: dict[str, str] | None = None,
    family: HistogramMetricFamily | None = None,
) -> HistogramMetricFamily:
    """`histogram` as a Prometheus histogram (added to `family` when given, under `labels`)."""
    if family is None:
        family = HistogramMetricFamily(name, documentation, labels=list(labels or ()))
    family.add_metric(list((labels or {}).values()), list(histogram.cumulative()), histogram.sum)
    return family


# ----------------------------------------------------------------- BrokerTopicMetrics

_TOPIC_METERS = (
    ("messagesin", "messages_in", "Records appended to the topic's logs by producers."),
    ("bytesin", "bytes_in", "Bytes of record batches producers appended to the topic."),
    ("bytesout", "bytes_out", "Bytes of records sent to consumers of the topic."),
    ("bytesrejected", "bytes_rejected", "Bytes of produced record batches refused with an error."),
    ("totalproducerequests", "produce_requests", "Partition appends of produce requests."),
    ("failedproducerequests", "failed_produce_requests", "Partition appends that failed."),
    ("totalfetchrequests", "fetch_requests", "Partition reads of consumer fetch requests."),
    ("failedfetchrequests", "failed_fetch_requests", "Partition reads that failed."),
)


def broker_topic_part(stats: BrokerTopicStats, replication_bytes_in: int) -> Part:
    """Kafka's BrokerTopicMetrics meters, per topic and for the broker (no topic label, as the
    exporter gives the MBean without a topic); the replication bytes for the broker only, as
    Kafka counts them. `replication_bytes_in`: what this broker's replica fetchers appended."""
    attributes = [attribute for _, attribute, _ in _TOPIC_METERS]
    retired = [getattr(stats.retired, attribute) for attribute in attributes]
    rows = [(topic, [getattr(topic_stats, a) for a in attributes]) for topic, topic_stats in stats.topics.items()]
    replication = (replication_bytes_in, stats.replication_bytes_out)
    return functools.partial(_broker_topic_families, retired, rows, replication)


def _broker_topic_families(
    retired: list[int], rows: list[tuple[str, list[int]]], replication: tuple[int, int]
) -> Iterator[Metric]:
    for index, (metric, _, documentation) in enumerate(_TOPIC_METERS):
        family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{metric}", documentation, labels=["topic"])
        total = retired[index]
        for topic, values in rows:
            total += values[index]
            family.add_metric([topic], values[index])
        family.samples.append(Sample(f"kafka_server_brokertopicmetrics_{metric}_total", {}, total))
        yield family
    bytes_in, bytes_out = replication
    yield counter(
        "kafka_server_brokertopicmetrics_replicationbytesin",
        "Bytes of record batches this broker's replica fetchers appended from leaders.",
        bytes_in,
    )
    yield counter(
        "kafka_server_brokertopicmetrics_replicationbytesout",
        "Bytes of records this broker sent to followers fetching from it.",
        bytes_out,
    )


# ------------------------------------------------------------------------ RequestMetrics

_REQUEST_TIMES = (
    ("requestqueuetimems", "queue", "Time the request waited after it was read before it was "
     "handled (behind earlier requests of its connection, or a throttled connection), in ms."),
    ("localtimems", "local", "Time the broker spent handling the request and encoding its "
     "response on the event loop, in ms."),
    ("remotetimems", "remote", "Time the request waited for others (a long-poll fetch for data, "
     "an acks=all produce for followers, a join for the group), in ms."),
    ("responsesendtimems", "send", "Time from the response queued on its connection to its last "
     "byte handed to the socket, in ms."),
    ("totaltimems", "total", "Time from the request read to its response sent, in ms."),
)


# Fetches are recorded as one of these only (broker.dispatch); Fetch is their sum.
_FETCH_KINDS: Final = ("FetchConsumer", "FetchFollower")


def request_part(stats: RequestStats) -> Part:
    rows = [
        (name, times.by_version(), [_copy(getattr(times, attribute)) for _, attribute, _ in _REQUEST_TIMES])
        for name, times in stats.by_name.items()
    ]
    fetches = [row for row in rows if row[0] in _FETCH_KINDS]
    if fetches:
        versions: Counter[int] = Counter()
        for _, by_version, _ in fetches:
            versions.update(by_version)
        rows.append(("Fetch", dict(versions), [_sum(list(kinds)) for kinds in zip(*(row[2] for row in fetches))]))
    return functools.partial(_request_families, rows)


def _sum(histograms: list[Histogram]) -> Histogram:
    """One histogram of the observations of several."""
    total = Histogram()
    total.counts = [sum(counts) for counts in zip(*(histogram.counts for histogram in histograms))]
    total.sum = sum(histogram.sum for histogram in histograms)
    return total


def _copy(histogram: Histogram) -> Histogram:
    copy = Histogram()
    copy.counts, copy.sum = list(histogram.counts), histogram.sum
    return copy


def _request_families(rows: list[tuple[str, dict[int, int], list[Histogram]]]) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        "kafka_network_requestmetrics_requests", "Requests served, by request name and version.",
        labels=["request", "version"],
    )
    for name, versions, _ in rows:
        for version, count in versions.items():
            requests.add_metric([name, str(version)], count)
    yield requests
    for index, (metric, _, documentation) in enumerate(_REQUEST_TIMES):
        family = HistogramMetricFamily(f"kafka_network_requestmetrics_{metric}", documentation, labels=["request"])
        for name, _, histograms in rows:
            histogram_family("", "", histograms[index], {"request": name}, family)
        yield family


# ------------------------------------------------------------------------ ReplicaManager


def _partition_gauges(name: str, documentation: str, rows: list[tuple[str, int, float]]) -> Iterator[Metric]:
    """A gauge per partition from (topic, partition, value) rows."""
    family = GaugeMetricFamily(name, documentation, labels=["topic", "partition"])
    samples = family.samples
    for topic, partition, value in rows:
        samples.append(Sample(name, {"topic": topic, "partition": str(partition)}, value))
    yield family


def replica_manager_families(broker: "Broker") -> Iterator[Part]:
    replica_manager = broker.replica_manager
    log_manager = broker.log_manager
    leaders = under_replicated = under_min_isr = at_min_isr = offline = 0
    per_partition = []
    for tp, partition in replica_manager.partitions.items():
        if log_manager.is_offline(tp):
            offline += 1
        lagging = 0
        if partition.is_leader:
            leaders += 1
            if len(partition.isr) < len(partition.replicas):
                under_replicated += 1
                lagging = 1
            min_isr = partition.min_insync_replicas
            if len(partition.isr) < min_isr:
                under_min_isr += 1
            elif len(partition.isr) == min_isr:
                at_min_isr += 1
        per_partition.append((tp.topic, tp.partition, lagging))
    prefix = "kafka_server_replicamanager_"
    yield gauge(prefix + "leadercount", "Partitions this broker leads.", leaders)
    yield gauge(prefix + "partitioncount", "Partitions this broker holds a replica of.", len(replica_manager.partitions))
    yield gauge(
        prefix + "underreplicatedpartitions",
        "Partitions this broker leads whose ISR is smaller than their replica set.",
        under_replicated,
    )
    yield gauge(
        prefix + "underminisrpartitioncount",
        "Partitions this broker leads whose ISR is below min.insync.replicas (acks=all produces fail).",
        under_min_isr,
    )
    yield gauge(
        prefix + "atminisrpartitioncount",
        "Partitions this broker leads whose ISR is exactly min.insync.replicas.",
        at_min_isr,
    )
    yield gauge(prefix + "offlinereplicacount", "Replicas here whose log dir is offline.", offline)
    yield counter(prefix + "isrshrinks", "ISR shrinks this broker stored as leader.", replica_manager.isr_shrinks)
    yield counter(prefix + "isrexpands", "ISR expansions this broker stored as leader.", replica_manager.isr_expands)
    yield functools.partial(
        _partition_gauges,
        "kafka_cluster_partition_underreplicated",
        "1 when this broker leads the partition and its ISR is smaller than its replica set.",
        per_partition,
    )
    yield gauge(
        "kafka_server_replicafetchermanager_maxlag",
        "Largest lag in records of a partition this broker follows (leader high watermark minus log end).",
        replica_manager.fetchers.max_lag(),
    )
    yield _purgatory_gauge(
        "kafka_server_delayedoperationpurgatory_purgatorysize",
        "Waiting requests counted once per partition each waits on: long-poll fetches for data, "
        "acks=all produces for followers.",
        replica_manager.watched_partitions(),
    )
    yield _purgatory_gauge(
        "kafka_server_delayedoperationpurgatory_numdelayedoperations",
        "Requests waiting: long-poll fetches for data, acks=all produces for followers.",
        replica_manager.waiting_requests(),
    )


def fetch_session_families(broker: "Broker") -> Iterator[Metric]:
    """Kafka's FetchSessionCache metrics (incremental fetch sessions, KIP-227)."""
    sessions = broker.fetch_sessions
    yield gauge(
        "kafka_server_fetchsessioncache_numincrementalfetchsessions",
        "Incremental fetch sessions kept for consumers and followers.",
        len(sessions.sessions),
    )
    yield gauge(
        "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
        "Partitions kept over all incremental fetch sessions.",
        sessions.partitions,
    )
    yield counter(
        "kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
        "Sessions evicted to make room for new ones.",
        sessions.evictions,
    )


def _purgatory_gauge(name: str, documentation: str, counts: tuple[int, int]) -> GaugeMetricFamily:
    fetches, produces = counts
    purgatory = GaugeMetricFamily(name, documentation, labels=["delayedoperation"])
    purgatory.add_metric(["Fetch"], fetches)
    purgatory.add_metric(["Produce"], produces)
    return purgatory


# Kafka's BrokerState values
_STARTING, _RUNNING, _SHUTTING_DOWN = 1, 3, 7


def broker_state_family(broker: "Broker") -> Metric:
    state = _SHUTTING_DOWN if broker.shutting_down else _RUNNING if broker.ready else _STARTING
    return gauge(
        "kafka_server_kafkaserver_brokerstate",
        "Kafka's broker state: 1 starting (loading logs, registering), 3 running, 7 shutting down.",
        state,
    )


# ------------------------------------------------------------------------ KafkaController


def controller_families(broker: "Broker") -> Iterator[Metric]:
    """Standalone, the broker is its cluster's controller; a partition is offline when its log
    dir is. In cluster mode the active controller reports what its context holds, the others
    zeros, as Kafka's controllers do: sum over the brokers for the cluster's value."""
    if broker.cluster is None:
        active = 1
        topics = len(broker.topics.topics)
        partitions = len(broker.replica_manager.partitions)
        offline = sum(1 for tp in broker.replica_manager.partitions if broker.log_manager.is_offline(tp))
    else:
        controller = broker.cluster.controller
        active = int(controller.active)
        topics, partitions, offline = controller.partition_counts()
    prefix = "kafka_controller_kafkacontroller_"
    yield gauge(prefix + "activecontrollercount", "1 on the active controller, 0 elsewhere.", active)
    yield gauge(
        prefix + "offlinepartitionscount",
        "Partitions without a live leader (reported by the active controller).",
        offline,
    )
    yield gauge(prefix + "globaltopiccount", "Topics in the cluster (active controller).", topics)
    yield gauge(prefix + "globalpartitioncount", "Partitions in the cluster (active controller).", partitions)


def rate_and_time_name(state: str) -> str:
    """The ControllerStats timer of a ControllerState (Kafka's rateAndTimeMetricName):
    BrokerChange's keeps the name it had before Kafka had states."""
    return "LeaderElectionRateAndTimeMs" if state == "BrokerChange" else f"{state}RateAndTimeMs"


def controller_event_families(broker: "Broker", metrics: "BrokerMetrics") -> Iterator[Metric]:
    """Kafka's ControllerStats and ControllerEventManager (cluster mode only: standalone, the
    broker runs no controller events and elects no leaders)."""
    if broker.cluster is None:
        return
    controller = broker.cluster.controller
    yield counter(
        "kafka_controller_controllerstats_uncleanleaderelections",
        "Leaders this broker's controller elected from outside the ISR (records may be lost).",
        controller.unclean_leader_elections,
    )
    for state, times in metrics.controller_event_times.items():
        yield histogram_family(
            f"kafka_controller_controllerstats_{rate_and_time_name(state).lower()}",
            f"Time this broker's controller took to process its {state} events, in ms.",
            times,
        )
    yield gauge(
        "kafka_controller_controllereventmanager_eventqueuesize",
        "Events waiting in this broker's controller queue.",
        controller.queued_events(),
    )
    yield histogram_family(
        "kafka_controller_controllereventmanager_eventqueuetimems",
        "Time an event waited in the controller's queue before it was processed, in ms.",
        metrics.controller_queue_times,
    )


# ----------------------------------------------------------------------------- Logs


_LOG_GAUGES = (
    ("kafka_log_log_size", "Bytes of the partition's log segments."),
    ("kafka_log_log_numlogsegments", "Segments of the partition's log."),
    ("kafka_log_log_logstartoffset", "The log start offset."),
    ("kafka_log_log_logendoffset", "The log end offset."),
)


def log_families(broker: "Broker") -> Iterator[Part]:
    log_manager = broker.log_manager
    rows = [
        (tp.topic, tp.partition, (log.size_in_bytes, len(log.segments), log.log_start_offset, log.log_end_offset))
        for tp, log in log_manager.logs.items()
    ]
    for index, (name, documentation) in enumerate(_LOG_GAUGES):
        yield functools.partial(
            _partition_gauges, name, documentation, [(topic, partition, values[index]) for topic, partition, values in rows]
        )
    dirs = log_manager.dirs.values()
    yield gauge(
        "kafka_log_logmanager_offlinelogdirectorycount",
        "Log dirs taken offline by an I/O error.",
        sum(1 for d in dirs if not d.online),
    )
    offline = GaugeMetricFamily(
        "kafka_log_logmanager_logdirectoryoffline", "1 for a log dir that is offline.", labels=["logdirectory"]
    )
    for log_dir in dirs:
        offline.add_metric([log_dir.path], 0 if log_dir.online else 1)
    yield offline


def cleaner_families(broker: "Broker") -> Iterator[Metric]:
    cleaner = broker.log_manager.cleaner
    since_last_run = 0.0 if cleaner.last_run_ms is None else max(time.time() * 1000 - cleaner.last_run_ms, 0.0)
    yield gauge(
        "kafka_log_logcleaner_time_since_last_run_ms",
        "Milliseconds since the log cleaner last looked for a log to clean (0 before its first round).",
        since_last_run,
    )
    yield gauge("kafka_log_logcleaner_max_clean_time_secs", "Duration of the last cleaning, in s.", cleaner.last_clean_s)
    yield gauge(
        "kafka_log_logcleanermanager_max_dirty_percent",
        "Highest dirty ratio (percent of a compacted log's cleanable bytes not yet cleaned) "
        "the cleaner last found.",
        100 * cleaner.max_dirty_ratio,
    )
    uncleanable = GaugeMetricFamily(
        "kafka_log_logcleanermanager_uncleanable_partitions_count",
        "Partitions whose cleaning failed; left uncleaned until restart.",
        labels=["logdirectory"],
    )
    by_dir = Counter(
        os.path.dirname(broker.log_manager.logs[tp].directory)
        for tp in cleaner.uncleanable
        if tp in broker.log_manager.logs
    )
    for log_dir in broker.log_manager.dirs.values():
        uncleanable.add_metric([log_dir.path], by_dir.get(log_dir.path, 0))
    yield uncleanable


# ----------------------------------------------------------------------------- Network


def network_families(broker: "Broker", metrics: "BrokerMetrics") -> Iterator[Metric]:
    yield gauge(
        "kafka_network_socketserver_networkprocessoravgidle_percent",
        "Share (0-1) of time the event loop, logway's one network thread, waited for work.",
        metrics.loop_idle.idle,
    )
    connections = GaugeMetricFamily(
        "kafka_server_socket_server_metrics_connection_count",
        "Open connections per listener.",
        labels=["listener", "networkprocessor"],
    )
    created = CounterMetricFamily(
        "kafka_server_socket_server_metrics_connection_creation",
        "Connections accepted per listener.",
        labels=["listener", "networkprocessor"],
    )
    open_by_listener = broker.connections_by_listener()
    for listener in broker.config.listeners:
        connections.add_metric([listener.name, "0"], open_by_listener.get(listener.name, 0))
        created.add_metric([listener.name, "0"], metrics.connections_accepted.get(listener.name, 0))
    yield connections
    yield created


# ----------------------------------------------------------------------- Coordinators

_GROUP_STATES = (
    ("numgroupsstable", GroupState.STABLE),
    ("numgroupspreparingrebalance", GroupState.PREPARING_REBALANCE),
    ("numgroupscompletingrebalance", GroupState.COMPLETING_REBALANCE),
    ("numgroupsempty", GroupState.EMPTY),
    ("numgroupsdead", GroupState.DEAD),
)


def group_families(broker: "Broker") -> Iterator[Metric]:
    _error, groups = broker.group_coordinator.list_groups(())
    states = Counter(group.state for group in groups)
    prefix = "kafka_coordinator_group_groupmetadatamanager_"
    yield gauge(prefix + "numgroups", "Groups this broker coordinates.", len(groups))
    for metric, state in _GROUP_STATES:
        yield gauge(prefix + metric, f"Groups this broker coordinates in state {state.value}.", states[state.value])
    yield gauge(
        prefix + "numoffsets",
        "Committed offsets of the groups this broker coordinates.",
        sum(1 for _ in broker.group_coordinator.committed_offsets()),
    )


def consumer_lag_families(broker: "Broker") -> Iterator[Part]:
    """kafka-exporter's consumer group metrics for the groups this broker coordinates (each group
    has one coordinator, so summing over brokers counts each once). Lag is the partition's high
    watermark minus the committed offset, for partitions this broker holds a replica of (a
    follower's high watermark trails the leader's by a fetch); others are left out."""
    partitions = broker.replica_manager.partitions
    committed = []
    for group_id, tp, offset in broker.group_coordinator.committed_offsets():
        partition = partitions.get(tp)
        committed.append((group_id, tp.topic, tp.partition, offset, None if partition is None else partition.high_watermark))
    yield functools.partial(_consumer_lag_families, committed)
    led = [
        (tp.topic, tp.partition, partition.high_watermark, partition.log.log_start_offset)
        for tp, partition in partitions.items()
        if partition.is_leader
    ]
    yield functools.partial(
        _partition_gauges,
        "kafka_topic_partition_current_offset",
        "High watermark of the partitions this broker leads.",
        [(topic, partition, newest) for topic, partition, newest, _ in led],
    )
    yield functools.partial(
        _partition_gauges,
        "kafka_topic_partition_oldest_offset",
        "Log start offset of the partitions this broker leads.",
        [(topic, partition, oldest) for topic, partition, _, oldest in led],
    )


def _consumer_lag_families(committed: list[tuple[str, str, int, int, int | None]]) -> Iterator[Metric]:
    labels = ["consumergroup", "topic", "partition"]
    current = GaugeMetricFamily("kafka_consumergroup_current_offset", "The group's committed offset.", labels=labels)
    lag = GaugeMetricFamily(
        "kafka_consumergroup_lag", "High watermark minus the group's committed offset.", labels=labels
    )
    lag_sum: Counter[tuple[str, str]] = Counter()
    for group_id, topic, partition, offset, high_watermark in committed:
        values = [group_id, topic, str(partition)]
        current.add_metric(values, offset)
        if high_watermark is not None:
            behind = max(high_watermark - offset, 0)
            lag.add_metric(values, behind)
            lag_sum[group_id, topic] += behind
    lag_sums = GaugeMetricFamily(
        "kafka_consumergroup_lag_sum", "The group's lag over the topic's partitions.", labels=["consumergroup", "topic"]
    )
    for (group_id, topic), value in lag_sum.items():
        lag_sums.add_metric([group_id, topic], value)
    yield from (current, lag, lag_sums)


def transaction_families(broker: "Broker") -> Iterator[Metric]:
    _error, transactions = broker.transaction_coordinator.list_transactions()
    states = Counter(txn.state for txn in transactions)
    family = GaugeMetricFamily(
        "kafka_coordinator_transaction_transactionstatemanager_numtransactions",
        "Transactional ids this broker coordinates, by transaction state.",
        labels=["state"],
    )
    for state in TxnState:
        family.add_metric([_txn_state_name(state)], states[state])
    yield family
    now = broker.transaction_coordinator.clock()
    open_states = (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
    oldest = max((now - txn.start_ms for txn in transactions if txn.state in open_states), default=0)
    yield gauge(
        "kafka_coordinator_transaction_transactionstatemanager_oldestopentransactionms",
        "Age of the oldest open transaction this broker coordinates, in ms (0 without one).",
        max(oldest, 0),
    )


def _txn_state_name(state: TxnState) -> str:
    """Kafka's name of a transaction state (TransactionState.name): PrepareCommit, Ongoing..."""
    return "".join(word.capitalize() for word in state.name.split("_"))


# ----------------------------------------------------------------------------- quotas

# Kafka's per-client quota sensors, MBeans kafka.server:type=<Produce|Fetch|Request>,user=..,
# client-id=..; the exporter's quota rules name them kafka_server_quota_<attribute> with the
# type as `resource` (user and client-id "" where the quota that applies does not name them).
_QUOTA_TYPES = (("Produce", "produce", "byte_rate"), ("Fetch", "fetch", "byte_rate"), ("Request", "request", "request_time"))


def quota_families(broker: "Broker") -> Iterator[Metric]:
    """The usage of clients of every quota type in use (none until a quota is set, as Kafka
    keeps no quota sensors before)."""
    labels = ["resource", "user", "clientid"]
    rates = {
        "byte_rate": GaugeMetricFamily(
            "kafka_server_quota_byte_rate", "Bytes per second a client produced or fetched, over the quota window.",
            labels=labels,
        ),
        "request_time": GaugeMetricFamily(
            "kafka_server_quota_request_time",
            "Share of a request handler's time (percent) a client's requests took, over the quota window.",
            labels=labels,
        ),
    }
    throttle = GaugeMetricFamily(
        "kafka_server_quota_throttle_time", "Mean throttle time of a client's requests over the quota window, in ms.",
        labels=labels,
    )
    for resource, attribute, rate_name in _QUOTA_TYPES:
        manager = getattr(broker.client_quotas, attribute)
        if not manager.enabled:
            continue
        for user, client_id, rate, mean_throttle_ms in manager.usage():
            rates[rate_name].add_metric([resource, user, client_id], rate)
            throttle.add_metric([resource, user, client_id], mean_throttle_ms)
    yield from (*rates.values(), throttle)


# ----------------------------------------------------------------------------- ZooKeeper


def zookeeper_families(broker: "Broker", metrics: "BrokerMetrics") -> Iterator[Metric]:
    """Cluster mode only (standalone has no ZooKeeper session)."""
    if broker.cluster is None:
        return
    session = metrics.zk_session
    prefix = "kafka_server_sessionexpirelistener_"
    yield counter(prefix + "zookeepersyncconnects", "ZooKeeper (re)connections.", session.sync_connects)
    yield counter(prefix + "zookeeperdisconnects", "ZooKeeper connections lost.", session.disconnects)
    yield counter(prefix + "zookeeperexpires", "ZooKeeper sessions expired.", session.expires)
    state = GaugeMetricFamily(
        prefix + "sessionstate", "1 for the ZooKeeper session's current state.", labels=["state"]
    )
    for name in ("CONNECTED", "CONNECTING", "EXPIRED", "NOT_CONNECTED"):
        state.add_metric([name], int(session.state == name))
    yield state
    yield histogram_family(
        "kafka_server_zookeeperclientmetrics_zookeeperrequestlatencyms",
        "Time a ZooKeeper request took, retries after a lost connection included, in ms.",
        metrics.zk_latency,
    )
