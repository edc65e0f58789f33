"""benchmarks.clients: what the client workloads compute from their samples."""

import json
from collections import Counter
from dataclasses import asdict

from benchmarks.clients import Measurement, RequestCounter, percentiles, requests_sent


def test_latency_percentiles_are_by_nearest_rank():
    assert percentiles([float(v) for v in range(1, 1001)]) == {
        "p50": 500.0, "p90": 900.0, "p99": 990.0, "p99.9": 999.0, "max": 1000.0}
    assert percentiles([7.0]) == {"p50": 7.0, "p90": 7.0, "p99": 7.0, "p99.9": 7.0, "max": 7.0}


def test_requests_sent_are_summed_by_type_over_the_brokers():
    stats = {"brokers": {
        "127.0.0.1:9092/bootstrap": {"req": {"Produce": 0, "Metadata": 1, "ApiVersion": 1}},
        "127.0.0.1:9092/0": {"req": {"Produce": 40, "Fetch": 0, "ApiVersion": 1}},
        ":0/internal": {"req": {}},
    }}

    assert requests_sent(stats) == Counter({"Produce": 40, "ApiVersion": 2, "Metadata": 1})
    assert requests_sent({}) == Counter()


def test_a_request_counter_keeps_the_latest_statistics():
    counter = RequestCounter()
    counter.on_stats(json.dumps({"brokers": {"b/0": {"req": {"Fetch": 3}}}}))
    counter.on_stats(json.dumps({"brokers": {"b/0": {"req": {"Fetch": 5}}}}))

    assert counter.sent == Counter({"Fetch": 5})
    assert counter.config()["statistics.interval.ms"] > 0


def test_broker_cpu_per_request_needs_both_figures():
    measured = Measurement("e2e", 10, 1000, 1.0, broker_cpu=0.5, requests={"Produce": 60, "Fetch": 40})

    assert measured.broker_cpu_per_request == 0.005
    assert Measurement("e2e", 10, 1000, 1.0, broker_cpu=0.5).broker_cpu_per_request is None
    assert Measurement("e2e", 10, 1000, 1.0, requests={"Fetch": 1}).broker_cpu_per_request is None


def test_a_measurement_with_its_requests_goes_into_the_runs_json():
    measured = Measurement("e2e", 10, 1000, 1.0, broker_cpu=0.5, requests={"Produce": 60, "Fetch": 40})

    assert json.loads(json.dumps(asdict(measured)))["requests"] == {"Produce": 60, "Fetch": 40}
