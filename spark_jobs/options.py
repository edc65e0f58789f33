"""The options of the "logway" data source, parsed and checked once, by the names Spark's own
Kafka source gives them, so that jobs written for it port over by changing the format name.

Reading (spark.read.format("logway").option(...)):

| option | meaning |
|---|---|
| kafka.bootstrap.servers | brokers to bootstrap from (plain `bootstrap.servers` is accepted too) |
| subscribe | comma list of topics |
| subscribePattern | a regular expression topic names must match whole (internal topics never match) |
| assign | JSON `{"topicA":[0,1],"topicB":[2]}`: exactly these partitions |
| startingOffsets | `earliest` (default for batch reads; `latest` for streams) or JSON `{"t":{"0":23,"1":-2}}` (-2 earliest, -1 latest) |
| endingOffsets | `latest` (default) or JSON as above (batch reads only) |
| startingTimestamp | ms since the epoch, for every partition: each starts at its first record stamped at or after it |
| startingOffsetsByTimestamp | JSON `{"t":{"0":1700000000000}}` |
| startingOffsetsByTimestampStrategy | `error` (default) or `latest`: what a partition without such a record does |
| endingTimestamp, endingOffsetsByTimestamp | the same for where reading ends (no record: the latest offset) |
| failOnDataLoss | `true` (default): a range whose start retention already deleted fails the query; `false` skips to the log start with a warning |
| includeHeaders | `true` adds the `headers` column |
| minPartitions | split offset ranges so the read has at least this many Spark partitions |
| maxRecordsPerPartition | split any offset range longer than this |
| maxOffsetsPerTrigger | streams: at most this many offsets per micro-batch, shared out by partition size |
| kafka.isolation.level | `read_uncommitted` (default, as Spark's source) or `read_committed` |
| kafkaConsumer.pollTimeoutMs | how long a task waits for records it expects (default 120000) |
| logDirs | comma list of log dirs (the broker's `log.dirs`): read segment files directly, offline |
| rsm.config.url | the brokers' tiered store (their `rsm.config.url`, an fsspec URL: `file:///mnt/tier`, `s3://bucket/prefix`): offsets the store holds are read from it directly, the rest from the brokers (spark_jobs.remote) |
| rsm.config.* | the store's other fsspec options, as the brokers' (`rsm.config.endpoint_url`, `rsm.config.key`, ...) |
| kafka.* | any other librdkafka setting (security.protocol, sasl.*, fetch sizes, ...) |

Precedence, as in Spark: startingTimestamp over startingOffsetsByTimestamp over startingOffsets,
and the same for the ending options. The consumer settings the reader owns (auto.offset.reset,
enable.auto.commit, deserializers, interceptors) are refused, as Spark refuses them;
kafka.group.id is accepted and unused, since readers never join a group nor commit.
Unknown options are ignored, as Spark ignores them, except under the `rsm.` prefix: any
`rsm.config.*` needs rsm.config.url, and other `rsm.*` keys are refused (Kafka has none a
reader could use).

Writing (df.write.format("logway")):

| option | meaning |
|---|---|
| kafka.bootstrap.servers | brokers to bootstrap from (plain `bootstrap.servers` is accepted too) |
| topic | the topic of every row (overrides a topic column) |
| transactional | `true` (default): each task writes in one transaction, exactly once per task for read_committed readers; `false`: an idempotent producer, at least once across task attempts |
| transactionalIdPrefix | the transactional.id of a task is `<prefix>-<job id>-<Spark partition id>` (default prefix `logway-spark`) |
| kafka.transaction.timeout.ms | how long a task's transaction may stay open (default 900000 here) |
| kafka.* | any other librdkafka producer setting (compression.type, linger.ms, ...) |

kafka.transactional.id is refused: the writer derives it per task (see spark_jobs.writer).

Everything here is plain Python: no Spark, no client, so it is unit-tested directly.
"""

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

EARLIEST = -2
LATEST = -1
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
DEFAULT_POLL_TIMEOUT_MS = 120_000
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

