"""benchmarks.request_cost: Produce, Fetch and tailing pairs served in process (and Produce over a
loopback connection), their CPU and Python calls counted."""

import asyncio

import pytest

from benchmarks.request_cost import measure


@pytest.mark.parametrize("api", ["produce", "fetch", "tail", "wire"])
def test_every_request_is_answered_and_its_cost_and_calls_counted(tmp_path, api):
    result = asyncio.run(measure(tmp_path, requests=20, repeats=3, batch_bytes=4096, calls=True, api=api))

    assert 0 < result["min_us"] <= result["q1_us"] <= result["median_us"]
    assert result["python_calls"] > 10  # a request goes through dispatch, handler and log
