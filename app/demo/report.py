"""A self-contained HTML report of a demo run: summary table, timeline chart (inline SVG), event log.

Rendered through `templates/demo_report.html.j2`; this module computes the charts' geometry and words
the findings. No JavaScript, no external fonts, styles or images: the file opens anywhere, offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from app import templates
from app.demo import prediction
from app.demo.prediction import Forecast
from app.demo.timeline import Event, Scene
from app.templates import svg

MILESTONES = (
    ("signal", "metric changed", "#6b7280"),
    ("alert", "alert (Prometheus)", "#d97706"),
    ("delivered", "delivered (Alertmanager)", "#db2777"),
    ("decision", "decision (Sickbay)", "#2563eb"),
    ("action", "action (Sickbay)", "#7c3aed"),
    ("effect", "effect in the cluster", "#059669"),
)
KIND_COLOURS = {
    "signal": "#6b7280",
    "precursor": "#9ca3af",
    "alert": "#d97706",
    "decision": "#2563eb",
    "action": "#7c3aed",
    "cluster": "#059669",
    "note": "#374151",
}
STATUS_COLOURS = {"done": "#059669", "blocked": "#b45309", "timed out": "#dc2626"}
STAGES = (
    ("alert", "Prometheus: scrape, rules", "#d97706"),
    ("delivered", "Alertmanager: group_wait", "#db2777"),
    ("decision", "Sickbay: receive, classify", "#2563eb"),
    ("action", "Sickbay: read, plan, act", "#7c3aed"),
    ("effect", "visible in the API", "#059669"),
)
SUMMARY_HEADER = (
    "#",
    "scene",
    "node",
    "class",
    "signal→alert",
    "→delivered",
    "→decision",
    "→action",
    "→effect",
    "outcome",
)
# What the features that drive the demo's thermal risk (and their neighbours) measure
# (`app.predict.features`), in a reader's words; a feature without an entry is shown by its name.
FEATURE_TEXT = {
    "gpu_temp_vs_baseline_c": "GPU temperature against the GPU's own 7-day baseline, load discounted (°C)",
    "mem_temp_vs_baseline_c": "memory temperature against the GPU's own 7-day baseline, load discounted (°C)",
    "mem_gpu_temp_gap_vs_baseline_c": "memory-minus-core temperature gap against its own baseline (°C)",
    "mem_temp_rise_6h_c": "memory temperature rise over the last 6 h (°C)",
    "gpu_temp_vs_peers_c": "GPU temperature against the other GPUs of the node (°C)",
    "mem_temp_vs_peers_c": "memory temperature against the other GPUs of the node (°C)",
    "thermal_throttle_share_1h": "share of the last hour with a thermal throttle reason",
    "thermal_throttle_share_6h": "share of the last 6 h with a thermal throttle reason",
    "hw_slowdown_share_1h": "share of the last hour with HW slowdown",
    "util_mean_1h": "mean utilisation over the last hour",
    "sbe_rate_1h": "single-bit ECC errors per hour, over the last hour",
    "sbe_surprise_6h_7d": "how surprising the last 6 h's single-bit count is at the GPU's own 7-day rate (s.d.)",
    "sbe_accel_1h_6h": "acceleration: the 1 h single-bit rate against the 6 h rate (log ratio)",
    "dbe_increase_24h": "double-bit ECC errors in 24 h",
    "correctable_remapped_rows_growth_24h": "rows remapped in 24 h",
    "row_remap_pending": "a row remap waiting for the next GPU reset",
    "hours_since_reset": "hours since the counters last reset (here: since the simulated past began)",
}
_LEFT, _RIGHT, _TOP = 330, 60, 34


@dataclass(frozen=True, slots=True)
class RunInfo:
    started: datetime
    nodes: int
    gpus_per_node: int
    ready_s: float
    scenario_s: float
    total_s: float
    kubeconfig: Path
    workdir: Path
    notes: tuple[str, ...] = ()


def ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:.0f} ms"


def _lane_label(scene: Scene) -> str:
    return f"{scene.label} · {scene.node}"


def _ticks(end: float, *, steps: Sequence[float], most: int, x: Any, height: int) -> list[svg.Shape]:
    """Vertical grid lines with their seconds below, at the first step that fits `most` of them."""
    step = next(s for s in steps if end / s <= most)
    out, tick = [], type(step)(0)
    while tick <= end:
        out.append(svg.line(x(tick), _TOP - 6, x(tick), height - 28, stroke="#e5e7eb"))
        out.append(svg.text(x(tick), height - 12, f"{tick:g}s", text_anchor="middle", fill="#6b7280"))
        tick += step
    return out


def timeline_figure(scenes: Sequence[Scene], *, width: int = 1100) -> svg.Figure | None:
    """One lane per scene over the whole run: a mark at each milestone, a bar from the signal to the
    effect (dashed before it: a precursor), and the latency. None when no scene ran."""
    lanes = [s for s in scenes if s.started is not None]
    if not lanes:
        return None
    times = [
        t
        for s in lanes
        for t in (s.started, s.signal, s.alert, s.delivered, s.decision, s.action, s.effect)
        if t is not None
    ]
    end = max(times) * 1.04 + 1.0
    lane_h = 26
    height = _TOP + lane_h * len(lanes) + 34

    def x(t: float) -> float:
        return _LEFT + (width - _LEFT - _RIGHT) * max(0.0, t) / end

    shapes = [
        svg.rect(0, _TOP + i * lane_h, width, lane_h, fill="#f9fafb" if i % 2 else "#ffffff")
        for i in range(len(lanes))
    ]
    shapes += _ticks(end, steps=(1, 2, 5, 10, 15, 20, 30, 60, 120), most=14, x=x, height=height)
    for i, scene in enumerate(lanes):
        y = _TOP + i * lane_h + lane_h / 2
        label = _lane_label(scene)
        shapes.append(
            svg.text(_LEFT - 10, y + 4, label, title=scene.title, text_anchor="end", fill="#111827")
        )
        start = scene.signal if scene.signal is not None else scene.started
        if start is not None and scene.started is not None and start > scene.started:
            precursor = (x(scene.started), y, x(start), y)  # from the injection to the metric change
            shapes.append(svg.line(*precursor, stroke="#9ca3af", stroke_width=2, stroke_dasharray="4 3"))
        if start is not None and scene.effect is not None:
            bar = (x(start), y, x(scene.effect), y)
            shapes.append(svg.line(*bar, stroke="#a7f3d0", stroke_width=8, stroke_linecap="round"))
        for key, title, colour in MILESTONES:
            t = getattr(scene, key)
            if t is not None:
                mark = f"{title}: +{t:.2f}s"
                shapes.append(svg.circle(x(t), y, 4, title=mark, fill=colour, stroke="white", stroke_width=1))
        last = max((t for t in (scene.effect, scene.action, scene.decision) if t is not None), default=None)
        if last is not None and start is not None:
            text = f"{scene.effect - start:.2f}s" if scene.effect is not None else scene.status
            colour = "#065f46" if scene.effect is not None else STATUS_COLOURS.get(scene.status, "#374151")
            shapes.append(svg.text(x(last) + 8, y + 4, text, fill=colour))
    return svg.Figure(width, height, shapes, legend=[(title, colour) for _, title, colour in MILESTONES])


def breakdown_figure(scenes: Sequence[Scene], *, width: int = 1100) -> svg.Figure | None:
    """Where the time goes, per scene: stacked stages from the metric change to the effect. None when no
    scene completed."""
    lanes = [
        s
        for s in scenes
        if s.signal is not None and s.effect is not None and s.effect_kind not in ("released", "at-risk")
    ]
    if not lanes:
        return None
    end = max(float(s.since_signal(s.effect) or 0.0) for s in lanes) * 1.08 + 0.2
    lane_h = 24
    height = _TOP + lane_h * len(lanes) + 34

    def x(t: float) -> float:
        return _LEFT + (width - _LEFT - _RIGHT) * max(0.0, t) / end

    shapes = _ticks(end, steps=(0.25, 0.5, 1.0, 2.0, 5.0, 10.0), most=12, x=x, height=height)
    for i, scene in enumerate(lanes):
        y = _TOP + i * lane_h + 4
        shapes.append(svg.text(_LEFT - 10, y + 12, _lane_label(scene), text_anchor="end", fill="#111827"))
        previous = 0.0
        for key, title, colour in STAGES:
            value = scene.since_signal(getattr(scene, key))
            if value is None:
                continue
            value = max(value, previous)
            if value > previous:
                took = f"{title}: {(value - previous) * 1000:.0f} ms"
                shapes.append(
                    svg.rect(x(previous), y, x(value) - x(previous), lane_h - 8, title=took, fill=colour)
                )
            previous = value
        shapes.append(svg.text(x(previous) + 6, y + 12, f"{previous * 1000:.0f} ms", fill="#111827"))
    return svg.Figure(width, height, shapes, legend=[(title, colour) for _, title, colour in STAGES])


def summary_rows(scenes: Sequence[Scene]) -> list[list[str]]:
    return [
        [
            str(i),
            s.title,
            s.node + (f" GPU {s.gpu}" if s.gpu is not None else ""),
            s.fault_class or "—",
            ms(s.since_signal(s.alert)),
            ms(s.since_signal(s.delivered)),
            ms(s.since_signal(s.decision)),
            ms(s.since_signal(s.action)),
            ms(s.since_signal(s.effect)),
            s.status + (f" ({s.note})" if s.note else ""),
        ]
        for i, s in enumerate(scenes, 1)
    ]


def _hours(seconds: float | None) -> str:
    return "—" if seconds is None else prediction.hours(seconds)


def _at(t: float | None) -> str:
    return "—" if t is None else f"+{t:.2f}s"


def prediction_view(f: Forecast) -> dict[str, Any]:
    """What `demo_prediction.html.j2` tells: the score, what drove it, the ladder's actions, the failure."""
    risk, model = f.precursor, f.model
    if f.score is None:
        return {"score": None, "node": risk.node, "gpu": risk.gpu}
    others = (
        f"{f.others_max:.3f} (the highest of the other {f.gpus_scored - 1} GPUs)"
        if f.others_max is not None
        else "—"
    )
    model_text = (
        f"{model.version}: act ≥ {model.act:.3f}, warn ≥ {model.warn:.3f}, held for "
        f"{_hours(model.sustain_s)}, horizon {_hours(model.horizon_s)}; holdout precision "
        f"{model.precision or 0:.2f}, recall {model.recall or 0:.2f}, median lead "
        f"{model.lead_median_h or 0:.1f} h"
        if model
        else "—"
    )
    facts = [
        (
            "simulated past",
            f"{_hours(f.history_s)} of the same fleet, backfilled into Prometheus "
            f"({f.history_samples:,} samples, one per GPU per metric every "
            f"{model.step_s if model else prediction.STEP_S:.0f} s); then live scrapes every second",
        ),
        (
            "the GPU",
            f"{risk.node} GPU {risk.gpu} ({risk.uuid}); thermal runaway: memory temperature "
            f"{risk.mem_rise_at(risk.onset + (f.running_at_score_s or 0.0)):.1f} °C over its baseline when "
            f"scored, rising toward +{risk.mem_rise_c:g} °C at the failure; SW-thermal slowdown coming and "
            f"going from {risk.throttle_from:.0%} of the way: no rule quarantines it (a thermal-throttling "
            "alert, if slowdown holds 10 minutes, is a transient soft signal)",
        ),
        ("model", model_text),
        (
            "promoted → scored",
            f"model promoted at {_at(f.promoted_at)}; the next scoring cycle began at {_at(f.scored_at)}, "
            "read the whole look-back from Prometheus and scored every GPU; Sickbay took the risk up at "
            f"{_at(f.decided_at)}",
        ),
        ("rest of the fleet", others),
        ("taint", f"{_at(f.taint_at)}: {f.taint or '—'}"),
        (
            "drained",
            f"{f.evictions} evictions; GPU pods still running on the node before its failure: "
            + (", ".join(f.pods_kept) or "none"),
        ),
        (
            "the failure",
            f"brought forward {_hours(f.brought_forward_s)}: XID 48 at {_at(f.failed_at)}, "
            f"quarantined (reset-gpu) at {_at(f.quarantined_at)}",
        ),
        (
            "closed to new work",
            f"for {f.closed_s:.1f} s of this run when the GPU failed; in the fleet's own time, from "
            f"{_hours(f.due_at_score_s)} before the failure (which the demo brought forward)"
            if f.closed_s is not None
            else "—",
        ),
    ]
    return {
        "score": f"{f.score:.3f}",
        "node": risk.node,
        "gpu": risk.gpu,
        "scored_at": _at(f.scored_at),
        "level": f.level or "act",
        "threshold": f"{model.act:.3f}" if model else "?",
        "due": _hours(f.due_at_score_s),
        "running": _hours(f.running_at_score_s),
        "facts": facts,
        "reason": f.reason,
        "drivers": [
            (name, FEATURE_TEXT.get(name.split(":")[-1], ""), f"+{weight:.2f}") for name, weight in f.drivers
        ],
        "checkpoints_at": _at(f.checkpoints_at),
        "events": f.events,
    }


