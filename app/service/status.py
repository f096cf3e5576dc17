"""The status page at `GET /`: what Sickbay is doing, readable without JavaScript, refreshing itself.

Server-rendered from the same sources as the API (the Node objects, the journal, the breaker), through
`templates/status.html.j2`. This module only picks and words what to show; the template escapes every
value, so a hostile alert label renders as text, never as markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app import templates
from app.act.gatekeeper import GateKeeper
from app.decide import footprint
from app.domain import NodeState
from app.service.api import breaker_view, node_view, unattributed_view
from app.service.audit_job import AuditRun
from app.store import deadletter, inbox
from app.store.faults import Entry

_NEXT_STEP = {
    "quarantined": "drain GPU pods",
    "draining": "finish evictions, wait until the pods are gone, then request remediation",
    "drain-failed": "not handed off: fix what held the pods (or move them), then it drains again",
    "remediating": "wait for the remediator (sickbay.io/remediation-done)",
    "verifying": "pass the verification Job (when enabled), then release after healthy-delay with no active fault",
    "at-risk": "watch the risk score; drain only if policy says so",
}


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
    audit: AuditRun | None = None,
    refresh_s: int = 10,
) -> str:
    mode = "dry-run: observing only, writing nothing" if dry_run else ("paused" if paused else "acting")
    return templates.render(
        "status.html.j2",
        identity=identity,
        leader=leader,
        mode=mode,
        now=now.strftime("%Y-%m-%d %H:%M:%S UTC"),
        refresh_s=int(refresh_s),
        breaker=breaker_view(gates) if gates is not None else None,
        nodes=None if nodes is None else _nodes(nodes),
        shadow=None if shadow is None else _shadow(shadow),
        risks=[_risk(r) for r in risks],
        intake=None if intake is None else _intake(intake),
        timeline=_timeline(entries, outcomes),
        model=_model(model_card),
        audit=None if audit is None else _audit(audit),
    )


_AUDIT_ROWS = 50  # the page stays small on a messy cluster; the CLI lists every finding


def _audit(run: AuditRun) -> dict[str, Any]:
    """The last scheduled audit: warnings first, at most `_AUDIT_ROWS` rows."""
    ordered = sorted(run.findings, key=lambda f: (f.severity != "warning", f.kind, f.object))
    warnings = sum(1 for f in run.findings if f.severity == "warning")
    return {
        "at": run.at.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "warnings": warnings,
        "infos": len(run.findings) - warnings,
        "findings": [
            {"kind": f.kind.value, "severity": f.severity.value, "object": f.object, "detail": f.detail}
            for f in ordered[:_AUDIT_ROWS]
        ],
        "more": max(0, len(ordered) - _AUDIT_ROWS),
    }


def _shadow(view: dict[str, Any]) -> dict[str, Any]:
    """Shadow or acting, why, and the validation log (backtest figures, guard trips, operators)."""
    rows = []
    for row in view.get("history", ()):
        evidence = row.get("evidence") or {}
        figures = (
            f"{evidence.get('false_alarms')} false alarms / {evidence.get('node_days')} node-days "
            f"= {evidence.get('false_alarms_per_1000_node_days')} per 1,000; {evidence.get('caught')} of "
            f"{evidence.get('failures')} failures caught; {evidence.get('verdict')}"
            if evidence
            else ""
        )
        rows.append(
            {
                **{key: str(row.get(key)) for key in ("at", "version", "mode", "reason", "by", "detail")},
                "klass": "ok" if row.get("mode") == "acting" else "bad",
                "figures": figures,
            }
        )
    acting = view.get("mode") == "acting"
    return {
        **{key: str(view.get(key)) for key in ("version", "fleet", "reason", "detail", "by", "since")},
        "acting": acting,
        "held": bool(view.get("held")),
        "what": "it taints nodes at risk and asks their workloads to checkpoint"
        if acting
        else "it scores and journals what it would do; it writes no taint and no Event",
        "history": rows,
    }


def _nodes(nodes: Sequence[NodeState]) -> list[dict[str, str]]:
    """The nodes Sickbay is acting on, by name, with the step each waits for."""
    rows = []
    for node in sorted((n for n in nodes if n.state is not None), key=lambda n: n.name):
        view = node_view(node)
        state = view["state"] or ""
        held = node.annotation(footprint.DRAIN_FAILED) if state == "drain-failed" else None
        rows.append(
            {
                "name": node.name,
                "state": state,
                "klass": "bad" if state in ("quarantined", "draining", "drain-failed") else "warn",
                "fault": str(view["fault"].get("class", "")) + _gpu(view["fault"]),
                "reason": view["reason"] or "",
                "since": view["since"] or "",
                "step": _NEXT_STEP.get(state, "") + (f" — {held}" if held else ""),
            }
        )
    return rows


def _gpu(fault: dict[str, Any]) -> str:
    parts = []
    if fault.get("gpu") is not None:
        parts.append(f"GPU {fault['gpu']}")
    if fault.get("xid") is not None:
        parts.append(f"XID {fault['xid']}")
    return (" · " + ", ".join(parts)) if parts else ""


def _risk(risk: dict[str, Any]) -> dict[str, str]:
    return {
        "node": str(risk.get("node", "")),
        "gpu": str(risk.get("gpu", "")),
        "score": f"{float(risk.get('score', 0.0)):.2f}",
        "level": str(risk.get("level", "")),
        "drivers": ", ".join(str(d) for d in risk.get("drivers", ())),
    }


def _intake(intake: IntakeProblems) -> dict[str, Any]:
    unattributed = []
    for row in intake.unattributed:
        view = unattributed_view(row)
        unattributed.append(
            {
                "received_at": str(view["received_at"]),
                "alert": str(view["alertname"]) + (f" (XID {view['xid']})" if view["xid"] else ""),
                "status": str(view["status"]),
                "fingerprint": str(view["fingerprint"]),
                "labels": _compact(view["labels"]),
            }
        )
    rejected = [
        {
            "last_seen": letter.last_seen,
            "source": letter.source,
            "reason": letter.reason,
            "where": letter.where,
            "message": letter.message,
            "labels": _compact(letter.labels),
            "seen": letter.seen,
        }
        for letter in intake.rejected
    ]
    return {
        "unattributed_total": intake.unattributed_total,
        "unattributed": unattributed,
        "rejected_total": intake.rejected_total,
        "rejected": rejected,
    }


def _compact(labels: Any, *, limit: int = 300) -> str:
    if isinstance(labels, dict):
        text = ", ".join(f"{k}={v}" for k, v in labels.items())
    else:
        text = "" if labels is None else str(labels)
    return text if len(text) <= limit else text[:limit] + "…"


def _timeline(entries: Iterable[Entry], outcomes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Journal entries, newest first, each with the outcomes of its actions (oldest first)."""
    by_fault: dict[int, list[dict[str, Any]]] = {}
    for outcome in outcomes:
        if outcome.get("fault_id") is not None:
            by_fault.setdefault(int(outcome["fault_id"]), []).append(outcome)
    return [
        {
            "at": entry.at,
            "where": f"{entry.node or '-'}" + (f" GPU {entry.gpu}" if entry.gpu is not None else ""),
            "what": f"XID {entry.xid}" if entry.xid is not None else entry.rule,
            "status": entry.status,
            "fault_class": entry.fault_class,
            "reason": entry.reason,
            "summary": entry.plan.get("summary", ""),
            "steps": [
                {
                    "kind": o["kind"],
                    "target": o.get("pod") or o.get("node") or "",
                    "status": o["status"],
                    "detail": o["detail"],
                }
                for o in reversed(by_fault.get(entry.id, []))
            ],
        }
        for entry in entries
    ]


def _model(card: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not card:
        return []
    return [(str(k), str(v)) for k, v in {"version": card.get("version"), **card.get("holdout", {})}.items()]
