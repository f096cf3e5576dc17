"""The backtest report's inline SVG plots: the risk timeline of the nodes worth looking at, lead times.

Figures as `app.templates.svg` shapes (geometry here, markup and escaping in `svg.html.j2`); no
JavaScript, fonts or images from anywhere else; `report` puts them into the page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import backtest
from app.templates import svg

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


def timeline(
    result: backtest.BacktestResult, nodes: Sequence[str], *, width: int = 1100
) -> svg.Figure | None:
    """One lane per node: its risk (the highest of its GPUs) over the range, the warn and act lines, the
    holds at act (shaded; grey where the proactive budget refused them), hardware failures (▼; black when
    missed) and known precursors (grey bar under the lane). None when there is no node to draw."""
    replay = result.replay
    if not nodes:
        return None
    risk = replay.node_risk()
    risk = risk[risk["node"].astype(str).isin(nodes)]
    by_node = {str(k): v for k, v in risk.groupby("node", observed=True)}
    left, right, top, lane_h, gap = 190, 20, 34, 44, 8
    plot_w = width - left - right
    height = top + (lane_h + gap) * len(nodes) + 30
    t0, t1 = replay.start, max(replay.end, replay.start + 1.0)

    def x(t: float) -> float:
        return left + plot_w * (min(max(t, t0), t1) - t0) / (t1 - t0)

    shapes = _time_ticks(t0, t1, x=x, top=top - 6, bottom=height - 24, label_y=height - 10)
    for i, node in enumerate(nodes):
        y0 = top + i * (lane_h + gap)

        def y(v: float, y0: float = y0) -> float:
            return y0 + lane_h - lane_h * min(max(v, 0.0), 1.0)

        shapes.append(svg.rect(left, y0, plot_w, lane_h, fill="#f9fafb"))
        shapes += _holds(result.alarms[result.alarms["node"].astype(str) == node], x=x, y0=y0, lane_h=lane_h)
        for level, colour in ((replay.warn, COLOURS["warn"]), (replay.act, COLOURS["act"])):
            at = (left, y(level), left + plot_w, y(level))
            shapes.append(svg.line(*at, stroke=colour, stroke_dasharray="4 3", stroke_width=1))
        series = by_node.get(node)
        if series is not None and len(series):
            t, v = _pooled(
                series["timestamp"].to_numpy(dtype=np.float64),
                series["score"].to_numpy(dtype=np.float64),
                MAX_POINTS,
            )
            points = " ".join(f"{x(float(a)):.1f},{y(float(b)):.1f}" for a, b in zip(t, v, strict=True))
            shapes.append(
                svg.shape("polyline", points=points, fill="none", stroke=COLOURS["risk"], stroke_width=1.3)
            )
        failures = result.failures
        shapes += _failures(failures[failures["node"].astype(str) == node], x=x, y0=y0, lane_h=lane_h)
        shapes.append(svg.text(left - 8, y0 + lane_h / 2 + 4, node, text_anchor="end", fill="#111827"))
    legend = [
        ("node risk", COLOURS["risk"]),
        (f"warn {replay.warn:.2f}", COLOURS["warn"]),
        (f"act {replay.act:.2f}", COLOURS["act"]),
        ("held at act", "#fca5a5"),
        ("at warn: budget full", "#9ca3af"),
        ("failure caught", COLOURS["failure"]),
        ("failure missed", COLOURS["missed"]),
    ]
    return svg.Figure(
        width, height, shapes, font_size=11, css_class="timeline", legend=legend, legend_mark="square"
    )


def _holds(alarms: pd.DataFrame, *, x: Any, y0: float, lane_h: int) -> list[svg.Shape]:
    """Each alarm's hold: grey while the budget kept it at warn, red while at act."""
    out = []
    for alarm in backtest.records(alarms):
        if alarm["outcome"] == "after-failure":
            continue
        first, acted_from, hold_end = (
            float(alarm["first"]),
            float(alarm["acted_from"]),
            float(alarm["hold_end"]),
        )
        x_a, x_b = x(first), x(hold_end)
        x_act = x(acted_from) if alarm["acted"] else x_b
        title = (
            f"GPU {alarm['gpu']}: {alarm['outcome']} alarm {_when(first)} → {_when(hold_end)}"
            + ("" if not alarm["acted"] else f", at act from {_when(acted_from)}")
            + ("" if alarm["acted"] and acted_from <= first else " (held at warn by the budget)")
        )
        if x_act > x_a:  # at warn while the budget was full
            out.append(svg.rect(x_a, y0, max(x_act - x_a, 1.0), lane_h, title=title, fill=COLOURS["refused"]))
        if alarm["acted"]:
            out.append(svg.rect(x_act, y0, max(x_b - x_act, 1.0), lane_h, title=title, fill=COLOURS["held"]))
    return out


