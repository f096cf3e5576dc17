"""From a signal to its Plan: the one sequence `serve` (the pipeline) and `sickbay explain` both run.

classify → observe (read the cluster and the journal as decide needs them; no writes) → plan. Kept in one
function so `explain` cannot drift from what `serve` would do: it passes no journal (nothing has been
recorded) and, without a kubeconfig, no cluster, and gets the same decision from what it can see.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from app.classify import classifier
from app.decide import plans
from app.decide.situation import Situation
from app.domain import Fault, FaultClass, Plan, Signal
from app.kube import port
from app.kube.viewgate import ViewGate
from app.service import observing
from app.store.journal import Journal

# Classes whose plan never depends on the node or its pods: no cluster read for them.
NO_CLUSTER_NEEDED = frozenset({FaultClass.IGNORE, FaultClass.DEPENDS})


class ShadowNotes(Protocol):
    def note_for(self, version: str | None) -> str | None: ...


@dataclass(frozen=True)
class Decided:
    fault: Fault  # as classified (the plan's own fault carries an escalation's class)
    plan: Plan
    situation: Situation  # what was observed (the node as read, for the executor)


async def plan_signal(
    signal: Signal,
    *,
    context: list[Signal],
    rules: classifier.Rules,
    now: datetime,
    kube: port.KubePort | None,
    journal: Journal | None,
    shadow: ShadowNotes | None = None,
    view: ViewGate | None = None,
) -> Decided:
    """Classify `signal` among `context`, observe what its plan depends on, and plan it at `now`
    (`view`: the cluster view, read instead of a node list where it can answer)."""
    fault = classifier.classify(signal, rules=rules, context=context)
    policy = rules.policy
    if signal.firing and fault.fault_class not in NO_CLUSTER_NEEDED:
        situation = await observing.situation_of(
            fault, kube=kube, journal=journal, policy=policy, now=now, view=view
        )
    elif not signal.firing:
        situation = await observing.resolved_situation(fault, journal=journal)
    else:
        situation = Situation.unknown()
    if fault.fault_class is FaultClass.AT_RISK and shadow is not None:
        situation = replace(situation, shadow=shadow.note_for(signal.label("model_version")))
    plan = plans.plan_for(fault, policy=policy, now=now, situation=situation)
    return Decided(fault=fault, plan=plan, situation=situation)
