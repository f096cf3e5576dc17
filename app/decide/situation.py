"""What decide knows about the world when it plans: the node, its pods, the groups, recent history; and
which of it a fault's plan needs read (`reads_for`).

Gathered by the caller (`service.observing` reads the cluster and the journal as `reads_for` says);
`Situation.unknown()` is what `explain` uses without a cluster, and decide then plans from the fault alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app.config import rules
from app.decide import gates, restart_policy
from app.domain import Fault, FaultClass, NodeState, PastFault, PodRef, PodState


@dataclass(frozen=True, slots=True)
class Reads:
    """What to read for planning one firing fault on its node: no more than its plan can use."""

    # The node's past faults since then (restart backoff, escalation when a fault follows the GPU).
    history_since: datetime | None = None
    # The node's quarantines since then (the weekly cap on remediation attempts).
    quarantines_since: datetime | None = None
    # The node and its pods.
    cluster: bool = False
    # The pods of every restart-gang group with a member on the node, wherever they run.
    gangs: bool = False
    # The GPU fleet an at-risk fault's proactive budget is measured against.
    proactive_fleet: bool = False


def reads_for(fault: Fault, *, policy: rules.Policy, now: datetime) -> Reads:
    """Which reads the plan of `fault` (firing) depends on, at `now`."""
    if fault.node is None:
        return Reads()
    cls = fault.fault_class
    history = now - policy.escalation.window if cls in restart_policy.RETRY_CLASSES else None
    quarantines = now - gates.ATTEMPT_WINDOW if cls.is_hardware else None
    if cls is FaultClass.TRANSIENT and policy.transient.escalate_to is None:
        # A soft signal that cannot escalate touches no pod and no node spec: its plan needs the history,
        # not the cluster, and a storm of soft alerts must not spend the API budget fatal faults need.
        return Reads(history_since=history, quarantines_since=quarantines)
    return Reads(
        history_since=history,
        quarantines_since=quarantines,
        cluster=True,
        gangs=cls.is_hardware,
        proactive_fleet=cls is FaultClass.AT_RISK and fault.signal.firing,
    )


@dataclass(frozen=True, slots=True)
class Situation:
    node: NodeState | None
    pods_on_node: tuple[PodState, ...] = ()
    # Pods of the groups that the node's (or the signal's) pods belong to, on any node.
    group_pods: tuple[PodState, ...] = ()
    history: tuple[PastFault, ...] = ()
    # When this node was quarantined before (the last week): the weekly attempt cap reads these.
    quarantines: tuple[datetime, ...] = ()
    # For an at-risk fault: the GPU fleet the proactive budget is measured against (None: not read).
    proactive: gates.ProactiveFleet | None = None
    # For an at-risk fault: why the proactive ladder runs in shadow (records what it would do, writes no
    # taint or Event; it may still remove a taint it set before), or None when it acts.
    shadow: str | None = None
    # For a resolved transient signal: fingerprints of the soft alerts still firing on the node.
    soft_firing: tuple[str, ...] = ()
    # Confirmed GPU index → pod facts on the node beyond the signal's own (a partial drain with
    # `drain.peers` needs the holders of the faulty GPU's NVLink peers); empty: none known.
    gpu_holders: tuple[tuple[int, PodRef], ...] = ()

    @classmethod
    def unknown(cls, history: tuple[PastFault, ...] = ()) -> Situation:
        return cls(node=None, history=history)

    def pod(self, namespace: str, name: str) -> PodState | None:
        return next(
            (
                p
                for p in (*self.pods_on_node, *self.group_pods)
                if p.namespace == namespace and p.name == name
            ),
            None,
        )
