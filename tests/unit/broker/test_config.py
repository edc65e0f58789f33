"""Broker configuration: .properties parsing, typing and checks, listeners, describe."""

import logging
from pathlib import Path

import pytest

from broker.config import (
    BROKER_CONFIGS,
    BrokerConfig,
    ConfigError,
    Listener,
    parse_listeners,
    parse_properties,
    parse_security_protocol_map,
)
from protocol.config_types import ConfigSource, ConfigSynonym, ConfigType
from storage.log_config import LONG_MAX, TOPIC_CONFIGS, LogConfig

REPO = Path(__file__).resolve().parents[3]
SERVER_PROPERTIES = REPO / "config" / "server.properties"
PLAIN_MAP = {"PLAINTEXT": "PLAINTEXT", "OTHER": "PLAINTEXT", "SSL": "SSL"}


# --------------------------------------------------------------------------------------------
# parse_properties
# --------------------------------------------------------------------------------------------


def test_properties_comments_and_blank_lines():
    text = "# a comment\n   ! another one\n\n \t \na=1\n#b=2\n  c=3\n"
    assert parse_properties(text) == {"a": "1", "c": "3"}


def test_properties_comment_only_at_line_start():
    assert parse_properties("a=1 # not a comment\n") == {"a": "1 # not a comment"}


@pytest.mark.parametrize(
    ("line", "key", "value"),
    [
        ("key=value", "key", "value"),
        ("key:value", "key", "value"),
        ("key value", "key", "value"),
        ("key = value", "key", "value"),
        ("key\t:\tvalue", "key", "value"),
        ("key    value with spaces  ", "key", "value with spaces"),
        ("key = = v", "key", "= v"),
        ("key=a=b:c", "key", "a=b:c"),
        ("a:b=c", "a", "b=c"),
        ("key", "key", ""),
        ("key=", "key", ""),
        ("key   ", "key", ""),
        ("listeners=PLAINTEXT://:9092", "listeners", "PLAINTEXT://:9092"),
    ],
)
def test_properties_separators(line, key, value):
    assert parse_properties(line) == {key: value}


def test_properties_continuation():
    text = "a=one, \\\n     two, \\\n\tthree\nb=x\n"
    assert parse_properties(text) == {"a": "one, two, three", "b": "x"}


def test_properties_continuation_in_key_and_edge_cases():
    assert parse_properties("ke\\\n  y=v") == {"key": "v"}
    # an even number of backslashes is an escaped backslash, not a continuation
    assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}
    # three: an escaped backslash, then a continuation
    assert parse_properties("a=x\\\\\\\n  y") == {"a": "x\\y"}
    # a continuation at the end of the text just ends the value
    assert parse_properties("a=x\\") == {"a": "x"}
    # an empty continued line ends the entry
    assert parse_properties("a=x\\\n\nb=y") == {"a": "x", "b": "y"}
    # a continued line is never a comment
    assert parse_properties("a=x\\\n  #y") == {"a": "x#y"}
    # a comment line does not continue
    assert parse_properties("# c \\\na=1") == {"a": "1"}


def test_properties_escapes():
    text = r"t=a\tb" "\n" r"n=a\nb" "\n" r"r=\r" "\n" r"f=\f" "\n" r"bs=a\\b" "\n" r"u=\u0041\u00e9"
    assert parse_properties(text) == {
        "t": "a\tb",
        "n": "a\nb",
        "r": "\r",
        "f": "\f",
        "bs": "a\\b",
        "u": "A\u00e9",
    }


def test_properties_escaped_separators_and_spaces():
    assert parse_properties(r"a\=b\:c=d\=e") == {"a=b:c": "d=e"}
    assert parse_properties(r"my\ key = v") == {"my key": "v"}
    assert parse_properties("k=v\\ \\ ") == {"k": "v  "}  # escaped trailing blanks stay
    assert parse_properties(r"k=\q\#") == {"k": "q#"}  # other escapes stand for the character


def test_properties_line_endings_and_last_wins():
    assert parse_properties("a=1\r\nb=2\rc=3\na=4") == {"a": "4", "b": "2", "c": "3"}
    assert parse_properties("") == {}


def test_properties_malformed_unicode_escape():
    with pytest.raises(ConfigError, match="uxxxx"):
        parse_properties(r"a=\u00zz")
    with pytest.raises(ConfigError):
        parse_properties("a=\\u12")


# --------------------------------------------------------------------------------------------
# Typing, validation, unknown keys
# --------------------------------------------------------------------------------------------


def test_defaults():
    c = BrokerConfig()
    assert c.get("broker.id") == -1 == c.broker_id
    assert c.get("num.partitions") == 1
    assert c.get("default.replication.factor") == 1
    assert c.get("log.cleanup.policy") == ["delete"]
    assert c.get("log.retention.ms") is None
    assert c.get("log.retention.hours") == 168
    assert c.get("log.cleaner.min.cleanable.ratio") == 0.5
    assert c.get("auto.create.topics.enable") is True
    assert c.get("log.flush.interval.messages") == LONG_MAX
    assert c.get("group.max.size") == 2**31 - 1
    assert c.get("offsets.topic.replication.factor") == 3
    assert c.get("zookeeper.connect") is None
    assert c.get("listeners") == "PLAINTEXT://:9092"
    assert not c.is_set("num.partitions")
    assert c.explicit_settings == {}
    assert c.log_config() == LogConfig()


