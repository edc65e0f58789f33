"""broker.testing as an application's test suite uses it: the kafka_broker fixture of the
installed pytest plugin, in a pytest run of its own, with confluent-kafka; the context manager
with kafka-python; EmbeddedBroker under unittest."""

import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from broker.testing import embedded_broker

pytestmark = pytest.mark.compat
pytest_plugins = ["pytester"]

TIMEOUT_S = 20

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_example() -> str:
    """The python block of the README's "Testing your application" section."""
    section = README.read_text().split("## Testing your application", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readmes_example_passes_in_a_new_pytest_process_with_the_installed_plugin(pytester):
    pytester.makepyfile(test_readme=_readme_example())

    # A separate process: the fixture comes from the pytest11 entry point alone, as it does
    # for an application that installed logway.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)

    result.assert_outcomes(passed=1)


def test_the_context_manager_serves_kafka_python():
    with embedded_broker({"num.partitions": 2}) as bootstrap:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_block_ms=TIMEOUT_S * 1000)
        try:
            sent = [producer.send("events", value=f"v{i}".encode(), partition=i % 2) for i in range(10)]
            metadata = [future.get(timeout=TIMEOUT_S) for future in sent]
        finally:
            producer.close()
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                 auto_offset_reset="earliest", request_timeout_ms=15_000)
        try:
            consumer.assign([TopicPartition("events", 0), TopicPartition("events", 1)])
            received = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(received) < 10 and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    received.extend(record.value for record in records)
        finally:
            consumer.close()

    assert {m.partition for m in metadata} == {0, 1}
    assert sorted(received) == sorted(f"v{i}".encode() for i in range(10))


_UNITTEST_CASE = """
    import unittest

    from kafka import KafkaAdminClient

    from broker.testing import EmbeddedBroker


    class TopicsTest(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            cls.broker = EmbeddedBroker({"auto.create.topics.enable": False}).start()

        @classmethod
        def tearDownClass(cls):
            cls.broker.stop()

        def test_no_topics_yet(self):
            admin = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap)
            try:
                self.assertEqual(admin.list_topics(), [])
            finally:
                admin.close()
"""


def test_unittest_runs_an_embedded_broker_without_pytest(pytester):
    pytester.makepyfile(test_topics=_UNITTEST_CASE)

    result = pytester.run(sys.executable, "-m", "unittest", "-v", "test_topics", timeout=120)

    assert result.ret == 0, result.stderr.str()
    result.stderr.fnmatch_lines(["*test_no_topics_yet*ok*", "OK"])
