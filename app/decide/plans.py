"""Fault + situation → Plan, on two independent tracks.

Hardware track: quarantine the node (one patch), drain its GPU pods, hand it to a remediator; release is
the reconciler's business, never a reaction to a resolved alert (a resolved *risk* is different: the
proactive ladder in `proactive` removes its own taint). Workload track: requeue the affected pods,
restart whole gangs where policy says so, or — when the workload itself failed (an application XID) —
restart the one pod the cluster confirms on that GPU, with backoff, escalating to the hardware track when
the fault follows the GPU. A transient signal restarts nothing: `soft` re-checks it and makes a lasting
one visible. Pure: the caller gathers the situation and `now`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from app.config import rules
from app.decide import (
    attribution,
    footprint,
    gates,
    groups,
    handoffs,
    partial,
    proactive,
    queueing,
    restart_policy,
    soft,
)
from app.decide.situation import Situation
from app.domain import (
    Action,
    ActionKind,
    Fault,
    FaultClass,
    OwnerRef,
    Plan,
    PodState,
    QuarantineParams,
    RequeueParams,
    RestartParams,
    Track,
)

DUPLICATE_RULE = "duplicate"  # set by classification; decide does not import classify


def plan_for(
    fault: Fault, *, policy: rules.Policy, now: datetime, situation: Situation | None = None
) -> Plan:
    situation = situation or Situation.unknown()
    node = fault.node
    if fault.fault_class is FaultClass.AT_RISK:
        return proactive.plan_at_risk(fault, policy=policy, now=now, situation=situation)
    found = attribution.attribute(fault.signal, situation, policy.drain)
    workload = groups.workload_key(found.pod, found.named, policy.workloads)
    if not fault.signal.firing:
        if fault.fault_class is FaultClass.TRANSIENT and node is not None:
            return soft.plan_resolved(fault, policy=policy.transient, now=now, situation=situation)
        return Plan.record_only(
            fault, now, "resolved signal: recorded; release is decided by reconciliation, not here"
        )
    if node is None:
        return Plan.record_only(
            fault, now, "the signal names no node, so there is nothing to act on: recorded"
        )
    if fault.rule == DUPLICATE_RULE:
        return Plan.record_only(
            fault, now, "already reported through the other path: recorded, not acted on twice"
        )
    if situation.node is not None and not situation.node.managed:
        return Plan.record_only(fault, now, f"{node} is opted out ({footprint.MANAGED}=false): recorded only")
    match fault.fault_class:
        case FaultClass.IGNORE | FaultClass.DEPENDS:
            return Plan.record_only(fault, now, "informational: recorded as a feature for the model")
        case FaultClass.RESTART_WORKLOAD:
            return _workload_failure(
                fault, policy=policy, now=now, situation=situation, found=found, workload=workload
            )
        case FaultClass.TRANSIENT:
            visible = soft.plan_firing(fault, policy=policy, now=now, situation=situation, workload=workload)
            if isinstance(visible, soft.Escalate):
                plan = _hardware(
                    visible.fault, policy=policy, now=now, situation=situation, workload=workload
                )
                return replace(plan, actions=(*plan.actions, visible.condition))
            return visible
        case FaultClass.RESET_GPU | FaultClass.REBOOT_NODE | FaultClass.REPLACE:
            return _hardware(fault, policy=policy, now=now, situation=situation, workload=workload)
        case FaultClass.DRIVER_MISMATCH:
            return Plan(
                fault=fault,
                decided_at=now,
                summary=f"taint {node} NoSchedule until its driver matches its pool; no drain",
                actions=(
                    Action(
                        kind=ActionKind.QUARANTINE,
                        track=Track.HARDWARE,
                        node=node,
                        reason=fault.reason,
                        params=QuarantineParams(fault.fault_class, cordon=False),
                    ),
                ),
            )
        case FaultClass.AT_RISK:  # planned above, resolved signals included
            raise AssertionError("unreachable")


def _workload_failure(
    fault: Fault,
    *,
    policy: rules.Policy,
    now: datetime,
    situation: Situation,
    found: attribution.Attribution,
    workload: str | None,
) -> Plan:
    """The workload itself failed: restart it with backoff, if the cluster confirms it is the GPU's pod;
    escalate to the hardware track when the fault follows the GPU."""
    signal = fault.signal
    verdict = restart_policy.follows_the_gpu(
        situation.history,
        gpu=signal.gpu,
        workload=workload,
        fingerprint=signal.fingerprint,
        now=now,
        policy=policy.escalation,
    )
    if verdict.escalate:
        escalated = replace(
            fault,
            fault_class=FaultClass(policy.escalation.escalate_to),
            reason=f"{verdict.reason}; escalated from {fault.fault_class.value} ({fault.reason})",
            rule="escalation",
        )
        return _hardware(escalated, policy=policy, now=now, situation=situation, workload=workload)
    pod = found.pod
    if pod is None:
        return Plan.record_only(
            fault, now, f"{fault.fault_class.value}, no pod restarted: {found.how}", workload=workload
        )
    attempt, previous = restart_policy.restart_attempt(
        situation.history,
        workload=workload,
        fingerprint=signal.fingerprint,
        now=now,
        window=policy.escalation.window,
    )
    delay = restart_policy.backoff(attempt, policy.retry)
    not_before = max(now, previous + delay) if previous is not None else now
    when = "now" if not_before <= now else f"at {not_before.isoformat()} (backoff {delay.total_seconds():g}s)"
    return Plan(
        fault=fault,
        decided_at=now,
        summary=f"restart {pod.ref} {when}, attempt {attempt} ({found.how}); the node stays in the pool",
        actions=(
            Action(
                kind=ActionKind.RESTART_POD,
                track=Track.WORKLOAD,
                node=fault.node,
                pod=pod.ref,
                reason=fault.reason,
                params=RestartParams(pod.uid),
                not_before=not_before,
            ),
        ),
        workload=workload,
    )


def _hardware(
    fault: Fault, *, policy: rules.Policy, now: datetime, situation: Situation, workload: str | None
) -> Plan:
    node = fault.node
    assert node is not None
    if fault.fault_class is not FaultClass.REPLACE and gates.attempts_exceeded(
        situation.quarantines, policy=policy.budgets, now=now
    ):
        fault = replace(
            fault,
            fault_class=FaultClass.REPLACE,
            reason=f"{node} was remediated {len(situation.quarantines)} times this week "
            f"(cap {policy.budgets.attempts_per_week}): hand it off for replacement; {fault.reason}",
            rule="attempt-cap",
        )
    cls = fault.fault_class
    remediation = handoffs.remediation_for(cls, policy)
    chosen = partial.choose(fault, situation, policy.drain)
    # A node under a partial drain is widened to a full one when another of its GPUs faults (`partial`);
    # the same GPU again is the reset already under way.
    again = situation.node is not None and partial.resetting(situation.node, fault.signal.gpu)
    if situation.node is not None and not footprint.needs_quarantine(
        situation.node, cls, cordon=not (chosen.partial or again)
    ):
        current = footprint.quarantined_class(situation.node)
        return Plan.record_only(
            fault,
            now,
            f"{node} is already quarantined for {current.value if current else '?'}",
            workload=workload,
        )
    actions = [
        Action(
            kind=ActionKind.QUARANTINE,
            track=Track.HARDWARE,
            node=node,
            reason=fault.reason,
            # A partial drain keeps the node's healthy work running: the NoSchedule taint keeps new work
            # off while the reset is pending, and no cordon marks the node as emptied.
            params=QuarantineParams(cls, cordon=not chosen.partial),
        )
    ]
    actions += _workload_track(fault, policy=policy, situation=situation, chosen=chosen)
    actions.append(
        Action(
            kind=ActionKind.REQUEST_REMEDIATION,
            track=Track.HARDWARE,
            node=node,
            reason=f"hand the node to the {cls.value} remediator ({remediation.remediator})",
            params=remediation,
        )
    )
    if cls is FaultClass.REPLACE:
        release = "never auto-released"
    elif policy.verification.enabled:
        release = "released after a verification Job passes and the healthy delay"
    else:
        release = "released after the healthy delay"
    evictions = sum(1 for a in actions if a.kind is ActionKind.EVICT_POD)
    gang = sum(1 for a in actions if a.kind is ActionKind.RESTART_GANG)
    queued = sum(1 for a in actions if a.kind is ActionKind.REQUEUE_WORKLOAD)
    drain = f"evict {evictions} GPU pod(s)" if situation.node is not None else "drain GPU pods"
    gang_text = f", restart {gang} gang pod(s) elsewhere" if gang else ""
    how = f" ({chosen.why})" if situation.node is not None else ""
    gang_text += f", requeue {queued} job(s) through Kueue" if queued else ""
    return Plan(
        fault=fault,
        decided_at=now,
        summary=f"quarantine {node}, {drain}{gang_text}, request {cls.value}; {release}{how}",
        actions=tuple(actions),
        workload=workload,
    )


def _workload_track(
    fault: Fault, *, policy: rules.Policy, situation: Situation, chosen: partial.EvictionSet
) -> list[Action]:
    node = fault.node
    if situation.node is None:
        return [
            Action(
                kind=ActionKind.DRAIN, track=Track.WORKLOAD, node=node, reason="move GPU pods off the node"
            )
        ]
    actions: list[Action] = []
    restarted: set[str] = set()
    for pod in chosen.evict:
        group = groups.group_of(pod, policy.workloads)
        mode = policy.workloads.policy_for(group.kind) if group else policy.workloads.default_policy
        if mode == "leave-to-controller":
            continue
        why = f"requeue {pod.namespace}/{pod.name} off the faulty node" + (f" ({group.key})" if group else "")
        # The pod is evicted either way: the hardware track hands the node off only once it is empty.
        actions.append(
            Action(kind=ActionKind.EVICT_POD, track=Track.WORKLOAD, node=node, pod=pod.ref, reason=why)
        )
        job = queueing.queued_job(pod)
        if queueing.requeue_path(pod) == "kueue" and job is not None:
            key = f"kueue:{pod.namespace}/{job.uid}"
            if key not in restarted:  # one requeue per job; Kueue stops all its pods, so no gang restart
                restarted.add(key)
                if group is not None:
                    restarted.add(group.key)
                actions.append(_requeue(pod, job, node=node))
            continue
        if mode == "restart-gang" and group is not None and group.key not in restarted:
            restarted.add(group.key)
            for member in groups.members(group, situation.group_pods, policy.workloads):
                if member.node == node or member.terminal:
                    continue
                actions.append(
                    Action(
                        kind=ActionKind.RESTART_GANG,
                        track=Track.WORKLOAD,
                        node=member.node,
                        pod=member.ref,
                        reason=f"restart the gang {group.key}: a member lost its node, so the survivors "
                        "would hang on a collective until a timeout",
                        params=RestartParams(member.uid),
                    )
                )
    return actions


def _requeue(pod: PodState, job: OwnerRef, *, node: str | None) -> Action:
    queue = queueing.queue_of(pod)
    return Action(
        kind=ActionKind.REQUEUE_WORKLOAD,
        track=Track.WORKLOAD,
        node=node,
        pod=pod.ref,
        reason=f"requeue {job.kind} {pod.namespace}/{job.name} through its Kueue queue {queue}: its quota is "
        "released and it is admitted again, off the quarantined node",
        params=RequeueParams(job, namespace=pod.namespace, queue=queue),
    )
