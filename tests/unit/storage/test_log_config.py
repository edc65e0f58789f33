"""Topic-level config: the table, LogConfig resolution, validation and DescribeConfigs entries."""

import dataclasses

import pytest

from protocol.config_types import ConfigSource, ConfigSynonym, ConfigType
from protocol.errors import ErrorCode, KafkaError
from storage.log_config import (
    LONG_MAX,
    TOPIC_CONFIGS,
    InvalidConfigError,
    LogConfig,
    describe_topic_configs,
    format_value,
    parse_value,
    validate_remote_storage,
    validate_topic_overrides,
)

HOUR_MS = 3_600_000
MINUTE_MS = 60_000


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------


def test_table_covers_kafkas_topic_configs():
    assert set(TOPIC_CONFIGS) == {
        "cleanup.policy",
        "compression.type",
        "delete.retention.ms",
        "file.delete.delay.ms",
        "flush.messages",
        "flush.ms",
        "index.interval.bytes",
        "max.compaction.lag.ms",
        "max.message.bytes",
        "message.timestamp.type",
        "remote.storage.enable",
        "local.retention.ms",
        "local.retention.bytes",
        "message.timestamp.difference.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.after.max.ms",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "preallocate",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.index.bytes",
        "segment.jitter.ms",
        "segment.ms",
        "unclean.leader.election.enable",
        "message.downconversion.enable",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    }


def test_table_types_and_synonyms():
    assert TOPIC_CONFIGS["cleanup.policy"].type is ConfigType.LIST
    assert TOPIC_CONFIGS["min.cleanable.dirty.ratio"].type is ConfigType.DOUBLE
    assert TOPIC_CONFIGS["segment.bytes"].type is ConfigType.INT
    assert TOPIC_CONFIGS["retention.ms"].type is ConfigType.LONG
    assert TOPIC_CONFIGS["preallocate"].type is ConfigType.BOOLEAN
    assert TOPIC_CONFIGS["compression.type"].type is ConfigType.STRING
    retention = [(s.name, s.factor) for s in TOPIC_CONFIGS["retention.ms"].synonyms]
    assert retention == [
        ("log.retention.ms", 1),
        ("log.retention.minutes", MINUTE_MS),
        ("log.retention.hours", HOUR_MS),
    ]
    segment_ms = [(s.name, s.factor) for s in TOPIC_CONFIGS["segment.ms"].synonyms]
    assert segment_ms == [("log.roll.ms", 1), ("log.roll.hours", HOUR_MS)]
    jitter = [(s.name, s.factor) for s in TOPIC_CONFIGS["segment.jitter.ms"].synonyms]
    assert jitter == [("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", HOUR_MS)]
    assert [s.name for s in TOPIC_CONFIGS["max.message.bytes"].synonyms] == ["message.max.bytes"]
    assert TOPIC_CONFIGS["leader.replication.throttled.replicas"].synonyms == ()
    assert all(d.documentation for d in TOPIC_CONFIGS.values())


# --------------------------------------------------------------------------------------------
# LogConfig
# --------------------------------------------------------------------------------------------


def test_default_log_config_is_kafkas():
    c = LogConfig()
    assert c.cleanup_policy == frozenset({"delete"})
    assert c.compression_type == "producer"
    assert c.delete_retention_ms == 86_400_000
    assert c.file_delete_delay_ms == 60_000
    assert c.flush_messages == LONG_MAX == 9223372036854775807
    assert c.flush_ms == LONG_MAX
    assert c.index_interval_bytes == 4096
    assert c.max_compaction_lag_ms == LONG_MAX
    assert c.max_message_bytes == 1_048_588
    assert c.message_timestamp_type == "CreateTime"
    assert c.message_timestamp_difference_max_ms == LONG_MAX
    assert c.message_timestamp_before_max_ms == LONG_MAX
    assert c.message_timestamp_after_max_ms == LONG_MAX
    assert c.min_cleanable_dirty_ratio == 0.5
    assert c.min_compaction_lag_ms == 0
    assert c.min_insync_replicas == 1
    assert c.preallocate is False
    assert c.retention_bytes == -1
    assert c.retention_ms == 604_800_000
    assert c.segment_bytes == 1_073_741_824
    assert c.segment_index_bytes == 10_485_760
    assert c.segment_jitter_ms == 0
    assert c.segment_ms == 604_800_000
    assert c.unclean_leader_election_enable is False
    assert c.message_downconversion_enable is True
    assert c.leader_replication_throttled_replicas == ()
    assert c.follower_replication_throttled_replicas == ()
    assert c.delete and not c.compact


