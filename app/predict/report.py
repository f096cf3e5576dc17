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
import numpy.typing as npt
import pandas as pd

from app.predict import backtest

MAX_LANES = 40
OTHER_LANES = 5
MAX_POINTS = 800
COLOURS = {
    "risk": "#2563eb",
    "warn": "#d97706",
    "act": "#dc2626",
    "held": "#fee2e2",
    "refused": "#e5e7eb",
    "failure": "#b91c1c",
    "missed": "#111827",
    "precursor": "#9ca3af",
    "bar": "#2563eb",
}
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


# -- picking and shaping ----------------------------------------------------------------------------------


def pick_nodes(
    result: backtest.BacktestResult, *, lanes: int = MAX_LANES, others: int = OTHER_LANES
) -> list[str]:
    """Flagged nodes (by first flag), then nodes with a missed failure, then the riskiest others."""
    alarms = result.alarms.sort_values("first", kind="stable")
    chosen: list[str] = list(dict.fromkeys(alarms["node"].astype(str)))
    missed = result.failures.loc[~result.failures["caught"], "node"].astype(str)
    chosen += [n for n in dict.fromkeys(missed) if n not in chosen]
    peaks = result.replay.scores.groupby("node", observed=True)["score"].max().sort_values(ascending=False)
    rest = [str(n) for n in peaks.index if str(n) not in chosen][:others]
    return (chosen[: max(0, lanes - len(rest))] + rest)[:lanes]


def _pooled(t: npt.NDArray[np.float64], y: npt.NDArray[np.float64], limit: int) -> tuple[Any, Any]:
    """At most `limit` points: the maximum of each bucket (a peak is never smoothed away)."""
    if len(t) <= limit:
        return t, y
    bucket = np.floor(np.linspace(0, limit, len(t), endpoint=False)).astype(np.int64)
    frame = pd.DataFrame({"b": bucket, "t": t, "y": y}).groupby("b").agg(t=("t", "first"), y=("y", "max"))
    return frame["t"].to_numpy(), frame["y"].to_numpy()


# -- the risk timeline ----------------------------------------------------------------------------------


