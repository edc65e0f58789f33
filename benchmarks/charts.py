"""PNG charts of one benchmark run, drawn from the data benchmarks.run keeps (its --json shape).

    python -m benchmarks.charts RUN_JSON [DIR]     # DIR: benchmarks/charts by default

benchmarks.run calls write_charts at the end of every run. Each chart is drawn when the run
has its data, and a chart the run has no data for is removed from DIR, so that DIR holds one
run's pictures only:

  throughput.png  per workload, the median rate of logway and of each peer that ran it (the
                  mock, the machine's own limits, a broker with idle connections against one
                  without), with the lowest and highest round as whiskers;
  ratios.png      the run's ratios (median of per-round ratios; dots: the rounds) and targets;
  latency.png     the latency workload's percentiles per broker (median over rounds);
  tls.png         SSL / PLAINTEXT rates and the broker's CPU seconds per GB on each listener;
  scale.png       the scale and cluster-scale parts: seconds per phase, the broker's RSS.

matplotlib draws with its Agg backend (no display needed); it is in the bench extra.
"""

import json
import statistics
import sys
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402  (after choosing the backend)
from matplotlib.ticker import FuncFormatter  # noqa: E402

CHART_NAMES = ("throughput", "ratios", "latency", "tls", "scale")
DEFAULT_DIR = Path(__file__).resolve().parent / "charts"