def test_from_properties_types_values():
    c = BrokerConfig.from_properties(
        {
            "num.partitions": " 3 ",
            "auto.create.topics.enable": "FALSE",
            "log.cleanup.policy": "compact , delete",
            "log.cleaner.min.cleanable.ratio": "0.1",
            "log.retention.bytes": "9223372036854775807",
            "broker.rack": "  r1 ",
        }
    )
    assert c.get("num.partitions") == 3
    assert c.get("auto.create.topics.enable") is False
    assert c.get("log.cleanup.policy") == ["compact", "delete"]
    assert c.get("log.cleaner.min.cleanable.ratio") == 0.1
    assert c.get("log.retention.bytes") == LONG_MAX
    assert c.get("broker.rack") == "r1"
    assert c.is_set("num.partitions")
    assert c.explicit_settings["num.partitions"] == " 3 "  # raw, as the operator wrote it


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("num.partitions", "abc", "Not a number of type INT"),
        ("num.partitions", "0", "Value must be at least 1"),
        ("num.partitions", "2147483648", "Not a number of type INT"),
        ("broker.id", "-2", "Value must be at least -1"),
        ("auto.create.topics.enable", "yes", "Expected value to be either true or false"),
        ("offsets.topic.replication.factor", "40000", "Not a number of type SHORT"),
        ("log.retention.ms", "1.5", "Not a number of type LONG"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "Value must be no more than 1"),
        ("compression.type", "brotli", "String must be one of"),
        ("log.cleanup.policy", "compact,forever", "String must be one of: compact, delete"),
        ("log.message.timestamp.type", "Now", "String must be one of"),
        ("log.segment.bytes", "10", "Value must be at least 14"),
        ("log.roll.hours", "0", "Value must be at least 1"),
    ],
)
def test_invalid_values(name, value, reason):
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties({name: value})
    message = str(info.value)
    assert message.startswith(f"Invalid value {value} for configuration {name}: ")
    assert reason in message


def test_derived_topic_defaults_are_checked():
    # log.roll.ms has no broker-side rule, but segment.ms must be at least 1
    with pytest.raises(ConfigError, match="log.roll.ms"):
        BrokerConfig.from_properties({"log.roll.ms": "0"})


def test_replica_timeouts_are_checked():
    with pytest.raises(ConfigError, match="replica.socket.timeout.ms"):
        BrokerConfig.from_properties({"replica.fetch.wait.max.ms": "40000"})
    with pytest.raises(ConfigError, match="replica.lag.time.max.ms"):
        BrokerConfig.from_properties({"replica.lag.time.max.ms": "100"})


@pytest.mark.parametrize("name", ["num.network.threads", "num.io.threads"])
def test_thread_counts_are_accepted_only_at_kafkas_defaults(name):
    default = BROKER_CONFIGS[name].default
    assert BrokerConfig.from_properties({name: str(default)}).get(name) == default
    with pytest.raises(ConfigError, match=f"{name}=16 cannot be honoured.*one event loop"):
        BrokerConfig.from_properties({name: "16"})


def test_log_preallocate_is_accepted_only_at_its_default():
    assert BrokerConfig.from_properties({"log.preallocate": "false"}).get("log.preallocate") is False
    with pytest.raises(ConfigError, match="log.preallocate: logway does not preallocate segment files"):
        BrokerConfig.from_properties({"log.preallocate": "true"})


