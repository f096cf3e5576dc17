"""The node conditions Sickbay writes: `GpuHealthy` (quarantined, drain failed, healthy again) and the soft
condition (`GpuSoftFault` by default) a lasting transient signal raises and its clearing.

Values only, built from a fault or the node's own annotations (`footprint`); `app.act.nodes` writes them
through the node status. Messages are one line and at most 1,000 characters (the API server keeps what a
condition carries, and a status page shows it).
"""

from __future__ import annotations

from datetime import datetime

from app.decide.footprint import CONDITION, DRAIN_FAILED_REASON, REASON, camel, one_line
from app.domain import Condition, Fault, FaultClass, NodeState


def unhealthy_condition(fault: Fault, *, now: datetime) -> Condition:
    return Condition(
        type=CONDITION,
        status="False",
        reason=camel(fault.fault_class.value),
        message=one_line(fault.reason)[:1000],
        last_transition=now,
    )


def quarantined_condition(node: NodeState, fault_class: FaultClass, *, now: datetime) -> Condition:
    """GpuHealthy=False for a node Sickbay quarantined, rebuilt from the node's own annotations."""
    return Condition(
        type=CONDITION,
        status="False",
        reason=camel(fault_class.value),
        message=one_line(node.annotation(REASON) or fault_class.value)[:1000],
        last_transition=now,
    )


def soft_condition(kind: str, *, reason: str, message: str, now: datetime) -> Condition:
    """`<kind>=True`: a soft signal lasts on this node; the node stays schedulable."""
    return Condition(
        type=kind, status="True", reason=reason, message=one_line(message)[:1000], last_transition=now
    )


def soft_cleared(kind: str, *, message: str, now: datetime) -> Condition:
    return Condition(
        type=kind,
        status="False",
        reason="NoSoftFault",
        message=one_line(message)[:1000],
        last_transition=now,
    )


def drain_failed_condition(fault_class: FaultClass, *, why: str, now: datetime) -> Condition:
    """GpuHealthy=False while the drain could not empty the node: the class stays in the message."""
    return Condition(
        type=CONDITION,
        status="False",
        reason=DRAIN_FAILED_REASON,
        message=one_line(f"{fault_class.value}: not handed off, the drain failed: {why}")[:1000],
        last_transition=now,
    )


def healthy_condition(*, now: datetime, message: str) -> Condition:
    return Condition(
        type=CONDITION, status="True", reason="GpusHealthy", message=message, last_transition=now
    )
