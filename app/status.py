"""The status page at `GET /`: what Sickbay is doing, readable without JavaScript, refreshing itself.

Server-rendered from the same sources as the API (the Node objects, the journal, the breaker). Every
value that can come from a label, an annotation or an alert is escaped: a hostile alert label must
render as text, never as markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Any

from app.act.gatekeeper import GateKeeper
from app.api import breaker_view, node_view, unattributed_view
from app.decide import footprint
from app.domain import NodeState
from app.store import deadletter, inbox
from app.store.journal import Entry

_NEXT_STEP = {
    "quarantined": "drain GPU pods",
    "draining": "finish evictions, wait until the pods are gone, then request remediation",
    "drain-failed": "not handed off: fix what held the pods (or move them), then it drains again",
    "remediating": "wait for the remediator (sickbay.io/remediation-done)",
    "verifying": "release after healthy-delay with no active fault",
    "at-risk": "watch the risk score; drain only if policy says so",
}

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem;color:#1d2430;background:#f7f8fa}
h1{font-size:1.4rem;margin:0 0 .2rem} h2{font-size:1.1rem;margin:1.6rem 0 .5rem}
table{border-collapse:collapse;width:100%;background:#fff;box-shadow:0 1px 2px #0001}
th,td{text-align:left;padding:.35rem .6rem;border-bottom:1px solid #e3e6eb;vertical-align:top}
th{background:#eef1f5;font-weight:600} .muted{color:#6b7480} .tag{display:inline-block;padding:0 .4rem;
border-radius:.3rem;font-size:12px;background:#e3e6eb} .bad{background:#fbd5d5} .warn{background:#fde9c5}
.ok{background:#d3f0dc} .grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(12rem,1fr));gap:.8rem}
.card{background:#fff;padding:.7rem .9rem;box-shadow:0 1px 2px #0001} .big{font-size:1.5rem;font-weight:600}
"""


@dataclass(frozen=True)
class IntakeProblems:
    """Alerts the webhook refused (the dead-letter list) and alerts it stored that name no node."""

    rejected_total: int
    rejected: Sequence[deadletter.Kept]
    unattributed_total: int
    unattributed: Sequence[inbox.Row]


def render(
    *,
    identity: str,
    leader: bool,
    dry_run: bool,
    paused: bool,
    now: datetime,
    nodes: Sequence[NodeState] | None,
    entries: Sequence[Entry],
    outcomes: Sequence[dict[str, Any]],
    gates: GateKeeper | None,
    model_card: dict[str, Any] | None = None,
    risks: Sequence[dict[str, Any]] = (),
    intake: IntakeProblems | None = None,
    shadow: dict[str, Any] | None = None,
    refresh_s: int = 10,
) -> str:
    mode = "dry-run: observing only, writing nothing" if dry_run else ("paused" if paused else "acting")
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f'<meta http-equiv="refresh" content="{int(refresh_s)}">',
        "<title>Sickbay</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>Sickbay</h1>",
        f"<div class=muted>{escape(identity)} · {'leader' if leader else 'follower'} · {escape(mode)} · "
        f"{escape(now.strftime('%Y-%m-%d %H:%M:%S UTC'))} · refreshes every {int(refresh_s)} s</div>",
        _summary(nodes, gates),
        _prediction_mode(shadow),
        _nodes_table(nodes),
        _risk_table(risks),
        _intake_problems(intake),
        _timeline(entries, outcomes),
        _model(model_card),
        "</body></html>",
    ]
    return "\n".join(parts)


def _summary(nodes: Sequence[NodeState] | None, gates: GateKeeper | None) -> str:
    acting = [n for n in nodes or () if n.state is not None]
    breaker = breaker_view(gates) if gates is not None else None
    cards = [_card("nodes acted on", str(len(acting)))]
    if breaker is not None:
        state = (
            '<span class="tag bad">OPEN</span>' if breaker["open"] else '<span class="tag ok">closed</span>'
        )
        cards.append(_card("breaker", state, escape(breaker["reason"] or "")))
        cards.append(_card("quarantined / nodes", f"{breaker['quarantined']} / {breaker['nodes']}"))
    return "<h2>Overview</h2><div class=grid>" + "".join(cards) + "</div>"


