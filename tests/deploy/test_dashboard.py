"""The Grafana dashboard (deploy/grafana/sickbay-dashboard.json): every PromQL expression parses
(`promtool check rules` on one recording rule per expression, Grafana variables substituted) and names
only metrics that exist, with labels they have.

Metrics that exist: Sickbay's own (read from `create_metrics()`'s registry, with the suffixes Prometheus
exposes), the NVML agent's own (`app.agent.selfmetrics`), the dcgm-exporter families the agent serves
(`app.agent.exposition`) and everything the rule bundle reads or records (DCGM, kube-state-metrics, `up`),
Prometheus' `ALERTS`, and PREDICTION_METRICS: the few the prediction work is adding.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram

from app.agent import exposition
from app.agent import selfmetrics as agent_metrics
from app.config import rules as rules_config
from app.obs import metrics as sickbay_metrics
from tests.deploy import promql, support

# Added by the prediction work (the risk model), not registered by app/obs/metrics.py yet. When one of
# them is, test_prediction_metrics_are_not_registered_yet fails: remove it from here.
PREDICTION_METRICS: dict[str, set[str]] = {}  # all registered by app/obs/metrics.py now
# Series Prometheus itself makes.
PROMETHEUS_SERIES: dict[str, set[str] | None] = {"ALERTS": None, "up": None}
# Labels a scrape adds to every series (ServiceMonitor/PodMonitor target labels, see deploy/overlays).
TARGET_LABELS = {"instance", "job", "namespace", "pod", "container", "service", "endpoint", "node"}
# What the dashboard must show (the issue's list), by metric.
REQUIRED = {
    "sickbay_gpu_risk",
    "sickbay_nodes",
    "sickbay_actions_total",
    "sickbay_breaker_open",
    "sickbay_alerts_received_total",
    "sickbay_http_request_duration_seconds_bucket",
    "sickbay_drain_duration_seconds_bucket",
    "sickbay_model_info",
    "sickbay_model_precision",
    "sickbay_model_recall",
}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
}


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(support.DASHBOARD.read_text(encoding="utf-8"))
    return data


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def _expressions() -> list[tuple[str, str]]:
    """(panel title / refId, expression) for every query of the dashboard."""
    return [
        (f"{panel['title']} / {target['refId']}", target["expr"])
        for panel in _panels(_dashboard())
        for target in panel.get("targets", [])
    ]


def _registered(metrics: Any) -> dict[str, set[str]]:
    """Exposed sample name -> label names, for every metric of a metrics dataclass."""
    out: dict[str, set[str]] = {}
    for item in dataclasses.fields(metrics):
        _add(out, getattr(metrics, item.name))
    return out


def _add(out: dict[str, set[str]], metric: object) -> None:
    if not isinstance(metric, Counter | Gauge | Histogram):
        return
    kind = metric._type  # the registry lists no labelled family without children
    labels = set(metric._labelnames)
    for suffix in SUFFIXES[kind]:
        out[metric._name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())


def _bundle_names() -> set[str]:
    bundle = yaml.safe_load(support.RULES.read_text(encoding="utf-8"))
    names: set[str] = set()
    for group in bundle["groups"]:
        for rule in group["rules"]:
            names |= promql.metric_names(rule["expr"])
            if "record" in rule:
                names.add(rule["record"])
    return names


def known_metrics() -> dict[str, set[str] | None]:
    """Metric name -> its label names (None: not checked, the metric is not Sickbay's)."""
    known: dict[str, set[str] | None] = {name: None for name in _bundle_names()}
    known.update({name: None for name in exposition.series_names()})
    known.update(PROMETHEUS_SERIES)
    known.update(_registered(sickbay_metrics.create_metrics()))
    known.update(_registered(agent_metrics.create_metrics()))
    known.update(PREDICTION_METRICS)
    return known


def test_the_dashboard_is_importable_grafana_json() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "sickbay-overview"
    assert dashboard["title"] == "Sickbay"
    panels = _panels(dashboard)
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", *promql.GRAFANA_VARIABLES} - {
        "__rate_interval",
        "__interval",
        "__range",
    }
    for panel in panels:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), panel["title"]
        if panel["type"] == "row":
            continue
        assert panel.get("description"), f"panel {panel['title']!r} has no description"
        # No data source uid of one particular Grafana: always the dashboard's variable.
        for holder in [panel, *panel.get("targets", [])]:
            assert holder["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_every_expression_parses(tmp_path: Path) -> None:
    rules = [
        {"record": f"dashboard:expression:{number}", "expr": promql.substitute(expr)}
        for number, (_, expr) in enumerate(_expressions())
    ]
    variable = next(v for v in _dashboard()["templating"]["list"] if v["name"] == "node")
    selector = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"]["query"])
    assert selector is not None
    rules.append({"record": "dashboard:variable:node", "expr": selector.group(1)})
    path = tmp_path / "dashboard-expressions.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    support.assert_ok(support.run([support.tool("promtool"), "check", "rules", str(path)]))


@pytest.mark.parametrize(("where", "expr"), _expressions(), ids=[w for w, _ in _expressions()])
def test_every_expression_names_metrics_that_exist(where: str, expr: str) -> None:
    known = known_metrics()
    names = promql.metric_names(promql.substitute(expr))
    assert names, f"{where}: no metric in {expr!r}"
    unknown = names - set(known)
    assert not unknown, f"{where}: unknown metrics {sorted(unknown)} in {expr!r}"
    for name, labels in promql.selector_labels(promql.substitute(expr)).items():
        have = known.get(name)
        if have is None:
            continue
        extra = labels - have - TARGET_LABELS
        assert not extra, f"{where}: {name} has no label(s) {sorted(extra)}"


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    used = set().union(*(promql.metric_names(promql.substitute(e)) for _, e in _expressions()))
    assert REQUIRED - used == set()
    assert {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"} <= used, "DCGM panels"
    assert set(PREDICTION_METRICS) <= used, "a prediction metric the dashboard does not use: drop it"


def test_prediction_metrics_are_not_registered_yet() -> None:
    registered = _registered(sickbay_metrics.create_metrics())
    landed = sorted(set(PREDICTION_METRICS) & set(registered))
    assert not landed, (
        f"{landed} are registered by app/obs/metrics.py now: remove them from PREDICTION_METRICS in "
        "tests/deploy/test_dashboard.py so the dashboard is checked against the real labels"
    )


def test_the_budget_panels_use_the_policys_limits() -> None:
    budgets = rules_config.load_policy(support.ROOT / "rules" / "policy.yaml").budgets
    panels = {panel["title"]: panel for panel in _panels(_dashboard())}

    def red(title: str) -> float:
        steps = panels[title]["fieldConfig"]["defaults"]["thresholds"]["steps"]
        return float(next(step["value"] for step in steps if step["color"] == "red"))

    assert red("Budget used") == budgets.max_fraction
    assert red("Nodes held") == budgets.max_nodes
