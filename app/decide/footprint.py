"""Sickbay's footprint on a Node: the taints, labels, annotations and cordon it adds, and how to undo them.

This is the contract with operators: every mark is visible in `kubectl`, attributable to Sickbay, and
removed exactly on release. What Sickbay itself added is written down on the node (`sickbay.io/added`),
so release never removes what an operator set (their own cordon, their own taints).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from app.domain import (
    Fault,
    FaultClass,
    NodePatch,
    NodeState,
    PodRef,
    RemediationState,
    RiskLevel,
    Taint,
)

PREFIX = "sickbay.io/"
UNHEALTHY = "sickbay.io/unhealthy"
AT_RISK = "sickbay.io/at-risk"
STATE = "sickbay.io/state"
REASON = "sickbay.io/reason"
SINCE = "sickbay.io/since"
FAULT = "sickbay.io/fault"
OWNED_BY = "sickbay.io/owned-by"
ADDED = "sickbay.io/added"
REMEDIATION_REQUESTED = "sickbay.io/remediation-requested"
REMEDIATION_REQUESTED_AT = "sickbay.io/remediation-requested-at"
REMEDIATION_DONE = "sickbay.io/remediation-done"
# Why the drain could not empty the node, and when it last tried: written with the `drain-failed` state,
# removed when the node leaves it (the next drain, a hand-off, a release).
DRAIN_FAILED = "sickbay.io/drain-failed"
DRAIN_FAILED_AT = "sickbay.io/drain-failed-at"
# Since when reconciliation has seen the node healthy, in a state it may be released from: the healthy
# delay counts from here, on whichever replica leads. Removed when it stops being healthy, on any state
# change or new quarantine (the delay starts over), and on release.
HEALTHY_SINCE = "sickbay.io/healthy-since"
# Since when reconciliation has seen the node's GPU allocatable below its capacity: the allocatable grace
# counts from here, on whichever replica leads. An observation of any managed GPU node, ours or not, so a
# release leaves it; removed when allocatable is back (or the node opts out).
ALLOCATABLE_SHORT_SINCE = "sickbay.io/allocatable-short-since"
# Since when the node's drain runs: the drain deadline counts from here, on whichever replica leads, so a
# drain a new leader resumes keeps the deadline the old one set. Written when the drain starts (the node
# goes `draining`), kept while it is drained, removed when it moves on (drain-failed, a hand-off) and on
# release: a drain retried after `drain-failed` is a new drain, with a deadline of its own.
DRAINING_SINCE = "sickbay.io/draining-since"
# Verify before release (`app.decide.verification`), while the node is `verifying`: the Job that runs now
# and when it was asked for, how many Jobs failed in a row, the Job that passed, and why verification gave
# up (nothing left to escalate to: a human decides). Removed on any other state and on release.
VERIFICATION_JOB = "sickbay.io/verification-job"
VERIFICATION_STARTED_AT = "sickbay.io/verification-started-at"
VERIFICATION_FAILURES = "sickbay.io/verification-failures"
VERIFIED = "sickbay.io/verified"
VERIFICATION_GAVE_UP = "sickbay.io/verification-gave-up"
VERIFICATION_MARKS = (
    VERIFICATION_JOB,
    VERIFICATION_STARTED_AT,
    VERIFICATION_FAILURES,
    VERIFIED,
    VERIFICATION_GAVE_UP,
)
# The pods a partial drain covers ("ns/name,ns/name"): written when it starts, so a drain resumed by a new
# leader or retried after `drain-failed` moves those pods, not every GPU pod; absent for a whole-node drain.
# Removed by a whole-node drain (a graver fault) and on release.
DRAIN_PODS = "sickbay.io/drain-pods"
MANAGED = "sickbay.io/managed"
CONDITION = "GpuHealthy"
# A lasting soft (transient) signal; the type is a policy setting (`transient.condition`), this its default.
SOFT_CONDITION = "GpuSoftFault"
DRAIN_FAILED_REASON = "DrainFailed"  # the GpuHealthy reason while the node is `drain-failed`
OUR_ANNOTATIONS = (
    REASON,
    SINCE,
    FAULT,
    OWNED_BY,
    ADDED,
    REMEDIATION_REQUESTED,
    REMEDIATION_REQUESTED_AT,
    REMEDIATION_DONE,
    DRAIN_FAILED,
    DRAIN_FAILED_AT,
    HEALTHY_SINCE,
    DRAINING_SINCE,
    *VERIFICATION_MARKS,
    DRAIN_PODS,
)
_DRAIN_FAILED_MARKS = (DRAIN_FAILED, DRAIN_FAILED_AT)
_SEVERITY = {
    FaultClass.DRIVER_MISMATCH: 1,
    FaultClass.RESET_GPU: 2,
    FaultClass.REBOOT_NODE: 3,
    FaultClass.REPLACE: 4,
}


def quarantined_class(node: NodeState) -> FaultClass | None:
    for taint in node.taints:
        if taint.key == UNHEALTHY:
            try:
                return FaultClass(taint.value)
            except ValueError:
                return None
    return None


def needs_quarantine(node: NodeState, fault_class: FaultClass, *, cordon: bool = False) -> bool:
    """False when the node already carries our quarantine for this class or a graver one; a quarantine
    that wants the cordon (`cordon`) is still needed where a partial drain left the node uncordoned."""
    current = quarantined_class(node)
    if current is None:
        return True
    if cordon and current is fault_class and partially_drained(node):
        return True
    return _SEVERITY.get(fault_class, 0) > _SEVERITY.get(current, 0)


def partially_drained(node: NodeState) -> bool:
    """Quarantined for a GPU reset whose drain kept the node's other work: tainted, never cordoned by us."""
    return (
        quarantined_class(node) is FaultClass.RESET_GPU
        and "cordon" not in added(node)
        and not node.unschedulable
    )


