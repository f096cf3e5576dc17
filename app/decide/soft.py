"""Transient signals — soft alerts, alerts no rule knows, unknown XIDs: simple retries, never a kill.

A transient signal says nothing about a workload having failed, so it restarts nothing and leaves the
node in the pool. It is recorded and looked at again with the retry backoff for as long as it fires.
Once it has lasted `transient.persist_after`, or fired `transient.repeats` separate times on the same GPU
within the escalation window, it becomes visible on the node (a condition and an Event), and it goes to
the hardware track only when the policy names a class for that (`transient.escalate_to`). An unknown XID
is visible at once: the catalog has a gap an operator must fill. What `act` then writes on the node
as read (the condition, or nothing when it is already so) is `condition_write`'s answer.
Pure: history and `now` are passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from app.config import rules
from app.decide import conditions, footprint
from app.decide.situation import Situation
from app.domain import (
    Action,
    ActionKind,
    Condition,
    ConditionParams,
    Fault,
    FaultClass,
    NodeState,
    Plan,
    RecheckParams,
    Track,
)

# Set by classification for an XID the catalog does not list; decide does not import classify.
UNKNOWN_XID_RULE = "xid-unknown"
UNKNOWN_XID_REASON = "UnknownXid"


@dataclass(frozen=True, slots=True)
class Escalate:
    """A lasting soft signal that the policy sends to the hardware track, and the condition to raise too."""

    fault: Fault
    condition: Action


def recheck_delay(check: int, policy: rules.RetryPolicy) -> timedelta:
    """Wait before re-check number `check` (1-based): initial · factor^(check-1), capped at `max`."""
    return timedelta(seconds=policy.waits.delay(max(1, check)))


def condition_reason(fault: Fault) -> str:
    """The node condition's CamelCase reason: the alert's name, or UnknownXid."""
    if fault.rule == UNKNOWN_XID_RULE:
        return UNKNOWN_XID_REASON
    words = "".join(c if c.isalnum() else " " for c in fault.signal.name).split()
    camel = "".join(w[:1].upper() + w[1:] for w in words)
    return camel[:128] or "SoftFault"


def _lasting(fault: Fault, *, policy: rules.Policy, now: datetime, situation: Situation) -> str | None:
    """Why the signal must now be visible on the node, or None while it is still only being re-checked."""
    signal = fault.signal
    transient = policy.transient
    if fault.rule == UNKNOWN_XID_RULE:
        return f"XID {signal.xid} is not in the XID catalog; add it there ({fault.reason})"
    lasted = now - signal.starts_at
    if lasted >= transient.persist_after:
        return (
            f"{signal.name} has been firing for {_human(lasted)} "
            f"(visible after {_human(transient.persist_after)}): {fault.reason}"
        )
    window = policy.escalation.window
    episodes = {
        (h.fingerprint, h.at)
        for h in situation.history
        if h.fault_class is FaultClass.TRANSIENT
        and h.name == signal.name
        and h.gpu == signal.gpu
        and now - h.at <= window
    } | {(signal.fingerprint, signal.starts_at)}
    if len(episodes) >= transient.repeats:
        gpu = f"GPU {signal.gpu}" if signal.gpu is not None else "this node"
        return (
            f"{signal.name} fired {len(episodes)} separate times on {gpu} within {_human(window)} "
            f"(visible at {transient.repeats}): {fault.reason}"
        )
    return None


def plan_firing(
    fault: Fault, *, policy: rules.Policy, now: datetime, situation: Situation, workload: str | None
) -> Plan | Escalate:
    signal = fault.signal
    node = signal.node
    transient = policy.transient
    why = _lasting(fault, policy=policy, now=now, situation=situation)
    if why is None:
        check = 1 + sum(
            1 for h in situation.history if h.fingerprint == signal.fingerprint and h.at == signal.starts_at
        )
        visible_at = signal.starts_at + transient.persist_after
        due = max(now, min(now + recheck_delay(check, policy.retry), visible_at))
        recheck = Action(
            kind=ActionKind.RECHECK,
            track=Track.RECORD,
            node=node,
            reason=f"re-check {check} of {signal.name} while it fires",
            params=RecheckParams(check),
            not_before=due,
        )
        return Plan(
            fault=fault,
            decided_at=now,
            summary=f"transient: recorded, nothing restarted, the node stays in the pool; re-check {check} "
            f"at {due.isoformat()} while it fires (visible on the node after "
            f"{_human(transient.persist_after)} or {transient.repeats} firings)",
            actions=(recheck,),
            workload=workload,
        )
    condition = Action(
        kind=ActionKind.RAISE_CONDITION,
        track=Track.RECORD,
        node=node,
        reason=why,
        params=ConditionParams(transient.condition, reason=condition_reason(fault)),
    )
    if transient.escalate_to is not None:
        escalated = replace(
            fault,
            fault_class=FaultClass(transient.escalate_to),
            reason=f"{why}; escalated to {transient.escalate_to} by policy (transient.escalate_to)",
            rule="transient-escalation",
        )
        return Escalate(fault=escalated, condition=condition)
    return Plan(
        fault=fault,
        decided_at=now,
        summary=f"transient signal made visible: {transient.condition}=True on {node} and an Event; "
        "nothing restarted, the node stays in the pool",
        actions=(condition,),
        workload=workload,
    )


def plan_resolved(
    fault: Fault, *, policy: rules.TransientPolicy, now: datetime, situation: Situation
) -> Plan:
    """A soft signal resolved: clear the condition unless another soft signal still fires on the node."""
    signal = fault.signal
    others = [fp for fp in situation.soft_firing if fp != signal.fingerprint]
    if others:
        return Plan.record_only(
            fault,
            now,
            f"resolved; {len(others)} other soft signal(s) still fire on {signal.node}, so "
            f"{policy.condition} stays",
        )
    clear = Action(
        kind=ActionKind.CLEAR_CONDITION,
        track=Track.RECORD,
        node=signal.node,
        reason=f"{signal.name} resolved and no other soft signal fires on {signal.node}",
        params=ConditionParams(policy.condition),
    )
    return Plan(
        fault=fault,
        decided_at=now,
        summary=f"resolved: {policy.condition} cleared on {signal.node} if it was raised",
        actions=(clear,),
    )


def _human(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 60:
        return f"{seconds / 60:.1f}m"
    return f"{seconds:.0f}s"


@dataclass(frozen=True, slots=True)
class Unchanged:
    """Nothing to write on the node's soft-fault condition (it is already so, or the node opted out)."""

    why: str


def condition_write(
    node: NodeState, *, kind: str, raise_it: bool, reason: str, message: str, now: datetime
) -> Condition | Unchanged:
    """The soft-fault condition `kind` to write on a freshly read node: raised (`raise_it`) or cleared.

    Idempotent, so a repeat writes nothing and sends no Event: a condition already True with the same
    reason is not raised again, and one that is not True is not cleared. `reason` blank: `SoftFault`.
    """
    if not node.managed:
        return Unchanged(f"node opted out ({footprint.MANAGED}=false)")
    current = node.condition(kind)
    if raise_it:
        wanted = conditions.soft_condition(kind, reason=reason or "SoftFault", message=message, now=now)
        if current is not None and (current.status, current.reason) == ("True", wanted.reason):
            return Unchanged(f"{kind} is already True")
        return wanted
    if current is None or current.status != "True":
        return Unchanged(f"{kind} was not raised")
    return conditions.soft_cleared(kind, message=message, now=now)
