"""A self-contained HTML report of a backtest: figures, assumptions, risk timeline, lead times, alarms.

The plots are inline SVG drawn here; no JavaScript, fonts, styles or images from anywhere else, so the file
opens offline. It renders a `backtest.BacktestResult` and computes nothing the result does not hold
(beyond picking which nodes to draw). Style follows `app/demo/report.py`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from app.predict import backtest
from app.predict.report_svg import lead_histogram_svg, pick_nodes, timeline_svg

OUTCOME_COLOURS = {
    "true": "#059669",
    "early": "#2563eb",
    "other": "#6b7280",
    "false": "#dc2626",
    "after-failure": "#9ca3af",
}


def _e(text: object) -> str:
    return html.escape(str(text))


def _when(t: float) -> str:
    if not np.isfinite(t):
        return "—"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def _number(value: Any, spec: str = ".3f", suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:{spec}}{suffix}"


def _pct(value: Any) -> str:
    return _number(None if value is None else 100.0 * float(value), ".1f", "%")


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #111827; max-width: 1200px; }
h1 { font-size: 1.5rem; margin-bottom: 0.2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; width: 100%; font-size: 0.85rem; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e5e7eb; vertical-align: top; }
th { background: #f3f4f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.muted { color: #6b7280; } code { background: #f3f4f6; padding: 1px 4px; border-radius: 3px; }
.figures { display: flex; flex-wrap: wrap; gap: 12px; margin: 1rem 0; }
.figure { border: 1px solid #e5e7eb; border-radius: 6px; padding: 8px 14px; min-width: 150px; }
.figure .value { font-size: 1.4rem; font-weight: 600; } .figure .label { color: #6b7280; font-size: 0.8rem; }
"""


def _figures(body: Mapping[str, Any]) -> str:
    summary = body["summary"]
    costs = body["costs"]["all_failures"]
    recall = summary["recall_with_precursor"]
    lead = summary["lead_time_h_with_precursor"] or summary["lead_time_h"]
    items = [
        (_pct(summary["precision"]), "alarm precision (true / (true + false))"),
        (
            _pct(recall if recall is not None else summary["recall"]),
            "recall, failures with precursors" if recall is not None else "recall, all failures",
        ),
        (_number(lead["median"], ".1f", " h"), "median lead time"),
        (_number(summary["false_alarms_per_1000_node_days"], ".2f"), "false alarms / 1,000 node-days"),
        (f"{summary['traps']['flagged']} / {summary['traps']['gpus']}", "trap GPUs flagged"),
        (_pct(costs["reduction"]), "GPU-hours lost to failures, saved"),
        (_pct(costs["capacity_fraction"]), "capacity held at act"),
    ]
    return "".join(
        f'<div class="figure"><div class="value">{_e(v)}</div><div class="label">{_e(label)}</div></div>'
        for v, label in items
    )


def _cost_rows(body: Mapping[str, Any]) -> str:
    blocks: list[tuple[str, Mapping[str, Any] | None]] = [
        ("all failures", body["costs"]["all_failures"]),
        ("failures with precursors", body["costs"]["failures_with_precursor"]),
    ]
    unbudgeted = body["costs"].get("without_budget")
    if unbudgeted:
        blocks += [
            ("all failures, no budget", unbudgeted["all_failures"]),
            ("with precursors, no budget", unbudgeted["failures_with_precursor"]),
        ]
    rows = []
    for title, c in blocks:
        if c is None:
            continue
        cells = (
            str(c["failures"]),
            str(c["caught_in_time"]),
            _number(c["reactive_gpu_h"], ".1f"),
            _number(c["ladder_gpu_h"], ".1f"),
            _pct(c["reduction"]),
            f"{c['needless_restarts']} ({_number(c['needless_restart_gpu_h'], '.1f')})",
            _pct(c["net_reduction"]),
            f"{_number(c['capacity_gpu_h'], '.0f')} ({_pct(c['capacity_fraction'])})",
            f"{c['peak_nodes_held']} / {c['max_nodes_at_act']}",
            f"{c['holds_delayed']} / {c['holds_refused']}",
        )
        rows.append(
            f"<tr><td>{_e(title)}</td>" + "".join(f'<td class="num">{_e(v)}</td>' for v in cells) + "</tr>"
        )
    head = (
        "<tr><th></th><th>failures</th><th>caught in time</th><th>reactive GPU-h</th><th>ladder GPU-h</th>"
        "<th>saved</th><th>other alarms (restart GPU-h)</th><th>net saved</th><th>capacity GPU-h</th>"
        "<th>peak nodes at act / budget</th><th>holds delayed / refused by the budget</th></tr>"
    )
    return f"<table>{head}{''.join(rows)}</table>"


