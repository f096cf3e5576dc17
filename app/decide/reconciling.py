"""What reconciliation does next with a node: for one Sickbay owns, step back, release, drain or follow a
remediation; for any node, clear a soft-fault condition nothing keeps up, and signal GPU allocatable that
stayed below capacity.

Reconciliation observes (the listed node, the faults still firing on it, its pods), asks here, and
executes the answer; it compares nothing itself. Every timer these decisions read is an annotation on the
node (`sickbay.io/healthy-since`, `sickbay.io/remediation-requested-at`, `sickbay.io/drain-failed-at`,
`sickbay.io/allocatable-short-since`, the `sickbay.io/verification-*` marks) or a condition's own
transition time, so a new leader reads the clock the old one wrote, and a failover changes no decision
and restarts no delay.

Pure: observations and `now` in, a decision out. Each decision carries why, for act's log line.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from app.config import rules
from app.decide import conditions, drains, evictions, footprint, handoffs, verification
from app.domain import (
    HARDWARE_CLASSES,
    Condition,
    FaultClass,
    NodeState,
    PodState,
    RemediationParams,
    RemediationState,
    Signal,
    SignalSource,
    SignalStatus,
    freeze_mapping,
)

# A fault of these classes still firing on the node keeps it quarantined, whatever its state.
_HOLDS_THE_NODE = frozenset({c.value for c in HARDWARE_CLASSES} | {FaultClass.DRIVER_MISMATCH.value})
# Classes whose quarantine needs no repair: the node goes back once it is healthy (no drain, no remediator).
_NO_REPAIR = (FaultClass.DRIVER_MISMATCH, None)
ALLOCATABLE_ALERT = "GpuAllocatableBelowCapacity"


class Step(StrEnum):
    """Which decision below applies to an owned node this round."""

    STEP_BACK = "step-back"  # an operator uncordoned it: Sickbay removes its marks and leaves it
    RELEASE = "release"  # nothing left to repair: `release_step`
    RESUME_DRAIN = "resume-drain"  # quarantined or draining and no drain runs (a new leader, a lost task)
    DRAIN_AGAIN = "drain-again"  # drain-failed and no drain runs: `drain_again`
    FOLLOW_REMEDIATION = "follow-remediation"  # handed to a remediator: `remediation_step`
    VERIFY = "verify"  # remediated, its verification Job not passed yet: `verification.verification_step`
    NOTHING = "nothing"


@dataclass(frozen=True, slots=True)
class Next:
    step: Step
    # The class the node is quarantined for (its fault annotation, else its taint); None if unreadable.
    fault_class: FaultClass | None
    why: str = ""
    # RESUME_DRAIN and DRAIN_AGAIN: the remediator the drain hands the node to once it is empty.
    remediation: RemediationParams | None = None


@dataclass(frozen=True, slots=True)
class Release:
    why: str


@dataclass(frozen=True, slots=True)
class Mark:
    """Write the node's `healthy-since` annotation at `since`, or remove it when `since` is None."""

    since: datetime | None
    why: str


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do this round; `until` is when the answer changes by time alone, if it will."""

    why: str
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class Verify:
    why: str


@dataclass(frozen=True, slots=True)
class Escalate:
    """The remediation timed out: hand the node to the `replace` remediator instead (once: the request
    rewrites `remediation-requested`, and a node asked for `replace` has nothing left to escalate to)."""

    why: str
    remediation: RemediationParams


@dataclass(frozen=True, slots=True)
class DrainAgain:
    how: str  # "retried" (the retry is due) or "finished" (nothing is left to move): the drain's reason
    why: str


def fault_class(node: NodeState) -> FaultClass | None:
    """The class the node is held for: its `sickbay.io/fault` annotation, else its quarantine taint."""
    raw = footprint.fault_of(node).get("class") or (footprint.quarantined_class(node) or "")
    try:
        return FaultClass(str(raw)) if raw else None
    except ValueError:
        return None


def next_step(node: NodeState, *, drain_running: bool, policy: rules.Policy) -> Next:
    """Which decision applies to an owned node, from its state label, its class and whether a drain runs;
    a drain to start carries the remediator it hands the node to."""
    cls = fault_class(node)
    step = _next_step(node, cls, drain_running=drain_running, verify=policy.verification.enabled)
    if step.step in (Step.RESUME_DRAIN, Step.DRAIN_AGAIN) and cls is not None:
        return replace(step, remediation=handoffs.remediation_for(cls, policy))
    return step


def _next_step(node: NodeState, cls: FaultClass | None, *, drain_running: bool, verify: bool) -> Next:
    if "cordon" in footprint.added(node) and not node.unschedulable:
        why = "an operator uncordoned the node by hand; Sickbay removes its marks and steps back"
        return Next(Step.STEP_BACK, cls, why)
    match node.state:
        case RemediationState.QUARANTINED | RemediationState.DRAINING:
            if cls in _NO_REPAIR:
                return Next(Step.RELEASE, cls, "no repair needed: released once healthy")
            if drain_running:
                return Next(Step.NOTHING, cls, "its drain is running")
            return Next(Step.RESUME_DRAIN, cls, "no drain is running for it")
        case RemediationState.DRAIN_FAILED:
            if cls is None:
                return Next(Step.NOTHING, cls, "drain-failed with no readable class: waits for a human")
            if drain_running:
                return Next(Step.NOTHING, cls, "its drain is running")
            return Next(Step.DRAIN_AGAIN, cls, "drain-failed")
        case RemediationState.REMEDIATING:
            return Next(Step.FOLLOW_REMEDIATION, cls, "handed to its remediator")
        case RemediationState.VERIFYING if verify and not verification.verified(node):
            return Next(Step.VERIFY, cls, "remediation done: its verification Job has not passed yet")
        case RemediationState.VERIFYING:
            return Next(Step.RELEASE, cls, "remediation done: released once healthy")
        case _:
            return Next(Step.NOTHING, cls, "no remediation state")


def lost_condition(node: NodeState, step: Next, *, now: datetime) -> Condition | None:
    """GpuHealthy=False to write again when the write after the quarantine was lost (it is best-effort
    there); None when the node says it already, is verifying (on its way back), or Sickbay steps back."""
    if step.fault_class is None or step.step is Step.STEP_BACK or node.state is RemediationState.VERIFYING:
        return None
    current = node.condition(footprint.CONDITION)
    if current is not None and current.status == "False":
        return None
    return conditions.quarantined_condition(node, step.fault_class, now=now)


def health_problem(node: NodeState, *, firing: Collection[str]) -> str | None:
    """Why the node's GPUs do not report healthy, or None: a hardware or driver-mismatch fault still
    firing on it (`firing`: the classes of its alerts that fire), or GPU allocatable below capacity."""
    holding = sorted(set(firing) & _HOLDS_THE_NODE)
    if holding:
        return f"a {', '.join(holding)} fault still fires on it"
    if node.gpu_capacity > 0 and node.gpu_allocatable < node.gpu_capacity:
        return f"GPU allocatable {node.gpu_allocatable} is below capacity {node.gpu_capacity}"
    return None


def release_step(
    node: NodeState, *, firing: Collection[str], policy: rules.ReleasePolicy, now: datetime
) -> Release | Mark | Wait:
    """Release a node once it stayed healthy for `healthy_delay`, counted from its `healthy-since` mark.

    Healthy: no hardware or driver-mismatch fault still firing on it (`firing`: the classes of the
    alerts whose latest notification fires) and GPU allocatable back to capacity. The first round that
    sees it healthy writes the mark; a round that sees it unhealthy removes it, so the delay starts over.
    A mark that cannot be read is written again from now.
    """
    why = health_problem(node, firing=firing)
    if why is not None:
        if node.annotation(footprint.HEALTHY_SINCE) is not None:
            return Mark(since=None, why=f"not healthy: {why}; the healthy delay starts over")
        return Wait(why=f"not healthy: {why}")
    delay = policy.healthy_delay
    marked = footprint.time_of(node, footprint.HEALTHY_SINCE)
    since = marked or now
    if now - since >= delay:
        return Release(why=f"no active fault and healthy for {delay}; remediation complete")
    if marked is None:
        return Mark(since=now, why=f"healthy now; released at {(now + delay).isoformat()} if it stays so")
    return Wait(why=f"healthy since {since.isoformat()}", until=since + delay)


def remediation_step(
    node: NodeState, cls: FaultClass | None, *, policy: rules.Policy, now: datetime
) -> Verify | Escalate | Wait:
    """Verify once the remediator says done; escalate to `replace` once its timeout passed unanswered.

    The timeout counts from `sickbay.io/remediation-requested-at`. A remediation already escalated (the
    request says `replace`) and a `none` remediator (a human) wait without limit.
    """
    if node.annotation(footprint.REMEDIATION_DONE):
        return Verify(why="remediation reported done; verifying")
    if cls is None:
        return Wait(why="the node's fault class cannot be read")
    if cls is FaultClass.REPLACE or node.annotation(footprint.REMEDIATION_REQUESTED) == FaultClass.REPLACE:
        return Wait(why="replacement is asked for; nothing to escalate to")
    remediator = policy.remediator(cls)
    if remediator.kind == "none":
        return Wait(why=f"{cls.value} waits for a human (remediator 'none')")
    requested = footprint.time_of(node, footprint.REMEDIATION_REQUESTED_AT)
    if requested is None:
        return Wait(why="no readable remediation-requested-at: the timeout cannot be counted")
    deadline = requested + remediator.timeout
    if now > deadline:
        return Escalate(
            why=f"{cls.value} did not complete within {remediator.timeout}; escalating to replace",
            remediation=handoffs.remediation_for(FaultClass.REPLACE, policy),
        )
    return Wait(why=f"{cls.value} requested at {requested.isoformat()}", until=deadline)


def drain_again(
    node: NodeState, *, pods: Sequence[PodState], policy: rules.DrainPolicy, now: datetime
) -> DrainAgain | Wait:
    """Drain a `drain-failed` node again when its retry is due, or at once when nothing is left to move
    (a human moved the pods); the drain hands it off only if it empties it."""
    if drains.retry_due(node, policy, now=now):
        return DrainAgain(
            how="retried", why=f"retrying the drain ({node.annotation(footprint.DRAIN_FAILED)})"
        )
    only = footprint.drain_pods(node)  # a partial drain waits for its own pods only
    covered = {(p.namespace, p.name) for p in only} if only is not None else None
    if not any(
        evictions.drainable(p, policy) and (covered is None or (p.namespace, p.name) in covered) for p in pods
    ):
        return DrainAgain(how="finished", why="no pods left to drain; handing it off")
    last = footprint.time_of(node, footprint.DRAIN_FAILED_AT)
    until = last + policy.retry_after if last is not None and policy.retry_after is not None else None
    return Wait(why="drainable pods are still on it and its retry is not due", until=until)


@dataclass(frozen=True, slots=True)
class ClearSoft:
    """Set the soft-fault condition to `condition` (False): nothing has kept it up for its time to live."""

    condition: Condition
    why: str


def soft_condition_outlived(node: NodeState, *, policy: rules.TransientPolicy, now: datetime) -> bool:
    """The node's soft-fault condition is True and older than `condition_ttl`: worth asking whether any
    soft alert still fires on it (`soft_condition_step`)."""
    current = node.condition(policy.condition)
    if current is None or current.status != "True" or current.last_transition is None:
        return False
    return now - current.last_transition >= policy.condition_ttl


def soft_condition_step(
    node: NodeState, *, firing: Collection[str], policy: rules.TransientPolicy, now: datetime
) -> ClearSoft | Wait:
    """Clear a soft-fault condition nothing keeps up (agent events never resolve, and a resolution can be
    lost); it stays while any soft alert on the node still fires (`firing`: the classes of its alerts)."""
    if not soft_condition_outlived(node, policy=policy, now=now):
        return Wait(why=f"{policy.condition} is not True, or not for {policy.condition_ttl}")
    if FaultClass.TRANSIENT.value in firing:
        return Wait(why="a soft signal still fires on the node")
    why = f"no soft signal has fired on the node for {policy.condition_ttl}"
    return ClearSoft(condition=conditions.soft_cleared(policy.condition, message=why, now=now), why=why)


@dataclass(frozen=True, slots=True)
class MarkShort:
    """Write the node's `allocatable-short-since` annotation at `since`, or remove it when `since` is None."""

    since: datetime | None
    why: str