def timeline_svg(result: backtest.BacktestResult, nodes: Sequence[str], *, width: int = 1100) -> str:
    """One lane per node: its risk (the highest of its GPUs) over the range, the warn and act lines, the
    holds at act (shaded; grey where the proactive budget refused them), hardware failures (▼; black when
    missed) and known precursors (grey bar under the lane)."""
    replay = result.replay
    if not nodes:
        return "<p>No node to draw.</p>"
    risk = replay.node_risk()
    risk = risk[risk["node"].astype(str).isin(nodes)]
    by_node = {str(k): v for k, v in risk.groupby("node", observed=True)}
    left, right, top, lane_h, gap = 190, 20, 34, 44, 8
    plot_w = width - left - right
    height = top + (lane_h + gap) * len(nodes) + 30
    t0, t1 = replay.start, max(replay.end, replay.start + 1.0)

    def x(t: float) -> float:
        return left + plot_w * (min(max(t, t0), t1) - t0) / (t1 - t0)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="system-ui, sans-serif" font-size="11" '
        'class="timeline">'
    ]
    parts += _time_ticks(t0, t1, x=x, top=top - 6, bottom=height - 24, label_y=height - 10)
    failures = result.failures
    alarms = result.alarms
    for i, node in enumerate(nodes):
        y0 = top + i * (lane_h + gap)

        def y(v: float, y0: float = y0) -> float:
            return y0 + lane_h - lane_h * min(max(v, 0.0), 1.0)

        parts.append(f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{lane_h}" fill="#f9fafb"/>')
        for alarm in backtest.records(alarms[alarms["node"].astype(str) == node]):
            if alarm["outcome"] == "after-failure":
                continue
            first, acted_from = float(alarm["first"]), float(alarm["acted_from"])
            x_a, x_b = x(first), x(float(alarm["hold_end"]))
            x_act = x(acted_from) if alarm["acted"] else x_b
            title = (
                f"GPU {alarm['gpu']}: {_e(alarm['outcome'])} alarm {_when(first)} → "
                f"{_when(float(alarm['hold_end']))}"
                + ("" if not alarm["acted"] else f", at act from {_when(acted_from)}")
                + ("" if alarm["acted"] and acted_from <= first else " (held at warn by the budget)")
            )
            if x_act > x_a:  # at warn while the budget was full
                parts.append(
                    f'<rect x="{x_a:.1f}" y="{y0}" width="{max(x_act - x_a, 1.0):.1f}" height="{lane_h}" '
                    f'fill="{COLOURS["refused"]}"><title>{title}</title></rect>'
                )
            if alarm["acted"]:
                parts.append(
                    f'<rect x="{x_act:.1f}" y="{y0}" width="{max(x_b - x_act, 1.0):.1f}" height="{lane_h}" '
                    f'fill="{COLOURS["held"]}"><title>{title}</title></rect>'
                )
        for level, colour in ((replay.warn, COLOURS["warn"]), (replay.act, COLOURS["act"])):
            parts.append(
                f'<line x1="{left}" y1="{y(level):.1f}" x2="{left + plot_w}" y2="{y(level):.1f}" '
                f'stroke="{colour}" stroke-dasharray="4 3" stroke-width="1"/>'
            )
        series = by_node.get(node)
        if series is not None and len(series):
            t, v = _pooled(
                series["timestamp"].to_numpy(dtype=np.float64),
                series["score"].to_numpy(dtype=np.float64),
                MAX_POINTS,
            )
            points = " ".join(f"{x(float(a)):.1f},{y(float(b)):.1f}" for a, b in zip(t, v, strict=True))
            parts.append(
                f'<polyline points="{points}" fill="none" stroke="{COLOURS["risk"]}" stroke-width="1.3"/>'
            )
        for failure in backtest.records(failures[failures["node"].astype(str) == node]):
            ft = float(failure["failure_time"])
            precursor = float(failure["precursor_start"])
            if np.isfinite(precursor):
                parts.append(
                    f'<line x1="{x(precursor):.1f}" y1="{y0 + lane_h + 3}" x2="{x(ft):.1f}" y2="{y0 + lane_h + 3}" '
                    f'stroke="{COLOURS["precursor"]}" stroke-width="3"><title>precursor of {_e(failure["id"])} '
                    f"from {_when(precursor)}</title></line>"
                )
            colour = COLOURS["failure"] if failure["caught"] else COLOURS["missed"]
            xf = x(ft)
            what = f"lead {float(failure['lead_h']):.1f} h" if failure["caught"] else "missed"
            parts.append(
                f'<path d="M{xf - 5:.1f},{y0 + 1} L{xf + 5:.1f},{y0 + 1} L{xf:.1f},{y0 + 10} Z" fill="{colour}">'
                f"<title>{_e(failure['id'])} GPU {failure['gpu']} {_e(failure['mode'])} ({_e(failure['fault_class'])}) "
                f"at {_when(ft)}: {what}</title></path>"
            )
        parts.append(
            f'<text x="{left - 8}" y="{y0 + lane_h / 2 + 4:.1f}" text-anchor="end" fill="#111827">{_e(node)}</text>'
        )
    parts += _legend(
        [
            ("node risk", COLOURS["risk"]),
            (f"warn {replay.warn:.2f}", COLOURS["warn"]),
            (f"act {replay.act:.2f}", COLOURS["act"]),
            ("held at act", "#fca5a5"),
            ("at warn: budget full", "#9ca3af"),
            ("failure caught", COLOURS["failure"]),
            ("failure missed", COLOURS["missed"]),
        ],
        x=10,
        y=14,
    )
    parts.append("</svg>")
    return "".join(parts)


def _time_ticks(t0: float, t1: float, *, x: Any, top: float, bottom: float, label_y: float) -> list[str]:
    span_days = (t1 - t0) / backtest.DAY
    every = next((d for d in (0.25, 0.5, 1, 2, 7, 14, 30) if span_days / d <= 16), 60)
    tick = math.ceil(t0 / (every * backtest.DAY)) * every * backtest.DAY
    out = []
    while tick <= t1:
        fmt = "%m-%d %H:%M" if every < 1 else "%m-%d"
        label = datetime.fromtimestamp(tick, UTC).strftime(fmt)
        out.append(
            f'<line x1="{x(tick):.1f}" y1="{top}" x2="{x(tick):.1f}" y2="{bottom}" stroke="#e5e7eb"/>'
            f'<text x="{x(tick):.1f}" y="{label_y}" text-anchor="middle" fill="#6b7280">{label}</text>'
        )
        tick += every * backtest.DAY
    return out


def _legend(items: Sequence[tuple[str, str]], *, x: float, y: float) -> list[str]:
    parts = []
    for title, colour in items:
        parts.append(
            f'<rect x="{x:.0f}" y="{y - 5}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{x + 14:.0f}" y="{y + 4}" fill="#374151">{_e(title)}</text>'
        )
        x += 26 + 6.2 * len(title)
    return parts


# -- the lead-time histogram ----------------------------------------------------------------------------


def lead_histogram_svg(
    leads_h: Sequence[float], *, min_lead_h: float, width: int = 700, height: int = 240
) -> str:
    """Failures caught, by lead time (hours), with the median and the lead a planned restart needs."""
    if not leads_h:
        return "<p>No failure was caught: no lead times to show.</p>"
    values = np.asarray(leads_h, dtype=np.float64)
    top_h = float(values.max())
    width_h = next((w for w in (1, 2, 3, 6, 12, 24, 48) if top_h / w <= 24), 96)
    edges = np.arange(0.0, top_h + width_h + 1e-9, width_h)
    counts, _ = np.histogram(values, bins=edges)
    left, right, top, bottom = 44, 16, 34, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    most = max(math.ceil(int(counts.max()) * 1.1), 1)

    def x(h: float) -> float:
        return left + plot_w * h / float(edges[-1])

    def y(c: float) -> float:
        return top + plot_h - plot_h * c / most

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="system-ui, sans-serif" font-size="11" class="leads">'
    ]
    for c in range(0, most + 1, max(1, most // 5)):
        parts.append(
            f'<line x1="{left}" y1="{y(c):.1f}" x2="{width - right}" y2="{y(c):.1f}" stroke="#e5e7eb"/>'
            f'<text x="{left - 6}" y="{y(c) + 4:.1f}" text-anchor="end" fill="#6b7280">{c}</text>'
        )
    for lo, hi, count in zip(edges[:-1], edges[1:], counts, strict=True):
        if count:
            parts.append(
                f'<rect x="{x(lo) + 1:.1f}" y="{y(count):.1f}" width="{x(hi) - x(lo) - 2:.1f}" '
                f'height="{y(0) - y(count):.1f}" fill="{COLOURS["bar"]}"><title>{lo:g} to {hi:g} h: {count}</title></rect>'
            )
    label_every = max(1, len(edges) // 12)
    for i, edge in enumerate(edges):
        if i % label_every == 0:
            parts.append(
                f'<text x="{x(edge):.1f}" y="{height - bottom + 14}" text-anchor="middle" fill="#6b7280">{edge:g}</text>'
            )
    parts.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 6}" text-anchor="middle" fill="#374151">'
        "lead time (hours before the failure)</text>"
    )
    median = float(np.median(values))
    for value, colour, title, label_y in (
        (median, "#059669", f"median {median:.1f} h", top - 6),
        (min_lead_h, COLOURS["act"], f"min lead {min_lead_h:g} h", top - 20),
    ):
        parts.append(
            f'<line x1="{x(value):.1f}" y1="{label_y + 2}" x2="{x(value):.1f}" y2="{top + plot_h}" '
            f'stroke="{colour}" stroke-dasharray="4 3"/>'
            f'<text x="{x(value) + 4:.1f}" y="{label_y}" fill="{colour}">{_e(title)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


# -- the page -------------------------------------------------------------------------------------------

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
