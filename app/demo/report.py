"""A self-contained HTML report of a demo run: summary table, timeline chart (inline SVG), event log.

No JavaScript, no external fonts, styles or images: the file opens anywhere, offline.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from app.demo import prediction
from app.demo.prediction import Forecast
from app.demo.timeline import Event, Scene

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


def _e(text: object) -> str:
    return html.escape(str(text))


def _legend(items: Sequence[tuple[str, str]], *, x: float, y: float) -> list[str]:
    parts = []
    for title, colour in items:
        parts.append(
            f'<circle cx="{x:.0f}" cy="{y}" r="4.5" fill="{colour}"/>'
            f'<text x="{x + 8:.0f}" y="{y + 4}" fill="#374151">{_e(title)}</text>'
        )
        x += 22 + 6.6 * len(title)
    return parts


def _lane_label(scene: Scene) -> str:
    return f"{scene.label} · {scene.node}"


def timeline_svg(scenes: Sequence[Scene], *, width: int = 1100) -> str:
    """One lane per scene over the whole run: a mark at each milestone, a bar from the signal to the
    effect (dashed before it: a precursor), and the latency."""
    lanes = [s for s in scenes if s.started is not None]
    if not lanes:
        return "<p>No scene ran.</p>"
    times = [
        t
        for s in lanes
        for t in (s.started, s.signal, s.alert, s.delivered, s.decision, s.action, s.effect)
        if t is not None
    ]
    end = max(times) * 1.04 + 1.0
    left, right, top, lane_h = 330, 60, 34, 26
    plot_w = width - left - right
    height = top + lane_h * len(lanes) + 34

    def x(t: float) -> float:
        return left + plot_w * max(0.0, t) / end

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="system-ui, sans-serif" font-size="12">'
    ]
    for i in range(len(lanes)):
        y = top + i * lane_h + lane_h / 2
        fill = "#f9fafb" if i % 2 else "#ffffff"
        parts.append(
            f'<rect x="0" y="{y - lane_h / 2:.1f}" width="{width}" height="{lane_h}" fill="{fill}"/>'
        )
    step = next(s for s in (1, 2, 5, 10, 15, 20, 30, 60, 120) if end / s <= 14)
    tick = 0
    while tick <= end:
        parts.append(
            f'<line x1="{x(tick):.1f}" y1="{top - 6}" x2="{x(tick):.1f}" y2="{height - 28}" '
            f'stroke="#e5e7eb"/><text x="{x(tick):.1f}" y="{height - 12}" text-anchor="middle" '
            f'fill="#6b7280">{tick}s</text>'
        )
        tick += step
    for i, scene in enumerate(lanes):
        y = top + i * lane_h + lane_h / 2
        parts.append(
            f'<text x="{left - 10}" y="{y + 4:.1f}" text-anchor="end" fill="#111827">'
            f"{_e(_lane_label(scene))}<title>{_e(scene.title)}</title></text>"
        )
        start = scene.signal if scene.signal is not None else scene.started
        if start is not None and scene.started is not None and start > scene.started:
            parts.append(  # a precursor: from the injection to the metric change
                f'<line x1="{x(scene.started):.1f}" y1="{y:.1f}" x2="{x(start):.1f}" y2="{y:.1f}" '
                'stroke="#9ca3af" stroke-width="2" stroke-dasharray="4 3"/>'
            )
        if start is not None and scene.effect is not None:
            parts.append(
                f'<line x1="{x(start):.1f}" y1="{y:.1f}" x2="{x(scene.effect):.1f}" y2="{y:.1f}" '
                'stroke="#a7f3d0" stroke-width="8" stroke-linecap="round"/>'
            )
        for key, title, colour in MILESTONES:
            t = getattr(scene, key)
            if t is None:
                continue
            parts.append(
                f'<circle cx="{x(t):.1f}" cy="{y:.1f}" r="4" fill="{colour}" stroke="white" stroke-width="1">'
                f"<title>{_e(title)}: +{t:.2f}s</title></circle>"
            )
        last = max((t for t in (scene.effect, scene.action, scene.decision) if t is not None), default=None)
        if last is not None and start is not None:
            text = f"{scene.effect - start:.2f}s" if scene.effect is not None else scene.status
            colour = "#065f46" if scene.effect is not None else STATUS_COLOURS.get(scene.status, "#374151")
            parts.append(f'<text x="{x(last) + 8:.1f}" y="{y + 4:.1f}" fill="{colour}">{_e(text)}</text>')
    parts += _legend([(title, colour) for _, title, colour in MILESTONES], x=10, y=14)
    parts.append("</svg>")
    return "".join(parts)


STAGES = (
    ("alert", "Prometheus: scrape, rules", "#d97706"),
    ("delivered", "Alertmanager: group_wait", "#db2777"),
    ("decision", "Sickbay: receive, classify", "#2563eb"),
    ("action", "Sickbay: read, plan, act", "#7c3aed"),
    ("effect", "visible in the API", "#059669"),
)


def breakdown_svg(scenes: Sequence[Scene], *, width: int = 1100) -> str:
    """Where the time goes, per scene: stacked stages from the metric change to the effect."""
    lanes = [
        s
        for s in scenes
        if s.signal is not None and s.effect is not None and s.effect_kind not in ("released", "at-risk")
    ]
    if not lanes:
        return "<p>No scene completed.</p>"
    end = max(float(s.since_signal(s.effect) or 0.0) for s in lanes) * 1.08 + 0.2
    left, right, top, lane_h = 330, 60, 34, 24
    plot_w = width - left - right
    height = top + lane_h * len(lanes) + 34

    def x(t: float) -> float:
        return left + plot_w * max(0.0, t) / end

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="system-ui, sans-serif" font-size="12">'
    ]
    step = next(s for s in (0.25, 0.5, 1.0, 2.0, 5.0, 10.0) if end / s <= 12)
    tick = 0.0
    while tick <= end:
        parts.append(
            f'<line x1="{x(tick):.1f}" y1="{top - 6}" x2="{x(tick):.1f}" y2="{height - 28}" '
            f'stroke="#e5e7eb"/><text x="{x(tick):.1f}" y="{height - 12}" text-anchor="middle" '
            f'fill="#6b7280">{tick:g}s</text>'
        )
        tick += step
    for i, scene in enumerate(lanes):
        y = top + i * lane_h + 4
        parts.append(
            f'<text x="{left - 10}" y="{y + 12:.1f}" text-anchor="end" fill="#111827">{_e(_lane_label(scene))}</text>'
        )
        previous = 0.0
        for key, title, colour in STAGES:
            value = scene.since_signal(getattr(scene, key))
            if value is None:
                continue
            value = max(value, previous)
            if value > previous:
                parts.append(
                    f'<rect x="{x(previous):.1f}" y="{y:.1f}" width="{x(value) - x(previous):.1f}" '
                    f'height="{lane_h - 8}" fill="{colour}"><title>{_e(title)}: '
                    f"{(value - previous) * 1000:.0f} ms</title></rect>"
                )
            previous = value
        parts.append(
            f'<text x="{x(previous) + 6:.1f}" y="{y + 12:.1f}" fill="#111827">{previous * 1000:.0f} ms</text>'
        )
    parts += _legend([(title, colour) for _, title, colour in STAGES], x=10, y=14)
    parts.append("</svg>")
    return "".join(parts)


def summary_rows(scenes: Sequence[Scene]) -> list[list[str]]:
    rows = []
    for i, s in enumerate(scenes, 1):
        rows.append(
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
        )
    return rows


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

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #111827; max-width: 1200px; }
h1 { font-size: 1.5rem; margin-bottom: 0.2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; width: 100%; font-size: 0.85rem; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e5e7eb; vertical-align: top; }
th { background: #f3f4f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.muted { color: #6b7280; } code { background: #f3f4f6; padding: 1px 4px; border-radius: 3px; }
.kind { font-weight: 600; } .scene-detail td { font-size: 0.8rem; }
"""


