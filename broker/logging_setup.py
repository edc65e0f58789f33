"""The broker process's logging: where it goes, in which format, at which levels.

Kafka's brokers are configured by log4j.properties; logway's by one of (command line flags of
`logway`, broker/cli.py):

- `--log-config FILE`: a Python logging configuration that takes over everything: a JSON file
  (`.json`) in logging.config.dictConfig's schema, else an INI file in fileConfig's. See
  config/logging.json: server.log and the request log in files of their own, rotated.
- otherwise `--log-file FILE` writes to that file instead of stderr, rotated when it reaches
  `--log-file-max-bytes` (100 MiB), keeping `--log-file-backups` old files (10) as FILE.1 ...;
  or `--log-dir DIR` (Kafka's LOG_DIR) writes DIR/server.log and the request log apart in
  DIR/kafka-request.log, as Kafka's log4j.properties does, both rotated so;
  `--log-format json` writes one JSON object per line instead of text; `--log-level` sets the
  root logger's level (INFO).

Levels follow log4j's names where Python's differ: TRACE (a level below DEBUG that logway
registers), WARN for WARNING, FATAL for CRITICAL; `log4j_level_name` and `python_level` convert.

The request log (Kafka's kafka.request.logger): the `kafka.request.logger` logger gets one line
per request answered at DEBUG (broker/dispatch.py), off unless that logger or the root is at
DEBUG or below, e.g. `--log-level DEBUG` or at run time through IncrementalAlterConfigs on the
BROKER_LOGGER resource (broker/log_levels.py).
"""

import datetime
import json
import logging
import logging.config
import logging.handlers
import os
import sys

TRACE = 5
logging.addLevelName(TRACE, "TRACE")

REQUEST_LOGGER = "kafka.request.logger"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DEFAULT_MAX_BYTES = 100 * 1024 * 1024
DEFAULT_BACKUPS = 10

# log4j's names where Python's differ, both ways.
_TO_LOG4J = {"WARNING": "WARN", "CRITICAL": "FATAL"}
_FROM_LOG4J = {"WARN": logging.WARNING, "FATAL": logging.CRITICAL, "TRACE": TRACE}
LOG4J_LEVELS = ("DEBUG", "ERROR", "FATAL", "INFO", "TRACE", "WARN")  # Kafka's LogLevelConfig


class LoggingSetupError(Exception):
    """The logging configuration given cannot be used."""


def log4j_level_name(level: int) -> str:
    name = logging.getLevelName(level)
    return _TO_LOG4J.get(name, name)


def python_level(name: str) -> int:
    """A log4j (or Python) level name as a Python level; ValueError for an unknown one."""
    upper = name.strip().upper()
    if upper in _FROM_LOG4J:
        return _FROM_LOG4J[upper]
    level = logging.getLevelName(upper)
    if not isinstance(level, int):
        raise ValueError(f"unknown log level {name!r}")
    return level


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (ISO 8601, UTC, milliseconds), level (log4j's name),
    logger, thread, message, and exception when there is one; a request log line also carries
    its fields under "request". Usable from a dictConfig: {"()": "broker.logging_setup.JsonFormatter"}."""

    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": log4j_level_name(record.levelno),
            "logger": record.name,
            "thread": record.threadName,
            "message": record.getMessage(),
        }
        request = getattr(record, "request", None)
        if request is not None:
            document["request"] = request
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            document["exception"] = record.exc_text
        if record.stack_info:
            document["stack"] = self.formatStack(record.stack_info)
        return json.dumps(document, default=str)


def configure(
    level: str = "INFO",
    config_file: str | None = None,
    log_file: str | None = None,
    log_dir: str | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    backups: int = DEFAULT_BACKUPS,
    json_format: bool = False,
) -> None:
    """Set up the process's logging (see the module docstring); LoggingSetupError when the
    configuration file or the log file cannot be used."""
    if config_file is not None:
        _apply_config_file(config_file)
        return
    try:
        root_level = python_level(level)
    except ValueError as exc:
        raise LoggingSetupError(str(exc)) from None
    if max_bytes < 0 or backups < 0:
        raise LoggingSetupError("--log-file-max-bytes and --log-file-backups must not be negative")
    formatter = JsonFormatter() if json_format else logging.Formatter(TEXT_FORMAT)
    request_handler = None
    if log_dir is not None:
        log_file = os.path.join(log_dir, "server.log")
        request_handler = _rotating(os.path.join(log_dir, "kafka-request.log"), max_bytes, backups, formatter)
    if log_file is not None:
        handler = _rotating(log_file, max_bytes, backups, formatter)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(root_level)
    if request_handler is not None:
        request_log = logging.getLogger(REQUEST_LOGGER)
        request_log.addHandler(request_handler)
        request_log.propagate = False


def _rotating(path: str, max_bytes: int, backups: int, formatter: logging.Formatter) -> logging.Handler:
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
    except OSError as exc:
        raise LoggingSetupError(f"cannot open the log file {path}: {exc}") from None
    handler.setFormatter(formatter)
    return handler


def _apply_config_file(path: str) -> None:
    try:
        if path.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                logging.config.dictConfig(json.load(f))
        else:
            if not os.path.exists(path):
                raise FileNotFoundError(f"No such file: {path!r}")
            logging.config.fileConfig(path, disable_existing_loggers=False)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, ImportError) as exc:
        # dictConfig reports a bad schema as ValueError; fileConfig a missing section as
        # KeyError, a bad handler class as ImportError or AttributeError.
        raise LoggingSetupError(f"cannot use the logging configuration {path}: {exc}") from None