def quarantine_patch(
    node: NodeState,
    fault: Fault,
    *,
    now: datetime,
    identity: str,
    cordon: bool = True,
    effect: str = "NoSchedule",
) -> NodePatch:
    """Taint, cordon, label and annotate in one desired-state patch, recording what we ourselves added."""
    cls = fault.fault_class
    taints = (*(t for t in node.taints if t.key != UNHEALTHY), Taint(UNHEALTHY, cls.value, effect))
    marks = set(added(node))
    marks.add("taint")
    will_cordon = cordon and not node.unschedulable
    if will_cordon:
        marks.add("cordon")
    since = node.annotation(SINCE) if node.annotation(OWNED_BY) else None
    return NodePatch(
        node=node.name,
        resource_version=node.resource_version,
        labels=((STATE, RemediationState.QUARANTINED.value),),
        annotations=(
            (ADDED, ",".join(sorted(marks))),
            (FAULT, fault_annotation(fault)),
            (OWNED_BY, identity),
            (REASON, one_line(fault.reason)),
            (SINCE, since or now.isoformat()),
            # A new fault: whatever healthy time was counted before it no longer counts.
            *(((HEALTHY_SINCE, ""),) if node.annotation(HEALTHY_SINCE) is not None else ()),
        ),
        taints=taints,
        unschedulable=True if will_cordon else None,
    )


def state_patch(node: NodeState, state: RemediationState, **annotations: str) -> NodePatch:
    """The state label and `sickbay.io/<key>` annotations; leaving `drain-failed` removes its marks,
    leaving `draining` its start (`drain_start_patch` writes it), and the healthy clock starts over (it
    counts only while the node stays where it may be released from)."""
    wanted = {PREFIX + k.replace("_", "-"): v for k, v in annotations.items()}
    stale = (
        (HEALTHY_SINCE,) if state is RemediationState.DRAIN_FAILED else (*_DRAIN_FAILED_MARKS, HEALTHY_SINCE)
    )
    if state is not RemediationState.DRAINING:
        stale = (*stale, DRAINING_SINCE)
    if state is not RemediationState.VERIFYING:  # a new remediation is verified afresh
        stale = (*stale, *VERIFICATION_MARKS)
    for key in stale:
        if node.annotation(key) is not None:
            wanted.setdefault(key, "")
    pairs = tuple(sorted(wanted.items()))
    return NodePatch(
        node=node.name,
        resource_version=node.resource_version,
        labels=((STATE, state.value),),
        annotations=pairs,
    )


def drain_start_patch(node: NodeState, *, now: datetime, only: Sequence[PodRef] | None = None) -> NodePatch:
    """Mark the node `draining` with when its drain started: the start already on it when a drain is
    resumed (a new leader, a lost task), so its deadline stays the one first set; else (or unreadable) now.
    `only`: the pods a partial drain covers (kept on the node, `DRAIN_PODS`); None: a whole-node drain."""
    since = time_of(node, DRAINING_SINCE) or now
    covered = ",".join(f"{p.namespace}/{p.name}" for p in only) if only is not None else ""
    extra = {"drain_pods": covered} if covered or node.annotation(DRAIN_PODS) is not None else {}
    return state_patch(node, RemediationState.DRAINING, draining_since=since.isoformat(), **extra)


def drain_pods(node: NodeState) -> list[PodRef] | None:
    """The pods the node's partial drain covers, or None for a whole-node drain (or a garbled mark)."""
    raw = node.annotation(DRAIN_PODS)
    if not raw:
        return None
    pods = []
    for item in raw.split(","):
        namespace, _, name = item.strip().partition("/")
        if not namespace or not name:
            return None  # garbled: drain the whole node rather than guess
        pods.append(PodRef(namespace=namespace, name=name))
    return pods


