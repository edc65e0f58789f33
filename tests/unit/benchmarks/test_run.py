import os
import platform
import sys

import pytest

from benchmarks.clients import Measurement
from benchmarks.run import ALL_PARTS, ALL_WORKLOADS, Report, _summed, compute_ratios, interpreter, parse_args


def test_every_workload_by_default():
    args = parse_args([])

    assert args.parts == list(ALL_PARTS)
    assert args.workloads == list(ALL_WORKLOADS)


def test_workloads_select_one_case():
    args = parse_args(["--parts", "mock,logway", "--workloads", " wire-produce "])

    assert args.parts == ["mock", "logway"]
    assert args.workloads == ["wire-produce"]


def test_unknown_workload_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--workloads", "wire-produce,fetch-everything"])

    assert "unknown workloads: fetch-everything" in capsys.readouterr().err


def test_the_scale_part_takes_ten_thousand_partitions_or_a_thousand_when_quick():
    assert parse_args(["--parts", "scale"]).scale_partitions == 10_000
    assert parse_args(["--parts", "scale", "--quick"]).scale_partitions == 1_000
    assert parse_args(["--parts", "scale", "--scale-partitions", "500"]).scale_partitions == 500


def test_the_tls_part_is_one_of_the_defaults_and_runs_alone():
    assert "tls" in parse_args([]).parts
    assert parse_args(["--parts", "tls", "--quick"]).parts == ["tls"]


def test_tls_ratios_are_ssl_over_plaintext_per_round():
    report = Report()
    for plaintext, ssl in ((2.0, 1.0), (4.0, 3.0), (1.0, 1.0)):  # seconds for 1,000 records
        report.add("tls_produce_small", "PLAINTEXT", Measurement("p", 1000, 100_000, plaintext))
        report.add("tls_produce_small", "SSL", Measurement("s", 1000, 100_000, ssl))

    rows = {row["label"]: row for row in compute_ratios(report)}

    row = rows["produce 100 B acks=1, confluent-kafka: SSL / PLAINTEXT (tls)"]
    assert row["rounds"] == [2.0, 4.0 / 3.0, 1.0]
    assert row["value"] == 4.0 / 3.0


def test_the_end_to_end_ratio_is_the_brokers_cpu_share_per_round():
    report = Report()
    for logway, mock in ((0.40, 0.08), (0.45, 0.05)):
        report.add("end_to_end", "logway", Measurement("l", 5000, 500_000, 5.0, broker_cpu=logway))
        report.add("end_to_end", "mock", Measurement("m", 5000, 500_000, 5.0, broker_cpu=mock))

    rows = {row["label"]: row for row in compute_ratios(report)}

    row = rows["broker CPU, a record a ms tailed (lower is better): logway / mock"]
    assert row["rounds"] == pytest.approx([5.0, 9.0])
    assert parse_args(["--workloads", "end-to-end", "--quick"]).e2e_records == 1_000


def test_the_end_to_end_ratio_a_request_divides_each_brokers_cpu_by_its_clients_requests():
    report = Report()
    # different counts of requests, so that the two ratios differ
    logway = Measurement("l", 5000, 500_000, 5.0, broker_cpu=0.40, requests={"Produce": 5000, "Fetch": 5000})
    mock = Measurement("m", 5000, 500_000, 5.0, broker_cpu=0.20, requests={"Produce": 5000, "Fetch": 10})
    report.add("end_to_end", "logway", logway)
    report.add("end_to_end", "mock", mock)

    rows = {row["label"]: row for row in compute_ratios(report)}

    assert rows["broker CPU, a record a ms tailed (lower is better): logway / mock"]["value"] == pytest.approx(2.0)
    row = rows["broker CPU a request, a record a ms tailed (lower is better): logway / mock"]
    assert row["value"] == pytest.approx((0.40 / 10_000) / (0.20 / 5010))


