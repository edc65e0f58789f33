"""broker/log_levels.py: the BROKER_LOGGER resource, Kafka's Log4jController for Python loggers."""

import logging

import pytest

from broker import log_levels
from protocol.errors import ErrorCode, KafkaError

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@pytest.fixture
def logger():
    made = logging.getLogger("logway.test.levels.child")
    parent = logging.getLogger("logway.test.levels")
    parent.setLevel(logging.ERROR)
    yield made
    made.setLevel(logging.NOTSET)
    parent.setLevel(logging.NOTSET)


def levels() -> dict[str, str]:
    return {entry.name: entry.value for entry in log_levels.describe()}


def test_describe_lists_root_first_then_each_logger_at_its_effective_level(logger):
    entries = log_levels.describe()
    assert entries[0].name == "root"
    assert levels()["logway.test.levels.child"] == "ERROR"  # inherited from its parent
    assert not any(entry.read_only for entry in entries)


def test_set_then_delete_a_level(logger):
    log_levels.check([(logger.name, SET, "TRACE")])
    log_levels.apply([(logger.name, SET, "TRACE")])
    assert levels()[logger.name] == "TRACE"
    assert logger.isEnabledFor(5)
    log_levels.apply([(logger.name, SET, "WARN")])
    assert logger.level == logging.WARNING
    log_levels.check([(logger.name, DELETE, None)])
    log_levels.apply([(logger.name, DELETE, None)])
    assert logger.level == logging.NOTSET
    assert levels()[logger.name] == "ERROR"


def test_a_package_above_existing_loggers_can_be_set(logger):
    # "logway.test" was never made, but Python's hierarchy holds it as a placeholder.
    log_levels.check([("logway.test", SET, "DEBUG")])
    log_levels.apply([("logway.test", SET, "DEBUG")])
    try:
        assert levels()["logway.test"] == "DEBUG"
    finally:
        logging.getLogger("logway.test").setLevel(logging.NOTSET)


@pytest.mark.parametrize(
    "change, code, message",
    [
        (("no.such.logger", SET, "DEBUG"), ErrorCode.invalid_config, "Logger no.such.logger does not exist!"),
        (("no.such.logger", DELETE, None), ErrorCode.invalid_config, "Logger no.such.logger does not exist!"),
        (
            ("root", SET, "LOUD"),
            ErrorCode.invalid_config,
            "Cannot set the log level of root to LOUD as it is not a supported log level. "
            "Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN",
        ),
        (("root", SET, "debug"), ErrorCode.invalid_config, None),  # Kafka's check is case-sensitive
        (("root", DELETE, None), ErrorCode.invalid_request, "Removing the log level of the root logger is not allowed"),
        (("root", APPEND, "DEBUG"), ErrorCode.invalid_request, "APPEND operation is not allowed for the BROKER_LOGGER resource"),
        (("root", SUBTRACT, "DEBUG"), ErrorCode.invalid_request, "SUBTRACT operation is not allowed for the BROKER_LOGGER resource"),
        (("root", 9, "DEBUG"), ErrorCode.invalid_request, "Unknown operation type 9 is not allowed for the BROKER_LOGGER resource"),
    ],
)
def test_refusals_follow_kafka(change, code, message):
    with pytest.raises(KafkaError) as refused:
        log_levels.check([change])
    assert refused.value.error_code == code
    if message is not None:
        assert str(refused.value) == message