# What the features that usually drive an HBM risk measure (`app.predict.features`), in a reader's words.
FEATURE_TEXT = {
    "sbe_rate_1h": "single-bit ECC errors per hour, over the last hour",
    "sbe_rate_6h": "single-bit ECC errors per hour, over 6 h",
    "sbe_rate_24h": "single-bit ECC errors per hour, over 24 h",
    "sbe_accel_1h_6h": "acceleration: the 1 h single-bit rate against the 6 h rate (log ratio)",
    "sbe_accel_6h_24h": "acceleration: the 6 h single-bit rate against the 24 h rate (log ratio)",
    "dbe_increase_24h": "double-bit ECC errors in 24 h",
    "correctable_remapped_rows": "rows remapped after correctable errors",
    "correctable_remapped_rows_growth_24h": "rows remapped in 24 h",
    "row_remap_pending": "a row remap waiting for the next GPU reset",
    "mem_temp_vs_baseline_c": "memory temperature against the GPU's own baseline",
    "gpu_temp_vs_peers_c": "GPU temperature against the other GPUs of the node",
    "util_mean_1h": "mean utilisation over the last hour",
    "hours_since_reset": "hours since the counters last reset (here: since the simulated past began)",
}


def _hours(seconds: float | None) -> str:
    return "—" if seconds is None else prediction.hours(seconds)


