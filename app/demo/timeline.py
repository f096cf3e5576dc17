"""What happened, and when: each scene's signal → alert → decision → action → effect in the cluster.

Times are seconds since the scenario started (wall clock, UTC, shared by every part on this machine):

- signal: the simulator changed the metric (the injection, or the failure at the end of a precursor);
  for a prediction, the model was promoted (the metrics had been changing for hours);
- alert: the alert's `startsAt` as Prometheus set it (the rule evaluation that found it); for a
  prediction, the scoring cycle that found the risk;
- delivered: Alertmanager's notification reached the stack's probe receiver, routed exactly like
  Sickbay's (for a release: the resolved notification);
- decision: when Sickbay took the alert up (`decided_at` of its plan in `GET /api/v1/actions`), after
  receiving, storing and classifying it (for a release: the node entering `verifying`);
- action: the first outcome Sickbay journaled for that plan (quarantine applied, pod restarted, ...);
- effect: what the Kubernetes API shows, polled through the official client (node unschedulable or
  tainted, pod gone, node released, node at risk).

`Recorder` polls Sickbay's journal and the cluster in the background and fills both the chronological
event log and each scene's milestones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.decide import footprint
from app.demo.stack import Stack

log = logging.getLogger(__name__)

HARDWARE = frozenset({"reset-gpu", "reboot-node", "replace"})
AT_RISK = "at-risk"
# Outcomes that are a scene's "action": the first write of its plan.
ACTION_KINDS = frozenset({"quarantine", "restart-pod", "taint-at-risk"})


def effective_class(item: dict[str, Any]) -> str:
    """The class the plan acts on: an escalated fault keeps its original class in the journal, but its
    quarantine action names the class it escalated to."""
    for action in (item.get("plan") or {}).get("actions", []):
        if action.get("kind") == "quarantine" and (action.get("params") or {}).get("class"):
            return str(action["params"]["class"])
    return str(item.get("class"))


def shorten(text: str, limit: int = 110) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Event:
    t: float
    node: str
    kind: str  # signal, precursor, alert, decision, action, cluster, note
    text: str


@dataclass(slots=True, kw_only=True)
class Scene:
    """One scripted fault and what Sickbay should make of it."""

    key: str
    title: str
    label: str  # a short name, for the chart
    node: str
    gpu: int | None = None
    expect: str = ""
    # The effect to wait for: "unschedulable", "tainted" (NoSchedule without a cordon), "pod-gone",
    # "released", "at-risk" (the at-risk taint at act), "soft-condition" (GpuSoftFault=True).
    effect_kind: str = "unschedulable"
    classes: frozenset[str] = HARDWARE  # the fault classes that count as "the decision" for this scene
    pod: tuple[str, str] | None = None  # for pod-gone
    # How much earlier than the signal its alert may start (a scoring cycle can begin just before the
    # model it loads was promoted).
    slack_s: float = 0.5
    started: float | None = None
    signal: float | None = None
    signal_text: str = ""
    alert: float | None = None
    alert_text: str = ""
    delivered: float | None = None  # Alertmanager's notification reached a receiver (the stack's probe)
    decision: float | None = None
    decision_text: str = ""
    fault_class: str = ""
    fault_id: int | None = None
    action: float | None = None
    action_text: str = ""
    effect: float | None = None
    effect_text: str = ""
    status: str = "waiting"  # waiting, running, done, blocked, timed out
    note: str = ""

    def since_signal(self, value: float | None) -> float | None:
        if value is None or self.signal is None:
            return None
        return value - self.signal

    @property
    def done(self) -> bool:
        return self.status in ("done", "blocked", "timed out")

    @property
    def via_alertmanager(self) -> bool:
        """A risk the scoring job found goes straight into Sickbay's inbox: no notification to match."""
        return AT_RISK not in self.classes


@dataclass(slots=True)
class NodeView:
    unschedulable: bool = False
    taint: str | None = None
    state: str | None = None
    remediation: str | None = None
    at_risk: str | None = None  # the at-risk taint's value:effect
    soft: str | None = None  # the soft-fault condition's reason while it is True


