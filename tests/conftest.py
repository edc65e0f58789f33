import os

import pytest
from hypothesis import settings

from broker import local_cluster

# No per-example deadline: on a shared, loaded machine (CI runs two workers on two cores) an
# example's duration says nothing about correctness, and speed is the benchmarks' question.
settings.register_profile("logway", deadline=None)
settings.load_profile("logway")

# Shared test modules whose asserts should explain themselves as those of test modules do.
pytest.register_assert_rewrite("tests.topic_lifecycle")

from tests.harness import BrokerProcess  # noqa: E402 (after the rewrite is registered)


def pytest_configure(config):
    """Each pytest-xdist worker chooses test ports from its own part of the range: a CI run once
    gave brokers in both workers the same port, drawn in each before either bound it.

    A worker that died is replaced by one numbered from the worker count on (gw4 after gw0-gw3):
    the replacements share one more part, so that the run goes on and reports its other tests
    (a replacement once refused to start, and the whole run ended three minutes in)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...
    if worker:
        workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
        local_cluster.draw_ports_from_slice(min(int(worker.removeprefix("gw")), workers), workers + 1)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Name each xdist_group test's group at the end of its node id, as pytest-xdist does for
    `--dist loadgroup`: pytest 9.2 builds node ids from `_id` and ignores the `_nodeid` that
    pytest-xdist 3.8 sets (pytest-xdist #1386), so without this the Spark tests spread over
    both workers and each starts its own Spark session. Workers only: the scheduler reads the
    node ids they report.

    Tests marked slow go first (a stable sort: modules stay together; every slow module is slow
    throughout), so that no test of minutes is handed out last: in a full run the 3-4 minute
    tests/property/test_topic_lifecycle.py, collected after tests/compat, was still running on
    one worker after the other had finished (their test times differed by about two minutes)."""
    if not (hasattr(config, "workerinput") and config.getvalue("loadgroup")):
        return
    from _pytest.nodeid import NodeId

    items.sort(key=lambda item: item.get_closest_marker("slow") is None)

    for item in items:
        groups = {mark.args[0] if mark.args else mark.kwargs.get("name", "default")
                  for mark in item.iter_markers("xdist_group")}
        if groups and not item.nodeid.endswith("@" + "_".join(sorted(groups))):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(sorted(groups))}")


@pytest.fixture
def pwritev_calls(monkeypatch):
    """The number of buffers of each os.pwritev call the test makes, in order (they still write)."""
    calls = []
    real = os.pwritev

    def counted(fd, buffers, offset):
        calls.append(len(buffers))
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "pwritev", counted)
    return calls


@pytest.fixture
def broker_factory(tmp_path):
    """Start brokers on demand (each with its own data dir); all are stopped at the end."""
    started: list[BrokerProcess] = []

    def start(name: str = "broker", **overrides: str) -> BrokerProcess:
        process = BrokerProcess(tmp_path / name, {k.replace("_", "."): v for k, v in overrides.items()})
        started.append(process.start())
        return process

    yield start
    for process in started:
        process.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory) -> BrokerProcess:
    """One broker for a whole test module whose tests use distinct topics."""
    process = BrokerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    yield process
    process.kill()
    assert "Traceback" not in process.log(), process.log()[-5000:]