def prediction_section(f: Forecast | None) -> str:
    """The prediction scenes as HTML, as the report shows them; empty without a forecast."""
    return "" if f is None else templates.render("demo_prediction.html.j2", p=prediction_view(f))


def render(
    info: RunInfo, scenes: Sequence[Scene], events: Sequence[Event], *, forecast: Forecast | None = None
) -> str:
    return templates.render(
        "demo_report.html.j2",
        info={
            "started": info.started.isoformat(timespec="seconds"),
            "nodes": info.nodes,
            "gpus_per_node": info.gpus_per_node,
            "ready": f"{info.ready_s:.1f}",
            "scenario": f"{info.scenario_s:.1f}",
            "total": f"{info.total_s:.1f}",
            "notes": info.notes,
            "logs": str(info.workdir / "logs"),
        },
        header=SUMMARY_HEADER,
        summary=summary_rows(scenes),
        prediction=None if forecast is None else prediction_view(forecast),
        timeline=timeline_figure(scenes),
        breakdown=breakdown_figure(scenes),
        scenes=scenes,
        log=[
            {
                "t": f"{e.t:.2f}",
                "node": e.node,
                "kind": e.kind,
                "colour": KIND_COLOURS.get(e.kind, "#111827"),
                "text": e.text,
            }
            for e in sorted(events, key=lambda e: e.t)
        ],
    )


def write_report(
    path: Path,
    info: RunInfo,
    scenes: Sequence[Scene],
    events: Sequence[Event],
    *,
    forecast: Forecast | None = None,
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(info, scenes, events, forecast=forecast), encoding="utf-8")
    return path
