"""What Sickbay's journal and Alertmanager's deliveries mean for the demo: the events to log and the
scene milestones they fill in (alert, decision, action, delivered).

Pure functions over what the recorder read (`timeline.Recorder` polls `GET /api/v1/actions` and the
probe receiver); `rel` turns a wall-clock time into seconds since the scenario started.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.demo.milestones import ACTION_KINDS, AT_RISK, Event, Scene, effective_class, parse_time, shorten
from app.demo.probe import Delivery

Rel = Callable[[datetime], float]


@dataclass(frozen=True, slots=True)
class _Fault:
    """The fields of a journaled fault the events and the milestones are made of."""

    firing: bool
    node: str
    alert_at: datetime | None
    decided_at: datetime | None
    rule: str
    xid: str  # " XID 79", or empty
    gpu: str  # " GPU 0", or empty
    cls: str  # the class acted on (after an escalation)
    summary: str


def _fault(item: dict[str, Any]) -> _Fault:
    plan = item.get("plan") or {}
    return _Fault(
        firing=item.get("status", "") == "firing",
        node=item.get("node") or "?",
        alert_at=parse_time(item.get("at")),
        decided_at=parse_time(plan.get("decided_at")),
        rule=item.get("rule", ""),
        xid=f" XID {item['xid']}" if item.get("xid") else "",
        gpu=f" GPU {item['gpu']}" if item.get("gpu") is not None else "",
        cls=effective_class(item),
        summary=plan.get("summary", ""),
    )


def item_events(item: dict[str, Any], rel: Rel) -> list[Event]:
    """A journaled fault as events: its alert (or resolution) and the decision taken on it."""
    f = _fault(item)
    if not f.firing:
        # A resolution keeps the alert's startsAt; what is news is when it was delivered and processed.
        if f.decided_at is not None:
            return [Event(rel(f.decided_at), f.node, "alert", f"resolved{f.xid}{f.gpu} (rule {f.rule})")]
        return []
    events = []
    if f.alert_at is not None and f.cls == AT_RISK:
        events.append(
            Event(rel(f.alert_at), f.node, "alert", f"scored at risk{f.gpu} by the model (scoring cycle)")
        )
    elif f.alert_at is not None:
        events.append(
            Event(
                rel(f.alert_at),
                f.node,
                "alert",
                f"firing{f.xid}{f.gpu} ({item.get('source')}, rule {f.rule})",
            )
        )
    if f.decided_at is not None:
        escalated = f" (escalated from {item.get('class')})" if f.cls != item.get("class") else ""
        events.append(Event(rel(f.decided_at), f.node, "decision", f"{f.cls}{escalated}: {f.summary}"))
    return events


def match_item(scenes: Iterable[Scene], item: dict[str, Any], rel: Rel) -> None:
    """The scene a firing fault answers: its alert and decision milestones, class and journal id."""
    f = _fault(item)
    if not f.firing:
        return
    for scene in scenes:
        if scene.node != f.node or scene.signal is None or scene.decision is not None:
            continue
        if f.cls not in scene.classes or f.alert_at is None or f.decided_at is None:
            continue
        if rel(f.alert_at) < scene.signal - scene.slack_s:
            continue  # an older fault on the same node
        found = f"scored at risk{f.gpu} (model)" if f.cls == AT_RISK else f"{f.rule}{f.xid}{f.gpu}".strip()
        scene.alert, scene.alert_text = rel(f.alert_at), found
        scene.decision, scene.decision_text = rel(f.decided_at), f.summary
        scene.fault_class = f.cls
        scene.fault_id = int(item["id"])


def outcome_event(outcome: dict[str, Any], rel: Rel) -> Event | None:
    """A journaled outcome as an action event; None without a readable time."""
    at = parse_time(outcome.get("at"))
    if at is None:
        return None
    node = outcome.get("node") or "?"
    pod = f" {outcome['pod']}" if outcome.get("pod") else ""
    text = shorten(f"{outcome.get('kind')}{pod}: {outcome.get('status')} ({outcome.get('detail')})")
    return Event(rel(at), node, "action", text)


def match_outcome(scenes: Iterable[Scene], outcome: dict[str, Any], rel: Rel) -> None:
    """The first write of a scene's plan is its action milestone (and a block its note)."""
    at = parse_time(outcome.get("at"))
    if at is None:
        return
    for scene in scenes:
        if scene.fault_id is None or scene.action is not None:
            continue
        if outcome.get("fault_id") != scene.fault_id:
            continue
        if outcome.get("kind") not in ACTION_KINDS:
            continue
        scene.action = rel(at)
        scene.action_text = f"{outcome.get('kind')} {outcome.get('status')}"
        if outcome.get("status") == "blocked":
            scene.note = shorten(str(outcome.get("detail", "")), 80)


def match_deliveries(scenes: Iterable[Scene], deliveries: Iterable[Delivery], rel: Rel) -> None:
    """When Alertmanager delivered each scene's alert, as the stack's probe receiver saw it (the probe
    gets the same notifications as Sickbay, through a `continue: true` route)."""
    seen = list(deliveries)
    for scene in scenes:
        status = "resolved" if scene.effect_kind == "released" else "firing"
        since = scene.signal if status == "resolved" else scene.alert
        if scene.delivered is not None or since is None or not scene.via_alertmanager:
            continue
        for delivery in seen:
            labels = delivery.labels
            if labels.get("node") != scene.node or delivery.status != status:
                continue
            if status == "firing" and labels.get("sickbay_class") in ("ignore", "transient"):
                continue
            if scene.gpu is not None and labels.get("gpu") not in (None, str(scene.gpu)):
                continue
            t = rel(delivery.wall)
            if t >= (scene.signal or 0.0) and t >= since - 0.05:
                scene.delivered = t
                break