# Options whose kafka.* form the reader or writer sets itself (Spark refuses the same ones).
_MANAGED_CLIENT_KEYS = frozenset(
    {
        "auto.offset.reset",
        "enable.auto.commit",
        "key.deserializer",
        "value.deserializer",
        "key.serializer",
        "value.serializer",
        "interceptor.classes",
        "transactional.id",
    }
)
# Handled by their own options rather than passed to the client as they are.
_CONSUMED_CLIENT_KEYS = frozenset({"bootstrap.servers", "isolation.level", "group.id"})


class OptionError(ValueError):
    """An option that is missing, malformed or in conflict with another."""


TP = tuple[str, int]


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: one of `assign`, `subscribe`, `subscribePattern`."""

    kind: Literal["assign", "subscribe", "pattern"]
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[TP, ...] = ()

    def describe(self) -> str:
        if self.kind == "assign":
            return "assign " + ", ".join(f"{t}-{p}" for t, p in self.partitions)
        if self.kind == "subscribe":
            return "subscribe " + ",".join(self.topics)
        return f"subscribePattern {self.pattern}"

    def select(self, available: Mapping[str, int]) -> list[TP]:
        """The partitions to read, given every topic and its partition count.

        Raises OptionError for a subscribed topic or an assigned partition that does not exist:
        a batch read of something missing is a mistake, not an empty result."""
        if self.kind == "assign":
            missing = [
                f"{t}-{p}" for t, p in self.partitions if not 0 <= p < available.get(t, 0)
            ]
            if missing:
                raise OptionError(f"assigned partitions do not exist: {', '.join(missing)}")
            return sorted(set(self.partitions))
        if self.kind == "subscribe":
            missing = [t for t in self.topics if t not in available]
            if missing:
                raise OptionError(f"subscribed topics do not exist: {', '.join(missing)}")
            topics = sorted(set(self.topics))
        else:
            regex = re.compile(self.pattern)
            topics = sorted(
                t for t in available if t not in INTERNAL_TOPICS and regex.fullmatch(t)
            )
        return [(t, p) for t in topics for p in range(available[t])]


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends, before it is resolved against the log.

    kind "offsets": `offsets` maps partitions to offsets, EARLIEST (-2) or LATEST (-1);
    "timestamp": every partition by `timestamp`; "timestamps": `timestamps` per partition.
    Partitions a JSON spec leaves out take `default` (EARLIEST or LATEST)."""

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: tuple[tuple[TP, int], ...] = ()
    timestamp: int | None = None
    timestamps: tuple[tuple[TP, int], ...] = ()

    def to_json(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "timestamp":
            return str(self.timestamp)
        return offsets_to_json(dict(self.offsets if self.kind == "offsets" else self.timestamps))


@dataclass(frozen=True)
class ReadOptions:
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    bootstrap_servers: str = ""
    log_dirs: tuple[str, ...] = ()
    starting_by_timestamp_strategy: Literal["error", "latest"] = "error"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    isolation_level: str = "read_uncommitted"
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    client_config: tuple[tuple[str, str], ...] = field(default=())
    remote_store_url: str | None = None
    remote_store_options: tuple[tuple[str, str], ...] = ()

    @property
    def offline(self) -> bool:
        return bool(self.log_dirs)

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"


DEFAULT_TRANSACTIONAL_ID_PREFIX = "logway-spark"


@dataclass(frozen=True)
class WriteOptions:
    bootstrap_servers: str
    topic: str | None = None
    client_config: tuple[tuple[str, str], ...] = ()
    transactional: bool = True
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX
    inject_failure_after_rows: int | None = None  # tests: see spark_jobs.writer


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    """Spark hands options over case-insensitively; so do we (values keep their case)."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    value = opts.get(name.lower())
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"{name} must be true or false, not {value!r}")
    return lowered == "true"


def _positive_int(opts: dict[str, str], name: str) -> int | None:
    value = opts.get(name.lower())
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"{name} must be an integer, not {value!r}") from None
    if number <= 0:
        raise OptionError(f"{name} must be positive, not {number}")
    return number


def _json(name: str, text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{name} is not valid JSON ({exc}): {text!r}") from None


def parse_partition_map(name: str, text: str) -> dict[TP, int]:
    """`{"topic": {"0": 23, "1": -2}}` -> {("topic", 0): 23, ("topic", 1): -2}."""
    parsed = _json(name, text)
    if not isinstance(parsed, dict):
        raise OptionError(f"{name} must be a JSON object of topics, not {text!r}")
    result: dict[TP, int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"{name}: topic {topic!r} must map partitions to numbers")
        for partition, value in partitions.items():
            try:
                number = int(partition)
            except ValueError:
                raise OptionError(f"{name}: partition {partition!r} of {topic!r} is not a number") from None
            if not isinstance(value, int) or isinstance(value, bool):
                raise OptionError(f"{name}: {topic}-{partition} must be an integer, not {value!r}")
            result[(topic, number)] = value
    return result


def offsets_to_json(offsets: Mapping[TP, int]) -> str:
    """The inverse of parse_partition_map, in Spark's layout, sorted."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), value in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = value
    return json.dumps(nested, separators=(",", ":"))


def _parse_assign(text: str) -> tuple[TP, ...]:
    parsed = _json("assign", text)
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(f'assign must be a JSON object like {{"topic":[0,1]}}, not {text!r}')
    partitions = []
    for topic, numbers in parsed.items():
        if not isinstance(numbers, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers
        ):
            raise OptionError(f"assign: topic {topic!r} must list partition numbers")
        partitions += [(topic, n) for n in numbers]
    return tuple(partitions)


def _parse_subscription(opts: dict[str, str]) -> Subscription:
    given = [name for name in ("assign", "subscribe", "subscribepattern") if opts.get(name)]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options assign, subscribe, subscribePattern must be set"
            + (f" (got {', '.join(given)})" if given else "")
        )
    kind = given[0]
    if kind == "assign":
        return Subscription("assign", partitions=_parse_assign(opts["assign"]))
    if kind == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise OptionError("subscribe lists no topic")
        return Subscription("subscribe", topics=topics)
    pattern = opts["subscribepattern"]
    try:
        re.compile(pattern)
    except re.error as exc:
        raise OptionError(f"subscribePattern {pattern!r} is not a regular expression: {exc}") from None
    return Subscription("pattern", pattern=pattern)


