"""An embedded broker for an application's tests: a real Kafka-protocol broker without Docker.

    from broker.testing import embedded_broker

    with embedded_broker({"num.partitions": 3}) as bootstrap:
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})

(The issue asked for `logway.testing`; the project's top-level packages are fixed, so it lives
in the broker package as `broker.testing`.)

`pip install logway` also registers this module as a pytest plugin (the `pytest11` entry point
in pyproject.toml), which gives every test suite these fixtures:

- `kafka_broker`: the bootstrap string of a broker shared by the whole session (the scope is
  the `kafka_broker_scope` ini option or `--kafka-broker-scope`: session, package, module,
  class or function);
- `kafka_broker_function`: a fresh broker for each test, with the configs of the test's
  `@pytest.mark.kafka_broker_configs({...})` marker over `kafka_broker_configs`;
- `kafka_broker_configs`: the broker configs both use ({} unless a conftest.py overrides it).

A broker runs in the process that starts it: its asyncio event loop (uvloop) in a daemon
thread, listening on a port of 127.0.0.1 the kernel picks (port 0: no window in which another
process can take it), its log dir a new temporary directory that stopping removes. Measured on
the project's 2-core VM (shared, under load): start to listening takes 5-10 ms in-process and
stopping 5-15 ms, once the broker's modules are imported (about 0.6 s, once per test process),
against 0.6-0.66 s to start and 0.11 s to stop `python -m broker` in a subprocess, which pays
the interpreter's start and every import again for each broker. That makes a broker per test
affordable, hence in-process. What it costs: the broker shares the test process's GIL with
Python clients (fine at test volumes; librdkafka releases the GIL) and logs through the
process's `logging` (logger "broker" and below).

pytest stays optional: this module imports it only in `pytest_configure`, which only pytest
calls, after loading the module as a plugin. The broker's own modules are imported when a broker
first starts, not with this module: every pytest run in an environment where logway is installed
loads the plugin, and should not pay 0.6 s of imports (nor import kio, which imports hypothesis,
before the hypothesis plugin loads) unless it uses a broker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import types
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.config import BrokerConfig

log = logging.getLogger(__name__)

# Configs an embedded broker starts with unless given others: what makes a broker quick for
# tests, as Kafka's own embedded test clusters set them. Groups form at once instead of after
# Kafka's 3 s initial rebalance delay, and the internal topics of groups and transactions are
# created with 5 partitions instead of 50.
TEST_DEFAULTS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
}
_START_TIMEOUT_S = 30
_STOP_TIMEOUT_S = 30


def _config_value(value: Any) -> str:
    """A config value as the broker's properties spell it: Python's True is "true"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class EmbeddedBroker:
    """One broker in this process, started by `start()` (or `with`) and stopped by `stop()`.

    `configs`: Kafka broker configs (names as in server.properties; values as strings, numbers
    or booleans) over TEST_DEFAULTS; `log.dirs` and `listeners` are the embedded broker's own.
    `log_dir`: where the broker keeps its data, left in place at stop (default: a temporary
    directory, removed at stop).
    """

    def __init__(self, configs: Mapping[str, Any] | None = None, log_dir: str | os.PathLike[str] | None = None) -> None:
        self.configs = {key: _config_value(value) for key, value in (configs or {}).items()}
        for key in ("log.dirs", "log.dir", "listeners", "advertised.listeners"):
            if key in self.configs:
                raise ValueError(f"{key} is the embedded broker's own (pass log_dir for the data's place)")
        self._given_log_dir = None if log_dir is None else os.fspath(log_dir)
        self.log_dir: str | None = None
        self.port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._stopped: concurrent.futures.Future[None] | None = None

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise RuntimeError("the embedded broker is not running")
        return f"127.0.0.1:{self.port}"

    def start(self) -> EmbeddedBroker:
        """Start the broker and return once it listens; raises what stopped its start (a bad
        config: broker.config.ConfigError)."""
        if self._thread is not None:
            raise RuntimeError("the embedded broker is already running")
        from broker.config import BrokerConfig

        self.log_dir = self._given_log_dir or tempfile.mkdtemp(prefix="logway-embedded-")
        try:
            config = BrokerConfig().with_overrides({
                **TEST_DEFAULTS,
                **self.configs,
                "log.dirs": self.log_dir,
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "advertised.listeners": "PLAINTEXT://127.0.0.1:0",
            })
            started: concurrent.futures.Future[int] = concurrent.futures.Future()
            self._stopped = concurrent.futures.Future()
            self._thread = threading.Thread(
                target=self._run, args=(config, started), name="logway-embedded-broker", daemon=True
            )
            self._thread.start()
            self.port = started.result(_START_TIMEOUT_S)
        except BaseException:
            self._join()
            self._remove_log_dir()
            raise
        return self

    def stop(self) -> None:
        """Stop the broker cleanly (its logs flushed) and remove its temporary log dir."""
        if self._thread is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed in between: already stopped
                self._loop.call_soon_threadsafe(self._stop_requested.set)
        try:
            self._stopped.result(_STOP_TIMEOUT_S)
        finally:
            self._join()
            self.port = None
            self._remove_log_dir()

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join(_STOP_TIMEOUT_S)
            self._thread = None

    def _remove_log_dir(self) -> None:
        if self.log_dir is not None and self._given_log_dir is None:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        self.log_dir = None

    def _run(self, config: BrokerConfig, started: concurrent.futures.Future[int]) -> None:
        """The broker's thread: its own event loop, from start to stop."""
        import uvloop

        try:
            uvloop.run(self._serve(config, started))
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            elif not self._stopped.done():
                self._stopped.set_exception(exc)
            else:
                log.exception("embedded broker failed after stopping")
        finally:
            if not self._stopped.done():
                self._stopped.set_result(None)

    async def _serve(self, config: BrokerConfig, started: concurrent.futures.Future[int]) -> None:
        from broker.server import Broker

        self._loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        broker = Broker(config)
        await broker.start()
        try:
            started.set_result(broker.port)
            await self._stop_requested.wait()
        finally:
            await broker.stop()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def embedded_broker(configs: Mapping[str, Any] | None = None, log_dir: str | os.PathLike[str] | None = None) -> Iterator[str]:
    """A running broker's bootstrap string ("127.0.0.1:PORT") for the `with` block; the broker
    is stopped and its temporary log dir removed after it. Arguments as EmbeddedBroker's."""
    with EmbeddedBroker(configs, log_dir) as broker:
        yield broker.bootstrap