@dataclass(frozen=True, slots=True)
class SignalShort:
    """Emit `signal` (a reset-gpu fault for the node); `mark`: write its `since` on the node first."""

    signal: Signal
    mark: bool = False


def capacity_step(
    node: NodeState, *, policy: rules.ReleasePolicy, now: datetime, signalled: datetime | None = None
) -> MarkShort | SignalShort | Wait:
    """Turn GPU allocatable that stayed below capacity for `allocatable_grace` (the device plugin marked a
    GPU unhealthy) into a signal, once per drop: nothing else in Kubernetes links that to the pods on it.

    The grace counts from the node's `allocatable-short-since` mark, written the first round that sees
    the drop and removed when allocatable is back. `signalled`: the mark this replica already signalled
    for (a new leader signals a drop once more, under the same fingerprint, unless Sickbay holds the node).
    A node Sickbay holds is not signalled: its quarantine already covers the GPUs.
    """
    marked = footprint.time_of(node, footprint.ALLOCATABLE_SHORT_SINCE)
    present = node.annotation(footprint.ALLOCATABLE_SHORT_SINCE) is not None
    short = node.gpu_capacity > 0 and node.gpu_allocatable < node.gpu_capacity
    if not short or not node.managed:
        why = "allocatable is back to capacity" if node.managed else f"opted out ({footprint.MANAGED}=false)"
        return MarkShort(since=None, why=why) if present else Wait(why=why)
    grace = policy.allocatable_grace
    since = marked or now
    if now - since < grace:
        if marked is None:
            return MarkShort(
                since=now, why=f"{_short(node)}: signalled at {(now + grace).isoformat()} if so still"
            )
        return Wait(why=f"{_short(node)} since {since.isoformat()}", until=since + grace)
    if node.owned_by_sickbay or (marked is not None and signalled == marked):
        held = "Sickbay holds the node" if node.owned_by_sickbay else "signalled already"
        return MarkShort(since=now, why=f"{_short(node)}; {held}") if marked is None else Wait(why=held)
    return SignalShort(
        signal=_allocatable_signal(node, since=since, grace=grace, now=now), mark=marked is None
    )


def _short(node: NodeState) -> str:
    return f"GPU allocatable {node.gpu_allocatable} below capacity {node.gpu_capacity}"


def _allocatable_signal(node: NodeState, *, since: datetime, grace: timedelta, now: datetime) -> Signal:
    reason = f"{_short(node)} for longer than {grace}: the device plugin marked a GPU unhealthy"
    return Signal(
        source=SignalSource.ALLOCATABLE,
        fingerprint=f"allocatable-{node.name}-{int(since.timestamp())}",
        status=SignalStatus.FIRING,
        name=ALLOCATABLE_ALERT,
        starts_at=since,
        received_at=now,
        node=node.name,
        labels=freeze_mapping(
            {"alertname": ALLOCATABLE_ALERT, "node": node.name, "sickbay_class": "reset-gpu"}
        ),
        annotations=freeze_mapping({"summary": reason}),
    )
