"""benchmarks.clients: what the client workloads compute from their samples."""

from benchmarks.clients import percentiles


def test_latency_percentiles_are_by_nearest_rank():
    assert percentiles([float(v) for v in range(1, 1001)]) == {
        "p50": 500.0, "p90": 900.0, "p99": 990.0, "p99.9": 999.0, "max": 1000.0}
    assert percentiles([7.0]) == {"p50": 7.0, "p90": 7.0, "p99": 7.0, "p99.9": 7.0, "max": 7.0}