# ------------------------------------------------------------------------------ pytest plugin

_SCOPES = ("session", "package", "module", "class", "function")


def pytest_addoption(parser) -> None:
    parser.addini(
        "kafka_broker_scope",
        f"scope of the kafka_broker fixture: {', '.join(_SCOPES)} (default session)",
        default="session",
    )
    parser.addoption(
        "--kafka-broker-scope",
        choices=_SCOPES,
        help="scope of the kafka_broker fixture (over the kafka_broker_scope ini option)",
    )


def pytest_configure(config) -> None:
    import pytest  # only pytest calls this hook, so only a pytest run needs pytest

    config.addinivalue_line(
        "markers", "kafka_broker_configs(configs): broker configs of the test's kafka_broker_function"
    )
    scope = _broker_scope("kafka_broker", config)
    if scope not in _SCOPES:
        raise pytest.UsageError(f"kafka_broker_scope must be one of {', '.join(_SCOPES)}, not {scope!r}")
    config.pluginmanager.register(_fixtures(pytest), "logway-kafka-broker-fixtures")


def _broker_scope(fixture_name: str, config) -> str:
    """The kafka_broker fixture's scope (pytest asks when it defines the fixture)."""
    return config.getoption("kafka_broker_scope") or config.getini("kafka_broker_scope")


def _fixtures(pytest) -> types.ModuleType:
    """The fixtures, made once pytest is there to decorate them, in a module object of their own:
    pytest finds fixtures on a module when the plugin manager registers it."""
    @pytest.fixture(scope="session")
    def kafka_broker_configs() -> dict[str, Any]:
        """Broker configs of kafka_broker and kafka_broker_function: override this fixture in
        a conftest.py (session-scoped, or as wide as kafka_broker's scope) to set them."""
        return {}

    @pytest.fixture(scope=_broker_scope)
    def kafka_broker(kafka_broker_configs) -> Iterator[str]:
        """The bootstrap string of an embedded broker shared by the fixture's scope."""
        with embedded_broker(kafka_broker_configs) as bootstrap:
            yield bootstrap

    @pytest.fixture
    def kafka_broker_function(request, kafka_broker_configs) -> Iterator[str]:
        """The bootstrap string of an embedded broker of this test alone, with the configs of
        its kafka_broker_configs marker (closest first) over kafka_broker_configs."""
        configs = dict(kafka_broker_configs)
        for marker in reversed(list(request.node.iter_markers("kafka_broker_configs"))):
            configs.update(*marker.args, **marker.kwargs)
        with embedded_broker(configs) as bootstrap:
            yield bootstrap

    fixtures = types.ModuleType(f"{__name__}.fixtures")
    fixtures.kafka_broker_configs = kafka_broker_configs
    fixtures.kafka_broker = kafka_broker
    fixtures.kafka_broker_function = kafka_broker_function
    return fixtures
