"""broker/logging_setup.py: where the process logs and in which format."""

import json
import logging

import pytest

from broker import logging_setup


@pytest.fixture(autouse=True)
def restore_loggers():
    """configure() replaces handlers and levels process-wide; give them back afterwards."""
    touched = [logging.getLogger(), logging.getLogger(logging_setup.REQUEST_LOGGER), logging.getLogger("logway.test.config")]
    saved = [(logger, list(logger.handlers), logger.level, logger.propagate) for logger in touched]
    yield
    for logger, handlers, level, propagate in saved:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            if handler not in handlers:
                handler.close()
        for handler in handlers:
            logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def test_log_file_is_rotated_by_size_keeping_the_backups_asked_for(tmp_path):
    path = tmp_path / "logs" / "server.log"
    logging_setup.configure("INFO", log_file=str(path), max_bytes=2000, backups=2)
    for i in range(200):
        logging.getLogger("logway.test.rotation").info("line %d of a log that outgrows its file", i)
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["server.log", "server.log.1", "server.log.2"]
    assert "line 199" in path.read_text()
    assert all(p.stat().st_size <= 2000 for p in path.parent.iterdir())


def test_a_log_dir_holds_server_log_and_the_request_log_apart_as_kafkas(tmp_path):
    logging_setup.configure("DEBUG", log_dir=str(tmp_path / "logs"))
    logging.getLogger("logway.test.dir").info("a server line")
    logging.getLogger(logging_setup.REQUEST_LOGGER).debug("a request line")
    server = (tmp_path / "logs" / "server.log").read_text()
    requests = (tmp_path / "logs" / "kafka-request.log").read_text()
    assert "a server line" in server and "a request line" not in server
    assert "a request line" in requests and "a server line" not in requests


def test_json_format_writes_one_object_per_line_with_log4j_level_names(tmp_path):
    path = tmp_path / "server.log"
    logging_setup.configure("INFO", log_file=str(path), json_format=True)
    logger = logging.getLogger("logway.test.json")
    logger.warning("disk %s is slow", "/data/1")
    try:
        raise OSError("gone")
    except OSError:
        logger.exception("cannot write")
    first, second = [json.loads(line) for line in path.read_text().splitlines()]
    assert (first["level"], first["logger"], first["message"]) == ("WARN", "logway.test.json", "disk /data/1 is slow")
    assert first["time"].endswith("+00:00")
    assert second["level"] == "ERROR" and "OSError: gone" in second["exception"]


def test_json_format_carries_the_request_fields_of_a_request_log_line():
    record = logging.LogRecord("kafka.request.logger", logging.DEBUG, __file__, 1, "Completed request", (), None)
    record.request = {"api": "PRODUCE", "latencyMs": 1.5}
    document = json.loads(logging_setup.JsonFormatter().format(record))
    assert document["request"] == {"api": "PRODUCE", "latencyMs": 1.5}
    assert document["level"] == "DEBUG"


def test_level_names_follow_log4j():
    assert logging_setup.python_level("WARN") == logging.WARNING
    assert logging_setup.python_level("fatal") == logging.CRITICAL
    assert logging_setup.python_level("TRACE") < logging.DEBUG
    assert logging_setup.log4j_level_name(logging_setup.TRACE) == "TRACE"
    assert logging_setup.log4j_level_name(logging.WARNING) == "WARN"
    with pytest.raises(ValueError):
        logging_setup.python_level("LOUD")


def test_a_json_logging_config_file_takes_over(tmp_path):
    path = tmp_path / "requests.log"
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(path)}},
        "loggers": {"logway.test.config": {"level": "DEBUG", "handlers": ["file"], "propagate": False}},
    }
    config_path = tmp_path / "logging.json"
    config_path.write_text(json.dumps(config))
    logging_setup.configure("INFO", config_file=str(config_path))
    logging.getLogger("logway.test.config").debug("written through the config file")
    assert "written through the config file" in path.read_text()


def test_an_ini_logging_config_file_is_read_with_file_config(tmp_path):
    path = tmp_path / "server.log"
    config_path = tmp_path / "logging.ini"
    config_path.write_text(
        "[loggers]\nkeys=root\n\n[handlers]\nkeys=file\n\n[formatters]\nkeys=plain\n\n"
        "[logger_root]\nlevel=INFO\nhandlers=file\n\n"
        f"[handler_file]\nclass=FileHandler\nformatter=plain\nargs=({str(path)!r},)\n\n"
        "[formatter_plain]\nformat=%(levelname)s %(message)s\n"
    )
    logging_setup.configure("INFO", config_file=str(config_path))
    logging.getLogger("logway.test.ini").info("through fileConfig")
    assert path.read_text() == "INFO through fileConfig\n"


def test_the_shipped_example_config_is_valid(tmp_path):
    # config/logging.json names /var/log/logway; point its files into tmp_path to load it.
    from tests.harness import REPO

    config = json.loads((REPO / "config" / "logging.json").read_text())
    for handler in config["handlers"].values():
        handler["filename"] = str(tmp_path / handler["filename"].rsplit("/", 1)[1])
    config_path = tmp_path / "logging.json"
    config_path.write_text(json.dumps(config))
    logging_setup.configure("INFO", config_file=str(config_path))
    logging.getLogger(logging_setup.REQUEST_LOGGER).warning("request log line")
    logging.getLogger("logway.test.example").info("server log line")
    assert json.loads((tmp_path / "kafka-request.log").read_text())["message"] == "request log line"
    assert "server log line" in (tmp_path / "server.log").read_text()
    assert "request log line" not in (tmp_path / "server.log").read_text()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"config_file": "/nonexistent/logging.json"},
        {"config_file": "/nonexistent/logging.ini"},
        {"log_file": "/proc/no-such-dir/server.log"},
        {"level": "LOUD"},
    ],
)
def test_unusable_settings_are_refused(kwargs):
    with pytest.raises(logging_setup.LoggingSetupError):
        logging_setup.configure(**kwargs)
