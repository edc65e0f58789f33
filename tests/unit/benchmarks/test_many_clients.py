"""benchmarks.many_clients: the part runs end to end against a broker of its own, small."""

import math
import os
from array import array

import pytest

from benchmarks.many_clients import (
    ManyClientsResult,
    answers_against_speed,
    draw_timeline,
    many_clients,
    speed_timeline,
)
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
    assert result.timeline and all(q.loop_ms > 0 for q in result.timeline)
    assert any("full speed" in line for line in result.lines())


def test_without_pinning_nothing_is_probed(tmp_path):
    result = many_clients(tmp_path, producers=4, consumers=1, processes=1, seconds=1.0, partitions=1, pin=False)

    assert result.full_speed_latencies_ms is None
    assert not any("full speed" in line for line in result.lines())


def test_fewer_answers_in_the_quarter_seconds_the_cpu_was_slower_correlate_negatively(tmp_path):
    # Quarter-seconds 1 to 6 of a window from 0 to 2 s: slow ones (2 ms loops) get 5 answers of
    # 20 ms, fast ones (1 ms) 10 of 10 ms.
    slow = {2, 5, 6}
    latencies, answered_at = array("d"), array("d")
    speed = []
    for window in range(8):
        start = window * 0.25
        count, latency, loop = (5, 0.020, 0.002) if window in slow else (10, 0.010, 0.001)
        answered_at.extend(start + 0.01 * i for i in range(count))
        latencies.extend([latency] * count)
        speed += [(start + 0.05, loop), (start + 0.15, loop)]

    timeline = speed_timeline(latencies, answered_at, speed, 0.0, 2.0)

    assert [q.at_s for q in timeline] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]  # the whole quarters
    assert [q.answers for q in timeline] == [10, 5, 10, 10, 5, 5]
    assert [q.p50_ms for q in timeline] == [10.0, 20.0, 10.0, 10.0, 20.0, 20.0]
    assert answers_against_speed(timeline) == pytest.approx(-1.0)
    assert math.isnan(answers_against_speed(speed_timeline(latencies, answered_at, [], 0.0, 2.0)))

    result = many_clients_result_with(timeline)
    draw_timeline(result, tmp_path / "speed.png")
    assert (tmp_path / "speed.png").stat().st_size > 0


def many_clients_result_with(timeline):
    return ManyClientsResult(4, 1, 1, 10.0, 1.5, 45, 0, 0, 0, 0, 1.0, 1.0, {}, 0.0, timeline=timeline,
                             speed_correlation=answers_against_speed(timeline))