def _timestamp(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise OptionError(f"{name} must be milliseconds since the epoch, not {text!r}") from None


def _parse_offset_spec(opts: dict[str, str], which: str, default: str, streaming: bool) -> OffsetSpec:
    """startingX or endingX, by Spark's precedence: timestamp, by-timestamp JSON, offsets."""
    timestamp = opts.get(f"{which}timestamp")
    if timestamp is not None:
        return OffsetSpec("timestamp", timestamp=_timestamp(f"{which}Timestamp", timestamp))
    by_timestamp = opts.get(f"{which}offsetsbytimestamp")
    if by_timestamp is not None:
        timestamps = parse_partition_map(f"{which}OffsetsByTimestamp", by_timestamp)
        return OffsetSpec("timestamps", timestamps=tuple(sorted(timestamps.items())))
    name = f"{which}Offsets"
    text = opts.get(f"{which}offsets", default).strip()
    if text.lower() in ("earliest", "latest"):
        kind = text.lower()
        if not streaming and (which, kind) in (("starting", "latest"), ("ending", "earliest")):
            raise OptionError(f"{name}={kind} is not allowed in a batch read (it reads nothing)")
        return OffsetSpec(kind)  # type: ignore[arg-type]
    offsets = parse_partition_map(name, text)
    for tp, value in offsets.items():
        if value < EARLIEST:
            raise OptionError(f"{name}: {tp[0]}-{tp[1]} has offset {value}; -2 is earliest, -1 latest")
        if not streaming and which == "starting" and value == LATEST:
            raise OptionError(f"{name}: {tp[0]}-{tp[1]} is latest (-1), not allowed in a batch read")
        if not streaming and which == "ending" and value == EARLIEST:
            raise OptionError(f"{name}: {tp[0]}-{tp[1]} is earliest (-2), not allowed in a batch read")
    return OffsetSpec("offsets", offsets=tuple(sorted(offsets.items())))


def client_config(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The kafka.* options to hand to librdkafka, minus those the data source handles."""
    config = []
    for key, value in _lower(opts).items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in _MANAGED_CLIENT_KEYS:
            raise OptionError(f"kafka.{name} is managed by the logway data source and cannot be set")
        if name not in _CONSUMED_CLIENT_KEYS:
            config.append((name, value))
    return tuple(sorted(config))


def bootstrap_servers(opts: dict[str, str], required: bool) -> str:
    servers = opts.get("kafka.bootstrap.servers") or opts.get("bootstrap.servers") or ""
    if required and not servers:
        raise OptionError("kafka.bootstrap.servers (or bootstrap.servers) must be set")
    return servers


RSM_CONFIG_PREFIX = "rsm.config."
RSM_URL = "rsm.config.url"


def remote_store(opts: Mapping[str, str], offline: bool) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """(rsm.config.url, the other rsm.config.* options without the prefix), the brokers'
    settings of their tiered store. Spark lowercases option names; fsspec's options are
    lowercase."""
    unknown = sorted(k for k in opts if k.startswith("rsm.") and not k.startswith(RSM_CONFIG_PREFIX))
    if unknown:
        raise OptionError(f"unknown options {', '.join(unknown)} (the store is set by rsm.config.url and rsm.config.*)")
    url = opts.get(RSM_URL, "").strip() or None
    store_options = tuple(
        sorted((k[len(RSM_CONFIG_PREFIX) :], v) for k, v in opts.items() if k.startswith(RSM_CONFIG_PREFIX) and k != RSM_URL)
    )
    if store_options and url is None:
        raise OptionError(
            f"{', '.join(RSM_CONFIG_PREFIX + k for k, _ in store_options)} set without rsm.config.url: nothing would use them"
        )
    if url is not None and offline:
        raise OptionError("rsm.config.url reads a tiered store beside the brokers; it cannot be combined with logDirs")
    return url, store_options


def parse_read_options(options: Mapping[str, str], streaming: bool = False) -> ReadOptions:
    opts = _lower(options)
    log_dirs = tuple(d.strip() for d in opts.get("logdirs", "").split(",") if d.strip())
    isolation = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ISOLATION_LEVELS:
        raise OptionError(f"kafka.isolation.level must be one of {ISOLATION_LEVELS}, not {isolation!r}")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"startingOffsetsByTimestampStrategy must be error or latest, not {strategy!r}")
    if streaming and any(k.startswith("ending") for k in opts):
        raise OptionError("ending offsets are for batch reads; a stream reads on as data comes")
    poll_timeout = _positive_int(opts, "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS
    store_url, store_options = remote_store(opts, offline=bool(log_dirs))
    return ReadOptions(
        subscription=_parse_subscription(opts),
        starting=_parse_offset_spec(opts, "starting", "latest" if streaming else "earliest", streaming),
        ending=OffsetSpec("latest") if streaming else _parse_offset_spec(opts, "ending", "latest", False),
        bootstrap_servers=bootstrap_servers(opts, required=not log_dirs),
        log_dirs=log_dirs,
        starting_by_timestamp_strategy=strategy,  # type: ignore[arg-type]
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        min_partitions=_positive_int(opts, "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        isolation_level=isolation,
        poll_timeout_ms=poll_timeout,
        client_config=client_config(opts),
        remote_store_url=store_url,
        remote_store_options=store_options,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    topic = opts.get("topic", "").strip() or None
    prefix = opts.get("transactionalidprefix", DEFAULT_TRANSACTIONAL_ID_PREFIX).strip()
    if not prefix:
        raise OptionError("transactionalIdPrefix must not be empty")
    return WriteOptions(
        bootstrap_servers=bootstrap_servers(opts, required=True),
        topic=topic,
        client_config=client_config(opts),
        transactional=_bool(opts, "transactional", True),
        transactional_id_prefix=prefix,
        inject_failure_after_rows=_positive_int(opts, "injectFailureAfterRows"),
    )