def _failures(failures: pd.DataFrame, *, x: Any, y0: float, lane_h: int) -> list[svg.Shape]:
    """Each hardware failure: its precursor as a bar under the lane, and a ▼ at the failure."""
    out = []
    for failure in backtest.records(failures):
        ft = float(failure["failure_time"])
        precursor = float(failure["precursor_start"])
        if np.isfinite(precursor):
            title = f"precursor of {failure['id']} from {_when(precursor)}"
            bar = (x(precursor), y0 + lane_h + 3, x(ft), y0 + lane_h + 3)
            out.append(svg.line(*bar, title=title, stroke=COLOURS["precursor"], stroke_width=3))
        colour = COLOURS["failure"] if failure["caught"] else COLOURS["missed"]
        xf = x(ft)
        what = f"lead {float(failure['lead_h']):.1f} h" if failure["caught"] else "missed"
        title = (
            f"{failure['id']} GPU {failure['gpu']} {failure['mode']} ({failure['fault_class']}) "
            f"at {_when(ft)}: {what}"
        )
        triangle = f"M{xf - 5:.1f},{y0 + 1} L{xf + 5:.1f},{y0 + 1} L{xf:.1f},{y0 + 10} Z"
        out.append(svg.shape("path", title=title, d=triangle, fill=colour))
    return out


def _time_ticks(
    t0: float, t1: float, *, x: Any, top: float, bottom: float, label_y: float
) -> list[svg.Shape]:
    span_days = (t1 - t0) / backtest.DAY
    every = next((d for d in (0.25, 0.5, 1, 2, 7, 14, 30) if span_days / d <= 16), 60)
    tick = math.ceil(t0 / (every * backtest.DAY)) * every * backtest.DAY
    out = []
    while tick <= t1:
        label = datetime.fromtimestamp(tick, UTC).strftime("%m-%d %H:%M" if every < 1 else "%m-%d")
        out.append(svg.line(x(tick), top, x(tick), bottom, stroke="#e5e7eb"))
        out.append(svg.text(x(tick), label_y, label, text_anchor="middle", fill="#6b7280"))
        tick += every * backtest.DAY
    return out


def lead_histogram(
    leads_h: Sequence[float], *, min_lead_h: float, width: int = 700, height: int = 240
) -> svg.Figure | None:
    """Failures caught, by lead time (hours), with the median and the lead a planned restart needs. None
    when no failure was caught."""
    if not leads_h:
        return None
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

    shapes = []
    for c in range(0, most + 1, max(1, most // 5)):
        shapes.append(svg.line(left, y(c), width - right, y(c), stroke="#e5e7eb"))
        shapes.append(svg.text(left - 6, y(c) + 4, str(c), text_anchor="end", fill="#6b7280"))
    for lo, hi, count in zip(edges[:-1], edges[1:], counts, strict=True):
        if count:
            title = f"{lo:g} to {hi:g} h: {count}"
            box = (x(lo) + 1, y(count), x(hi) - x(lo) - 2, y(0) - y(count))
            shapes.append(svg.rect(*box, title=title, fill=COLOURS["bar"]))
    label_every = max(1, len(edges) // 12)
    for i, edge in enumerate(edges):
        if i % label_every == 0:
            shapes.append(
                svg.text(x(edge), height - bottom + 14, f"{edge:g}", text_anchor="middle", fill="#6b7280")
            )
    what = "lead time (hours before the failure)"
    shapes.append(svg.text(round(left + plot_w / 2), height - 6, what, text_anchor="middle", fill="#374151"))
    median = float(np.median(values))
    for value, colour, title, label_y in (
        (median, "#059669", f"median {median:.1f} h", top - 6),
        (min_lead_h, COLOURS["act"], f"min lead {min_lead_h:g} h", top - 20),
    ):
        shapes.append(
            svg.line(x(value), label_y + 2, x(value), top + plot_h, stroke=colour, stroke_dasharray="4 3")
        )
        shapes.append(svg.text(x(value) + 4, label_y, title, fill=colour))
    return svg.Figure(width, height, shapes, font_size=11, css_class="leads")