def _at(t: float | None) -> str:
    return "—" if t is None else f"+{t:.2f}s"


def prediction_section(f: Forecast | None) -> str:
    """The prediction scenes told in full: the score, what drove it, the ladder's actions, the failure."""
    if f is None:
        return ""
    risk, model = f.precursor, f.model
    if f.score is None:
        return (
            "<h2>Prediction</h2><p>The model did not flag the degrading GPU "
            f"({_e(risk.node)} GPU {risk.gpu}) within the scene's time: see the logs.</p>"
        )
    threshold = f"{model.act:.3f}" if model else "?"
    headline = (
        f"At {_at(f.scored_at)} Sickbay's risk model scored GPU {risk.gpu} of <b>{_e(risk.node)}</b> at "
        f"<b>{f.score:.3f}</b> ({_e(f.level or 'act')}; the act threshold is {threshold}), "
        f"<b>{_hours(f.due_at_score_s)} before</b> the double-bit error the simulation had scheduled for it, "
        f"after {_hours(f.running_at_score_s)} of accelerating single-bit ECC errors on which no rule fires. "
        "The proactive ladder took the node out of the pool for new work and asked its running workloads "
        "to checkpoint; it drained nothing."
    )
    others = (
        f"{f.others_max:.3f} (the highest of the other {f.gpus_scored - 1} GPUs)"
        if f.others_max is not None
        else "—"
    )
    drivers = "".join(
        f"<tr><td><code>{_e(name)}</code></td><td>{_e(FEATURE_TEXT.get(name.split(':')[-1], ''))}</td>"
        f'<td class="num">+{weight:.2f}</td></tr>'
        for name, weight in f.drivers
    )
    events = "".join(
        f"<tr><td>{_e(kind)}</td><td>{_e(name)}</td><td>{_e(kind_)}</td></tr>"
        for kind, name, kind_ in f.events
    )
    facts = [
        (
            "simulated past",
            f"{_hours(f.history_s)} of the same fleet, backfilled into Prometheus "
            f"({f.history_samples:,} samples, one per GPU per metric every "
            f"{model.step_s if model else prediction.STEP_S:.0f} s); "
            "then live scrapes every second",
        ),
        (
            "the GPU",
            f"{risk.node} GPU {risk.gpu} ({risk.uuid}); HBM precursor: single-bit errors from "
            f"{risk.start_per_h:g}/h toward {risk.end_per_h:.0f}/h at the failure; no row remapped, "
            "so no alert",
        ),
        (
            "model",
            (
                f"{model.version}: act ≥ {model.act:.3f}, warn ≥ {model.warn:.3f}, held for "
                f"{_hours(model.sustain_s)}, horizon {_hours(model.horizon_s)}; holdout precision "
                f"{model.precision or 0:.2f}, recall {model.recall or 0:.2f}, median lead "
                f"{model.lead_median_h or 0:.1f} h"
            )
            if model
            else "—",
        ),
        (
            "promoted → scored",
            f"model promoted at {_at(f.promoted_at)}; the next scoring cycle began at "
            f"{_at(f.scored_at)}, read "
            f"the whole look-back from Prometheus and scored every GPU; Sickbay took the risk up at "
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
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts)
    return f"""<h2>Prediction: a failure seen hours ahead</h2>
<p>{headline}</p>
<table class="scene-detail">{rows}</table>
<h3>What drove the score</h3>
<p class="muted">Lift: how much the model's log-odds fall when that one feature is set to its training
median (median occlusion, exact for the model). Sickbay's reason: {_e(f.reason)}</p>
<table><tr><th>feature</th><th>what it measures</th><th>lift (log-odds)</th></tr>{drivers}</table>
<h3>Checkpoint requests (Events <code>SickbayCheckpointRequested</code>)</h3>
<p class="muted">Written at {_at(f.checkpoints_at)}, right after the taint, on each running GPU pod of the
node and on each pod's owner (as the cluster lists them); each carries the reason above.</p>
<table><tr><th>on</th><th>object</th><th>type</th></tr>{events}</table>
"""


def render(
    info: RunInfo, scenes: Sequence[Scene], events: Sequence[Event], *, forecast: Forecast | None = None
) -> str:
    summary = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{_e(c)}</td>' if 4 <= i <= 8 else f"<td>{_e(c)}</td>" for i, c in enumerate(row)
        )
        + "</tr>"
        for row in summary_rows(scenes)
    )
    details = "".join(
        f"<tr><td>{_e(s.title)}</td><td>{_e(s.expect)}</td><td>{_e(s.signal_text)}</td>"
        f"<td>{_e(s.alert_text)}</td><td>{_e(s.decision_text)}</td><td>{_e(s.action_text)}</td>"
        f"<td>{_e(s.effect_text)}</td></tr>"
        for s in scenes
    )
    log = "".join(
        f'<tr><td class="num">+{e.t:.2f}s</td><td>{_e(e.node)}</td>'
        f'<td class="kind" style="color:{KIND_COLOURS.get(e.kind, "#111827")}">{_e(e.kind)}</td>'
        f"<td>{_e(e.text)}</td></tr>"
        for e in sorted(events, key=lambda e: e.t)
    )
    notes = "".join(f"<li>{_e(n)}</li>" for n in info.notes)
    head = "".join(f"<th>{_e(h)}</th>" for h in SUMMARY_HEADER)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sickbay demo report</title><style>{_CSS}</style></head>
