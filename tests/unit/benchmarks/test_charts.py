"""benchmarks.charts draws a run's figures as PNG files, from the data benchmarks.run keeps."""

import json
from dataclasses import asdict

import matplotlib.image

from benchmarks import charts, run
from benchmarks.clients import Measurement, percentiles
from benchmarks.run import Report, compute_ratios

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _measured(label: str, records: int, seconds: float, size: int = 100, latency_ms=None) -> Measurement:
    m = Measurement(label, records, records * size, seconds, client_cpu=seconds, broker_cpu=seconds / 4)
    m.latency_ms = latency_ms
    return m


def _sample_run() -> dict:
    """A small run as benchmarks.run records it: two rounds of logway and the mock, the machine,
    the latency and tls workloads, the scale and cluster-scale figures."""
    report = Report()
    for seconds in (1.0, 1.2):
        for side, factor in (("logway", 1.0), ("mock", 0.9)):
            report.add("ck_produce_a1", side, _measured(f"{side}: produce", 100_000, seconds * factor))
            report.add("wire_produce", side, _measured(f"{side}: wire", 5_000, seconds * factor, size=100_000))
            report.add("latency_produce_a1", side, _measured(
                f"{side}: latency", 500, seconds, latency_ms=percentiles([0.05 * factor, 0.07, 0.2, 3.0])))
        report.add("sendfile", "machine", _measured("machine: sendfile", 0, seconds))
        report.add("tls_produce_small", "PLAINTEXT", _measured("PLAINTEXT: produce", 100_000, seconds))
        report.add("tls_produce_small", "SSL", _measured("SSL: produce", 100_000, seconds * 1.3))
    report.values.update({
        "tls_produce_small_PLAINTEXT_broker_cpu_s_per_gb": 1.0,
        "tls_produce_small_SSL_broker_cpu_s_per_gb": 2.5,
        "scale_create_s": 4.8, "scale_clean_restart_s": 2.6, "scale_crash_restart_s": 3.6,
        "scale_created_rss_mib": 71.0, "scale_created_peak_rss_mib": 72.0,
        "cluster_scale_create_request_s": 9.5, "cluster_scale_failover_new_controller_s": 18.2,
    })
    return {
        "run": {"date": "2026-11-25 12:00:00 UTC", "command": "python -m benchmarks.run --quick", "size": 100,
                "rounds": 2, "scale_partitions": 1000},
        "series": {w: {s: [{**asdict(m), "records_per_s": m.records_per_s, "mb_per_s": m.mb_per_s} for m in ms]
                       for s, ms in sides.items()} for w, sides in report.series.items()},
        "values": report.values,
        "ratios": compute_ratios(report),
        "notes": [],
        "profiles": [],
    }


def test_every_chart_of_a_run_is_a_png_file_matplotlib_reads_back(tmp_path):
    written = charts.write_charts(_sample_run(), tmp_path)

    assert [path.name for path in written] == [f"{name}.png" for name in charts.CHART_NAMES]
    for path in written:
        assert path.read_bytes().startswith(PNG_SIGNATURE)
        height, width, _ = matplotlib.image.imread(path).shape
        assert height > 200 and width > 400


def test_a_chart_the_run_has_no_data_for_is_not_drawn_and_an_old_one_is_removed(tmp_path):
    for name in charts.CHART_NAMES:  # an earlier run's charts
        (tmp_path / f"{name}.png").write_bytes(PNG_SIGNATURE)
    data = _sample_run()
    data["series"] = {w: sides for w, sides in data["series"].items() if not w.startswith(("tls_", "latency_"))}
    data["values"] = {k: v for k, v in data["values"].items() if not k.startswith(("tls_", "scale_", "cluster_"))}

    written = charts.write_charts(data, tmp_path)

    assert sorted(path.name for path in written) == ["ratios.png", "throughput.png"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ratios.png", "throughput.png"]


def test_workloads_a_run_left_out_keep_empty_series_that_draw_nothing(tmp_path):
    data = _sample_run()
    for sides in data["series"].values():  # as `run --workloads ...` keeps the others
        sides["not run"] = []
    data["series"]["ck_consume_window"] = {"logway": [], "mock": []}

    written = charts.write_charts(data, tmp_path)

    assert tmp_path / "throughput.png" in written


def _ratios_only() -> dict:
    """A run with nothing but its ratios: one chart, drawn quickly."""
    return {**_sample_run(), "series": {}, "values": {}}


def test_the_command_line_draws_from_a_kept_json(tmp_path, capsys):
    kept = tmp_path / "run.json"
    kept.write_text(json.dumps(_ratios_only()))

    assert charts.main([str(kept), str(tmp_path / "charts")]) == 0

    assert (tmp_path / "charts" / "ratios.png").read_bytes().startswith(PNG_SIGNATURE)
    assert "ratios.png" in capsys.readouterr().out


def test_the_runner_keeps_the_json_beside_the_charts(tmp_path):
    run._write_charts(_ratios_only(), tmp_path / "charts")

    assert json.loads((tmp_path / "charts" / "run.json").read_text())["run"]["rounds"] == 2
    assert sorted(path.name for path in (tmp_path / "charts").iterdir()) == ["ratios.png", "run.json"]


def test_charts_go_beside_results_md_unless_told_otherwise():
    assert run.parse_args([]).charts == str(run.CHARTS_DIR)
    assert run.CHARTS_DIR.parent.joinpath("RESULTS.md").exists()
    assert run.parse_args(["--charts", "/tmp/elsewhere"]).charts == "/tmp/elsewhere"
    assert run.parse_args(["--no-charts"]).charts is None

