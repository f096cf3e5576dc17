"""A self-contained HTML report of a backtest: figures, assumptions, risk timeline, lead times, alarms.

Rendered through `templates/backtest_report.html.j2`, the plots inline SVG from `report_svg`; no
JavaScript, fonts, styles or images from anywhere else, so the file opens offline. It renders a
`backtest.BacktestResult` and computes nothing the result does not hold (beyond picking which nodes to
draw); this module only words and formats its figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from app import templates
from app.predict import backtest
from app.predict.report_svg import lead_histogram, pick_nodes, timeline

OUTCOME_COLOURS = {
    "true": "#059669",
    "early": "#2563eb",
    "other": "#6b7280",
    "false": "#dc2626",
    "after-failure": "#9ca3af",
}
_SIDE_BY_SIDE = (
    ("alarms", "alarms", "d"),
    ("precision (alarms)", "precision", ".3f"),
    ("recall, failures with precursors", "recall_with_precursor", ".3f"),
    ("recall, all failures", "recall", ".3f"),
    ("false alarms per 1,000 node-days", "false_alarms_per_1000_node_days", ".2f"),
)


def _number(value: Any, spec: str = ".3f", suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:{spec}}{suffix}"


def _pct(value: Any) -> str:
    return _number(None if value is None else 100.0 * float(value), ".1f", "%")


def render(result: backtest.BacktestResult) -> str:
    body = result.as_dict()
    summary = body["summary"]
    model, fleet, span = body["model"], body["fleet"], body["range"]
    assumptions = body["costs"]["assumptions"]
    lead = summary["lead_time_h_with_precursor"] or summary["lead_time_h"]
    nodes = pick_nodes(result)
    return templates.render(
        "backtest_report.html.j2",
        span={
            "start": span["start"],
            "end": span["end"],
            "days": f"{span['days']:g}",
            "step_min": f"{span['step_s'] / 60:g}",
        },
        fleet=fleet,
        model={
            "version": model["version"],
            "warn": f"{model['warn']:.3f}",
            "act": f"{model['act']:.3f}",
            "clear_after_steps": model["clear_after_steps"],
            "clear_margin": f"{100 * model['clear_margin']:g}",
        },
        ground_truth=body["ground_truth"],
        figures=_figures(body),
        summary=summary,
        outcomes=", ".join(f"{k}: {v}" for k, v in sorted(summary["alarms_by_outcome"].items())) or "none",
        node_days=f"{summary['node_days']:.0f}",
        baseline=_baseline(body),
        costs=_costs(body),
        statements=assumptions["statements"],
        numbers=", ".join(f"{k} = {v}" for k, v in assumptions.items() if k != "statements"),
        drawn=len(nodes),
        timeline=timeline(result, nodes),
        lead={
            "median": _number(lead["median"], ".1f"),
            "p10": _number(lead["p10"], ".1f"),
            "p90": _number(lead["p90"], ".1f"),
            "count": lead["count"],
        },
        leads=lead_histogram(lead["values"], min_lead_h=float(assumptions["min_lead_h"])),
        alarms=[_alarm(a) for a in body["alarms"]],
        failures=[_failure(f) for f in body["failures"]],
    )


def write_html(path: Path, result: backtest.BacktestResult) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(result), encoding="utf-8")
    return path


def _figures(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The headline figures, (value, what it is)."""
    summary = body["summary"]
    costs = body["costs"]["all_failures"]
    recall = summary["recall_with_precursor"]
    lead = summary["lead_time_h_with_precursor"] or summary["lead_time_h"]
    return [
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


def _costs(body: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
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
    return [
        (
            title,
            (
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
            ),
        )
        for title, c in blocks
        if c is not None
    ]


def _alarm(a: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "node": a["node"],
        "gpu": a["gpu"],
        "first_flag": a["first_flag"],
        "last_flag": a["last_flag"],
        "peak": _number(a["peak"], ".3f"),
        "colour": OUTCOME_COLOURS.get(a["outcome"], "#111827"),
        "outcome": a["outcome"],
        "acted": "yes" if a["acted"] else "no",
        "trap": a["trap"] or "",
        "failure_id": a["failure_id"] or "",
        "lead": "" if a["lead_h"] is None else f"{a['lead_h']:.1f}",
        "drivers": ", ".join(f"{name} {weight:+.2f}" for name, weight in a["drivers"]),
    }


def _failure(f: Mapping[str, Any]) -> dict[str, Any]:
    if not f["caught"]:
        outcome = "missed"
    elif not f["acted"]:
        outcome = f"caught {f['lead_h']:.1f} h ahead; held at warn by the budget"
    elif f["acted_lead_h"] is not None and f["acted_lead_h"] < f["lead_h"] - 1e-6:
        outcome = f"caught {f['lead_h']:.1f} h ahead; at act {f['acted_lead_h']:.1f} h ahead (budget)"
    else:
        outcome = f"caught {f['lead_h']:.1f} h ahead"
    return {
        "id": f["id"],
        "node": f["node"],
        "gpu": f["gpu"],
        "mode": f["mode"] or "",
        "fault_class": f["fault_class"],
        "failure_time": f["failure_time"],
        "precursor_start": f["precursor_start"] or "—",
        "outcome": outcome,
    }


def _baseline(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The model beside the rules baseline replayed in the same pass, and the promotion gate's verdict."""
    base = body.get("baseline")
    if not base:
        return None
    model, rules = body["summary"], base["summary"]
    rows: list[Sequence[Any]] = [
        (name, _number(model.get(key), spec), _number(rules.get(key), spec))
        for name, key, spec in _SIDE_BY_SIDE
    ]
    rows.append(("trap GPUs flagged", model["traps"]["flagged"], rules["traps"]["flagged"]))
    return {
        "version": base["version"],
        "skipped": ", ".join(base.get("rules_skipped") or []) or "none",
        "rows": rows,
        "verdict": (base.get("model_beats_baseline") or {}).get("reason", ""),
    }