def test_connection_limits():
    c = BrokerConfig()
    assert c.get("max.connections") == c.get("max.connections.per.ip") == 2**31 - 1
    assert c.max_connections_per_ip_overrides == {}
    c = BrokerConfig.from_properties(
        {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:5, [::1]:6,gateway:0"}
    )
    assert c.max_connections_per_ip_overrides == {"127.0.0.1": 5, "::1": 6, "gateway": 0}
    for bad in ("127.0.0.1", "127.0.0.1:x", ":5", "host:-1"):
        with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
            BrokerConfig.from_properties({"max.connections.per.ip.overrides": bad})
    with pytest.raises(ConfigError, match="no client could connect"):
        BrokerConfig.from_properties({"max.connections.per.ip": "0"})


def test_get_unknown_key():
    with pytest.raises(KeyError):
        BrokerConfig().get("no.such.key")


def test_unknown_keys_are_refused():
    with pytest.raises(ConfigError, match="'foo.bar'.*'ssl.keystore.file'"):
        BrokerConfig.from_properties({"foo.bar": "1", "ssl.keystore.file": "/x", "num.partitions": "2"})
    with pytest.raises(ConfigError, match="baz"):
        BrokerConfig.from_properties({"num.partitions": "2"}).with_overrides({"baz": "1"})


def test_a_topic_key_names_its_broker_default():
    with pytest.raises(ConfigError, match="file.delete.delay.ms is a topic config.*log.segment.delete.delay.ms"):
        BrokerConfig.from_properties({"file.delete.delay.ms": "1000"})


def test_with_overrides_is_a_copy():
    base = BrokerConfig.from_properties({"num.partitions": "2"})
    more = base.with_overrides({"num.partitions": "5", "log.retention.hours": "1"})
    assert base.get("num.partitions") == 2 and not base.is_set("log.retention.hours")
    assert more.get("num.partitions") == 5
    assert more.log_config().retention_ms == 3_600_000
    assert more == BrokerConfig.from_properties({"num.partitions": "5", "log.retention.hours": "1"})
    with pytest.raises(ConfigError):
        base.with_overrides({"num.partitions": "none"})


# --------------------------------------------------------------------------------------------
# load
# --------------------------------------------------------------------------------------------


def test_load_file_and_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("broker.id=3\nnum.partitions = 4\nlog.dirs=/d1,/d2\n", encoding="utf-8")
    c = BrokerConfig.load(path, ["num.partitions=6", "log.retention.minutes=10", "broker.rack=a=b"])
    assert c.broker_id == 3
    assert c.get("num.partitions") == 6
    assert c.get("broker.rack") == "a=b"
    assert c.log_dirs == ["/d1", "/d2"]
    assert c.log_config().retention_ms == 600_000
    assert BrokerConfig.load(str(path)).get("num.partitions") == 4


def test_load_without_file():
    c = BrokerConfig.load(None, ["broker.id=7"])
    assert c.broker_id == 7
    assert BrokerConfig.load(None) == BrokerConfig()


def test_load_errors(tmp_path):
    with pytest.raises(ConfigError, match="key=value"):
        BrokerConfig.load(None, ["broker.id"])
    with pytest.raises(ConfigError, match="key=value"):
        BrokerConfig.load(None, ["=1"])
    with pytest.raises(ConfigError, match="missing.properties"):
        BrokerConfig.load(tmp_path / "missing.properties")
    bad = tmp_path / "bad.properties"
    bad.write_text("num.partitions=many\n")
    with pytest.raises(ConfigError, match="num.partitions"):
        BrokerConfig.load(bad)


def test_load_latin1_file(tmp_path):
    path = tmp_path / "latin1.properties"
    path.write_bytes("broker.rack=z\xf6ne\n".encode("latin-1"))
    assert BrokerConfig.load(path).get("broker.rack") == "z\xf6ne"


# --------------------------------------------------------------------------------------------
# Listeners
# --------------------------------------------------------------------------------------------


def test_parse_listeners():
    assert parse_listeners("PLAINTEXT://127.0.0.1:9092,OTHER://:9093", PLAIN_MAP) == [
        Listener("PLAINTEXT", "127.0.0.1", 9092),
        Listener("OTHER", "", 9093),
    ]
    assert parse_listeners(" plaintext://host.example:1 ", PLAIN_MAP) == [
        Listener("PLAINTEXT", "host.example", 1)
    ]


def test_parse_ipv6_listeners():
    listeners = parse_listeners("PLAINTEXT://[::1]:9092,OTHER://[fe80::1%eth0]:9093", PLAIN_MAP)
    assert listeners == [
        Listener("PLAINTEXT", "::1", 9092),
        Listener("OTHER", "fe80::1%eth0", 9093),
    ]
    assert str(listeners[0]) == "PLAINTEXT://[::1]:9092"
    assert str(Listener("OTHER", "", 9093)) == "OTHER://:9093"


def test_ipv4_and_ipv6_may_share_a_port():
    listeners = parse_listeners("PLAINTEXT://127.0.0.1:9092,OTHER://[::1]:9092", PLAIN_MAP)
    assert [listener.port for listener in listeners] == [9092, 9092]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("localhost:9092", "cannot parse"),
        ("PLAINTEXT://host", "cannot parse"),
        ("PLAINTEXT://host:port", "cannot parse"),
        ("://host:1", "cannot parse"),
        ("PLAINTEXT://host:70000", "out of range"),
        ("PLAINTEXT://:-1", "out of range"),
        ("UNKNOWN://:9092", "no security protocol defined for listener UNKNOWN"),
        ("PLAINTEXT://:9092,plaintext://:9093", "different name"),
        ("PLAINTEXT://:9092,OTHER://:9092", "different port"),
    ],
)
def test_bad_listeners(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_listeners(text, PLAIN_MAP)


def test_a_sasl_listener_needs_sasl_settings():
    # Kafka's default mechanism, GSSAPI, is not served (tests/unit/broker/security/test_sasl_config.py).
    with pytest.raises(ConfigError, match="SASL_PLAINTEXT: sasl.enabled.mechanisms includes GSSAPI"):
        BrokerConfig.from_properties({"listeners": "PLAINTEXT://:9092,SASL_PLAINTEXT://:9093"})


def test_security_protocol_map():
    assert parse_security_protocol_map("client:plaintext, INTERNAL : PLAINTEXT") == {
        "CLIENT": "PLAINTEXT",
        "INTERNAL": "PLAINTEXT",
    }
    with pytest.raises(ConfigError, match="unknown security protocol"):
        parse_security_protocol_map("A:TLS")
    with pytest.raises(ConfigError, match="LISTENER_NAME:SECURITY_PROTOCOL"):
        parse_security_protocol_map("A")
    with pytest.raises(ConfigError, match="more than once"):
        parse_security_protocol_map("A:PLAINTEXT,a:PLAINTEXT")


def test_custom_listener_names():
    c = BrokerConfig.from_properties(
        {
            "listeners": "CLIENT://127.0.0.1:9092,REPLICATION://127.0.0.1:9093",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
        }
    )
    assert [listener.name for listener in c.listeners] == ["CLIENT", "REPLICATION"]


def test_advertised_defaults_to_listeners_with_hostname(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "broker-host")
    c = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://:9092,OTHER://0.0.0.0:9093,THIRD://10.0.0.1:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT,THIRD:PLAINTEXT",
        }
    )
    assert c.listeners[0] == Listener("PLAINTEXT", "", 9092)  # binding is unchanged
    assert c.advertised_listeners == [
        Listener("PLAINTEXT", "broker-host", 9092),
        Listener("OTHER", "broker-host", 9093),
        Listener("THIRD", "10.0.0.1", 9094),
    ]


def test_default_listener_is_advertised_with_hostname(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "h1")
    assert BrokerConfig().advertised_listeners == [Listener("PLAINTEXT", "h1", 9092)]
    assert BrokerConfig().listeners == [Listener("PLAINTEXT", "", 9092)]


