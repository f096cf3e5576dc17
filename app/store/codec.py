"""JSON round-trips for the domain values the journal keeps (signals, plans), so history reloads exactly."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from app.domain import Action, Plan, PodRef, Signal, SignalSource, SignalStatus


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _pod(pod: PodRef | None) -> dict[str, str | None] | None:
    return {"namespace": pod.namespace, "name": pod.name, "container": pod.container} if pod else None


def signal_to_dict(signal: Signal) -> dict[str, Any]:
    return {
        "source": signal.source.value,
        "fingerprint": signal.fingerprint,
        "status": signal.status.value,
        "name": signal.name,
        "starts_at": _time(signal.starts_at),
        "received_at": _time(signal.received_at),
        "node": signal.node,
        "gpu": signal.gpu,
        "uuid": signal.uuid,
        "xid": signal.xid,
        "pod": _pod(signal.pod),
        "pod_label": signal.pod_label,
        "ends_at": _time(signal.ends_at),
        "labels": dict(signal.labels),
        "annotations": dict(signal.annotations),
    }


def signal_from_dict(data: dict[str, Any]) -> Signal:
    pod = data.get("pod")
    return Signal(
        source=SignalSource(data["source"]),
        fingerprint=data["fingerprint"],
        status=SignalStatus(data["status"]),
        name=data["name"],
        starts_at=datetime.fromisoformat(data["starts_at"]),
        received_at=datetime.fromisoformat(data["received_at"]),
        node=data.get("node"),
        gpu=data.get("gpu"),
        uuid=data.get("uuid"),
        xid=data.get("xid"),
        pod=PodRef(pod["namespace"], pod["name"], pod.get("container")) if pod else None,
        pod_label=data.get("pod_label"),
        ends_at=datetime.fromisoformat(data["ends_at"]) if data.get("ends_at") else None,
        labels=tuple(sorted(data.get("labels", {}).items())),
        annotations=tuple(sorted(data.get("annotations", {}).items())),
    )


def action_to_dict(action: Action) -> dict[str, Any]:
    return {
        "kind": action.kind.value,
        "track": action.track.value,
        "reason": action.reason,
        "node": action.node,
        "pod": _pod(action.pod),
        "params": dict(action.params),
        "not_before": _time(action.not_before),
    }


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    return {
        "summary": plan.summary,
        "decided_at": _time(plan.decided_at),
        "workload": plan.workload,
        "actions": [action_to_dict(a) for a in plan.actions],
        **({"shadowed": [action_to_dict(a) for a in plan.shadowed]} if plan.shadowed else {}),
    }


def dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def signal_json(signal: Signal) -> str:
    return dumps(signal_to_dict(signal))
