"""Topic-level (per-log) configuration, in Kafka's names, types, defaults and precedence.

A topic key such as `retention.ms` gets its value from, highest first:

1. the topic's own override (set at CreateTopics / AlterConfigs time),
2. the broker keys that stand for it, in order (`log.retention.ms`, then `log.retention.minutes`
   times 60000, then `log.retention.hours` times 3600000) -- only those the operator set,
3. the default.

`LogConfig.resolve` turns that into typed attributes for the log; `describe_topic_configs` reports
it the way DescribeConfigs does; `validate_topic_overrides` checks what a client asks to set.

The small typing helpers here (`parse_value`, `format_value`, `check_value`) follow the rules of
Kafka's config parser and are shared with `broker.config` (storage sits below broker, so the
sharing goes this way).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from protocol.config_types import ConfigEntry, ConfigSource, ConfigSynonym, ConfigType
from protocol.errors import ErrorCode, KafkaError

__all__ = [
    "INT_MAX",
    "LONG_MAX",
    "PREALLOCATE_REFUSAL",
    "InvalidConfigError",
    "BrokerSynonym",
    "TopicConfigDef",
    "TOPIC_CONFIGS",
    "LogConfig",
    "validate_topic_overrides",
    "describe_topic_configs",
    "validate_remote_storage",
    "parse_value",
    "format_value",
    "check_value",
]

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

_INT_BOUNDS = {
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.INT: (-(2**31), 2**31 - 1),
    ConfigType.LONG: (-(2**63), 2**63 - 1),
}
_INTEGER_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_LIST_SPLIT_RE = re.compile(r"\s*,\s*")


class InvalidConfigError(KafkaError):
    """A config name or value that Kafka would refuse (INVALID_CONFIG)."""

    error_code = ErrorCode.invalid_config


# --------------------------------------------------------------------------------------------
# Typing helpers, shared with broker.config
# --------------------------------------------------------------------------------------------


def parse_value(ctype: ConfigType, raw: str) -> Any:
    """Parse a raw string as Kafka's config parser would; ValueError(reason) when it cannot.

    Surrounding whitespace is ignored. BOOLEAN: "true"/"false", any case. SHORT/INT/LONG:
    decimal integers within the Java range. DOUBLE: a decimal or exponent number. LIST: comma
    separated, whitespace around items dropped, "" is the empty list. STRING/CLASS/PASSWORD:
    the trimmed string.
    """
    text = raw.strip()
    if ctype is ConfigType.BOOLEAN:
        lowered = text.lower()
        if lowered == "true":
            return True
        if lowered == "false":
            return False
        raise ValueError("Expected value to be either true or false")
    if ctype in _INT_BOUNDS:
        low, high = _INT_BOUNDS[ctype]
        if _INTEGER_RE.fullmatch(text):
            number = int(text)
            if low <= number <= high:
                return number
        raise ValueError(f"Not a number of type {ctype.name}")
    if ctype is ConfigType.DOUBLE:
        if "_" not in text:
            try:
                return float(text)
            except ValueError:
                pass
        raise ValueError("Not a number of type DOUBLE")
    if ctype is ConfigType.LIST:
        return [] if not text else _LIST_SPLIT_RE.split(text)
    return text


def format_value(ctype: ConfigType, value: Any) -> str | None:
    """Print a typed value as Kafka does in DescribeConfigs (None stays None)."""
    if value is None:
        return None
    if ctype is ConfigType.LIST:
        return ",".join(str(item) for item in value)
    if ctype is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if ctype is ConfigType.DOUBLE:
        return _java_double(float(value))
    return str(value)


def _java_double(x: float) -> str:
    """Java's Double.toString: "0.5", "100.0", "1.0E7", "1.0E-4"."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    if 1e-3 <= abs(x) < 1e7:
        text = repr(x)
        if "e" in text or "E" in text:  # pragma: no cover - repr is fixed-point in this range
            text = format(Decimal(text), "f")
        return text if "." in text else text + ".0"
    sign, digits, exponent = Decimal(repr(x)).as_tuple()
    digit_text = "".join(map(str, digits)).rstrip("0") or "0"
    power = len(digits) + int(exponent) - 1
    mantissa = digit_text[0] + "." + (digit_text[1:] or "0")
    return ("-" if sign else "") + f"{mantissa}E{power}"