def release_patch(node: NodeState) -> NodePatch:
    """Remove exactly what Sickbay added; an operator's own cordon and taints stay."""
    ours = added(node)
    taints = tuple(t for t in node.taints if t.key not in (UNHEALTHY, AT_RISK))
    return NodePatch(
        node=node.name,
        resource_version=node.resource_version,
        labels=((STATE, ""),),
        annotations=tuple((key, "") for key in OUR_ANNOTATIONS if node.annotation(key) is not None),
        taints=taints if taints != node.taints else None,
        unschedulable=False if "cordon" in ours and node.unschedulable else None,
    )


def at_risk_level(node: NodeState) -> RiskLevel | None:
    """The level of the node's at-risk taint, if it carries one Sickbay could have written."""
    for taint in node.taints:
        if taint.key == AT_RISK:
            try:
                return RiskLevel(taint.value)
            except ValueError:
                return None
    return None


def at_risk_effect(level: RiskLevel) -> str:
    return "NoSchedule" if level is RiskLevel.ACT else "PreferNoSchedule"


def at_risk_taint(level: RiskLevel) -> str:
    """The taint as `kubectl describe` shows it, for reasons and Events."""
    return f"{AT_RISK}={level.value}:{at_risk_effect(level)}"


def at_risk_patch(node: NodeState, *, level: RiskLevel, reason: str, now: datetime) -> NodePatch:
    """The at-risk taint at `level`, the `at-risk` state and why, in one write; other taints stay.

    The node is not marked `owned-by`: it is still in service, so reconciliation never drains or
    releases it. A remediation state (a node mid-quarantine) is never overwritten by `at-risk`.
    """
    taints = (
        *(t for t in node.taints if t.key != AT_RISK),
        Taint(AT_RISK, level.value, at_risk_effect(level)),
    )
    ours = node.state in (None, RemediationState.AT_RISK)
    since = node.annotation(SINCE) if node.state is RemediationState.AT_RISK else None
    return NodePatch(
        node=node.name,
        resource_version=node.resource_version,
        labels=((STATE, RemediationState.AT_RISK.value),) if ours else (),
        annotations=((REASON, one_line(reason)), (SINCE, since or now.isoformat())) if ours else (),
        taints=taints,
    )


def clear_at_risk_patch(node: NodeState) -> NodePatch:
    """Remove the at-risk taint and, where the node is only at risk, the state and reason that came with it."""
    taints = tuple(t for t in node.taints if t.key != AT_RISK)
    ours = node.state is RemediationState.AT_RISK and not node.owned_by_sickbay
    return NodePatch(
        node=node.name,
        resource_version=node.resource_version,
        labels=((STATE, ""),) if ours else (),
        annotations=tuple((key, "") for key in (REASON, SINCE) if node.annotation(key) is not None)
        if ours
        else (),
        taints=taints if taints != node.taints else None,
    )


def healthy_mark_patch(node: NodeState, *, since: datetime | None) -> NodePatch:
    """Set the node's `healthy-since` mark, or remove it (`since` None); guarded by the read's version."""
    return time_mark_patch(node, HEALTHY_SINCE, since=since)


def time_mark_patch(node: NodeState, key: str, *, since: datetime | None) -> NodePatch:
    """Set one of the node's timer annotations (`healthy-since`, `allocatable-short-since`) to `since`, or
    remove it (`since` None); guarded by the read's version, so a node changed since is marked next round."""
    return NodePatch(
        node=node.name,
        resource_version=node.resource_version,
        annotations=((key, since.isoformat() if since is not None else ""),),
    )


def time_of(node: NodeState, key: str) -> datetime | None:
    """The time in one of the node's annotations; None when absent or unreadable. One written by hand
    without an offset is read as UTC, as Sickbay writes it."""
    raw = node.annotation(key)
    if not raw:
        return None
    try:
        at = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def fault_annotation(fault: Fault) -> str:
    """Compact JSON for the `sickbay.io/fault` node annotation (`fault_of` reads it back)."""
    signal = fault.signal
    body = {
        "class": fault.fault_class.value,
        "gpu": signal.gpu,
        "xid": signal.xid,
        "source": signal.source.value,
        "fingerprint": signal.fingerprint,
    }
    return json.dumps({k: v for k, v in body.items() if v is not None}, separators=(",", ":"))


def fault_of(node: NodeState) -> dict[str, object]:
    raw = node.annotation(FAULT)
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def added(node: NodeState) -> tuple[str, ...]:
    """What Sickbay itself added to the node (`taint`, `cordon`), as `sickbay.io/added` says."""
    raw = node.annotation(ADDED) or ""
    return tuple(part for part in raw.split(",") if part)


def one_line(text: str) -> str:
    return " ".join(text.split())


def camel(value: str) -> str:
    return "".join(part.capitalize() for part in value.split("-"))
