"""The proactive ladder: a node's predicted risk → its at-risk taint, and at `act` a request to checkpoint.

Prediction acts early and gently. `warn` steers new work away (`sickbay.io/at-risk=warn:PreferNoSchedule`);
`act` stops new work (`:NoSchedule`) and asks the running GPU workloads to checkpoint (an Event on each
pod and on each pod's controller); it evicts them only when `prediction.drain` says so. A level that goes
down moves the taint down with it, and a resolved risk removes it (the scorer holds levels on the way down,
so this never flaps). At most `budgets.proactive_max_fraction` of the GPU nodes are at `act` at once:
past that a node stays at `warn` and the plan says why; that never opens the hardware breaker.

A node quarantined for a fault is left alone: the hardware track owns it, and its release removes the
at-risk taint with the rest. Pure: `act` re-reads the node and its fleet under a lock and asks `taint_step`
before it writes, so the hold at warn is decided here in both places; removing the taint asks `clear_step`.

In shadow (`Situation.shadow`, see `decide.shadow`) the same plan is made and then recorded instead of
carried out (`Plan.shadowed` holds its actions): no taint, no Event, no eviction. A resolved risk still
removes a taint, and a node still carrying one from before is cleared.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app.config import rules
from app.decide import evictions, footprint, gates
from app.decide.situation import Situation
from app.domain import (
    Action,
    ActionKind,
    AtRiskParams,
    CheckpointParams,
    Fault,
    NodePatch,
    NodeState,
    OwnerRef,
    Plan,
    PodState,
    RiskLevel,
    Signal,
    Track,
)

LEVEL = "level"  # the signal label the scorer sets: warn | act (a resolved signal keeps the last one)


def plan_at_risk(fault: Fault, *, policy: rules.Policy, now: datetime, situation: Situation) -> Plan:
    plan = _plan_acting(fault, policy=policy, now=now, situation=situation)
    if situation.shadow is None or not fault.signal.firing:
        return plan  # a resolved risk removes the taint in shadow too: removing never harms
    return shadowed(plan, situation=situation, now=now)


def shadowed(plan: Plan, *, situation: Situation, now: datetime) -> Plan:
    """The plan the ladder makes in shadow: what it would have done, recorded; no taint, no Event.

    A node that still carries the at-risk taint (set while the ladder acted, before the runtime guard or an
    operator sent it back to shadow) has it removed: shadow means no node is held by the model.
    """
    fault, why = plan.fault, situation.shadow or ""
    would = tuple(a for a in plan.actions if a.kind is not ActionKind.RECORD)
    summary = f"shadow: would {plan.summary}" if would else f"shadow: {plan.summary}"
    known = situation.node
    if (
        known is not None
        and footprint.at_risk_level(known) is not None
        and footprint.quarantined_class(known) is None  # a quarantined node is the hardware track's
    ):
        clear = Action(
            kind=ActionKind.CLEAR_AT_RISK,
            track=Track.HARDWARE,
            node=fault.node,
            reason=f"the proactive ladder is in shadow ({why}): the at-risk taint it set goes",
        )
        return Plan(
            fault=fault,
            decided_at=now,
            summary=f"{summary}; in shadow ({why}), so remove the at-risk taint it carries instead",
            actions=(clear,),
            shadowed=would,
        )
    return Plan.record_only(fault, now, f"{summary} ({why}); nothing written", shadowed=would)


def _plan_acting(fault: Fault, *, policy: rules.Policy, now: datetime, situation: Situation) -> Plan:
    node = fault.node
    known = situation.node
    if node is None:
        return Plan.record_only(fault, now, "the risk names no node, so there is nothing to act on: recorded")
    quarantined = footprint.quarantined_class(known) if known is not None else None
    if quarantined is not None:
        return Plan.record_only(
            fault,
            now,
            f"{node} is quarantined for {quarantined.value}: the at-risk ladder leaves it alone "
            "(its release removes the at-risk taint)",
        )
    if not fault.signal.firing:
        tainted = None if known is None else footprint.at_risk_level(known) is not None
        return _clear(fault, now=now, tainted=tainted)
    # Removing our own taint once the risk is gone is fine on an opted-out node; adding one is not.
    if known is not None and not known.managed:
        return Plan.record_only(fault, now, f"{node} is opted out ({footprint.MANAGED}=false): recorded only")
    wanted = level_of(fault.signal)
    if wanted is None or wanted is RiskLevel.NONE:
        return Plan.record_only(fault, now, "the risk signal carries no warn or act level: recorded")
    level, held = within_budget(wanted, node=node, fleet=situation.proactive, policy=policy.budgets)
    if known is not None and footprint.at_risk_level(known) is level:
        stays = f"; {held}" if held else ""
        return Plan.record_only(
            fault, now, f"{node} already carries {footprint.at_risk_taint(level)}: nothing to change{stays}"
        )
    why = describe_risk(fault.signal)
    actions = [
        Action(
            kind=ActionKind.TAINT_AT_RISK,
            track=Track.HARDWARE,
            node=node,
            reason=f"{why}; held at warn: {held}" if held else why,
            params=AtRiskParams(level, held=held),
        )
    ]
    if level is RiskLevel.ACT:
        actions += _act_step(fault, policy=policy, situation=situation, why=why)
    return Plan(
        fault=fault,
        decided_at=now,
        summary=_summary(node, level, held, actions, situation),
        actions=tuple(actions),
    )


def level_of(signal: Signal) -> RiskLevel | None:
    try:
        return RiskLevel(signal.label(LEVEL) or "")
    except ValueError:
        return None


def describe_risk(signal: Signal) -> str:
    """One line for Events and reasons: the level, the score and what drove it (from the scorer's signal)."""
    level = signal.label(LEVEL) or "?"
    score = _annotation(signal, "score")
    drivers = _annotation(signal, "drivers")
    text = f"predicted hardware-fault risk at {level}" + (f" (score {score})" if score else "")
    return text + (f", driven by {drivers}" if drivers else "")


def _annotation(signal: Signal, key: str) -> str:
    return next((value for name, value in signal.annotations if name == key), "")


def within_budget(
    wanted: RiskLevel, *, node: str, fleet: gates.ProactiveFleet | None, policy: rules.BudgetPolicy
) -> tuple[RiskLevel, str]:
    """The level the node may take now, and why it was held at warn (empty when it was not).

    Only `act` is budgeted; with no fleet to measure against (it could not be read) nothing is held here,
    and `act` measures again from its own list (`taint_step`)."""
    if wanted is not RiskLevel.ACT or fleet is None:
        return wanted, ""
    verdict = gates.admit_proactive(fleet, node=node, policy=policy)
    return (RiskLevel.ACT, "") if verdict.allowed else (RiskLevel.WARN, verdict.reason)


@dataclass(frozen=True, slots=True)
class LeaveAlone:
    """The ladder must not touch the node now (opted out, or the hardware track's)."""

    why: str


@dataclass(frozen=True, slots=True)
class TaintLevel:
    """The at-risk level the node is to carry; `held` says why it is warn when act was asked for."""

    level: RiskLevel
    held: str = ""
    unchanged: bool = False  # it carries that level already: nothing to write


def taint_step(
    node: NodeState, *, wanted: RiskLevel, fleet: gates.ProactiveFleet | None, policy: rules.BudgetPolicy
) -> LeaveAlone | TaintLevel:
    """What the writer does with a freshly read node: leave it, keep its taint, or set `wanted` or, past
    the proactive budget measured on `fleet` (its own fresh list, taken under the proactive lock), warn.

    The same budget rule as the plan's (`within_budget`), applied again where the write happens, so two
    risks planned at once cannot both take the last slot."""
    if not node.managed:
        return LeaveAlone(f"node opted out ({footprint.MANAGED}=false)")
    quarantined = footprint.quarantined_class(node)
    if quarantined is not None:
        return LeaveAlone(f"quarantined for {quarantined.value}: the at-risk ladder leaves it alone")
    level, held = within_budget(wanted, node=node.name, fleet=fleet, policy=policy)
    return TaintLevel(level=level, held=held, unchanged=footprint.at_risk_level(node) is level)


def clear_step(node: NodeState) -> LeaveAlone | NodePatch:
    """What removing the at-risk taint writes to a freshly read node, or why nothing is written: a node
    quarantined for a fault keeps it until its release removes it, and one without it needs nothing."""
    current = footprint.quarantined_class(node)
    if current is not None:
        return LeaveAlone(
            f"quarantined for {current.value}: left alone, its release removes the at-risk taint"
        )
    patch = footprint.clear_at_risk_patch(node)
    return LeaveAlone("no at-risk taint to remove") if patch.empty else patch


def _act_step(fault: Fault, *, policy: rules.Policy, situation: Situation, why: str) -> list[Action]:
    """At act: ask the running GPU workloads to checkpoint; evict them only when policy says so."""
    node = fault.node
    prediction = policy.prediction
    actions: list[Action] = []
    if situation.node is None:  # nothing was read (explain without a cluster): act lists the pods itself
        if prediction.drain:
            actions.append(
                Action(
                    kind=ActionKind.DRAIN, track=Track.WORKLOAD, node=node, reason="evict GPU pods: " + why
                )
            )
        return actions
    running = [p for p in situation.pods_on_node if evictions.running_workload(p)]
    if prediction.checkpoint_events:
        ask = f"{why}; node {node} takes no new work, checkpoint now" + (
            " (the pod will be evicted)" if prediction.drain else ""
        )
        actions += [
            Action(
                kind=ActionKind.REQUEST_CHECKPOINT,
                track=Track.WORKLOAD,
                node=node,
                pod=pod.ref,
                reason=ask,
                params=CheckpointParams(uid=pod.uid),
            )
            for pod in running
        ]
        actions += [
            Action(
                kind=ActionKind.REQUEST_CHECKPOINT,
                track=Track.WORKLOAD,
                node=node,
                reason=ask,
                params=CheckpointParams(owner=owner, namespace=namespace),
            )
            for namespace, owner in _owners(running)
        ]
    if prediction.drain:
        actions += [
            Action(
                kind=ActionKind.EVICT_POD,
                track=Track.WORKLOAD,
                node=node,
                pod=pod.ref,
                reason=f"move {pod.namespace}/{pod.name} off a node predicted to fail ({why})",
            )
            for pod in situation.pods_on_node
            if evictions.drainable(pod, policy.drain)
        ]
    return actions


def _owners(pods: list[PodState]) -> list[tuple[str, OwnerRef]]:
    """Each distinct controller of the pods once, in pod order: several ranks of one Job are one request."""
    seen: dict[tuple[str, str, str], OwnerRef] = {}
    for pod in pods:
        owner = pod.controller
        if owner is not None:
            seen.setdefault((pod.namespace, owner.kind, owner.name), owner)
    return [(namespace, owner) for (namespace, _, _), owner in seen.items()]


def _clear(fault: Fault, *, now: datetime, tainted: bool | None) -> Plan:
    """Remove the taint; `tainted` is None when the node was not read (`act` then reads it)."""
    node = fault.node
    score = _annotation(fault.signal, "score")
    if tainted is False:
        return Plan.record_only(
            fault, now, f"the risk on {node} is gone and it carries no at-risk taint: recorded"
        )
    return Plan(
        fault=fault,
        decided_at=now,
        summary=f"the risk on {node} is gone: remove its {footprint.AT_RISK} taint",
        actions=(
            Action(
                kind=ActionKind.CLEAR_AT_RISK,
                track=Track.HARDWARE,
                node=node,
                reason="the predicted risk fell below warn" + (f" (score {score})" if score else ""),
            ),
        ),
    )


def _summary(node: str, level: RiskLevel, held: str, actions: list[Action], situation: Situation) -> str:
    text = f"taint {node} {footprint.at_risk_taint(level)}"
    if level is RiskLevel.WARN:
        text += ": new work steers away" + (f" (held at warn: {held})" if held else "")
        return text
    asks = sum(1 for a in actions if a.kind is ActionKind.REQUEST_CHECKPOINT)
    evicts = sum(1 for a in actions if a.kind is ActionKind.EVICT_POD)
    text += f": no new work; ask {asks} pod(s) and owner(s) to checkpoint" if asks else ": no new work"
    if evicts or any(a.kind is ActionKind.DRAIN for a in actions):
        text += f", evict {evicts} GPU pod(s)" if evicts else ", evict its GPU pods"
    if situation.proactive is None:
        text += " (the proactive budget is checked when acting)"
    return text