def check_value(
    value: Any,
    *,
    minimum: int | float | None = None,
    maximum: int | float | None = None,
    allowed: tuple[str, ...] | None = None,
) -> None:
    """Kafka's range and choice checks; ValueError(reason) when `value` breaks one.

    For a list, `allowed` applies to each item.
    """
    if minimum is not None and value < minimum:
        raise ValueError(f"Value must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ValueError(f"Value must be no more than {maximum}")
    if allowed is not None:
        items = value if isinstance(value, list | tuple | frozenset) else (value,)
        for item in items:
            if item not in allowed:
                raise ValueError("String must be one of: " + ", ".join(allowed))


def _invalid(name: str, raw: Any, reason: str) -> str:
    return f"Invalid value {raw} for configuration {name}: {reason}"


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerSynonym:
    """A broker key that stands for a topic key: topic value = broker value * `factor`."""

    name: str
    factor: int = 1


def _check_throttled_replicas(items: list[str]) -> None:
    if [item.strip() for item in items] == ["*"]:
        return
    for item in items:
        if item.strip() and not re.fullmatch(r"[0-9]+:[0-9]+", item.strip(), re.ASCII):
            raise ValueError(
                "must be '*' or a comma separated list of partitionId:brokerId pairs"
            )


@dataclass(frozen=True)
class TopicConfigDef:
    """One topic config: name, type, default, the broker keys that supply it, checks, docs.

    `synonyms` are in precedence order. When none of them is set, the value is `default`; the
    last synonym is the broker key that carries that default (in its own unit), which is what
    DescribeConfigs lists as the DEFAULT_CONFIG synonym.
    """

    name: str
    type: ConfigType
    default: Any
    documentation: str
    synonyms: tuple[BrokerSynonym, ...] = ()
    minimum: int | float | None = None
    maximum: int | float | None = None
    allowed: tuple[str, ...] | None = None
    extra_check: Callable[[Any], None] | None = None
    # The broker side treats any negative time as "unlimited" (-1) (retention.ms).
    broker_negative_is_unlimited: bool = False
    attr: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attr", self.name.replace(".", "_"))

    def parse(self, raw: Any, *, source_name: str | None = None) -> Any:
        """Parse and check a raw override value; InvalidConfigError when it is not acceptable."""
        name = source_name or self.name
        try:
            value = parse_value(self.type, str(raw))
            self.check(value)
        except ValueError as exc:
            raise InvalidConfigError(_invalid(name, raw, str(exc))) from None
        return value

    def check(self, value: Any) -> None:
        """ValueError(reason) when a typed value breaks this key's rules."""
        check_value(value, minimum=self.minimum, maximum=self.maximum, allowed=self.allowed)
        if self.extra_check is not None:
            self.extra_check(value)

    def from_broker(self, synonym: BrokerSynonym, raw: Any) -> Any:
        """The topic value that a broker synonym's raw value stands for."""
        try:
            value = parse_value(self.type, str(raw))
            if synonym.factor != 1:
                value = min(value * synonym.factor, LONG_MAX)
            if self.broker_negative_is_unlimited and value < 0:
                value = -1
            self.check(value)
        except ValueError as exc:
            raise InvalidConfigError(_invalid(synonym.name, raw, str(exc))) from None
        return value

    def format(self, value: Any) -> str | None:
        return format_value(self.type, value)

    def default_synonym(self) -> ConfigSynonym:
        """The DEFAULT_CONFIG synonym: the last broker key, with the default in its unit.

        A key no broker key stands for (the throttled replica lists) is named by itself.
        """
        if not self.synonyms:
            return ConfigSynonym(self.name, self.format(self.default), ConfigSource.DEFAULT_CONFIG)
        last = self.synonyms[-1]
        default = self.default
        if last.factor != 1:
            default //= last.factor
        return ConfigSynonym(last.name, self.format(default), ConfigSource.DEFAULT_CONFIG)


_MS_PER_MINUTE = 60_000
_MS_PER_HOUR = 3_600_000


def _syn(*names: str | tuple[str, int]) -> tuple[BrokerSynonym, ...]:
    return tuple(
        BrokerSynonym(n) if isinstance(n, str) else BrokerSynonym(n[0], n[1]) for n in names
    )


_L, _I, _D, _B, _S, _LIST = (
    ConfigType.LONG,
    ConfigType.INT,
    ConfigType.DOUBLE,
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.LIST,
)

_DEFS: tuple[TopicConfigDef, ...] = (
    TopicConfigDef(
        "cleanup.policy", _LIST, ("delete",),
        "What to do with old segments: 'delete' drops them once past the retention limits, "
        "'compact' keeps only the latest record of each key; both may be listed.",
        _syn("log.cleanup.policy"), allowed=("compact", "delete"),
    ),
    TopicConfigDef(
        "compression.type", _S, "producer",
        "Codec for batches stored in this topic: uncompressed, zstd, lz4, snappy or gzip; "
        "'producer' keeps whatever codec the producer used.",
        _syn("compression.type"),
        allowed=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    ),
    TopicConfigDef(
        "delete.retention.ms", _L, 86_400_000,
        "On compacted topics, how long a tombstone (a record with a null value) is kept after "
        "compaction, so that consumers reading from the start still see the delete.",
        _syn("log.cleaner.delete.retention.ms"), minimum=0,
    ),
    TopicConfigDef(
        "file.delete.delay.ms", _L, 60_000,
        "How long a deleted segment's files stay on disk before they are removed.",
        _syn("log.segment.delete.delay.ms"), minimum=0,
    ),
    TopicConfigDef(
        "flush.messages", _L, LONG_MAX,
        "fsync the log after this many appended records. The default never forces a flush and "
        "relies on the OS and on replication for durability.",
        _syn("log.flush.interval.messages"), minimum=1,
    ),
    TopicConfigDef(
        "flush.ms", _L, LONG_MAX,
        "fsync the log when this many milliseconds have passed since the last flush. The "
        "default never forces a flush.",
        _syn("log.flush.interval.ms", "log.flush.scheduler.interval.ms"), minimum=0,
    ),
    TopicConfigDef(
        "index.interval.bytes", _I, 4096,
        "Bytes of records between two entries of the offset index; smaller gives a denser index "
        "and shorter scans on lookups.",
        _syn("log.index.interval.bytes"), minimum=0,
    ),
    TopicConfigDef(
        "max.compaction.lag.ms", _L, LONG_MAX,
        "Longest time a record may stay uncompacted: older segments get compacted whatever the "
        "dirty ratio.",
        _syn("log.cleaner.max.compaction.lag.ms"), minimum=1,
    ),
    TopicConfigDef(
        "max.message.bytes", _I, 1_048_588,
        "Largest record batch, in bytes after compression, that the topic accepts.",
        _syn("message.max.bytes"), minimum=0,
    ),
    TopicConfigDef(
        "message.timestamp.type", _S, "CreateTime",
        "Timestamp stored with records: CreateTime keeps the producer's, LogAppendTime replaces "
        "it with the broker's clock at append.",
        _syn("log.message.timestamp.type"), allowed=("CreateTime", "LogAppendTime"),
    ),
    TopicConfigDef(
        "message.timestamp.difference.max.ms", _L, LONG_MAX,
        "Deprecated: how far a CreateTime timestamp may be from the broker's clock, either way, "
        "before the batch is refused. Used for the before/after limits left at their default.",
        _syn("log.message.timestamp.difference.max.ms"), minimum=0,
    ),
    TopicConfigDef(
        "message.timestamp.before.max.ms", _L, LONG_MAX,
        "How far in the past of the broker's clock a CreateTime timestamp may be before the "
        "batch is refused.",
        _syn("log.message.timestamp.before.max.ms"), minimum=0,
    ),
    TopicConfigDef(
        "message.timestamp.after.max.ms", _L, LONG_MAX,
        "How far in the future of the broker's clock a CreateTime timestamp may be before the "
        "batch is refused.",
        _syn("log.message.timestamp.after.max.ms"), minimum=0,
    ),
    TopicConfigDef(
        "min.cleanable.dirty.ratio", _D, 0.5,
        "Share of the log not yet compacted (dirty bytes over all bytes) above which the cleaner "
        "compacts it.",
        _syn("log.cleaner.min.cleanable.ratio"), minimum=0, maximum=1,
    ),
    TopicConfigDef(
        "min.compaction.lag.ms", _L, 0,
        "Shortest time a record stays uncompacted after it is written.",
        _syn("log.cleaner.min.compaction.lag.ms"), minimum=0,
    ),
    TopicConfigDef(
        "min.insync.replicas", _I, 1,
        "With acks=all, how many in-sync replicas must hold a write for it to succeed; with "
        "fewer, produce fails with NOT_ENOUGH_REPLICAS.",
        _syn("min.insync.replicas"), minimum=1,
    ),
    TopicConfigDef(
        "preallocate", _B, False,
        "Reserve a segment's full size on disk when the segment is created; logway does not, so "
        "only false is accepted.",
        _syn("log.preallocate"),
    ),
    TopicConfigDef(
        "retention.bytes", _L, -1,
        "Size a partition may grow to before its oldest segments are deleted (delete policy); "
        "-1 means no size limit.",
        _syn("log.retention.bytes"),
    ),
    TopicConfigDef(
        "retention.ms", _L, 604_800_000,
        "How long a segment is kept after its newest record before it is deleted (delete "
        "policy); -1 means no time limit.",
        _syn(
            "log.retention.ms",
            ("log.retention.minutes", _MS_PER_MINUTE),
            ("log.retention.hours", _MS_PER_HOUR),
        ),
        minimum=-1,
        broker_negative_is_unlimited=True,
    ),
    TopicConfigDef(
        "segment.bytes", _I, 1_073_741_824,
        "Size at which the active segment is closed and a new one started.",
        _syn("log.segment.bytes"), minimum=14,
    ),
    TopicConfigDef(
        "segment.index.bytes", _I, 10_485_760,
        "Size of the offset and time index files made for each segment.",
        _syn("log.index.size.max.bytes"), minimum=4,
    ),
    TopicConfigDef(
        "segment.jitter.ms", _L, 0,
        "A random amount up to this is taken off segment.ms for each segment, so that segments "
        "do not all roll at the same moment.",
        _syn("log.roll.jitter.ms", ("log.roll.jitter.hours", _MS_PER_HOUR)), minimum=0,
    ),
    TopicConfigDef(
        "segment.ms", _L, 604_800_000,
        "Time after which the active segment is rolled even if not full, so that retention and "
        "compaction can reach its records.",
        _syn("log.roll.ms", ("log.roll.hours", _MS_PER_HOUR)), minimum=1,
    ),
    TopicConfigDef(
        "unclean.leader.election.enable", _B, False,
        "Let a replica outside the ISR become leader when no in-sync one is left, at the price "
        "of losing the records it lacks.",
        _syn("unclean.leader.election.enable"),
    ),
    TopicConfigDef(
        "message.downconversion.enable", _B, True,
        "Whether batches may be rewritten in an older format for fetches from old consumers. "
        "Without effect, as in Kafka 4: every Fetch version served (4 and later) reads the "
        "current format, so nothing is ever converted.",
        _syn("log.message.downconversion.enable"),
    ),
    TopicConfigDef(
        "remote.storage.enable", _B, False,
        "Tiered storage (KIP-405): copy the topic's closed segments to the remote store and "
        "serve old offsets from it; needs remote.log.storage.system.enable on the broker and the "
        "delete cleanup policy. Once on, it cannot be turned off (ZooKeeper mode, as in Kafka).",
    ),
    TopicConfigDef(
        "local.retention.ms", _L, -2,
        "With remote.storage.enable, how long a segment copied to the remote store stays on the "
        "local disk; -2 takes retention.ms, -1 keeps it as long as retention.ms does.",
        _syn("log.local.retention.ms"), minimum=-2,
    ),
    TopicConfigDef(
        "local.retention.bytes", _L, -2,
        "With remote.storage.enable, the local size a partition may keep before its oldest "
        "copied segments are deleted locally; -2 takes retention.bytes, -1 means no limit.",
        _syn("log.local.retention.bytes"), minimum=-2,
    ),
    TopicConfigDef(
        "leader.replication.throttled.replicas", _LIST, (),
        "Replicas whose replication is throttled on the leader side: '*' for all of them, or "
        "partitionId:brokerId pairs separated by commas.",
        extra_check=_check_throttled_replicas,
    ),
    TopicConfigDef(
        "follower.replication.throttled.replicas", _LIST, (),
        "Replicas whose replication is throttled on the follower side: '*' for all of them, or "
        "partitionId:brokerId pairs separated by commas.",
        extra_check=_check_throttled_replicas,
    ),
)

TOPIC_CONFIGS: Mapping[str, TopicConfigDef] = MappingProxyType({d.name: d for d in _DEFS})


# --------------------------------------------------------------------------------------------
# LogConfig
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The settings one log works with, typed; every field defaults to Kafka's default.

    Built with `LogConfig.resolve(overrides, broker_settings)`; `LogConfig()` is the all-default
    config. As in Kafka, `message_timestamp_before_max_ms` / `..._after_max_ms` left at their
    default (Long.MAX) take the value of `message_timestamp_difference_max_ms`, so the log can
    read those two alone. `cleanup_policy` may be given as any iterable of names.
    """

    cleanup_policy: frozenset[str] = frozenset({"delete"})
    compression_type: str = "producer"
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    index_interval_bytes: int = 4096
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604_800_000
    segment_bytes: int = 1_073_741_824
    segment_index_bytes: int = 10_485_760
    segment_jitter_ms: int = 0
    segment_ms: int = 604_800_000
    unclean_leader_election_enable: bool = False
    message_downconversion_enable: bool = True
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    follower_replication_throttled_replicas: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.cleanup_policy, frozenset):
            policy = self.cleanup_policy
            if isinstance(policy, str):
                policy = parse_value(ConfigType.LIST, policy)
            object.__setattr__(self, "cleanup_policy", frozenset(policy))
        difference = self.message_timestamp_difference_max_ms
        if difference != LONG_MAX:
            if self.message_timestamp_before_max_ms == LONG_MAX:
                object.__setattr__(self, "message_timestamp_before_max_ms", difference)
            if self.message_timestamp_after_max_ms == LONG_MAX:
                object.__setattr__(self, "message_timestamp_after_max_ms", difference)

    @property
    def compact(self) -> bool:
        """True when the cleanup policy includes compaction."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """True when the cleanup policy includes time/size based deletion."""
        return "delete" in self.cleanup_policy

    @property
    def local_retention_ms_in_effect(self) -> int:
        """local.retention.ms, or retention.ms when left at -2 (Kafka's localRetentionMs)."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def local_retention_bytes_in_effect(self) -> int:
        """local.retention.bytes, or retention.bytes when left at -2."""
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes

    @property
    def max_segment_ms(self) -> int:
        """How long the active segment may stay open (Kafka's maxSegmentMs): segment.ms, or
        max.compaction.lag.ms when compacting and shorter, as the cleaner never touches the
        active segment and a record must leave it to be compacted in time."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @classmethod
    def resolve(
        cls, overrides: Mapping[str, str], broker_settings: Mapping[str, str]
    ) -> LogConfig:
        """Topic override, else the first broker synonym the operator set, else the default.

        Values are checked as Kafka checks them (InvalidConfigError otherwise). Override names
        that are not topic configs are ignored here; `validate_topic_overrides` refuses them.
        """
        if not overrides and not broker_settings:
            return _DEFAULT_LOG_CONFIG
        values = _resolved_values(overrides, broker_settings)
        _check_compaction_lags(values)
        return cls(**{TOPIC_CONFIGS[name].attr: _to_field(name, v) for name, v in values.items()})


def _to_field(name: str, value: Any) -> Any:
    if name == "cleanup.policy":
        return frozenset(value)
    if TOPIC_CONFIGS[name].type is ConfigType.LIST:
        return tuple(value)
    return value


_DEFAULT_LOG_CONFIG = LogConfig()
_FIELD_NAMES = frozenset(f.name for f in fields(LogConfig))
assert _FIELD_NAMES == {d.attr for d in _DEFS}, "LogConfig fields must match TOPIC_CONFIGS"


def _resolve_one(
    definition: TopicConfigDef,
    overrides: Mapping[str, str],
    broker_settings: Mapping[str, str],
) -> tuple[Any, ConfigSource] | None:
    """(typed value, source) from an override or a set broker synonym; None for the default."""
    raw = overrides.get(definition.name)
    if raw is not None:
        return definition.parse(raw), ConfigSource.DYNAMIC_TOPIC_CONFIG
    for synonym in definition.synonyms:
        raw = broker_settings.get(synonym.name)
        if raw is not None:
            return definition.from_broker(synonym, raw), ConfigSource.STATIC_BROKER_CONFIG
    return None


def _resolved_values(
    overrides: Mapping[str, str], broker_settings: Mapping[str, str]
) -> dict[str, Any]:
    """Only the keys that do not come from the default."""
    values: dict[str, Any] = {}
    for definition in _DEFS:
        found = _resolve_one(definition, overrides, broker_settings)
        if found is not None:
            values[definition.name] = found[0]
    return values


def _check_compaction_lags(values: Mapping[str, Any]) -> None:
    min_lag = values.get("min.compaction.lag.ms", TOPIC_CONFIGS["min.compaction.lag.ms"].default)
    max_lag = values.get("max.compaction.lag.ms", TOPIC_CONFIGS["max.compaction.lag.ms"].default)
    if min_lag > max_lag:
        raise InvalidConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > "
            f"max.compaction.lag.ms ({max_lag})"
        )


# --------------------------------------------------------------------------------------------
# Validation and DescribeConfigs
# --------------------------------------------------------------------------------------------


PREALLOCATE_REFUSAL = (
    "logway does not preallocate segment files to their full size (a segment's file grows with its "
    "appends, its blocks reserved a few MiB ahead), so only false can be honoured"
)


def validate_topic_overrides(overrides: Mapping[str, str]) -> None:
    """Check what a client asks to set on a topic: known names, well-typed values in range.

    Raises InvalidConfigError ("Unknown topic config name: x", "Invalid value y for configuration
    retention.ms: Not a number of type LONG", ...). A None value (a delete in AlterConfigs) only
    has its name checked.
    """
    for name in overrides:
        if name not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
    values: dict[str, Any] = {}
    for name, raw in overrides.items():
        if raw is not None:
            values[name] = TOPIC_CONFIGS[name].parse(raw)
    _check_compaction_lags(values)
    if values.get("preallocate"):
        # Refused here, where a client asks, rather than in the key's own check: a stored
        # override (a topic made before this refusal) must not stop its topic from loading.
        raise InvalidConfigError(_invalid("preallocate", overrides["preallocate"], PREALLOCATE_REFUSAL))


def validate_remote_storage(
    overrides: Mapping[str, str | None],
    broker_settings: Mapping[str, str],
    system_enabled: bool,
    existing_overrides: Mapping[str, str] | None = None,
) -> None:
    """Kafka's checks of a topic's tiered-storage settings (LogConfig.validateTopicLogConfigValues,
    ZooKeeper mode), on the topic's resolved config once `overrides` (the whole new set) apply:
    remote.storage.enable needs remote.log.storage.system.enable on the broker and no compaction,
    the local retention may not exceed the total one, and remote storage once on cannot be turned
    off (Kafka's ZooKeeper mode refuses remote.log.delete.on.disable, the only way off).
    InvalidConfigError otherwise."""
    config = LogConfig.resolve({k: v for k, v in overrides.items() if v is not None}, broker_settings)
    if not config.remote_storage_enable:
        was_enabled = str((existing_overrides or {}).get("remote.storage.enable", "false")).strip().lower() == "true"
        if was_enabled:
            raise InvalidConfigError(
                "It is invalid to disable remote storage without deleting remote data. If you want to keep the "
                "remote data and turn to read only, please set `remote.storage.enable=true,"
                "remote.log.copy.disable=true`. If you want to disable remote storage and delete all remote data, "
                "please set `remote.storage.enable=false,remote.log.delete.on.disable=true`."
            )
        return
    if not system_enabled:
        raise InvalidConfigError(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."
        )
    if config.compact:
        raise InvalidConfigError("Remote log storage is unsupported for the compacted topics")
    check_local_retention(config.retention_bytes, config.local_retention_bytes, config.retention_ms, config.local_retention_ms)


def check_local_retention(retention_bytes: int, local_bytes: int, retention_ms: int, local_ms: int) -> None:
    """Kafka's validateRemoteStorageRetentionSize and ...Time: a local retention, when set (not
    -2), is limited (not -1) and at most the total one whenever the total is limited."""
    for name, total_name, total, local, unlimited in (
        ("local.retention.bytes", "retention.bytes", retention_bytes, local_bytes, retention_bytes <= -1),
        ("local.retention.ms", "retention.ms", retention_ms, local_ms, retention_ms == -1),
    ):
        if unlimited or local == -2:
            continue
        if local == -1:
            raise InvalidConfigError(_invalid(name, local, f"Value must not be -1 as {total_name} value is set as {total}."))
        if local > total:
            raise InvalidConfigError(_invalid(name, local, f"Value must not be more than {total_name} property value: {total}"))


def describe_topic_configs(
    overrides: Mapping[str, str],
    broker_settings: Mapping[str, str],
    include_synonyms: bool = True,
    broker_sources: Mapping[str, ConfigSource] | None = None,
) -> list[ConfigEntry]:
    """DescribeConfigs entries for every topic config, in table order.

    The source is DYNAMIC_TOPIC_CONFIG for an override, that of the broker synonym set when one
    is (`broker_sources`, e.g. a dynamic broker config; STATIC_BROKER_CONFIG for keys it does
    not name), DEFAULT_CONFIG otherwise. Synonyms, highest first: the override, the broker
    synonyms the operator set (raw, in their own unit), then the default (named by the broker key
    that carries it, or by the topic key when no broker key stands for it). So the first synonym
    is always where the value comes from.
    """
    broker_sources = broker_sources or {}
    entries = []
    for definition in _DEFS:
        found = _resolve_one(definition, overrides, broker_settings)
        if found is None:
            value, source = definition.default, ConfigSource.DEFAULT_CONFIG
        else:
            value, source = found
            if source is ConfigSource.STATIC_BROKER_CONFIG:
                setting = next(s.name for s in definition.synonyms if broker_settings.get(s.name) is not None)
                source = broker_sources.get(setting, source)
        text = definition.format(value)
        synonyms: tuple[ConfigSynonym, ...] = ()
        if include_synonyms:
            synonyms = tuple(_topic_synonyms(definition, overrides, broker_settings, broker_sources, text))
        entries.append(
            ConfigEntry(
                name=definition.name,
                value=text,
                source=source,
                type=definition.type,
                documentation=definition.documentation,
                read_only=False,
                is_sensitive=False,
                synonyms=synonyms,
            )
        )
    return entries


def _topic_synonyms(
    definition: TopicConfigDef,
    overrides: Mapping[str, str],
    broker_settings: Mapping[str, str],
    broker_sources: Mapping[str, ConfigSource],
    override_text: str | None,
) -> Iterable[ConfigSynonym]:
    if overrides.get(definition.name) is not None:
        yield ConfigSynonym(definition.name, override_text, ConfigSource.DYNAMIC_TOPIC_CONFIG)
    for synonym in definition.synonyms:
        raw = broker_settings.get(synonym.name)
        if raw is not None:
            source = broker_sources.get(synonym.name, ConfigSource.STATIC_BROKER_CONFIG)
            yield ConfigSynonym(synonym.name, str(raw).strip(), source)
    yield definition.default_synonym()
