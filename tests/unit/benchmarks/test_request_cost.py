"""benchmarks.request_cost: Produce, Fetch, tailing and replicated pairs and an idle follower's session fetch
served in process (and Produce over a loopback connection, and an idle replica fetcher's rounds),
their CPU and Python calls counted."""

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.request_cost import measure

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("api", ["produce", "fetch", "tail", "replicated", "wire"])
def test_every_request_is_answered_and_its_cost_and_calls_counted(tmp_path, api):
    result = asyncio.run(measure(tmp_path, requests=20, repeats=3, batch_bytes=4096, calls=True, api=api))

    assert 0 < result["min_us"] <= result["q1_us"] <= result["median_us"]
    # Counted, not a floor: a compiled build leaves only a handful of interpreted calls per request.
    assert result["python_calls"] > 0


def test_an_idle_followers_fetch_of_its_whole_session_is_answered_and_counted(tmp_path):
    result = asyncio.run(
        measure(tmp_path, requests=5, repeats=3, batch_bytes=4096, calls=True, api="idle-follower", partitions=40)
    )

    assert 0 < result["min_us"] <= result["q1_us"] <= result["median_us"]
    assert result["python_calls"] > 0


def test_an_idle_fetchers_rounds_of_its_session_are_fetched_over_a_connection_and_counted(tmp_path):
    # measure() checks that the rounds were one session's incremental fetches of every partition.
    result = asyncio.run(
        measure(tmp_path, requests=5, repeats=3, batch_bytes=4096, calls=True, api="idle-round", partitions=40)
    )

    assert 0 < result["min_us"] <= result["q1_us"] <= result["median_us"]
    assert result["python_calls"] > 0


def test_an_idle_fetchers_long_polls_are_rounds_of_its_session_and_counted(tmp_path):
    result = asyncio.run(
        measure(
            tmp_path, requests=3, repeats=3, batch_bytes=4096, calls=False, api="idle-round", partitions=40,
            fetch_wait_ms=20,
        )
    )

    # The waits are not CPU: a round's CPU is far under the 20 ms each waited.
    assert 0 < result["min_us"] <= result["q1_us"] <= result["median_us"] < 20_000


@pytest.mark.parametrize("safe_path", [True, False])
def test_a_counted_run_imports_the_packages_its_parent_was_started_on(safe_path):
    # Started with -P and PYTHONPATH (a compiled build's packages), the callgrind runs must not
    # put the working directory, the worktree, first: they would count its pure-Python modules.
    flags = ["-P"] if safe_path else []
    printed = subprocess.run(
        [sys.executable, *flags, "-c", "from benchmarks.request_cost import counted_command; "
         "print(counted_command('wire', 10, 1, 4096)[1])"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert (printed == "-P") == safe_path
