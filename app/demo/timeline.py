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
event log and each scene's milestones; what each change means is `cluster_watch`'s and `journal_watch`'s,
the values themselves (`Event`, `Scene`) are `milestones`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.demo import cluster_watch, journal_watch
from app.demo.milestones import AT_RISK, Event, NodeView, Scene, parse_time
from app.demo.stack import Stack

# The values are imported from here by the demo's entry point, the scenario and the report.
__all__ = ["AT_RISK", "Event", "NodeView", "Recorder", "Scene", "parse_time"]

log = logging.getLogger(__name__)


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
        self._log(Event(t, node, kind, text))

    def _log(self, event: Event) -> None:
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
            view = cluster_watch.view_of(node)
            before = self.nodes.get(node.name, NodeView())
            self.nodes[node.name] = view
            if view != before:
                if text := cluster_watch.describe_change(before, view):
                    self.emit(t, node.name, "cluster", text)
                cluster_watch.mark_effects(self.scenes, t, node.name, before, view)
        for scene in self.scenes:
            if scene.effect_kind == "pod-gone" and scene.started is not None:
                await self.poll_pods(scene)

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
            for event in journal_watch.item_events(item, self.rel):
                self._log(event)
            journal_watch.match_item(self.scenes, item, self.rel)
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
            if (action := journal_watch.outcome_event(outcome, self.rel)) is not None:
                self._log(action)
            journal_watch.match_outcome(self.scenes, outcome, self.rel)
        if self.stack.probe is not None:
            journal_watch.match_deliveries(self.scenes, self.stack.probe.deliveries, self.rel)

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
