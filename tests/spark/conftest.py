"""Local Spark (local[2,2]: two threads, a failed task tried again once) against brokers the tests start.

One SparkSession serves every Spark test of a pytest process: a session costs 6-11 s to start,
so the fixture is session-scoped, and the tests carry xdist_group("spark") so that with
`--dist loadgroup` (pyproject addopts) pytest-xdist runs them all in one worker, one JVM.
With pytest 9.2 and pytest-xdist 3.8 that grouping needs tests/conftest.py's
pytest_collection_modifyitems (xdist renames node ids the old way, which pytest 9.2 no longer
reads: pytest-xdist issue #1386). The session binds to
loopback and runs its Python workers with this interpreter; nothing is downloaded.
"""

import os
import sys

import pytest

from tests.harness import BrokerProcess


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from spark_jobs.session import get_session

    session = get_session(
        "logway-tests",
        "local[2,2]",  # a failed task is retried once (the writer's tests)
        {
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "1g",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_broker(tmp_path_factory) -> BrokerProcess:
    """One broker per module, with a cleaner quick to start (compacted topics)."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("spark") / "data", {"log.cleaner.backoff.ms": "50"}
    ).start()
    yield process
    process.kill()
    assert "Traceback" not in process.log(), process.log()[-5000:]