def _alarm_rows(alarms: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for a in alarms:
        colour = OUTCOME_COLOURS.get(a["outcome"], "#111827")
        drivers = ", ".join(f"{name} {weight:+.2f}" for name, weight in a["drivers"])
        lead = "" if a["lead_h"] is None else f"{a['lead_h']:.1f}"
        rows.append(
            f'<tr><td>{_e(a["node"])}</td><td class="num">{a["gpu"]}</td><td>{_e(a["first_flag"])}</td>'
            f'<td>{_e(a["last_flag"])}</td><td class="num">{_number(a["peak"], ".3f")}</td>'
            f'<td style="color:{colour};font-weight:600">{_e(a["outcome"])}</td>'
            f"<td>{'yes' if a['acted'] else 'no'}</td><td>{_e(a['trap'] or '')}</td>"
            f'<td>{_e(a["failure_id"] or "")}</td><td class="num">{_e(lead)}</td><td>{_e(drivers)}</td></tr>'
        )
    head = (
        "<tr><th>node</th><th>GPU</th><th>first flag</th><th>last flag</th><th>peak</th><th>outcome</th>"
        "<th>acted</th><th>trap</th><th>failure</th><th>lead h</th><th>what drove the first flag</th></tr>"
    )
    return f"<table>{head}{''.join(rows)}</table>" if rows else "<p>No alarm.</p>"


def _failure_rows(failures: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for f in failures:
        if not f["caught"]:
            state = "missed"
        elif not f["acted"]:
            state = f"caught {f['lead_h']:.1f} h ahead; held at warn by the budget"
        elif f["acted_lead_h"] is not None and f["acted_lead_h"] < f["lead_h"] - 1e-6:
            state = f"caught {f['lead_h']:.1f} h ahead; at act {f['acted_lead_h']:.1f} h ahead (budget)"
        else:
            state = f"caught {f['lead_h']:.1f} h ahead"
        rows.append(
            f'<tr><td>{_e(f["id"])}</td><td>{_e(f["node"])}</td><td class="num">{f["gpu"]}</td>'
            f"<td>{_e(f['mode'] or '')}</td><td>{_e(f['fault_class'])}</td><td>{_e(f['failure_time'])}</td>"
            f"<td>{_e(f['precursor_start'] or '—')}</td><td>{_e(state)}</td></tr>"
        )
    head = (
        "<tr><th>id</th><th>node</th><th>GPU</th><th>mode</th><th>class</th><th>failure</th>"
        "<th>precursor from</th><th>outcome</th></tr>"
    )
    return f"<table>{head}{''.join(rows)}</table>" if rows else "<p>No hardware failure in the range.</p>"


def render(result: backtest.BacktestResult) -> str:
    body = result.as_dict()
    summary = body["summary"]
    model, fleet, span = body["model"], body["fleet"], body["range"]
    assumptions = body["costs"]["assumptions"]
    statements = "".join(f"<li>{_e(s)}</li>" for s in assumptions["statements"])
    numbers = ", ".join(f"{k} = {v}" for k, v in assumptions.items() if k != "statements")
    lead = summary["lead_time_h_with_precursor"] or summary["lead_time_h"]
    nodes = pick_nodes(result)
    outcomes = ", ".join(f"{k}: {v}" for k, v in sorted(summary["alarms_by_outcome"].items())) or "none"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sickbay backtest</title><style>{_CSS}</style></head>
<body>
<h1>Sickbay backtest</h1>
<p class="muted">{_e(span["start"])} → {_e(span["end"])} ({span["days"]:g} days, scored every
{span["step_s"] / 60:g} min) · {fleet["nodes"]} nodes, {fleet["gpus"]} GPUs · model <code>{_e(model["version"])}</code>
(warn ≥ {model["warn"]:.3f}, act ≥ {model["act"]:.3f}; hold: {model["clear_after_steps"]} steps below act less
{100 * model["clear_margin"]:g}%) · ground truth: {_e(body["ground_truth"])}</p>
<div class="figures">{_figures(body)}</div>
<p>{summary["alarms"]} alarms ({_e(outcomes)}) on {summary["nodes_flagged"]} nodes;
{summary["failures_caught"]} of {summary["failures_scored"]} hardware failures with a full horizon of scoring
before them caught; {summary["false_alarms"]} false alarms in {summary["node_days"]:.0f} node-days.</p>
{_baseline_rows(body)}
<h2>Cost and benefit (GPU-hours)</h2>
{_cost_rows(body)}
<h2>Assumptions</h2>
<ul>{statements}</ul>
<p class="muted">{_e(numbers)}</p>
<h2>Risk timeline</h2>
<p class="muted">Node risk (the highest decision score of its GPUs) for the flagged nodes, nodes with a missed
failure and the riskiest others ({len(nodes)} of {fleet["nodes"]}). Hover for details.</p>
{timeline_svg(result, nodes)}
<h2>Lead time</h2>
<p class="muted">Failures caught: median {_number(lead["median"], ".1f")} h, p10 {_number(lead["p10"], ".1f")} h,
p90 {_number(lead["p90"], ".1f")} h ({lead["count"]} failures).</p>
{lead_histogram_svg(lead["values"], min_lead_h=float(assumptions["min_lead_h"]))}
<h2>Alarms</h2>
{_alarm_rows(body["alarms"])}
<h2>Hardware failures in the range</h2>
{_failure_rows(body["failures"])}
</body></html>
"""


def write_html(path: Path, result: backtest.BacktestResult) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(result), encoding="utf-8")
    return path


_SIDE_BY_SIDE = (
    ("alarms", "alarms", "d"),
    ("precision (alarms)", "precision", ".3f"),
    ("recall, failures with precursors", "recall_with_precursor", ".3f"),
    ("recall, all failures", "recall", ".3f"),
    ("false alarms per 1,000 node-days", "false_alarms_per_1000_node_days", ".2f"),
)


def _baseline_rows(body: Mapping[str, Any]) -> str:
    """The model beside the rules baseline replayed in the same pass, and the promotion gate's verdict."""
    base = body.get("baseline")
    if not base:
        return ""
    model, rules = body["summary"], base["summary"]
    rows = "".join(
        f"<tr><td>{_e(name)}</td><td class='num'>{_number(model.get(key), spec)}</td>"
        f"<td class='num'>{_number(rules.get(key), spec)}</td></tr>"
        for name, key, spec in _SIDE_BY_SIDE
    )
    traps = (
        f"<tr><td>trap GPUs flagged</td><td class='num'>{model['traps']['flagged']}</td>"
        f"<td class='num'>{rules['traps']['flagged']}</td></tr>"
    )
    verdict = base.get("model_beats_baseline") or {}
    skipped = ", ".join(base.get("rules_skipped") or []) or "none"
    return (
        f"<h2>Model vs the rules baseline</h2><p class='muted'>{_e(base['version'])}, replayed in the same pass "
        f"(rules skipped for a missing feature: {_e(skipped)}).</p>"
        f"<table><tr><th>figure</th><th>model</th><th>baseline</th></tr>{rows}{traps}</table>"
        f"<p>{_e(verdict.get('reason', ''))}</p>"
    )
