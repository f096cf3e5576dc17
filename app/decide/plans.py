"""Fault → Plan: the default plan of each fault class, on the workload and hardware tracks.

Pure: takes the fault, the policy and `now`, returns a Plan value. Node state, gates and backoff history
are applied by the remediation layer that carries plans out; this module says what *should* happen.
"""

from __future__ import annotations

from datetime import datetime

from app.config import rules
from app.domain import Action, ActionKind, Fault, FaultClass, Plan, Track

REMEDIATION = {
    FaultClass.RESET_GPU: "reset-gpu",
    FaultClass.REBOOT_NODE: "reboot-node",
    FaultClass.REPLACE: "replace",
}
UNHEALTHY_TAINT = "sickbay.io/unhealthy"


def plan_for(fault: Fault, *, policy: rules.Policy, now: datetime) -> Plan:
    cls = fault.fault_class
    node = fault.node
    if not fault.signal.firing:
        return _record(
            fault, now, "resolved signal: recorded; release is decided by reconciliation, not here"
        )
    if node is None:
        return _record(fault, now, "the signal names no node, so there is nothing to act on: recorded")
    match cls:
        case FaultClass.IGNORE:
            return _record(fault, now, "informational: recorded as a feature for the model")
        case FaultClass.RESTART_WORKLOAD | FaultClass.TRANSIENT:
            return _retry(fault, policy=policy, now=now)
        case FaultClass.RESET_GPU | FaultClass.REBOOT_NODE | FaultClass.REPLACE:
            return _hardware(fault, now=now)
        case FaultClass.DRIVER_MISMATCH:
            return Plan(
                fault=fault,
                decided_at=now,
                summary=f"taint {node} NoSchedule until its driver matches its pool; no drain",
                actions=(
                    Action(
                        kind=ActionKind.TAINT_NO_SCHEDULE,
                        track=Track.HARDWARE,
                        node=node,
                        reason=fault.reason,
                        params=((UNHEALTHY_TAINT, cls.value),),
                    ),
                ),
            )
        case FaultClass.AT_RISK:
            return Plan(
                fault=fault,
                decided_at=now,
                summary=f"steer new work away from {node} (predicted degradation)",
                actions=(
                    Action(
                        kind=ActionKind.TAINT_AT_RISK, track=Track.HARDWARE, node=node, reason=fault.reason
                    ),
                ),
            )
        case FaultClass.DEPENDS:
            return _record(fault, now, "an undecoded 'depends' fault: recorded, no action")


def _record(fault: Fault, now: datetime, summary: str) -> Plan:
    return Plan(
        fault=fault,
        decided_at=now,
        summary=summary,
        actions=(Action(kind=ActionKind.RECORD, track=Track.RECORD, node=fault.node, reason=fault.reason),),
    )


def _retry(fault: Fault, *, policy: rules.Policy, now: datetime) -> Plan:
    pod = fault.signal.pod
    if pod is None:
        return _record(
            fault,
            now,
            f"{fault.fault_class.value} without a pod on the signal: recorded, re-checked on repeat",
        )
    initial = policy.retry.initial
    return Plan(
        fault=fault,
        decided_at=now,
        summary=f"restart {pod} (attempt 1, backoff from {initial.total_seconds():g}s); the node stays in the pool",
        actions=(
            Action(
                kind=ActionKind.RESTART_POD,
                track=Track.WORKLOAD,
                node=fault.node,
                pod=pod,
                reason=fault.reason,
                not_before=now,
            ),
        ),
    )


def _hardware(fault: Fault, *, now: datetime) -> Plan:
    node = fault.node
    cls = fault.fault_class
    remediation = REMEDIATION[cls]
    actions = [
        Action(
            kind=ActionKind.QUARANTINE,
            track=Track.HARDWARE,
            node=node,
            reason=fault.reason,
            params=((UNHEALTHY_TAINT, cls.value),),
        ),
        Action(
            kind=ActionKind.DRAIN, track=Track.HARDWARE, node=node, reason="move GPU pods off the sick node"
        ),
        Action(
            kind=ActionKind.REQUEST_REMEDIATION,
            track=Track.HARDWARE,
            node=node,
            reason=f"hand the node to the {remediation} remediator",
            params=(("remediation", remediation),),
        ),
    ]
    if cls is not FaultClass.REPLACE:
        actions.append(
            Action(kind=ActionKind.VERIFY, track=Track.HARDWARE, node=node, reason="verify before release")
        )
    if fault.signal.pod is not None:
        actions.insert(
            0,
            Action(
                kind=ActionKind.EVICT_POD,
                track=Track.WORKLOAD,
                node=node,
                pod=fault.signal.pod,
                reason="requeue the workload that was on the faulty GPU",
            ),
        )
    release = "never auto-released" if cls is FaultClass.REPLACE else "released after verification"
    return Plan(
        fault=fault,
        decided_at=now,
        summary=f"quarantine {node}, drain GPU pods, request {remediation}; {release}",
        actions=tuple(actions),
    )
