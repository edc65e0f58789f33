"""tests/conftest.py under pytest-xdist, in a pytest run of its own: a worker that dies is
replaced, and the run goes on and reports the rest."""

import subprocess
import sys
from pathlib import Path

from tests.harness import REPO

# The first test to run aborts its worker, as librdkafka's failed assertions abort the process
# they run in; the others pass.
_TESTS = """
import os
from pathlib import Path

DIED = Path(__file__).with_name("died")


def test_0():
    if not DIED.exists():
        DIED.touch()
        os.abort()


def test_1():
    pass


def test_2():
    pass


def test_3():
    pass
"""


def test_a_worker_that_dies_is_replaced_and_the_run_reports_the_rest(tmp_path: Path):
    (tmp_path / "test_dying.py").write_text(_TESTS)
    run = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-n", "2",
            "--rootdir", str(tmp_path), str(tmp_path / "test_dying.py"),
        ],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert "INTERNALERROR" not in run.stdout + run.stderr, run.stdout[-3000:]
    assert "1 failed, 3 passed" in run.stdout, run.stdout[-3000:]