<body>
<h1>Sickbay demo</h1>
<p class="muted">{_e(info.started.isoformat(timespec="seconds"))} · {info.nodes} nodes x {info.gpus_per_node} GPUs ·
stack ready in {info.ready_s:.1f}s · scenario {info.scenario_s:.1f}s · total {info.total_s:.1f}s</p>
<p>Simulated dcgm-exporters → Prometheus (scrape and rule evaluation every 1 s) → Alertmanager
(<code>group_wait: 0s</code> for hardware classes) → <code>sickbay serve</code> → simulated Kubernetes API.
Latencies are measured from the moment the simulator changed the metric.</p>
<ul>{notes}</ul>
<h2>Summary</h2>
<table><tr>{head}</tr>{summary}</table>
{prediction_section(forecast)}
<h2>Timeline</h2>
{timeline_svg(scenes)}
<h2>Where the time goes</h2>
<p class="muted">From the metric change to the effect in the cluster, per stage (hover for milliseconds).
Release scenes are left out: their time is the healthy delay, by design; so is the prediction, whose time
is the scoring cycle's (above).</p>
{breakdown_svg(scenes)}
<h2>Scenes in detail</h2>
<table class="scene-detail"><tr><th>scene</th><th>expected</th><th>signal</th><th>alert</th><th>decision</th>
<th>action</th><th>effect</th></tr>{details}</table>
<h2>Event log</h2>
<table><tr><th>time</th><th>node</th><th>what</th><th>detail</th></tr>{log}</table>
<p class="muted">Logs of every process: <code>{_e(info.workdir / "logs")}</code></p>
</body></html>
"""


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
