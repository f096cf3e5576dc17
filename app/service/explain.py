"""`sickbay explain`: what Sickbay would do with a payload, and why — no writes, no cluster needed.

Uses the same validation, classification and decision code as `serve`; the alerts of one payload are
each other's context (an XID 45 beside an XID 79 on the same GPU is decoded as `serve` would).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from app.classify import classifier
from app.domain import Fault, Plan, Signal
from app.ingest import bodies, payloads, signals
from app.kube import port
from app.service import planning
from app.store import codec


class ExplainError(ValueError):
    """The payload cannot be explained; the message says why, as the webhook would have."""


@dataclass(frozen=True)
class Explained:
    fault: Fault
    plan: Plan


def parse_payload(raw: bytes, *, keys: signals.NodeKeys, now: datetime) -> list[Signal]:
    """Validate a payload exactly as the webhook would: an Alertmanager webhook body or agent events."""
    try:
        if b'"events"' in raw and b'"alerts"' not in raw:
            events = bodies.decode(raw, payloads.GpuEventsPayload)
            return [
                signals.from_gpu_event(e, received_at=now, where=f"events.{i}")
                for i, e in enumerate(events.events)
            ]
        alerts = bodies.decode(raw, payloads.AlertmanagerPayload)
        return [
            signals.from_alert(a, keys=keys, received_at=now, where=f"alerts.{i}")
            for i, a in enumerate(alerts.alerts)
        ]
    except bodies.Rejection as exc:
        raise ExplainError(f"invalid payload: {exc.message}") from None
    except signals.SignalError as exc:
        raise ExplainError(f"invalid payload: {exc}") from None


async def explain(
    batch: list[Signal],
    *,
    rules: classifier.Rules,
    now: datetime,
    kube: port.KubePort | None = None,
) -> list[Explained]:
    """Classify and plan each signal; with `kube`, read the cluster exactly as `serve` would (no writes)."""
    out = []
    for signal in batch:
        decided = await planning.plan_signal(
            signal,
            context=[s for s in batch if s is not signal],
            rules=rules,
            now=now,
            kube=kube,
            journal=None,
        )
        out.append(Explained(fault=decided.fault, plan=decided.plan))
    return out


def to_json(items: list[Explained]) -> str:
    return json.dumps(
        [
            {
                "alert": item.fault.signal.name,
                "status": item.fault.signal.status.value,
                "node": item.fault.node,
                "gpu": item.fault.gpu,
                "xid": item.fault.xid,
                "class": item.fault.fault_class.value,
                "rule": item.fault.rule,
                "reason": item.fault.reason,
                "evidence": list(item.fault.evidence),
                "plan": codec.plan_to_dict(item.plan),
            }
            for item in items
        ],
        indent=2,
    )
