"""broker.testing: the embedded broker (its own thread and event loop in this process) spoken to
over loopback sockets, and its pytest fixtures run by pytester in this process."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from broker.config import ConfigError
from broker.testing import EmbeddedBroker, embedded_broker
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.kafka_wire import call

pytest_plugins = ["pytester"]


def _metadata(bootstrap: str, topic: str):
    """Metadata for one topic, asking the broker to create it if missing (as producers do)."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        request = MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
        return call(sock, ApiKey.METADATA, 12, request)


def _refuses_connections(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_the_context_manager_yields_a_loopback_broker_that_advertises_itself():
    with embedded_broker() as bootstrap:
        response = _metadata(bootstrap, "greetings")

    host, port = bootstrap.rsplit(":", 1)
    assert host == "127.0.0.1"
    assert [(b.host, b.port) for b in response.brokers] == [("127.0.0.1", int(port))]
    assert [t.error_code for t in response.topics] == [ErrorCode.none]


def test_stopping_closes_the_port_and_removes_the_temporary_log_dir():
    broker = EmbeddedBroker().start()
    bootstrap, log_dir = broker.bootstrap, Path(broker.log_dir)
    assert (log_dir / "logway-metadata.json").exists()

    broker.stop()

    assert not log_dir.exists()
    assert _refuses_connections(bootstrap)
    with pytest.raises(RuntimeError, match="not running"):
        broker.bootstrap


def test_configs_are_passed_to_the_broker_booleans_as_kafka_spells_them():
    with embedded_broker({"num.partitions": 3}) as bootstrap:
        created = _metadata(bootstrap, "three")
    with embedded_broker({"auto.create.topics.enable": False}) as bootstrap:
        not_created = _metadata(bootstrap, "three")

    assert [len(t.partitions) for t in created.topics] == [3]
    assert [t.error_code for t in not_created.topics] == [ErrorCode.unknown_topic_or_partition]


def test_an_unknown_config_stops_the_start_and_leaves_no_directory(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))

    with pytest.raises(ConfigError, match="no.such.key"):
        EmbeddedBroker({"no.such.key": "1"}).start()

    assert list(tmp_path.iterdir()) == []


def test_the_listener_and_log_dir_keys_are_the_embedded_brokers_own():
    with pytest.raises(ValueError, match="log_dir"):
        EmbeddedBroker({"log.dirs": "/tmp/elsewhere"})
    with pytest.raises(ValueError, match="listeners"):
        EmbeddedBroker({"listeners": "PLAINTEXT://0.0.0.0:9092"})


def test_a_given_log_dir_is_kept_and_a_restart_finds_its_topics(tmp_path):
    with embedded_broker({"num.partitions": 2}, log_dir=tmp_path) as bootstrap:
        _metadata(bootstrap, "kept")
    assert tmp_path.exists()

    with embedded_broker({"auto.create.topics.enable": "false"}, log_dir=tmp_path) as bootstrap:
        response = _metadata(bootstrap, "kept")

    assert [(t.error_code, len(t.partitions)) for t in response.topics] == [(ErrorCode.none, 2)]


def test_brokers_running_at_once_have_their_own_ports_and_dirs():
    with EmbeddedBroker() as first, EmbeddedBroker() as second:
        assert first.bootstrap != second.bootstrap
        assert first.log_dir != second.log_dir
        assert _metadata(second.bootstrap, "t").topics[0].error_code == ErrorCode.none


def test_importing_the_module_does_not_import_pytest():
    # An application's unittest suite may run without pytest installed.
    code = "import sys, broker.testing; assert 'pytest' not in sys.modules, 'pytest imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            cwd=Path(__file__).resolve().parents[3], env={**os.environ, "PYTHONPATH": "."})
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- the pytest plugin

_TWO_TESTS_RECORD_THEIR_BROKERS = """
    SEEN = []

    def test_one(kafka_broker):
        SEEN.append(kafka_broker)

    def test_two(kafka_broker):
        SEEN.append(kafka_broker)

    def test_brokers(request):
        print("BROKERS", len(set(SEEN)), len(SEEN))
"""


def test_the_kafka_broker_fixture_is_one_broker_for_the_session_by_default(pytester):
    pytester.makepyfile(_TWO_TESTS_RECORD_THEIR_BROKERS)

    result = pytester.runpytest("-s")

    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*BROKERS 1 2*"])


def test_the_kafka_broker_scope_can_be_chosen_on_the_command_line_or_in_the_ini_file(pytester):
    pytester.makepyfile(_TWO_TESTS_RECORD_THEIR_BROKERS)
    by_option = pytester.runpytest("-s", "--kafka-broker-scope", "function")
    pytester.makeini("[pytest]\nkafka_broker_scope = function\n")
    by_ini = pytester.runpytest("-s")

    for result in (by_option, by_ini):
        result.assert_outcomes(passed=3)
        result.stdout.fnmatch_lines(["*BROKERS 2 2*"])


def test_the_configs_fixture_and_the_marker_reach_the_function_broker(pytester):
    pytester.makeconftest("""
        import pytest

        @pytest.fixture(scope="session")
        def kafka_broker_configs():
            return {"num.partitions": 2, "auto.create.topics.enable": True}
    """)
    pytester.makepyfile(f"""
        import pytest
        from tests.unit.broker.test_testing import _metadata

        def test_shared(kafka_broker):
            assert len(_metadata(kafka_broker, "t").topics[0].partitions) == 2

        @pytest.mark.kafka_broker_configs({{"num.partitions": 4}})
        def test_marked(kafka_broker_function):
            assert len(_metadata(kafka_broker_function, "t").topics[0].partitions) == 4

        def test_unmarked(kafka_broker_function):
            assert len(_metadata(kafka_broker_function, "t").topics[0].partitions) == 2
    """)

    pytester.runpytest("--strict-markers").assert_outcomes(passed=3)


def test_a_broker_scope_pytest_does_not_know_is_refused(pytester):
    pytester.makeini("[pytest]\nkafka_broker_scope = forever\n")
    pytester.makepyfile("def test_one(kafka_broker):\n    pass\n")

    result = pytester.runpytest()

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*kafka_broker_scope must be one of*not 'forever'*"])