def test_the_end_to_end_ratios_against_the_mock_in_a_process_of_its_own():
    report = Report()
    requests = {"Produce": 5000, "Fetch": 5000}
    report.add("end_to_end", "logway", Measurement("l", 5000, 500_000, 5.0, broker_cpu=0.45, requests=requests))
    report.add("end_to_end", "mock", Measurement("m", 5000, 500_000, 5.0, broker_cpu=0.20, requests=requests))
    report.add("end_to_end", "mock-process", Measurement("p", 5000, 500_000, 5.0, broker_cpu=0.25, requests=requests))

    rows = {row["label"]: row for row in compute_ratios(report)}

    prefix = "broker CPU a request, a record a ms tailed (lower is better): "
    assert rows[prefix + "logway / mock"]["value"] == pytest.approx(2.25)
    assert rows[prefix + "logway / mock in a process of its own"]["value"] == pytest.approx(1.8)
    assert rows[prefix + "mock in this process / in a process of its own"]["value"] == pytest.approx(0.8)


def test_the_header_names_the_interpreter_binary_behind_the_virtualenv():
    # builds of one Python version differ in speed; the virtualenv's own python is a symlink
    assert interpreter() == f"python {platform.python_version()} ({os.path.realpath(sys.executable)})"
    assert not os.path.islink(interpreter().split("(")[1].rstrip(")"))


def test_every_core_busy_ratios_take_the_rate_at_the_cpu_a_byte_both_sides_spent(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    report = Report()
    # 1 GB in 0.5 s with 0.2 + 0.3 CPU seconds: every core busy would move 2 / 0.5 = 4 GB/s
    report.add("wire_produce", "logway", Measurement("l", 1000, 1_000_000_000, 0.5, client_cpu=0.2, broker_cpu=0.3))
    report.add("wire_produce", "mock", Measurement("m", 1000, 1_000_000_000, 0.4, client_cpu=0.3, broker_cpu=0.1))
    report.add("receive_append", "machine", Measurement("r", 0, 1_000_000_000, 0.3, client_cpu=0.1, broker_cpu=0.3))
    report.add("append", "machine", Measurement("a", 0, 1_000_000_000, 0.2))  # 5 GB/s

    rows = {row["label"]: row["value"] for row in compute_ratios(report)}

    every_core = "every core busy at "
    assert rows[f"produce 1 MiB batches, wire: {every_core}logway's CPU a byte (client + broker) / raw append (recycled pages)"] == pytest.approx(0.8)
    assert rows[f"produce 1 MiB batches, wire: {every_core}the mock's CPU a byte (client + broker) / raw append (recycled pages)"] == pytest.approx(1.0)
    label = f"machine: {every_core}the CPU a byte of received over loopback, CRC-32C, appended (sender + receiver) / raw append (recycled pages)"
    assert rows[label] == pytest.approx(1.0)
    # the throughput ratio itself is unchanged: 2 GB/s against 5
    assert rows["produce 1 MiB batches, wire: logway / raw append (recycled pages)"] == pytest.approx(0.4)


def test_every_core_busy_ratio_is_left_out_without_the_cpu_of_both_sides():
    report = Report()
    report.add("wire_produce", "logway", Measurement("l", 1000, 1_000_000_000, 0.5, client_cpu=None, broker_cpu=0.3))
    report.add("append", "machine", Measurement("a", 0, 1_000_000_000, 0.2))

    labels = [row["label"] for row in compute_ratios(report)]

    assert "produce 1 MiB batches, wire: logway / raw append (recycled pages)" in labels
    assert not [label for label in labels if "every core busy" in label]


def test_summed_adds_up_runs_made_one_after_another():
    parts = [
        Measurement("a", 100, 1_000, 0.5, client_cpu=0.2, broker_cpu=0.4),
        Measurement("b", 300, 3_000, 1.5, client_cpu=0.6, broker_cpu=1.2, timed_out=True),
    ]

    m = _summed("both", parts)

    assert (m.label, m.records, m.bytes, m.seconds) == ("both", 400, 4_000, 2.0)
    assert m.client_cpu == pytest.approx(0.8) and m.broker_cpu == pytest.approx(1.6)
    assert m.timed_out
    assert m.records_per_s == 200  # the rate over the runs' own time, not the mean of their rates


def test_summed_has_no_cpu_figure_when_a_run_lacks_it():
    parts = [Measurement("a", 1, 1, 1.0, client_cpu=0.1, broker_cpu=None), Measurement("b", 1, 1, 1.0, 0.1, 0.2)]

    m = _summed("both", parts)

    assert m.client_cpu == pytest.approx(0.2) and m.broker_cpu is None
