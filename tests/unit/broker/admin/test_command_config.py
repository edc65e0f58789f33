import ssl

import pytest
import trustme

from broker.admin import command_config
from broker.config import ConfigError
from broker.security.sasl_clients import PlainClient, ScramExchange


def test_no_file_is_plaintext_with_kafka_client_defaults():
    settings = command_config.load(None)
    assert (settings.protocol, settings.ssl_context, settings.sasl) == ("PLAINTEXT", None, None)
    assert settings.request_timeout_s == 30.0


def test_plain_login_comes_from_the_jaas_config_as_kafka_tools_take_it(tmp_path):
    path = tmp_path / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        "    username=\"admin\" password=\"admin-secret\";\n"
        "client.id=ops\n"
    )
    settings = command_config.load(str(path))
    client = settings.sasl()
    assert isinstance(client, PlainClient)
    assert client.first_token() == b"\0admin\0admin-secret"
    assert settings.client_id == "ops"


def test_scram_login_from_librdkafka_style_username_and_password():
    settings = command_config.settings({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice", "sasl.password": "secret",
    })
    client = settings.sasl()
    assert isinstance(client, ScramExchange) and client.mechanism == "SCRAM-SHA-512"
    assert client.first_token().startswith(b"n,,n=alice,r=")


def test_ssl_builds_a_client_context_checking_the_server_against_the_truststore(tmp_path):
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    settings = command_config.settings({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tmp_path / "ca.pem"),
    })
    assert isinstance(settings.ssl_context, ssl.SSLContext)
    assert settings.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert settings.ssl_context.check_hostname


@pytest.mark.parametrize("props, message", [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "GSSAPI is not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "needs a username and a password"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required username=a password=b;"},
     "PlainLoginModule"),
    ({"security.protocol": "KERBEROS"}, "security.protocol"),
    ({"sasl.login.callback.handler.class": "x"}, "cannot honour sasl.login.callback.handler.class"),
])
def test_settings_that_cannot_be_honoured_are_refused(props, message):
    with pytest.raises(ConfigError, match=message):
        command_config.settings(props)


def test_client_keys_without_effect_are_named_in_a_warning(capsys):
    command_config.settings({"retries": "5"})
    assert "'retries' was supplied but isn't used" in capsys.readouterr().err