# Workloads of the throughput chart: title ({size}: the run's record size) and the rate shown.
# Others (a workload added later) are drawn too, titled by their key, in records/s.
WORKLOADS = {
    "ck_produce_a1": ("confluent-kafka produce {size} B, acks=1", "records"),
    "ck_produce_all": ("confluent-kafka produce {size} B, acks=all", "records"),
    "ck_consume_window": ("confluent-kafka consume {size} B, same window", "records"),
    "ck_consume_all": ("confluent-kafka consume {size} B, all once", "records"),
    "ck_produce_large": ("confluent-kafka produce 1 MiB records", "mb"),
    "ck_consume_large": ("confluent-kafka consume 1 MiB records", "mb"),
    "wire_produce": ("wire produce, 1 MiB batches", "mb"),
    "wire_produce_16k": ("wire produce, 16 KiB batches", "mb"),
    "wire_fetch_large": ("wire fetch, 1 MiB records", "mb"),
    "wire_fetch_small": ("wire fetch, {size} B records", "mb"),
    "append": ("page-cache append (recycled pages)", "mb"),
    "append_new": ("page-cache append (new file)", "mb"),
    "append_reserved": ("page-cache append, blocks reserved ahead (recycled pages)", "mb"),
    "sendfile": ("sendfile over loopback", "mb"),
    "kp_produce": ("kafka-python produce {size} B", "records"),
    "kp_consume": ("kafka-python consume {size} B", "records"),
    "idle_produce": ("produce {size} B beside idle connections", "records"),
    "idle_consume": ("consume {size} B beside idle connections", "records"),
}
# Drawn elsewhere or not rates worth a bar: the tls chart, the latency chart, the strace runs.
_NOT_THROUGHPUT = ("tls_", "latency_", "zerocopy_")
_UNITS = {"records": ("records/s", "records_per_s"), "mb": ("MB/s", "mb_per_s")}
_SIDE_COLOURS = {"logway": "#1f77b4", "mock": "#ff7f0e", "machine": "#7f7f7f", "PLAINTEXT": "#2ca02c", "SSL": "#d62728"}
_OTHER_COLOURS = ("#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
_PERCENTILE_KEYS = ("p50", "p90", "p99", "p99.9", "max")
_TLS_WORKLOADS = {
    "tls_produce_small": "produce {size} B",
    "tls_consume_small": "consume {size} B",
    "tls_produce_large": "produce 1 MiB",
    "tls_consume_large": "consume 1 MiB",
}
_SCALE_PHASES = {
    "scale_create_s": "CreateTopics",
    "scale_create_to_metadata_s": "until Metadata names every leader",
    "scale_clean_stop_s": "clean stop",
    "scale_clean_restart_s": "clean restart to full Metadata",
    "scale_crash_restart_s": "restart after kill -9 to full Metadata",
}
_SCALE_RSS = {"created": "after creation", "clean_restart": "after clean restart", "crash_restart": "after kill -9 restart"}
_CLUSTER_PHASES = {
    "cluster_scale_create_request_s": "CreateTopics",
    "cluster_scale_create_leaders_s": "until every leader",
    "cluster_scale_create_full_isr_s": "until every ISR is full",
    "cluster_scale_failover_new_controller_s": "controller kill -9: new controller",
    "cluster_scale_failover_leaders_s": "  ... live leaders",
    "cluster_scale_restart_listening_s": "broker restart: listening",
    "cluster_scale_restart_full_isr_s": "  ... every ISR full",
    "cluster_scale_shutdown_leaders_s": "controlled shutdown: leaders moved",
    "cluster_scale_shutdown_exit_s": "  ... exited",
}


def write_charts(data: dict, directory: Path) -> list[Path]:
    """Draw the charts `data` (benchmarks.run's JSON) has figures for into `directory`; remove
    the others' old files. Returns the files written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in CHART_NAMES:
        path = directory / f"{name}.png"
        figure = _DRAW[name](data)
        if figure is None:
            path.unlink(missing_ok=True)
            continue
        figure.savefig(path, dpi=100)
        written.append(path)
    return written


def _subtitle(data: dict) -> str:
    run = data.get("run", {})
    parts = [run.get("date"), run.get("command")]
    if run.get("rounds"):
        parts.append(f"{run['rounds']} round(s)")
    return "; ".join(str(p) for p in parts if p)


def _titled(figure: Figure, title: str, data: dict) -> Figure:
    width = int(figure.get_figwidth() * 10)  # characters of the subtitle's font per line
    figure.suptitle("\n".join([title, *textwrap.wrap(_subtitle(data), width)]), fontsize=10)
    return figure


def _ordered_sides(sides: dict) -> list[str]:
    """logway first, then the peers in the order they ran."""
    return sorted(sides, key=lambda side: side != "logway")


def _colour(side: str, sides: list[str]) -> str:
    if side in _SIDE_COLOURS:
        return _SIDE_COLOURS[side]
    others = [s for s in sides if s not in _SIDE_COLOURS]
    return _OTHER_COLOURS[others.index(side) % len(_OTHER_COLOURS)]


def _grid(count: int, columns: int) -> tuple[int, int]:
    columns = min(columns, count)
    return -(-count // columns), columns


def _short(value: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def _throughput(data: dict) -> Figure | None:
    size = data.get("run", {}).get("size", 100)
    panels = []
    known = list(WORKLOADS)
    series = data.get("series", {})
    for workload in sorted(series, key=lambda w: known.index(w) if w in known else len(known)):
        # A run of some workloads only (--workloads) keeps empty series for the others.
        sides = {side: measured for side, measured in series[workload].items() if measured}
        if workload.startswith(_NOT_THROUGHPUT) or not sides:
            continue
        title, unit = WORKLOADS.get(workload, (workload, "records"))
        panels.append((title.format(size=size), unit, sides))
    if not panels:
        return None
    rows, columns = _grid(len(panels), 3)
    figure = Figure(figsize=(5 * columns, 3.3 * rows + 0.8), layout="constrained")
    for index, (title, unit, sides) in enumerate(panels):
        axes = figure.add_subplot(rows, columns, index + 1)
        label, key = _UNITS[unit]
        names = _ordered_sides(sides)
        medians, low, high = [], [], []
        for side in names:
            rates = [m[key] for m in sides[side]]
            median = statistics.median(rates)
            medians.append(median)
            low.append(median - min(rates))
            high.append(max(rates) - median)
        bars = axes.bar(names, medians, yerr=[low, high], capsize=4,
                        color=[_colour(side, names) for side in names])
        axes.bar_label(bars, labels=[_short(v) for v in medians], fontsize=8)
        axes.set_title(title, fontsize=9)
        axes.set_ylabel(label, fontsize=8)
        axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: _short(value)))
        axes.tick_params(labelsize=8)
        axes.margins(y=0.15)
    return _titled(figure, "Throughput per workload (median over rounds; whiskers: lowest and highest round)", data)


def _ratios(data: dict) -> Figure | None:
    rows = data.get("ratios", [])
    if not rows:
        return None
    figure = Figure(figsize=(11, 0.42 * len(rows) + 1.6), layout="constrained")
    axes = figure.add_subplot()
    positions = list(range(len(rows)))[::-1]
    axes.barh(positions, [row["value"] for row in rows], color="#1f77b4", alpha=0.8)
    for position, row in zip(positions, rows):
        if row.get("rounds"):
            axes.plot(row["rounds"], [position] * len(row["rounds"]), "o", color="black", markersize=3)
        if row.get("target") is not None:
            axes.plot([row["target"]], [position], "|", color="#d62728", markersize=14, markeredgewidth=2)
        axes.annotate(f"{row['value']:.3g}", (row["value"], position), xytext=(4, -3),
                      textcoords="offset points", fontsize=7)
    axes.axvline(1.0, color="gray", linewidth=0.8, linestyle="--")
    axes.set_yticks(positions, [row["label"] for row in rows], fontsize=7)
    axes.set_xscale("log")
    axes.set_xlabel("ratio (log scale; dots: rounds; red bar: target)", fontsize=8)
    return _titled(figure, "Ratios (median of per-round ratios)", data)


def _latency(data: dict) -> Figure | None:
    panels = [(workload, sides) for workload, sides in data.get("series", {}).items()
              if workload.startswith("latency_")
              and any(m.get("latency_ms") for ms in sides.values() for m in ms)]
    if not panels:
        return None
    size = data.get("run", {}).get("size", 100)
    figure = Figure(figsize=(6 * len(panels), 4), layout="constrained")
    for index, (workload, sides) in enumerate(panels):
        axes = figure.add_subplot(1, len(panels), index + 1)
        names = [side for side in _ordered_sides(sides) if any(m.get("latency_ms") for m in sides[side])]
        width = 0.8 / len(names)
        for offset, side in enumerate(names):
            measured = [m["latency_ms"] for m in sides[side] if m.get("latency_ms")]
            values = [statistics.median(p[key] for p in measured) for key in _PERCENTILE_KEYS]
            bars = axes.bar([i + offset * width for i in range(len(_PERCENTILE_KEYS))], values, width,
                            label=side, color=_colour(side, names))
            axes.bar_label(bars, labels=[f"{v:.2g}" for v in values], fontsize=7)
        axes.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(_PERCENTILE_KEYS))], _PERCENTILE_KEYS)
        axes.set_yscale("log")
        axes.set_ylabel("ms, produce() to delivery report (log scale)", fontsize=8)
        acks = workload.rsplit("_a", 1)[-1]
        axes.set_title(f"produce {size} B one at a time, acks={acks}", fontsize=9)
        axes.legend(fontsize=8)
    return _titled(figure, "Produce latency percentiles (median over rounds)", data)


def _tls(data: dict) -> Figure | None:
    series, values = data.get("series", {}), data.get("values", {})
    size = data.get("run", {}).get("size", 100)
    ratios, cpu = [], []
    for workload, title in _TLS_WORKLOADS.items():
        sides = series.get(workload, {})
        plain, ssl = sides.get("PLAINTEXT", []), sides.get("SSL", [])
        key = "records_per_s" if workload.endswith("small") else "mb_per_s"
        rounds = [s[key] / p[key] for s, p in zip(ssl, plain) if p[key] > 0]
        if rounds:
            ratios.append((title.format(size=size), statistics.median(rounds), rounds))
        per_gb = [values.get(f"{workload}_{side}_broker_cpu_s_per_gb") for side in ("PLAINTEXT", "SSL")]
        if all(v is not None for v in per_gb):
            cpu.append((title.format(size=size), per_gb))
    if not ratios and not cpu:
        return None
    figure = Figure(figsize=(12, 4), layout="constrained")
    if ratios:
        axes = figure.add_subplot(1, 2, 1)
        names = [name for name, _, _ in ratios]
        bars = axes.bar(names, [value for _, value, _ in ratios], color="#d62728", alpha=0.8)
        for index, (_, _, rounds) in enumerate(ratios):
            axes.plot([index] * len(rounds), rounds, "o", color="black", markersize=3)
        axes.bar_label(bars, labels=[f"{value:.2f}" for _, value, _ in ratios], fontsize=8)
        axes.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
        axes.set_ylabel("SSL / PLAINTEXT rate (dots: rounds)", fontsize=8)
        axes.set_title("What TLS costs in rate", fontsize=9)
        axes.tick_params(labelsize=8)
    if cpu:
        axes = figure.add_subplot(1, 2, 2)
        width = 0.4
        for offset, side in enumerate(("PLAINTEXT", "SSL")):
            bars = axes.bar([i + offset * width for i in range(len(cpu))], [per_gb[offset] for _, per_gb in cpu],
                            width, label=side, color=_SIDE_COLOURS[side])
            axes.bar_label(bars, labels=[f"{per_gb[offset]:.2g}" for _, per_gb in cpu], fontsize=7)
        axes.set_xticks([i + width / 2 for i in range(len(cpu))], [name for name, _ in cpu], fontsize=8)
        axes.set_ylabel("broker CPU seconds per GB of records", fontsize=8)
        axes.set_title("What TLS costs the broker's CPU (median over rounds)", fontsize=9)
        axes.legend(fontsize=8)
    return _titled(figure, "TLS: one broker, a PLAINTEXT and an SSL listener", data)


def _scale(data: dict) -> Figure | None:
    values = data.get("values", {})
    panels = []
    phases = [(label, values[key]) for key, label in _SCALE_PHASES.items() if key in values]
    if phases:
        panels.append(("one broker: seconds per phase", "s", phases))
    rss = [(label, values[f"scale_{phase}_rss_mib"], values.get(f"scale_{phase}_peak_rss_mib"))
           for phase, label in _SCALE_RSS.items() if f"scale_{phase}_rss_mib" in values]
    if rss:
        panels.append(("one broker: RSS (bar) and peak (dot)", "MiB", rss))
    cluster = [(label, values[key]) for key, label in _CLUSTER_PHASES.items() if key in values]
    if cluster:
        panels.append(("three brokers (RF=3, ZooKeeper): seconds per phase", "s", cluster))
    if not panels:
        return None
    figure = Figure(figsize=(6 * len(panels), 4.2), layout="constrained")
    for index, (title, unit, rows) in enumerate(panels):
        axes = figure.add_subplot(1, len(panels), index + 1)
        positions = list(range(len(rows)))[::-1]
        bars = axes.barh(positions, [row[1] for row in rows], color="#1f77b4", alpha=0.85)
        for position, row in zip(positions, rows):
            if len(row) > 2 and row[2] is not None:
                axes.plot([row[2]], [position], "o", color="black", markersize=4)
        axes.bar_label(bars, labels=[f"{row[1]:.3g}" for row in rows], fontsize=7, padding=2)
        axes.set_yticks(positions, [row[0] for row in rows], fontsize=8)
        axes.set_xlabel(unit, fontsize=8)
        axes.set_title(title, fontsize=9)
        axes.margins(x=0.2)
    partitions = data.get("run", {}).get("scale_partitions")
    return _titled(figure, f"Scale: {partitions:,} partitions" if partitions else "Scale", data)


_DRAW = {"throughput": _throughput, "ratios": _ratios, "latency": _latency, "tls": _tls, "scale": _scale}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    data = json.loads(Path(args[0]).read_text())
    for path in write_charts(data, Path(args[1]) if len(args) > 1 else DEFAULT_DIR):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
