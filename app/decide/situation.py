"""What decide knows about the world when it plans: the node, its pods, the groups, recent history.

Gathered by the caller (the pipeline reads the cluster and the journal); `Situation.unknown()` is what
`explain` uses without a cluster, and decide then plans from the fault alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app.decide import gates
from app.domain import NodeState, PastFault, PodState


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