def test_log_config_fields_match_table_defaults():
    c = LogConfig()
    for definition in TOPIC_CONFIGS.values():
        value = getattr(c, definition.attr)
        if definition.type is ConfigType.LIST:
            assert sorted(value) == sorted(definition.default)
        else:
            assert value == definition.default, definition.name


def test_log_config_is_frozen_and_slotted():
    c = LogConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.retention_ms = 1  # type: ignore[misc]
    assert not hasattr(c, "__dict__")


def test_log_config_accepts_any_iterable_policy():
    assert LogConfig(cleanup_policy={"compact"}).cleanup_policy == frozenset({"compact"})
    assert LogConfig(cleanup_policy="compact,delete").cleanup_policy == {"compact", "delete"}
    assert LogConfig(cleanup_policy=["compact"]).compact


def test_timestamp_before_after_fall_back_to_difference():
    c = LogConfig(message_timestamp_difference_max_ms=1000)
    assert c.message_timestamp_before_max_ms == 1000
    assert c.message_timestamp_after_max_ms == 1000
    c = LogConfig(message_timestamp_difference_max_ms=1000, message_timestamp_after_max_ms=5)
    assert (c.message_timestamp_before_max_ms, c.message_timestamp_after_max_ms) == (1000, 5)
    c = LogConfig.resolve({"message.timestamp.difference.max.ms": "7"}, {})
    assert c.message_timestamp_before_max_ms == 7


def test_resolve_nothing_is_the_default():
    assert LogConfig.resolve({}, {}) == LogConfig()


