"""The values the demo's timeline records: events, scenes with their milestones, and a node as seen.

Times are seconds since the scenario started (see `timeline` for what each milestone means). Plain values
and the helpers that read the journal's JSON; no polling, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

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
    verification: str | None = None  # its verification Job, in words (`verifying.view`)
