"""The broker keys of client quotas: Kafka's names, defaults and checks."""

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.server import Broker
from tests.in_process import broker_config


def test_quota_windows_default_to_kafkas_eleven_of_one_second():
    config = BrokerConfig()
    assert (config.get("quota.window.num"), config.get("quota.window.size.seconds")) == (11, 1)


@pytest.mark.parametrize("key", ["quota.window.num", "quota.window.size.seconds"])
def test_quota_windows_must_be_at_least_one(key):
    with pytest.raises(ConfigError, match=f"Invalid value 0 for configuration {key}"):
        BrokerConfig.from_properties({key: "0"})


@pytest.mark.parametrize("key", ["quota.producer.default", "quota.consumer.default"])
def test_the_static_default_quotas_kafka_3_removed_are_refused(key):
    with pytest.raises(ConfigError, match=key):
        BrokerConfig.from_properties({key: "1048576"})


def test_the_broker_measures_rates_over_the_configured_windows(tmp_path):
    broker = Broker(broker_config(tmp_path, {"quota.window.num": "5", "quota.window.size.seconds": "2"}))
    assert (broker.client_quotas.window.samples, broker.client_quotas.window.window_ms) == (5, 2000)
