"""The backtest's JSON body as rich tables on stdout: figures, the model beside the rules baseline, alarms."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table


def print_backtest(body: dict[str, Any]) -> None:
    console = Console() if sys.stdout.isatty() else Console(width=180)
    summary, span, model = body["summary"], body["range"], body["model"]
    lead = summary["lead_time_h_with_precursor"] or summary["lead_time_h"]
    money = body["costs"]["all_failures"]
    figures = Table(title=f"backtest {span['start']} → {span['end']}")
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    rows = [
        ("model (warn / act)", f"{model['version']} ({model['warn']:.3f} / {model['act']:.3f})"),
        (
            "scoring steps flagged: warn / act",
            f"{model.get('flagged_steps', {}).get('warn', 0)} / {model.get('flagged_steps', {}).get('act', 0)}",
        ),
        ("ground truth", body["ground_truth"]),
        (
            "nodes / GPUs / node-days",
            f"{body['fleet']['nodes']} / {body['fleet']['gpus']} / {summary['node_days']:.0f}",
        ),
        ("alarms (by outcome)", f"{summary['alarms']} {summary['alarms_by_outcome']}"),
        ("precision (alarms)", _fmt(summary["precision"])),
        ("recall, failures with precursors", _fmt(summary["recall_with_precursor"])),
        ("recall, all failures", _fmt(summary["recall"])),
        (
            "lead time h: median / p10 / p90",
            " / ".join(_fmt(lead[k], ".1f") for k in ("median", "p10", "p90")),
        ),
        ("false alarms per 1,000 node-days", _fmt(summary["false_alarms_per_1000_node_days"], ".2f")),
        ("trap GPUs flagged", f"{summary['traps']['flagged']} of {summary['traps']['gpus']}"),
        ("GPU-h lost: reactive → ladder", f"{money['reactive_gpu_h']:.1f} → {money['ladder_gpu_h']:.1f}"),
        (
            "saved (net of other alarms' restarts)",
            f"{_pct(money['reduction'])} ({_pct(money['net_reduction'])})",
        ),
        (
            "capacity held at act",
            f"{money['capacity_gpu_h']:.0f} GPU-h ({_pct(money['capacity_fraction'])}); "
            f"peak {money['peak_nodes_held']} of {money['max_nodes_at_act']} nodes; "
            f"holds delayed {money['holds_delayed']}, refused {money['holds_refused']}",
        ),
    ]
    for name, value in rows:
        figures.add_row(name, value)
    console.print(figures)
    if body.get("baseline"):
        console.print(side_by_side(body))
    alarms = Table(title="when each GPU would have been flagged (act)")
    for column in (
        "node",
        "gpu",
        "first flag",
        "last flag",
        "peak",
        "outcome",
        "acted",
        "trap",
        "lead h",
        "drivers",
    ):
        alarms.add_column(column)
    for a in body["alarms"]:
        drivers = ", ".join(f"{name} {weight:+.2f}" for name, weight in a["drivers"][:2])
        alarms.add_row(
            a["node"],
            str(a["gpu"]),
            a["first_flag"],
            a["last_flag"],
            _fmt(a["peak"]),
            a["outcome"],
            "yes" if a["acted"] else "no",
            a["trap"] or "",
            _fmt(a["lead_h"], ".1f"),
            drivers,
        )
    console.print(alarms)
    missed = [f for f in body["failures"] if not f["caught"]]
    if missed:
        table = Table(title="hardware failures not caught")
        for column in ("id", "node", "gpu", "mode", "class", "failure", "precursor from"):
            table.add_column(column)
        for f in missed:
            table.add_row(
                f["id"],
                f["node"],
                str(f["gpu"]),
                f["mode"] or "",
                f["fault_class"],
                f["failure_time"],
                f["precursor_start"] or "—",
            )
        console.print(table)


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "—" if value is None else f"{value:{spec}}"


def _pct(value: Any) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


SIDE_BY_SIDE = (
    ("alarms", "alarms", "d"),
    ("precision (alarms)", "precision", ".3f"),
    ("recall, failures with precursors", "recall_with_precursor", ".3f"),
    ("recall, all failures", "recall", ".3f"),
    ("false alarms", "false_alarms", "d"),
    ("false alarms per 1,000 node-days", "false_alarms_per_1000_node_days", ".2f"),
)


def side_by_side(body: dict[str, Any]) -> Table:
    """The model and the rules baseline on the same replay, and whether the model beats it."""
    base = body["baseline"]
    table = Table(title=f"model vs the rules baseline ({base['version']}), same range and truth")
    for column in ("figure", "model", "baseline"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    model, rules = body["summary"], base["summary"]
    for name, key, spec in SIDE_BY_SIDE:
        table.add_row(name, _fmt(model.get(key), spec), _fmt(rules.get(key), spec))
    lead_m = model["lead_time_h_with_precursor"] or model["lead_time_h"]
    lead_b = rules["lead_time_h_with_precursor"] or rules["lead_time_h"]
    table.add_row("median lead h", _fmt(lead_m["median"], ".1f"), _fmt(lead_b["median"], ".1f"))
    table.add_row(
        "trap GPUs flagged",
        f"{model['traps']['flagged']} of {model['traps']['gpus']}",
        f"{rules['traps']['flagged']} of {rules['traps']['gpus']}",
    )
    verdict = base.get("model_beats_baseline") or {}
    table.add_row("model beats the baseline", "yes" if verdict.get("passed") else "no", "")
    if base.get("rules_skipped"):
        table.add_row("rules skipped (feature absent)", "", ", ".join(base["rules_skipped"]))
    table.caption = verdict.get("reason")
    return table
