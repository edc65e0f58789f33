"""SASL settings resolved from server.properties, through BrokerConfig, as Kafka resolves them."""

import pytest

from broker.config import BrokerConfig, ConfigError

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-secret" user_admin="admin-secret";'
)
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="admin-secret";'


def sasl_config(**settings: str) -> BrokerConfig:
    return BrokerConfig({
        "listeners": "SASL_PLAINTEXT://:9092,PLAINTEXT://:9093",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        **{key.replace("__", "."): value for key, value in settings.items()},
    })


def test_a_sasl_plaintext_listener_with_its_jaas_config_is_accepted():
    config = sasl_config()
    listener = config.sasl_listener("SASL_PLAINTEXT")
    assert listener.mechanisms == ("PLAIN",)
    assert listener.jaas["PLAIN"].options["user_admin"] == "admin-secret"
    assert listener.max_reauth_ms == {"PLAIN": 0}
    assert config.sasl_listener("PLAINTEXT") is None


def test_kafkas_default_mechanism_gssapi_is_refused_clearly():
    with pytest.raises(ConfigError, match="GSSAPI .*which logway does not serve"):
        BrokerConfig({"listeners": "SASL_PLAINTEXT://:9092"})


def test_a_mechanism_without_jaas_config_is_refused_with_kafkas_message():
    with pytest.raises(ConfigError, match="Could not find a 'KafkaServer' or 'sasl_plaintext.KafkaServer' entry"):
        sasl_config(**{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"})


def test_the_listener_may_override_the_mechanisms():
    config = BrokerConfig({
        "listeners": "SASL_PLAINTEXT://:9092,OTHER://:9093",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,OTHER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.other.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    })
    assert config.sasl_listener("SASL_PLAINTEXT").mechanisms == ("SCRAM-SHA-512",)
    assert config.sasl_listener("OTHER").mechanisms == ("PLAIN",)


def test_connections_max_reauth_ms_per_listener_and_mechanism():
    config = sasl_config(**{
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "connections.max.reauth.ms": "1000",
        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "5000",
    })
    assert config.sasl_listener("SASL_PLAINTEXT").max_reauth_ms == {"PLAIN": 5000, "SCRAM-SHA-256": 1000}
    assert sasl_config(**{"connections.max.reauth.ms": "1000"}).sasl_listener("SASL_PLAINTEXT").max_reauth_ms == {"PLAIN": 1000}


def test_an_unprefixed_sasl_jaas_config_is_refused_since_kafka_brokers_ignore_it():
    with pytest.raises(ConfigError, match="sasl.jaas.config is ignored by Kafka brokers"):
        sasl_config(**{"sasl.jaas.config": PLAIN_JAAS})


def test_a_jaas_config_with_the_wrong_login_module_is_refused():
    with pytest.raises(ConfigError, match="needs login module org.apache.kafka.common.security.plain.PlainLoginModule"):
        sasl_config(**{"listener.name.sasl_plaintext.plain.sasl.jaas.config": SCRAM_JAAS})


def test_a_jaas_config_with_two_login_modules_is_refused():
    with pytest.raises(ConfigError, match="contains 2 login modules, should be 1 module"):
        sasl_config(**{"listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS + PLAIN_JAAS})


def test_sasl_keys_of_a_listener_without_sasl_are_refused():
    with pytest.raises(ConfigError, match="listener PLAINTEXT uses PLAINTEXT, not SASL"):
        sasl_config(**{"listener.name.plaintext.plain.sasl.jaas.config": PLAIN_JAAS})


def test_sasl_keys_of_an_unknown_listener_are_refused():
    with pytest.raises(ConfigError, match="names listener OTHER, which is not in listeners"):
        sasl_config(**{"listener.name.other.plain.sasl.jaas.config": PLAIN_JAAS})


def test_the_inter_broker_login_comes_from_the_listeners_jaas_entry():
    config = sasl_config(**{
        "zookeeper.connect": "localhost:2181",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
    })
    assert config.inter_broker_listener_name == "SASL_PLAINTEXT"
    assert (config.inter_broker_sasl.mechanism, config.inter_broker_sasl.username) == ("PLAIN", "admin")


def test_the_inter_broker_mechanism_must_be_enabled():
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms"):
        sasl_config(**{"zookeeper.connect": "localhost:2181", "inter.broker.listener.name": "SASL_PLAINTEXT"})


def test_inter_broker_listener_name_and_security_protocol_exclude_each_other():
    with pytest.raises(ConfigError, match="Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."):
        sasl_config(**{"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"})
