"""The backtest report's inline SVG plots: the risk timeline of the nodes worth looking at, lead times.

No JavaScript, fonts or images from anywhere else; `report` puts them into the page.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import UTC, datetime
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


def _e(text: object) -> str:
    return html.escape(str(text))


def _when(t: float) -> str:
    if not np.isfinite(t):
        return "—"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


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