def _prediction_mode(view: dict[str, Any] | None) -> str:
    """Shadow or acting, why, and the validation log (backtest figures, guard trips, operators)."""
    head = "<h2>Proactive ladder</h2>"
    if view is None:
        return head + "<p class=muted>Not available.</p>"
    acting = view.get("mode") == "acting"
    tag = '<span class="tag ok">acting</span>' if acting else '<span class="tag bad">SHADOW</span>'
    what = (
        "it taints nodes at risk and asks their workloads to checkpoint"
        if acting
        else "it scores and journals what it would do; it writes no taint and no Event"
    )
    held = (
        " Held: only an operator lifts it (<code>sickbay model validate</code>)." if view.get("held") else ""
    )
    parts = [
        head,
        f"<p>{tag} model <b>{escape(str(view.get('version')))}</b> on fleet {escape(str(view.get('fleet')))}: "
        f"{escape(what)}. {escape(str(view.get('reason')))}: {escape(str(view.get('detail')))} "
        f"<span class=muted>({escape(str(view.get('by')))}, since {escape(str(view.get('since')))})</span>"
        f"{held}</p>",
    ]
    rows = "".join(_validation_row(r) for r in view.get("history", ()))
    if rows:
        parts.append(
            "<table><tr><th>at</th><th>model</th><th>mode</th><th>reason</th><th>by</th><th>detail</th>"
            f"<th>backtest</th></tr>{rows}</table>"
        )
    return "".join(parts)


def _validation_row(row: dict[str, Any]) -> str:
    evidence = row.get("evidence") or {}
    figures = (
        f"{evidence.get('false_alarms')} false alarms / {evidence.get('node_days')} node-days "
        f"= {evidence.get('false_alarms_per_1000_node_days')} per 1,000; {evidence.get('caught')} of "
        f"{evidence.get('failures')} failures caught; {evidence.get('verdict')}"
        if evidence
        else ""
    )
    klass = "ok" if row.get("mode") == "acting" else "bad"
    return (
        f"<tr><td>{escape(str(row.get('at')))}</td><td>{escape(str(row.get('version')))}</td>"
        f'<td><span class="tag {klass}">{escape(str(row.get("mode")))}</span></td>'
        f"<td>{escape(str(row.get('reason')))}</td><td>{escape(str(row.get('by')))}</td>"
        f"<td>{escape(str(row.get('detail')))}</td><td>{escape(figures)}</td></tr>"
    )


def _card(title: str, value: str, note: str = "") -> str:
    return f"<div class=card><div class=muted>{escape(title)}</div><div class=big>{value}</div><div class=muted>{note}</div></div>"


def _nodes_table(nodes: Sequence[NodeState] | None) -> str:
    if nodes is None:
        return (
            "<h2>Nodes</h2><p class=muted>Kubernetes access is not configured: plans are journaled only.</p>"
        )
    acting = sorted((n for n in nodes if n.state is not None), key=lambda n: n.name)
    if not acting:
        return "<h2>Nodes</h2><p class=muted>No node is quarantined, draining, remediating or at risk.</p>"
    rows = []
    for node in acting:
        view = node_view(node)
        state = view["state"] or ""
        klass = "bad" if state in ("quarantined", "draining", "drain-failed") else "warn"
        held = node.annotation(footprint.DRAIN_FAILED) if state == "drain-failed" else None
        step = _NEXT_STEP.get(state, "") + (f" — {held}" if held else "")
        fault = view["fault"]
        rows.append(
            "<tr>"
            f"<td>{escape(node.name)}</td>"
            f'<td><span class="tag {klass}">{escape(state)}</span></td>'
            f"<td>{escape(str(fault.get('class', '')))}{_gpu(fault)}</td>"
            f"<td>{escape(view['reason'] or '')}</td>"
            f"<td>{escape(view['since'] or '')}</td>"
            f"<td>{escape(step)}</td>"
            "</tr>"
        )
    head = "<tr><th>node</th><th>state</th><th>fault</th><th>reason</th><th>since</th><th>next step</th></tr>"
    return f"<h2>Nodes Sickbay is acting on</h2><table>{head}{''.join(rows)}</table>"


def _gpu(fault: dict[str, Any]) -> str:
    parts = []
    if fault.get("gpu") is not None:
        parts.append(f"GPU {fault['gpu']}")
    if fault.get("xid") is not None:
        parts.append(f"XID {fault['xid']}")
    return (" · " + escape(", ".join(str(p) for p in parts))) if parts else ""


def _risk_table(risks: Sequence[dict[str, Any]]) -> str:
    if not risks:
        return "<h2>Risk</h2><p class=muted>No risk scores yet (no model loaded, or no GPU above the warn level).</p>"
    rows = "".join(
        f"<tr><td>{escape(str(r.get('node', '')))}</td><td>{escape(str(r.get('gpu', '')))}</td>"
        f"<td>{float(r.get('score', 0.0)):.2f}</td><td>{escape(str(r.get('level', '')))}</td>"
        f"<td>{escape(', '.join(str(d) for d in r.get('drivers', ())))}</td></tr>"
        for r in risks
    )
    head = "<tr><th>node</th><th>GPU</th><th>risk</th><th>level</th><th>what drove it</th></tr>"
    return f"<h2>Risk</h2><table>{head}{rows}</table>"


