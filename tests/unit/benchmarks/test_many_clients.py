"""benchmarks.many_clients: the part runs end to end against a broker of its own, small."""

from benchmarks.many_clients import many_clients
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
