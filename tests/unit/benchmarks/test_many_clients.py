"""benchmarks.many_clients: the part runs end to end against a broker of its own, small."""

import os
from array import array

import pytest

from benchmarks.many_clients import _answers_against_speed, many_clients
from benchmarks.run import parse_args


def test_the_many_clients_part_takes_a_thousand_producers_or_two_hundred_when_quick():
    assert "many-clients" in parse_args([]).parts
    assert parse_args(["--parts", "many-clients"]).many_producers == 1_000
    assert parse_args(["--parts", "many-clients", "--quick"]).many_producers == 200


def test_producers_and_consumers_are_answered_and_the_broker_cpu_counted(tmp_path):
    result = many_clients(tmp_path, producers=6, consumers=2, processes=2, seconds=1.5, partitions=2)

    assert result.errors == 0
    assert result.produce_answers > 6  # each producer more than once
    assert result.fetch_records > 0  # the consumers read what was produced
    assert result.broker_cpu_s > 0
    assert set(result.latencies_ms) >= {"p50", "p99", "p99.9", "max"}


def test_with_two_cpus_the_broker_gets_one_and_its_speed_is_probed(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("pinning needs two CPUs")
    result = many_clients(tmp_path, producers=4, consumers=1, processes=1, seconds=1.5, partitions=1)

    assert result.speed_spread >= 1.0
    assert 0 <= result.full_speed_seconds <= 2.0  # quarter-seconds of the 1.5 s window (and its edges)
    assert any("full speed" in line for line in result.lines())


def test_without_pinning_nothing_is_probed(tmp_path):
    result = many_clients(tmp_path, producers=4, consumers=1, processes=1, seconds=1.0, partitions=1, pin=False)

    assert result.full_speed_latencies_ms is None
    assert not any("full speed" in line for line in result.lines())


def test_fewer_answers_in_the_quarter_seconds_the_cpu_was_slower_correlate_negatively():
    # Quarter-seconds 1 to 6 of a window from 0 to 2 s: slow ones (2 ms loops) get 5 answers,
    # fast ones (1 ms) get 10.
    slow = {2, 5, 6}
    answered_at = array("d")
    speed = []
    for window in range(8):
        start = window * 0.25
        answered_at.extend(start + 0.01 * i for i in range(5 if window in slow else 10))
        speed += [(start + 0.05, 0.002 if window in slow else 0.001), (start + 0.15, 0.002 if window in slow else 0.001)]

    assert _answers_against_speed(answered_at, speed, 0.0, 2.0) == pytest.approx(-1.0)
    assert _answers_against_speed(answered_at, [], 0.0, 2.0) != _answers_against_speed(answered_at, [], 0.0, 2.0)