def _intake_problems(intake: IntakeProblems | None) -> str:
    """Refused and unattributed alerts: each is a fault that reached no node, so it is shown, not buried."""
    head = "<h2>Alerts that reached no node</h2>"
    if intake is None:
        return head + "<p class=muted>Not available: the inbox could not be read (see the log).</p>"
    parts = [head]
    if intake.unattributed:
        rows = "".join(_unattributed_row(unattributed_view(row)) for row in intake.unattributed)
        parts.append(
            f'<p><span class="tag warn">{intake.unattributed_total} unattributed</span> accepted, but no '
            "node label is set (an empty label counts as absent), so no node is acted on. Newest first:</p>"
            "<table><tr><th>received</th><th>alert</th><th>status</th><th>fingerprint</th><th>labels</th></tr>"
            f"{rows}</table>"
        )
    if intake.rejected:
        rows = "".join(_rejected_row(letter) for letter in intake.rejected)
        parts.append(
            f'<p><span class="tag bad">{intake.rejected_total} refused</span> invalid alerts and agent events, '
            "kept with their reason (<code>GET /api/v1/rejected</code>). Most recently seen first:</p>"
            "<table><tr><th>last seen</th><th>source</th><th>reason</th><th>where</th><th>why</th>"
            f"<th>labels</th><th>times</th></tr>{rows}</table>"
        )
    if len(parts) == 1:
        parts.append("<p class=muted>None: every alert received named a valid node.</p>")
    return "".join(parts)


def _unattributed_row(view: dict[str, Any]) -> str:
    what = str(view["alertname"]) + (f" (XID {view['xid']})" if view["xid"] else "")
    return (
        f"<tr><td>{escape(str(view['received_at']))}</td><td>{escape(what)}</td>"
        f"<td>{escape(str(view['status']))}</td><td>{escape(str(view['fingerprint']))}</td>"
        f"<td>{escape(_compact(view['labels']))}</td></tr>"
    )


def _rejected_row(letter: deadletter.Kept) -> str:
    return (
        f"<tr><td>{escape(letter.last_seen)}</td><td>{escape(letter.source)}</td>"
        f'<td><span class="tag">{escape(letter.reason)}</span></td><td>{escape(letter.where)}</td>'
        f"<td>{escape(letter.message)}</td><td>{escape(_compact(letter.labels))}</td><td>{letter.seen}</td></tr>"
    )


def _compact(labels: Any, *, limit: int = 300) -> str:
    if isinstance(labels, dict):
        text = ", ".join(f"{k}={v}" for k, v in labels.items())
    else:
        text = "" if labels is None else str(labels)
    return text if len(text) <= limit else text[:limit] + "…"


def _timeline(entries: Iterable[Entry], outcomes: Sequence[dict[str, Any]]) -> str:
    by_fault: dict[int, list[dict[str, Any]]] = {}
    for outcome in outcomes:
        if outcome.get("fault_id") is not None:
            by_fault.setdefault(int(outcome["fault_id"]), []).append(outcome)
    rows = []
    for entry in entries:
        done = by_fault.get(entry.id, [])
        steps = "<br>".join(
            f"{escape(o['kind'])} {escape(o.get('pod') or o.get('node') or '')}: "
            f'<span class="tag">{escape(o["status"])}</span> {escape(o["detail"])}'
            for o in reversed(done)
        )
        where = f"{entry.node or '-'}" + (f" GPU {entry.gpu}" if entry.gpu is not None else "")
        what = f"XID {entry.xid}" if entry.xid is not None else entry.rule
        rows.append(
            f"<tr><td>{escape(entry.at)}</td><td>{escape(where)}</td><td>{escape(what)} "
            f'<span class="tag">{escape(entry.status)}</span></td><td>{escape(entry.fault_class)}</td>'
            f"<td>{escape(entry.reason)}</td><td>{escape(entry.plan.get('summary', ''))}"
            f"{'<br>' + steps if steps else ''}</td></tr>"
        )
    if not rows:
        return "<h2>Timeline</h2><p class=muted>Nothing received yet.</p>"
    head = "<tr><th>at</th><th>where</th><th>signal</th><th>class</th><th>why</th><th>decision and actions</th></tr>"
    return f"<h2>Timeline (newest first)</h2><table>{head}{''.join(rows)}</table>"


def _model(card: dict[str, Any] | None) -> str:
    if not card:
        return "<h2>Model</h2><p class=muted>No model loaded: remediation runs from alerts only.</p>"
    metrics = card.get("holdout", {})
    items = "".join(
        f"<tr><th>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>"
        for k, v in {"version": card.get("version"), **metrics}.items()
    )
    return f"<h2>Model</h2><table>{items}</table>"