def test_explicit_advertised_listeners():
    c = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://0.0.0.0:9092",
            "advertised.listeners": "PLAINTEXT://kafka.example.com:19092",
        }
    )
    assert c.advertised_listeners == [Listener("PLAINTEXT", "kafka.example.com", 19092)]
    assert c.listeners == [Listener("PLAINTEXT", "0.0.0.0", 9092)]


def test_advertised_listener_must_be_a_listener():
    with pytest.raises(ConfigError, match="advertised.listeners"):
        BrokerConfig.from_properties({"advertised.listeners": "SSL://h:9093"})
    with pytest.raises(ConfigError, match="subset"):
        BrokerConfig.from_properties(
            {
                "listeners": "PLAINTEXT://:9092",
                "advertised.listeners": "OTHER://h:9093",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
            }
        )


def test_inter_broker_listener_must_be_advertised():
    with pytest.raises(ConfigError, match="inter.broker.listener.name"):
        BrokerConfig.from_properties({"inter.broker.listener.name": "REPLICATION"})


# --------------------------------------------------------------------------------------------
# Log dirs and log config
# --------------------------------------------------------------------------------------------


def test_log_dirs():
    assert BrokerConfig().log_dirs == ["/tmp/kafka-logs"]
    assert BrokerConfig.from_properties({"log.dir": "/a"}).log_dirs == ["/a"]
    c = BrokerConfig.from_properties({"log.dir": "/a", "log.dirs": " /b , /c,"})
    assert c.log_dirs == ["/b", "/c"]
    with pytest.raises(ConfigError, match="log directory"):
        BrokerConfig.from_properties({"log.dirs": " , "})


def test_log_config_from_broker_settings():
    c = BrokerConfig.from_properties(
        {
            "log.retention.hours": "1",
            "log.segment.bytes": "1048576",
            "log.cleanup.policy": "compact",
            "message.max.bytes": "500",
        }
    )
    log_config = c.log_config()
    assert log_config.retention_ms == 3_600_000
    assert log_config.segment_bytes == 1_048_576
    assert log_config.cleanup_policy == {"compact"}
    assert log_config.max_message_bytes == 500
    assert log_config == LogConfig.resolve({}, c.explicit_settings)


def test_topic_synonyms_are_broker_keys_with_matching_defaults():
    for topic in TOPIC_CONFIGS.values():
        for synonym in topic.synonyms:
            assert synonym.name in BROKER_CONFIGS, synonym.name
        if topic.synonyms:
            default = topic.default_synonym()
            broker_def = BROKER_CONFIGS[default.name]
            assert broker_def.format(broker_def.default) == default.value, topic.name
            for synonym in topic.synonyms[:-1]:
                assert BROKER_CONFIGS[synonym.name].default is None, synonym.name


def test_broker_defaults_give_kafkas_topic_defaults():
    settings = {
        name: d.format(d.default) for name, d in BROKER_CONFIGS.items() if d.default is not None
    }
    assert BrokerConfig.from_properties(settings).log_config() == LogConfig()


# --------------------------------------------------------------------------------------------
# describe
# --------------------------------------------------------------------------------------------


def test_describe_sources_and_values():
    c = BrokerConfig.from_properties(
        {"num.partitions": "3", "log.cleanup.policy": " delete , compact "}
    )
    entries = c.describe()
    assert [e.name for e in entries] == list(BROKER_CONFIGS)
    by = {e.name: e for e in entries}
    assert by["num.partitions"].source is ConfigSource.STATIC_BROKER_CONFIG
    assert by["num.partitions"].value == "3"
    assert by["num.partitions"].type is ConfigType.INT
    assert by["num.partitions"].documentation
    assert by["log.cleanup.policy"].value == "delete,compact"
    assert by["log.cleanup.policy"].type is ConfigType.LIST
    assert by["default.replication.factor"].source is ConfigSource.DEFAULT_CONFIG
    assert by["default.replication.factor"].value == "1"
    assert by["auto.create.topics.enable"].value == "true"
    assert by["log.cleaner.min.cleanable.ratio"].value == "0.5"
    assert by["log.retention.ms"].value is None
    assert by["log.retention.ms"].source is ConfigSource.DEFAULT_CONFIG
    for e in entries:
        expected = (
            ConfigSource.STATIC_BROKER_CONFIG if c.is_set(e.name) else ConfigSource.DEFAULT_CONFIG
        )
        assert e.source is expected
        assert e.is_sensitive == (e.type is ConfigType.PASSWORD)
        if e.synonyms:
            assert e.synonyms[0].name == e.name and e.synonyms[0].source is e.source


def test_describe_read_only_follows_kafkas_dynamic_keys():
    by = {e.name: e for e in BrokerConfig().describe()}
    assert by["broker.id"].read_only
    assert by["log.dirs"].read_only
    assert by["zookeeper.connect"].read_only
    assert not by["log.retention.hours"].read_only
    assert not by["num.io.threads"].read_only
    assert not by["compression.type"].read_only


