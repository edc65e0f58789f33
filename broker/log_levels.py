"""The BROKER_LOGGER resource: the process's loggers and their levels, read and changed at run
time as Kafka's Log4jController and RuntimeLoggerManager do for log4j's.

Names: Python's logger names (broker.server, replication.controller, kafka.request.logger ...),
"root" for the root logger. Levels in log4j's names: TRACE, DEBUG, INFO, WARN, ERROR, FATAL
(broker/logging_setup.py maps them to Python's).

- describe: root first, then every logger the process has made, each with its effective level
  (its own, else its nearest ancestor's).
- check then apply: SET gives a logger a level, DELETE drops it (the logger then follows its
  parent). A logger must exist: one the process has made, or a package above some (e.g.
  "replication"), which Python's hierarchy has as a placeholder; Kafka knows only loggers log4j
  has made. Errors as Kafka's: INVALID_CONFIG for a missing logger or a level not among the six;
  INVALID_REQUEST for DELETE of the root, APPEND, SUBTRACT or an unknown operation.

Levels live in memory: a restart goes back to the logging configuration, as in Kafka.
"""

import enum
import logging
from collections.abc import Iterable

from protocol.config_types import ConfigEntry, ConfigSource, ConfigType
from protocol.errors import ErrorCode, KafkaError
from storage.log_config import InvalidConfigError

from broker.logging_setup import LOG4J_LEVELS, log4j_level_name, python_level

log = logging.getLogger(__name__)

ROOT = "root"


class LoggerOperation(enum.IntEnum):
    """IncrementalAlterConfigs' operations (AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def describe() -> list[ConfigEntry]:
    return [_entry(logger) for logger in [logging.root, *_loggers()]]


def _loggers() -> list[logging.Logger]:
    known = logging.root.manager.loggerDict.values()
    return sorted((logger for logger in known if isinstance(logger, logging.Logger)), key=lambda logger: logger.name)


def _entry(logger: logging.Logger) -> ConfigEntry:
    return ConfigEntry(
        name=ROOT if logger is logging.root else logger.name,
        value=log4j_level_name(logger.getEffectiveLevel()),
        source=ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG,
        type=ConfigType.STRING,
        read_only=False,
    )


def check(changes: Iterable[tuple[str, int, str | None]]) -> None:
    """Refuse (KafkaError) the first bad (logger, operation, level) change."""
    for name, operation, level in changes:
        if operation == LoggerOperation.SET:
            _check_exists(name)
            if level not in LOG4J_LEVELS:
                raise InvalidConfigError(
                    f"Cannot set the log level of {name} to {level} as it is not a supported log level. "
                    f"Valid log levels are {', '.join(LOG4J_LEVELS)}"
                )
        elif operation == LoggerOperation.DELETE:
            _check_exists(name)
            if name == ROOT:
                raise KafkaError(
                    f"Removing the log level of the {ROOT} logger is not allowed", ErrorCode.invalid_request
                )
        elif operation in (LoggerOperation.APPEND, LoggerOperation.SUBTRACT):
            raise KafkaError(
                f"{LoggerOperation(operation).name} operation is not allowed for the BROKER_LOGGER resource",
                ErrorCode.invalid_request,
            )
        else:
            raise KafkaError(
                f"Unknown operation type {operation} is not allowed for the BROKER_LOGGER resource",
                ErrorCode.invalid_request,
            )


def apply(changes: Iterable[tuple[str, int, str | None]]) -> None:
    """Apply changes `check` accepted."""
    for name, operation, level in changes:
        logger = logging.root if name == ROOT else logging.getLogger(name)
        if operation == LoggerOperation.SET:
            logger.setLevel(python_level(level))
            log.warning("Updated the log level of %s to %s", name, level)
        else:
            logger.setLevel(logging.NOTSET)
            log.warning("Unset the log level of %s", name)


def _check_exists(name: str) -> None:
    if name != ROOT and name not in logging.root.manager.loggerDict:
        raise InvalidConfigError(f"Logger {name} does not exist!")