@dataclass
class Recorder:
    """Polls the journal and the cluster; turns what it sees into events and scene milestones."""

    stack: Stack
    t0: datetime
    scenes: list[Scene] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    nodes: dict[str, NodeView] = field(default_factory=dict)
    on_event: Callable[[Event], None] | None = None
    node_every_s: float = 0.1
    journal_every_s: float = 0.3
    _seen_items: set[int] = field(default_factory=set)
    _seen_outcomes: set[tuple[Any, ...]] = field(default_factory=set)
    _items: dict[int, dict[str, Any]] = field(default_factory=dict)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    errors: int = 0

    # -- time ----------------------------------------------------------------------------------------

    def rel(self, when: datetime) -> float:
        return (when - self.t0).total_seconds()

    def now(self) -> float:
        return self.rel(datetime.now(UTC))

    def emit(self, t: float, node: str, kind: str, text: str) -> None:
        event = Event(t, node, kind, text)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def sorted_events(self) -> list[Event]:
        return sorted(self.events, key=lambda e: e.t)

    # -- running -------------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._loop(self.poll_nodes, self.node_every_s), name="demo-nodes"),
            asyncio.create_task(self._loop(self.poll_journal, self.journal_every_s), name="demo-journal"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _loop(self, step: Callable[[], Any], every: float) -> None:
        while True:
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a hiccup while polling must not end the demo
                self.errors += 1
                log.debug("poll failed: %s", exc)
            await asyncio.sleep(every)

    async def settle(self) -> None:
        """One last look at everything (after the scenes, before the summary)."""
        await self.poll_nodes()
        await self.poll_journal()

    # -- the cluster -----------------------------------------------------------------------------------

    async def poll_nodes(self) -> None:
        listed = await self.stack.cluster.list_nodes()
        t = self.now()
        for node in listed:
            taint = next((f"{x.value}:{x.effect}" for x in node.taints if x.key == footprint.UNHEALTHY), None)
            risk = next((f"{x.value}:{x.effect}" for x in node.taints if x.key == footprint.AT_RISK), None)
            view = NodeView(
                unschedulable=node.unschedulable,
                taint=taint,
                state=node.label(footprint.STATE),
                remediation=node.annotation(footprint.REMEDIATION_REQUESTED),
                at_risk=risk,
                soft=next(
                    (
                        c.reason
                        for c in node.conditions
                        if c.type == footprint.SOFT_CONDITION and c.status == "True"
                    ),
                    None,
                ),
            )
            before = self.nodes.get(node.name, NodeView())
            self.nodes[node.name] = view
            if view != before:
                self._node_changed(t, node.name, before, view)
        for scene in self.scenes:
            if scene.effect_kind == "pod-gone" and scene.started is not None:
                await self.poll_pods(scene)

    def _node_changed(self, t: float, name: str, before: NodeView, now: NodeView) -> None:
        parts = []
        if now.unschedulable != before.unschedulable:
            parts.append("cordoned" if now.unschedulable else "uncordoned")
        if now.taint != before.taint:
            parts.append(f"taint {footprint.UNHEALTHY}={now.taint}" if now.taint else "taint removed")
        if now.at_risk != before.at_risk:
            parts.append(
                f"taint {footprint.AT_RISK}={now.at_risk}"
                if now.at_risk
                else f"taint {footprint.AT_RISK} removed"
            )
        if now.state != before.state:
            parts.append(f"state {now.state}" if now.state else "state cleared")
        if now.remediation != before.remediation and now.remediation:
            parts.append(f"remediation requested: {now.remediation}")
        if now.soft != before.soft:
            parts.append(
                f"condition {footprint.SOFT_CONDITION}=True ({now.soft})"
                if now.soft
                else f"condition {footprint.SOFT_CONDITION}=False"
            )
        if parts:
            self.emit(t, name, "cluster", ", ".join(parts))
        for scene in self.scenes:
            if scene.node != name or scene.started is None or scene.effect is not None:
                continue
            if scene.effect_kind == "unschedulable" and now.unschedulable and not before.unschedulable:
                scene.effect, scene.effect_text = t, f"unschedulable, taint {now.taint}"
            elif scene.effect_kind == "tainted" and now.taint and not before.taint:
                scene.effect, scene.effect_text = t, f"taint {now.taint}, schedulable={not now.unschedulable}"
            elif scene.effect_kind == "released" and before.taint and not now.taint:
                scene.effect, scene.effect_text = t, "released: uncordoned, marks removed"
            elif scene.effect_kind == "soft-condition" and now.soft and not before.soft:
                scene.effect = t
                scene.effect_text = (
                    f"{footprint.SOFT_CONDITION}=True ({now.soft}), schedulable={not now.unschedulable}, "
                    f"no taint={now.taint is None}"
                )
            elif scene.effect_kind == "at-risk" and now.at_risk and now.at_risk.startswith("act:"):
                scene.effect = t
                scene.effect_text = (
                    f"taint {footprint.AT_RISK}={now.at_risk}, schedulable={not now.unschedulable}"
                )
            if scene.effect_kind == "released" and now.state == "verifying" and scene.decision is None:
                scene.decision, scene.decision_text = t, "remediation reported done: verifying"

    async def poll_pods(self, scene: Scene) -> None:
        if scene.pod is None or scene.effect is not None:
            return
        namespace, name = scene.pod
        found = await self.stack.cluster.list_pods(namespace=namespace)
        if not any(p.name == name for p in found):
            t = self.now()
            scene.effect, scene.effect_text = (
                t,
                f"pod {namespace}/{name} deleted for its controller to recreate",
            )
            self.emit(t, scene.node, "cluster", scene.effect_text)

    # -- Sickbay's journal ------------------------------------------------------------------------------

    async def poll_journal(self) -> None:
        data = await self.stack.actions(limit=1000)
        for item in reversed(data.get("items", [])):  # oldest first
            if item["id"] in self._seen_items:
                continue
            self._seen_items.add(item["id"])
            self._items[item["id"]] = item
            self._new_item(item)
        for outcome in reversed(data.get("outcomes", [])):
            key = (
                outcome.get("fault_id"),
                outcome.get("at"),
                outcome.get("kind"),
                outcome.get("pod"),
                outcome.get("node"),
            )
            if key in self._seen_outcomes:
                continue
            self._seen_outcomes.add(key)
            self._new_outcome(outcome)
        self._match_deliveries()

    def _match_deliveries(self) -> None:
        """When Alertmanager delivered each scene's alert, as the stack's probe receiver saw it (the
        probe gets the same notifications as Sickbay, through a `continue: true` route)."""
        probe = self.stack.probe
        if probe is None:
            return
        for scene in self.scenes:
            status = "resolved" if scene.effect_kind == "released" else "firing"
            since = scene.signal if status == "resolved" else scene.alert
            if scene.delivered is not None or since is None or not scene.via_alertmanager:
                continue
            for delivery in list(probe.deliveries):
                labels = delivery.labels
                if labels.get("node") != scene.node or delivery.status != status:
                    continue
                if status == "firing" and labels.get("sickbay_class") in ("ignore", "transient"):
                    continue
                if scene.gpu is not None and labels.get("gpu") not in (None, str(scene.gpu)):
                    continue
                t = self.rel(delivery.wall)
                if t >= (scene.signal or 0.0) and t >= since - 0.05:
                    scene.delivered = t
                    break

    def _new_item(self, item: dict[str, Any]) -> None:
        node = item.get("node") or "?"
        alert_at = parse_time(item.get("at"))
        decided_at = parse_time((item.get("plan") or {}).get("decided_at"))
        status = item.get("status", "")
        rule = item.get("rule", "")
        xid = f" XID {item['xid']}" if item.get("xid") else ""
        gpu = f" GPU {item['gpu']}" if item.get("gpu") is not None else ""
        summary = (item.get("plan") or {}).get("summary", "")
        if status != "firing":
            # A resolution keeps the alert's startsAt; what is news is when it was delivered and processed.
            if decided_at is not None:
                self.emit(self.rel(decided_at), node, "alert", f"resolved{xid}{gpu} (rule {rule})")
            return
        cls = effective_class(item)
        if alert_at is not None and cls == AT_RISK:
            self.emit(self.rel(alert_at), node, "alert", f"scored at risk{gpu} by the model (scoring cycle)")
        elif alert_at is not None:
            self.emit(
                self.rel(alert_at), node, "alert", f"firing{xid}{gpu} ({item.get('source')}, rule {rule})"
            )
        if decided_at is not None:
            escalated = f" (escalated from {item.get('class')})" if cls != item.get("class") else ""
            self.emit(self.rel(decided_at), node, "decision", f"{cls}{escalated}: {summary}")
        for scene in self.scenes:
            if scene.node != node or scene.signal is None or scene.decision is not None:
                continue
            if cls not in scene.classes or alert_at is None or decided_at is None:
                continue
            if self.rel(alert_at) < scene.signal - scene.slack_s:
                continue  # an older fault on the same node
            found = f"scored at risk{gpu} (model)" if cls == AT_RISK else f"{rule}{xid}{gpu}".strip()
            scene.alert, scene.alert_text = self.rel(alert_at), found
            scene.decision, scene.decision_text = self.rel(decided_at), summary
            scene.fault_class = cls
            scene.fault_id = int(item["id"])

    def _new_outcome(self, outcome: dict[str, Any]) -> None:
        at = parse_time(outcome.get("at"))
        if at is None:
            return
        node = outcome.get("node") or "?"
        pod = f" {outcome['pod']}" if outcome.get("pod") else ""
        text = shorten(f"{outcome.get('kind')}{pod}: {outcome.get('status')} ({outcome.get('detail')})")
        self.emit(self.rel(at), node, "action", text)
        for scene in self.scenes:
            if scene.fault_id is None or scene.action is not None:
                continue
            if outcome.get("fault_id") != scene.fault_id:
                continue
            if outcome.get("kind") not in ACTION_KINDS:
                continue
            scene.action = self.rel(at)
            scene.action_text = f"{outcome.get('kind')} {outcome.get('status')}"
            if outcome.get("status") == "blocked":
                scene.note = shorten(str(outcome.get("detail", "")), 80)

    # -- scenes -----------------------------------------------------------------------------------------

    def add(self, scene: Scene) -> Scene:
        self.scenes.append(scene)
        return scene

    def begin(self, scene: Scene, signal_text: str, *, signal_now: bool = True) -> None:
        """The scene's fault is injected now; its metric changes now too, unless a precursor comes first
        (then `signalled` marks the change)."""
        now = self.now()
        scene.started = now
        scene.status = "running"
        scene.signal_text = signal_text
        if signal_now:
            scene.signal = now
            self.emit(now, scene.node, "signal", signal_text)

    def signalled(self, scene: Scene, text: str) -> None:
        """The scene's metric changed now (the end of a precursor)."""
        now = self.now()
        scene.signal = now
        scene.signal_text = text
        self.emit(now, scene.node, "signal", text)

    def note(self, node: str, text: str) -> None:
        self.emit(self.now(), node, "note", text)

    async def wait(self, scenes: Iterable[Scene], *, within_s: float) -> None:
        """Until each scene has its effect (or its action was blocked), or `within_s` seconds pass."""
        pending = list(scenes)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while True:
            for scene in pending:
                if scene.done:
                    continue
                if scene.effect is not None:
                    scene.status = "done"
                elif scene.action_text.endswith("blocked"):
                    scene.status = "blocked"
            if all(s.done for s in pending):
                return
            if loop.time() > deadline:
                for scene in pending:
                    if not scene.done:
                        scene.status = "timed out"
                return
            await asyncio.sleep(0.05)