def test_describe_synonyms():
    c = BrokerConfig.from_properties({"log.retention.minutes": "30", "num.partitions": "2"})
    by = {e.name: e for e in c.describe()}
    assert by["num.partitions"].synonyms == (
        ConfigSynonym("num.partitions", "2", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("num.partitions", "1", ConfigSource.DEFAULT_CONFIG),
    )
    assert by["log.retention.minutes"].synonyms == (
        ConfigSynonym("log.retention.minutes", "30", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    )
    assert by["log.retention.hours"].synonyms == (
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    )
    assert by["log.retention.ms"].synonyms == ()  # unset with no default
    assert all(e.synonyms == () for e in c.describe(include_synonyms=False))


# --------------------------------------------------------------------------------------------
# config/server.properties
# --------------------------------------------------------------------------------------------


def test_server_properties_loads_without_warnings(caplog):
    caplog.set_level(logging.WARNING)
    c = BrokerConfig.load(SERVER_PROPERTIES)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert c.broker_id == 0
    assert c.listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    assert c.advertised_listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    assert c.log_dirs == ["./data"]
    assert c.get("num.partitions") == 1
    assert c.get("zookeeper.connect") is None
    assert c.log_config() == LogConfig()


def test_server_properties_commented_keys_are_known_with_their_defaults():
    """Commented-out `#key=value` lines name real keys, at their defaults unless said otherwise."""
    examples = {
        "log.flush.interval.messages", "log.flush.interval.ms", "broker.rack", "replica.selector.class", "metrics.listener",
    }
    for line in SERVER_PROPERTIES.read_text().splitlines():
        if line.startswith("#") and "=" in line and " " not in line.split("=", 1)[0]:
            key, value = line[1:].split("=", 1)
            assert key in BROKER_CONFIGS, key
            if key not in examples:
                definition = BROKER_CONFIGS[key]
                assert definition.format(definition.parse(value)) == definition.format(
                    definition.default
                ), key


def test_reserved_broker_ids_bound_the_configured_one():
    assert BrokerConfig().get("broker.id.generation.enable") is True
    assert BrokerConfig().get("reserved.broker.max.id") == 1000
    with pytest.raises(ConfigError, match="not greater than reserved.broker.max.id"):
        BrokerConfig({"broker.id": "1001"})
    assert BrokerConfig({"broker.id": "1001", "reserved.broker.max.id": "2000"}).broker_id == 1001


# --- TLS listeners and ssl.* keys

SSL_LISTENER = {
    "listeners": "PLAINTEXT://:9092,SSL://:9093",
    "ssl.keystore.type": "PEM",
    "ssl.keystore.location": "/etc/logway/server.pem",
}


def test_ssl_listener_is_accepted_with_a_keystore():
    c = BrokerConfig(SSL_LISTENER)
    assert c.security_protocol("SSL") == "SSL"
    assert c.ssl_settings("SSL")["ssl.keystore.location"] == "/etc/logway/server.pem"


_PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


def test_sasl_ssl_listeners_ask_for_client_certificates_only_through_their_own_key():
    # KIP-684: the broker-wide ssl.client.auth is the SSL listeners'; a SASL_SSL listener's
    # clients authenticate with SASL unless its listener.name.<l>.ssl.client.auth says more.
    c = BrokerConfig(
        {
            **SSL_LISTENER,
            "listeners": "SSL://:9093,SASL_SSL://:9094,MTLS://:9095",
            "listener.security.protocol.map": "SSL:SSL,SASL_SSL:SASL_SSL,MTLS:SASL_SSL",
            "sasl.enabled.mechanisms": "PLAIN",
            **{f"listener.name.{name}.plain.sasl.jaas.config": _PLAIN_JAAS for name in ("sasl_ssl", "mtls")},
            "ssl.client.auth": "required",
            "listener.name.mtls.ssl.client.auth": "requested",
        }
    )
    assert c.ssl_settings("SSL")["ssl.client.auth"] == "required"
    assert c.ssl_settings("SASL_SSL")["ssl.client.auth"] == "none"
    assert c.ssl_settings("MTLS")["ssl.client.auth"] == "requested"


def test_ssl_listener_without_keystore_is_refused():
    with pytest.raises(ConfigError, match="Listener SSL uses security protocol SSL but has no keystore"):
        BrokerConfig({"listeners": "SSL://:9093"})


def test_ssl_keys_have_kafkas_defaults():
    s = BrokerConfig().ssl_settings("PLAINTEXT")
    assert s["ssl.protocol"] == "TLSv1.3"
    assert s["ssl.enabled.protocols"] == ["TLSv1.2", "TLSv1.3"]
    assert s["ssl.keystore.type"] == "JKS" and s["ssl.truststore.type"] == "JKS"
    assert s["ssl.client.auth"] == "none"
    assert s["ssl.endpoint.identification.algorithm"] == "https"
    assert s["ssl.principal.mapping.rules"] == "DEFAULT"
    assert s["ssl.cipher.suites"] is None


def test_listener_overrides_win_key_by_key():
    c = BrokerConfig(
        {
            **SSL_LISTENER,
            "listeners": "INTERNAL://:9092,EXTERNAL://:9093",
            "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SSL",
            "ssl.client.auth": "required",
            "listener.name.external.ssl.keystore.location": "/etc/logway/external.pem",
            "listener.name.external.ssl.client.auth": "none",
        }
    )
    internal, external = c.ssl_settings("INTERNAL"), c.ssl_settings("EXTERNAL")
    assert internal["ssl.keystore.location"] == "/etc/logway/server.pem"
    assert internal["ssl.client.auth"] == "required"
    assert external["ssl.keystore.location"] == "/etc/logway/external.pem"
    assert external["ssl.client.auth"] == "none"
    assert external["ssl.keystore.type"] == "PEM"  # not overridden: the broker-wide value


def test_a_listener_override_keystore_alone_serves_an_ssl_listener():
    c = BrokerConfig(
        {
            "listeners": "PLAINTEXT://:9092,SSL://:9093",
            "listener.name.ssl.ssl.keystore.type": "PEM",
            "listener.name.ssl.ssl.keystore.location": "/etc/logway/server.pem",
        }
    )
    assert c.ssl_settings("SSL")["ssl.keystore.type"] == "PEM"
    assert c.ssl_settings("PLAINTEXT")["ssl.keystore.type"] == "JKS"


@pytest.mark.parametrize(
    "key, match",
    [
        ("listener.name.other.ssl.client.auth", "must name a listener of listeners"),
        ("listener.name.SSL.ssl.client.auth", "in lower case"),
    ],
)
def test_listener_overrides_must_name_a_listener_in_lower_case(key, match):
    with pytest.raises(ConfigError, match=match):
        BrokerConfig({**SSL_LISTENER, key: "required"})


def test_listener_override_of_an_unknown_key_is_refused():
    with pytest.raises(ConfigError, match="Unknown broker config 'listener.name.ssl.ssl.keystore.file'"):
        BrokerConfig({**SSL_LISTENER, "listener.name.ssl.ssl.keystore.file": "x"})


def test_listener_override_values_are_checked():
    with pytest.raises(ConfigError, match="Invalid value always for configuration ssl.client.auth"):
        BrokerConfig({**SSL_LISTENER, "listener.name.ssl.ssl.client.auth": "always"})


def test_bad_principal_mapping_rules_are_refused_at_start():
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules: Invalid rule"):
        BrokerConfig({"ssl.principal.mapping.rules": "RULE:^CN=(.*)$/$1/X"})


def test_jks_keystore_is_refused_at_start():
    with pytest.raises(ConfigError, match="cannot read Java key stores"):
        BrokerConfig(
            {"listeners": "SSL://:9093", "ssl.keystore.location": "/ks.jks", "ssl.keystore.password": "x"}
        )


def test_security_inter_broker_protocol_names_the_inter_broker_listener():
    c = BrokerConfig({**SSL_LISTENER, "security.inter.broker.protocol": "SSL"})
    assert c.inter_broker_listener_name == "SSL"
    assert BrokerConfig(SSL_LISTENER).inter_broker_listener_name == "PLAINTEXT"  # the first listener
    assert BrokerConfig({**SSL_LISTENER, "inter.broker.listener.name": "ssl"}).inter_broker_listener_name == "SSL"
    with pytest.raises(ConfigError, match="Only one of inter.broker.listener.name and security.inter.broker.protocol"):
        BrokerConfig({**SSL_LISTENER, "security.inter.broker.protocol": "SSL", "inter.broker.listener.name": "SSL"})
    with pytest.raises(ConfigError, match="SASL_SSL is not one of PLAINTEXT, SSL"):
        BrokerConfig({**SSL_LISTENER, "security.inter.broker.protocol": "SASL_SSL"})


def test_passwords_are_never_described():
    c = BrokerConfig({**SSL_LISTENER, "ssl.keystore.type": "PKCS12", "ssl.keystore.password": "secret"})
    entry = next(e for e in c.describe() if e.name == "ssl.keystore.password")
    assert entry.value is None and entry.is_sensitive
    assert [synonym.value for synonym in entry.synonyms] == [None]
    assert entry.source is ConfigSource.STATIC_BROKER_CONFIG


def test_the_acl_authorizer_is_the_only_authorizer_and_its_keys_need_it():
    config = BrokerConfig.from_properties(
        {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"}
    )
    assert config.get("super.users") == "User:admin"
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        BrokerConfig.from_properties({"authorizer.class.name": "com.example.MyAuthorizer"})
    with pytest.raises(ConfigError, match="without an authorizer"):
        BrokerConfig.from_properties({"allow.everyone.if.no.acl.found": "true"})
    with pytest.raises(ConfigError, match="super.users"):
        BrokerConfig.from_properties({"authorizer.class.name": "logway.acl", "super.users": "admin"})


def test_replica_selector_class_takes_kafkas_rack_aware_selector_and_refuses_other_classes():
    assert BrokerConfig.from_properties({}).get("replica.selector.class") is None
    rack_aware = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    assert BrokerConfig.from_properties({"replica.selector.class": rack_aware}).get("replica.selector.class") == rack_aware
    with pytest.raises(ConfigError, match="replica.selector.class: logway's only replica selector is"):
        BrokerConfig.from_properties({"replica.selector.class": "com.example.NearestSelector"})


# --------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------


def test_metrics_listener_is_an_http_host_and_port():
    def listener(text):
        return BrokerConfig({"metrics.listener": text}).metrics_listener

    assert BrokerConfig().metrics_listener is None
    assert listener("http://127.0.0.1:9404") == ("127.0.0.1", 9404)
    assert listener("http://127.0.0.1:9404/metrics") == ("127.0.0.1", 9404)
    assert listener("http://:0") == ("", 0)
    assert listener("http://[::1]:9404") == ("::1", 9404)


@pytest.mark.parametrize(
    "text", ["127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1", "http://h:70000", "http://h:1/other"]
)
def test_a_metrics_listener_that_is_not_http_host_port_is_refused_at_start(text):
    with pytest.raises(ConfigError, match="for configuration metrics.listener"):
        BrokerConfig({"metrics.listener": text})


def test_graphite_settings_need_a_host_and_default_their_prefix_to_the_broker():
    assert BrokerConfig().metrics_graphite is None
    settings = BrokerConfig({"metrics.graphite.host": "carbon", "metrics.graphite.port": "2004"}).metrics_graphite
    assert (settings.host, settings.port, settings.interval_ms, settings.prefix) == ("carbon", 2004, 60000, None)
    with pytest.raises(ConfigError, match="metrics.graphite.prefix set without metrics.graphite.host"):
        BrokerConfig({"metrics.graphite.prefix": "x"})


# --------------------------------------------------------------------------------------------
# HTTP API
# --------------------------------------------------------------------------------------------


def test_http_listeners_are_off_by_default_and_parsed_as_scheme_host_port():
    assert BrokerConfig().http_listeners == []
    assert BrokerConfig({"http.listeners": "http://127.0.0.1:8082, https://:8443"}).http_listeners == [
        ("http", "127.0.0.1", 8082), ("https", "", 8443)]


@pytest.mark.parametrize("text", ["127.0.0.1:8082", "ftp://h:1", "http://h", "http://h:1/v3", "http://u@h:1"])
def test_an_http_listener_that_is_not_a_url_with_a_port_is_refused_at_start(text):
    with pytest.raises(ConfigError, match="for configuration http.listeners"):
        BrokerConfig({"http.listeners": text})


def test_an_http_authentication_method_other_than_none_or_basic_is_refused_at_start():
    with pytest.raises(ConfigError, match="http.authentication.method"):
        BrokerConfig({"http.authentication.method": "BEARER"})


# --- tiered storage


def test_remote_storage_needs_the_store_url():
    with pytest.raises(ConfigError, match="needs rsm.config.url"):
        BrokerConfig({"remote.log.storage.system.enable": "true"})
    config = BrokerConfig({"remote.log.storage.system.enable": "true", "rsm.config.url": "file:///tmp/store"})
    assert config.get("remote.log.storage.system.enable") is True


def test_store_options_fsspec_would_ignore_or_misread_are_refused_at_start():
    tiered = {"remote.log.storage.system.enable": "true", "rsm.config.url": "s3://bucket/prefix"}
    BrokerConfig({**tiered, "rsm.config.endpoint_url": "http://s3:9000", "rsm.config.key": "k", "rsm.config.secret": "s"})
    with pytest.raises(ConfigError, match="unknown option secrett") as refused:
        BrokerConfig({**tiered, "rsm.config.secrett": "hunter2"})
    assert "hunter2" not in str(refused.value)
    with pytest.raises(ConfigError, match="anon must be true or false"):
        BrokerConfig({**tiered, "rsm.config.anon": "no"})


def test_store_settings_without_remote_storage_are_refused():
    with pytest.raises(ConfigError, match="rsm.config.url set without remote.log.storage.system.enable"):
        BrokerConfig({"rsm.config.url": "file:///tmp/store"})


def test_only_logways_remote_storage_manager_is_accepted():
    tiered = {"remote.log.storage.system.enable": "true", "rsm.config.url": "file:///tmp/store"}
    BrokerConfig({**tiered, "remote.log.storage.manager.class.name": "logway.storage.remote.FsspecRemoteStorageManager"})
    with pytest.raises(ConfigError, match="cannot load Java classes"):
        BrokerConfig({**tiered, "remote.log.storage.manager.class.name": "io.aiven.kafka.tieredstorage.RemoteStorageManager"})
    with pytest.raises(ConfigError, match="remote.log.metadata.manager.class.name"):
        BrokerConfig({**tiered, "remote.log.metadata.manager.class.name": "com.example.Other"})


def test_broker_local_retention_may_not_exceed_the_total_retention():
    tiered = {"remote.log.storage.system.enable": "true", "rsm.config.url": "file:///tmp/store"}
    with pytest.raises(ConfigError, match="Value must not be more than retention.bytes property value: 10"):
        BrokerConfig({**tiered, "log.retention.bytes": "10", "log.local.retention.bytes": "11"})


def test_remote_storage_is_served_in_a_cluster():
    config = BrokerConfig({
        "remote.log.storage.system.enable": "true", "rsm.config.url": "file:///tmp/store",
        "zookeeper.connect": "127.0.0.1:2181",
    })
    assert config.get("remote.log.storage.system.enable") is True


# --- security keys that would have no effect are refused at start (Kafka ignores them)

_SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
SASL_LISTENER = {
    "listeners": "PLAINTEXT://:9092,SASL_PLAINTEXT://:9093",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": _PLAIN_JAAS,
}


def test_ssl_keys_without_a_tls_listener_are_refused():
    with pytest.raises(
        ConfigError,
        match="ssl.keystore.type, ssl.keystore.location are set but no listener uses SSL or SASL_SSL .*and no "
        "http.listeners is https: it would have no effect; remove them, or add a TLS listener",
    ):
        BrokerConfig({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/etc/logway/server.pem"})
    with pytest.raises(ConfigError, match="ssl.client.auth is set but no listener uses SSL"):
        BrokerConfig({**SASL_LISTENER, "ssl.client.auth": "required"})
    # Kafka's defaults spelled out change nothing, and are accepted.
    BrokerConfig({"ssl.keystore.type": "JKS", "ssl.client.auth": "none", "ssl.endpoint.identification.algorithm": "https"})


def test_ssl_keys_serve_an_https_http_listener():
    c = BrokerConfig({"http.listeners": "https://:8443", "ssl.keystore.type": "PEM", "ssl.keystore.location": "/k.pem"})
    assert c.ssl_settings("HTTPS")["ssl.keystore.location"] == "/k.pem"
    with pytest.raises(ConfigError, match="ssl.keystore.type, ssl.keystore.location are set but no listener uses SSL"):
        BrokerConfig({"http.listeners": "http://:8082", "ssl.keystore.type": "PEM", "ssl.keystore.location": "/k.pem"})


def test_a_listener_prefixed_ssl_key_on_a_listener_without_tls_is_refused():
    with pytest.raises(
        ConfigError,
        match="listener.name.plaintext.ssl.client.auth is set but listener PLAINTEXT uses PLAINTEXT, not SSL or "
        "SASL_SSL: it would have no effect; remove it, or map PLAINTEXT to SSL or SASL_SSL",
    ):
        BrokerConfig({**SSL_LISTENER, "listener.name.plaintext.ssl.client.auth": "required"})


def test_a_broker_wide_ssl_key_every_tls_listener_overrides_is_refused():
    with pytest.raises(ConfigError, match="ssl.enabled.protocols is set but no TLS listener takes it \\(SSL takes "
                       "listener.name.ssl.ssl.enabled.protocols\\): it would have no effect"):
        BrokerConfig({
            **SSL_LISTENER, "ssl.enabled.protocols": "TLSv1.3", "listener.name.ssl.ssl.enabled.protocols": "TLSv1.2",
        })
    # Keystores and truststores are exempt: Kafka's renewal sets listener.name.<l>.ssl.keystore.location
    # at run time over the server.properties one (broker/dynamic_config.py).
    BrokerConfig({**SSL_LISTENER, "listener.name.ssl.ssl.keystore.location": "/etc/logway/renewed.pem"})
    # KIP-684: a SASL_SSL listener takes only its own listener.name.<l>.ssl.client.auth.
    sasl_ssl = {
        **SASL_LISTENER, **SSL_LISTENER, "listeners": "SASL_SSL://:9094",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": _PLAIN_JAAS,
    }
    del sasl_ssl["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    with pytest.raises(ConfigError, match="ssl.client.auth is set but no TLS listener takes it \\(SASL_SSL is "
                       "SASL_SSL, which asks for client certificates only through listener.name.sasl_ssl.ssl.client.auth"):
        BrokerConfig({**sasl_ssl, "ssl.client.auth": "required"})
    assert BrokerConfig({**sasl_ssl, "listener.name.sasl_ssl.ssl.client.auth": "required"}).ssl_settings("SASL_SSL")[
        "ssl.client.auth"] == "required"


@pytest.mark.parametrize("key, value", [("sasl.enabled.mechanisms", "PLAIN"), ("connections.max.reauth.ms", "3600000")])
def test_sasl_keys_without_a_sasl_listener_are_refused(key, value):
    with pytest.raises(
        ConfigError,
        match=f"{key} is set but no listener uses SASL_PLAINTEXT or SASL_SSL: it would have no effect; remove it, "
        "or add a SASL_PLAINTEXT or SASL_SSL listener",
    ):
        BrokerConfig({**SSL_LISTENER, key: value})
    BrokerConfig({**SASL_LISTENER, key: value})


def test_sasl_keys_every_sasl_listener_overrides_are_refused():
    with pytest.raises(ConfigError, match="sasl.enabled.mechanisms is set but every SASL listener takes its own"):
        BrokerConfig({**SASL_LISTENER, "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN"})
    with pytest.raises(ConfigError, match="connections.max.reauth.ms is set but every SASL listener takes its own"):
        BrokerConfig({
            **SASL_LISTENER, "connections.max.reauth.ms": "1000",
            "listener.name.sasl_plaintext.connections.max.reauth.ms": "2000",
        })
    with pytest.raises(ConfigError, match="listener.name.sasl_plaintext.connections.max.reauth.ms is set but every "
                       "mechanism of listener SASL_PLAINTEXT takes its own"):
        BrokerConfig({
            **SASL_LISTENER, "listener.name.sasl_plaintext.connections.max.reauth.ms": "2000",
            "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "3000",
        })


def test_sasl_mechanism_inter_broker_protocol_without_sasl_between_brokers_is_refused():
    cluster = {**SASL_LISTENER, "zookeeper.connect": "127.0.0.1:2181", "sasl.mechanism.inter.broker.protocol": "PLAIN"}
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol is set but this broker is standalone "
                       "\\(no zookeeper.connect\\): no broker logs in to another"):
        BrokerConfig({**cluster, "zookeeper.connect": "", "inter.broker.listener.name": "SASL_PLAINTEXT"})
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol is set but the inter-broker listener "
                       "PLAINTEXT does not use SASL: it would have no effect"):
        BrokerConfig({**cluster, "inter.broker.listener.name": "PLAINTEXT"})
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="s" user_b="s";'
    c = BrokerConfig({
        **cluster, "inter.broker.listener.name": "SASL_PLAINTEXT",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
    })
    assert c.inter_broker_sasl.mechanism == "PLAIN"


def test_a_jaas_config_of_a_mechanism_not_enabled_on_its_listener_is_refused():
    with pytest.raises(
        ConfigError,
        match="listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config is set but SASL mechanism SCRAM-SHA-256 "
        "is not enabled on listener SASL_PLAINTEXT \\(it serves PLAIN\\): it would have no effect; remove it, or "
        "enable SCRAM-SHA-256",
    ):
        BrokerConfig({**SASL_LISTENER, "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": _SCRAM_JAAS})
    with pytest.raises(ConfigError, match="listener.name.sasl_plaintext.gssapi.connections.max.reauth.ms is set but "
                       "SASL mechanism GSSAPI is not enabled"):
        BrokerConfig({**SASL_LISTENER, "listener.name.sasl_plaintext.gssapi.connections.max.reauth.ms": "1000"})