@pytest.mark.parametrize(
    ("overrides", "broker", "expected"),
    [
        ({}, {}, 604_800_000),
        ({}, {"log.retention.hours": "1"}, HOUR_MS),
        ({}, {"log.retention.hours": "1", "log.retention.minutes": "2"}, 2 * MINUTE_MS),
        (
            {},
            {"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "3"},
            3,
        ),
        (
            {"retention.ms": "4"},
            {"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "3"},
            4,
        ),
        ({"retention.ms": "-1"}, {"log.retention.hours": "1"}, -1),
        ({}, {"log.retention.ms": "-1"}, -1),
        ({}, {"log.retention.hours": "-5"}, -1),  # any negative broker time means unlimited
        ({}, {"log.retention.minutes": " 10 "}, 10 * MINUTE_MS),
    ],
)
def test_retention_precedence(overrides, broker, expected):
    assert LogConfig.resolve(overrides, broker).retention_ms == expected


def test_other_broker_synonyms():
    c = LogConfig.resolve(
        {},
        {
            "log.roll.hours": "2",
            "log.roll.jitter.hours": "1",
            "log.segment.bytes": "1024",
            "message.max.bytes": "2000",
            "log.cleanup.policy": "compact, delete",
            "log.flush.scheduler.interval.ms": "5000",
            "log.cleaner.min.cleanable.ratio": "0.25",
            "log.message.timestamp.type": "LogAppendTime",
            "unclean.leader.election.enable": "TRUE",
            "log.index.size.max.bytes": "4096",
            "compression.type": "zstd",
            "num.partitions": "12",  # not a topic synonym: ignored
        },
    )
    assert c.segment_ms == 2 * HOUR_MS
    assert c.segment_jitter_ms == HOUR_MS
    assert c.segment_bytes == 1024
    assert c.max_message_bytes == 2000
    assert c.cleanup_policy == {"compact", "delete"} and c.compact and c.delete
    assert c.flush_ms == 5000
    assert c.min_cleanable_dirty_ratio == 0.25
    assert c.message_timestamp_type == "LogAppendTime"
    assert c.unclean_leader_election_enable is True
    assert c.segment_index_bytes == 4096
    assert c.compression_type == "zstd"


def test_first_set_broker_synonym_wins_over_later_ones():
    c = LogConfig.resolve({}, {"log.roll.ms": "1234", "log.roll.hours": "5"})
    assert c.segment_ms == 1234
    c = LogConfig.resolve(
        {}, {"log.flush.interval.ms": "10", "log.flush.scheduler.interval.ms": "9"}
    )
    assert c.flush_ms == 10


def test_overrides_beat_broker_settings():
    c = LogConfig.resolve(
        {"segment.ms": "100", "cleanup.policy": "compact", "message.downconversion.enable": "false"},
        {"log.roll.ms": "5000", "log.cleanup.policy": "delete", "log.message.downconversion.enable": "true"},
    )
    assert c.segment_ms == 100
    assert c.cleanup_policy == frozenset({"compact"})
    assert c.message_downconversion_enable is False


def test_resolve_types_values():
    c = LogConfig.resolve(
        {
            "min.cleanable.dirty.ratio": "0.75",
            "leader.replication.throttled.replicas": "0:1, 1:2",
            "follower.replication.throttled.replicas": "*",
            "max.message.bytes": "+42",
        },
        {},
    )
    assert c.min_cleanable_dirty_ratio == 0.75
    assert c.leader_replication_throttled_replicas == ("0:1", "1:2")
    assert c.follower_replication_throttled_replicas == ("*",)
    assert c.max_message_bytes == 42


def test_resolve_refuses_bad_values():
    with pytest.raises(InvalidConfigError, match="retention.ms"):
        LogConfig.resolve({"retention.ms": "soon"}, {})
    # a derived value is checked against the topic rule too (segment.ms is at least 1)
    with pytest.raises(InvalidConfigError, match="log.roll.ms"):
        LogConfig.resolve({}, {"log.roll.ms": "0"})


def test_resolve_ignores_unknown_override_names():
    assert LogConfig.resolve({"no.such.key": "1"}, {}) == LogConfig()


# --------------------------------------------------------------------------------------------
# validate_topic_overrides
# --------------------------------------------------------------------------------------------


def test_validate_accepts_good_overrides():
    validate_topic_overrides({})
    validate_topic_overrides(
        {
            "retention.ms": "-1",
            "cleanup.policy": "compact,delete",
            "compression.type": "lz4",
            "min.cleanable.dirty.ratio": "1",
            "preallocate": "False",
            "segment.bytes": "14",
            "leader.replication.throttled.replicas": "*",
            "follower.replication.throttled.replicas": "0:1,2:3",
            "message.timestamp.type": "LogAppendTime",
        }
    )
    validate_topic_overrides({"retention.ms": None})  # a delete in AlterConfigs


def test_validate_unknown_name():
    with pytest.raises(InvalidConfigError) as info:
        validate_topic_overrides({"retention.ms": "1", "x": "1"})
    assert str(info.value) == "Unknown topic config name: x"
    assert info.value.error_code is ErrorCode.invalid_config
    assert isinstance(info.value, KafkaError)


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("retention.ms", "abc", "Not a number of type LONG"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("retention.ms", "1_000", "Not a number of type LONG"),
        ("retention.ms", "9223372036854775808", "Not a number of type LONG"),
        ("segment.bytes", "13", "Value must be at least 14"),
        ("segment.bytes", "2147483648", "Not a number of type INT"),
        ("segment.index.bytes", "3", "Value must be at least 4"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
        ("min.cleanable.dirty.ratio", "-0.1", "Value must be at least 0"),
        ("min.cleanable.dirty.ratio", "half", "Not a number of type DOUBLE"),
        ("preallocate", "yes", "Expected value to be either true or false"),
        ("preallocate", "true", "logway does not preallocate segment files"),
        ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4"),
        ("message.timestamp.type", "createtime", "must be one of: CreateTime, LogAppendTime"),
        ("cleanup.policy", "compact,forever", "String must be one of: compact, delete"),
        ("cleanup.policy", "delete,", "String must be one of: compact, delete"),
        ("leader.replication.throttled.replicas", "all", "partitionId:brokerId"),
        ("follower.replication.throttled.replicas", "*,0:1", "partitionId:brokerId"),
    ],
)
def test_validate_bad_values(name, value, reason):
    with pytest.raises(InvalidConfigError) as info:
        validate_topic_overrides({name: value})
    message = str(info.value)
    assert message.startswith(f"Invalid value {value} for configuration {name}: ")
    assert reason in message


def test_preallocate_is_refused_when_asked_for_but_a_stored_override_still_loads_its_topic():
    with pytest.raises(InvalidConfigError, match="does not preallocate"):
        validate_topic_overrides({"preallocate": "true"})
    validate_topic_overrides({"preallocate": "false"})
    assert LogConfig.resolve({"preallocate": "true"}, {}).preallocate is True


def test_validate_compaction_lag_conflict():
    with pytest.raises(InvalidConfigError, match="min.compaction.lag.ms"):
        validate_topic_overrides({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    validate_topic_overrides({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "5"})


# --------------------------------------------------------------------------------------------
# describe_topic_configs
# --------------------------------------------------------------------------------------------


def _by_name(entries):
    return {e.name: e for e in entries}


def test_describe_defaults():
    entries = describe_topic_configs({}, {})
    assert [e.name for e in entries] == list(TOPIC_CONFIGS)
    by = _by_name(entries)
    assert by["retention.ms"].value == "604800000"
    assert by["cleanup.policy"].value == "delete"
    assert by["preallocate"].value == "false"
    assert by["message.downconversion.enable"].value == "true"
    assert by["min.cleanable.dirty.ratio"].value == "0.5"
    assert by["flush.ms"].value == "9223372036854775807"
    assert by["leader.replication.throttled.replicas"].value == ""
    for e in entries:
        assert e.source is ConfigSource.DEFAULT_CONFIG
        assert e.type is TOPIC_CONFIGS[e.name].type
        assert e.documentation == TOPIC_CONFIGS[e.name].documentation
        assert not e.read_only and not e.is_sensitive
        assert len(e.synonyms) == 1
        assert e.synonyms[0].source is ConfigSource.DEFAULT_CONFIG
    # the default is reported against the broker key that carries it, in that key's unit
    assert by["retention.ms"].synonyms == (
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    )
    assert by["segment.ms"].synonyms[0].name == "log.roll.hours"
    assert by["flush.ms"].synonyms[0].name == "log.flush.scheduler.interval.ms"
    assert by["max.message.bytes"].synonyms[0] == ConfigSynonym(
        "message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG
    )


def test_describe_broker_setting():
    by = _by_name(describe_topic_configs({}, {"log.retention.hours": "1"}))
    e = by["retention.ms"]
    assert e.value == "3600000"
    assert e.source is ConfigSource.STATIC_BROKER_CONFIG
    assert e.synonyms == (
        ConfigSynonym("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    )


def test_describe_synonyms_in_precedence_order():
    by = _by_name(
        describe_topic_configs(
            {"retention.ms": "1000"},
            {"log.retention.hours": "1", "log.retention.ms": "5000"},
        )
    )
    e = by["retention.ms"]
    assert e.value == "1000"
    assert e.source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert [(s.name, s.value, s.source) for s in e.synonyms] == [
        ("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "5000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]


def test_describe_override_values_as_kafka_prints_them():
    by = _by_name(
        describe_topic_configs(
            {
                "cleanup.policy": " compact ,  delete ",
                "preallocate": "TRUE",
                "min.cleanable.dirty.ratio": "1",
                "follower.replication.throttled.replicas": "0:1, 1:1",
            },
            {},
        )
    )
    assert by["cleanup.policy"].value == "compact,delete"
    assert by["preallocate"].value == "true"
    assert by["min.cleanable.dirty.ratio"].value == "1.0"
    throttled = by["follower.replication.throttled.replicas"]
    assert throttled.value == "0:1,1:1"
    assert throttled.source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert throttled.synonyms == (
        ConfigSynonym("follower.replication.throttled.replicas", "0:1,1:1",
                      ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ConfigSynonym("follower.replication.throttled.replicas", "",
                      ConfigSource.DEFAULT_CONFIG),
    )


def test_describe_first_synonym_is_the_source():
    entries = describe_topic_configs(
        {"segment.bytes": "2048", "cleanup.policy": "compact"},
        {"log.roll.hours": "3", "message.max.bytes": "100", "log.cleanup.policy": "delete"},
    )
    for e in entries:
        assert e.synonyms[0].source is e.source, e.name
    by = _by_name(entries)
    assert by["segment.ms"].value == str(3 * HOUR_MS)
    assert by["segment.ms"].source is ConfigSource.STATIC_BROKER_CONFIG
    assert by["max.message.bytes"].value == "100"
    assert by["cleanup.policy"].value == "compact"
    assert by["cleanup.policy"].synonyms[1] == ConfigSynonym(
        "log.cleanup.policy", "delete", ConfigSource.STATIC_BROKER_CONFIG
    )


def test_describe_without_synonyms():
    entries = describe_topic_configs({"retention.ms": "1"}, {"log.roll.hours": "1"}, False)
    assert all(e.synonyms == () for e in entries)
    by = _by_name(entries)
    assert by["retention.ms"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert by["segment.ms"].source is ConfigSource.STATIC_BROKER_CONFIG


def test_describe_refuses_bad_override():
    with pytest.raises(InvalidConfigError):
        describe_topic_configs({"retention.ms": "x"}, {})


# --------------------------------------------------------------------------------------------
# parse_value / format_value
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ctype", "raw", "expected"),
    [
        (ConfigType.BOOLEAN, " TrUe ", True),
        (ConfigType.BOOLEAN, "false", False),
        (ConfigType.INT, "-2147483648", -(2**31)),
        (ConfigType.SHORT, "32767", 32767),
        (ConfigType.LONG, "9223372036854775807", LONG_MAX),
        (ConfigType.DOUBLE, "1e3", 1000.0),
        (ConfigType.LIST, "", []),
        (ConfigType.LIST, " a , b,c ", ["a", "b", "c"]),
        (ConfigType.STRING, "  x y  ", "x y"),
    ],
)
def test_parse_value(ctype, raw, expected):
    assert parse_value(ctype, raw) == expected


@pytest.mark.parametrize(
    ("ctype", "raw"),
    [
        (ConfigType.BOOLEAN, "1"),
        (ConfigType.SHORT, "32768"),
        (ConfigType.INT, "1.0"),
        (ConfigType.INT, ""),
        (ConfigType.LONG, "0x10"),
        (ConfigType.DOUBLE, "1_0"),
    ],
)
def test_parse_value_refuses(ctype, raw):
    with pytest.raises(ValueError):
        parse_value(ctype, raw)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.5, "0.5"),
        (1.0, "1.0"),
        (100.0, "100.0"),
        (1e7, "1.0E7"),
        (1.5e-4, "1.5E-4"),
        (0.0, "0.0"),
    ],
)
def test_format_double_like_java(value, text):
    assert format_value(ConfigType.DOUBLE, value) == text


def test_format_other_types():
    assert format_value(ConfigType.LIST, ["a", "b"]) == "a,b"
    assert format_value(ConfigType.LIST, []) == ""
    assert format_value(ConfigType.BOOLEAN, True) == "true"
    assert format_value(ConfigType.LONG, -1) == "-1"
    assert format_value(ConfigType.STRING, None) is None


# --------------------------------------------------------------------------------------------
# Tiered storage (Kafka's LogConfig.validateTopicLogConfigValues, ZooKeeper mode)
# --------------------------------------------------------------------------------------------


def test_local_retention_left_at_minus_two_takes_the_total_retention():
    config = LogConfig.resolve({"retention.ms": "5000", "retention.bytes": "900"}, {})
    assert (config.local_retention_ms_in_effect, config.local_retention_bytes_in_effect) == (5000, 900)
    config = LogConfig.resolve({"local.retention.ms": "100", "local.retention.bytes": "10"}, {"log.local.retention.ms": "7"})
    assert (config.local_retention_ms_in_effect, config.local_retention_bytes_in_effect) == (100, 10)
    assert LogConfig.resolve({}, {"log.local.retention.ms": "7"}).local_retention_ms_in_effect == 7


def test_remote_storage_is_refused_when_the_broker_system_is_off():
    with pytest.raises(InvalidConfigError, match="Tiered Storage functionality is disabled in the broker") as info:
        validate_remote_storage({"remote.storage.enable": "true"}, {}, system_enabled=False)
    assert info.value.error_code is ErrorCode.invalid_config
    validate_remote_storage({"remote.storage.enable": "true"}, {}, system_enabled=True)
    validate_remote_storage({"remote.storage.enable": "false"}, {}, system_enabled=False)


def test_remote_storage_is_refused_for_compacted_topics():
    with pytest.raises(InvalidConfigError, match="unsupported for the compacted topics"):
        validate_remote_storage({"remote.storage.enable": "true", "cleanup.policy": "compact,delete"}, {}, True)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"retention.bytes": "100", "local.retention.bytes": "-1"},
         "Invalid value -1 for configuration local.retention.bytes: Value must not be -1 as retention.bytes value is set as 100."),
        ({"retention.bytes": "100", "local.retention.bytes": "101"},
         "Invalid value 101 for configuration local.retention.bytes: Value must not be more than retention.bytes property value: 100"),
        ({"retention.ms": "1000", "local.retention.ms": "-1"},
         "Invalid value -1 for configuration local.retention.ms: Value must not be -1 as retention.ms value is set as 1000."),
        ({"local.retention.ms": "604800001"},
         "Invalid value 604800001 for configuration local.retention.ms: Value must not be more than retention.ms property value: 604800000"),
    ],
)
def test_local_retention_may_not_exceed_the_total_retention(overrides, message):
    with pytest.raises(InvalidConfigError) as info:
        validate_remote_storage({"remote.storage.enable": "true", **overrides}, {}, True)
    assert str(info.value) == message


def test_local_retention_is_free_when_the_total_is_unlimited():
    validate_remote_storage(
        {"remote.storage.enable": "true", "retention.ms": "-1", "local.retention.ms": "-1", "local.retention.bytes": "5"},
        {}, True,
    )


def test_remote_storage_cannot_be_turned_off_once_on():
    with pytest.raises(InvalidConfigError, match="invalid to disable remote storage without deleting remote data"):
        validate_remote_storage({}, {}, True, existing_overrides={"remote.storage.enable": "true"})
