"""docs/grafana/logway-dashboard.json names only metrics the broker exports."""

import asyncio
import json
import re
import types
from pathlib import Path

from broker.metrics.collectors import controller_event_families, zookeeper_families
from tests.in_process import running_broker

DASHBOARD = Path(__file__).resolve().parents[4] / "docs" / "grafana" / "logway-dashboard.json"
# A PromQL identifier of the broker's metrics: kafka_..., and the process_ and python_ ones.
_METRIC = re.compile(r"\b(?:kafka|process|python)_[a-zA-Z0-9_:]*")
_SAMPLE_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}


def names(families) -> set[str]:
    """The sample names `families` export, with samples now or not (what a PromQL expression
    may name): a counter's <name>_total, a histogram's _bucket, _count and _sum."""
    return {family.name + suffix for family in families for suffix in _SAMPLE_SUFFIXES.get(family.type, ("",))}


def dashboard_expressions() -> list[str]:
    def walk(panels):
        for panel in panels:
            yield from (target["expr"] for target in panel.get("targets", ()))
            yield from walk(panel.get("panels", ()))

    dashboard = json.loads(DASHBOARD.read_text())
    return list(walk(dashboard["panels"])) + [
        variable["query"]["query"] for variable in dashboard["templating"]["list"] if isinstance(variable.get("query"), dict)
    ]


def exported_names(tmp_path) -> set[str]:
    """Every name a broker exports: a standalone one's families, and the ZooKeeper and
    controller event ones only a cluster member has."""

    async def main():
        async with running_broker(tmp_path) as broker:
            standalone = names(broker.metrics.registry.collect())
            controller = types.SimpleNamespace(unclean_leader_elections=0, queued_events=lambda: 0)
            member = types.SimpleNamespace(cluster=types.SimpleNamespace(controller=controller))
            return (
                standalone
                | names(zookeeper_families(member, broker.metrics))
                | names(controller_event_families(member, broker.metrics))
            )

    return asyncio.run(main())


def test_every_dashboard_expression_names_exported_metrics(tmp_path):
    exported = exported_names(tmp_path)
    expressions = dashboard_expressions()
    assert len(expressions) > 30
    unknown = {name for expr in expressions for name in _METRIC.findall(expr)} - exported
    assert not unknown, unknown
