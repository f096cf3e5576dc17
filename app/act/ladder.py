"""Carries out a proactive (at-risk) plan: the taint first, then the checkpoint requests, then any drain.

The taint's outcome decides the rest. Only a node that is now at `act` (the budget may have held it at
`warn` when acting, or it may have been there already) gets its workloads asked to checkpoint or
drained, so a replayed or repeated risk never asks twice. A failed Event is a failed outcome, not a
failed plan: the taint is what keeps new work away.
"""

from __future__ import annotations

import asyncio

from app.act.at_risk import AtRiskWriter
from app.act.drain import Drainer
from app.act.recorder import Recorder
from app.decide import drains
from app.domain import (
    Action,
    ActionKind,
    CheckpointParams,
    NodeState,
    Outcome,
    OutcomeStatus,
    Plan,
    RiskLevel,
)
from app.store.journal import Journal

CHECKPOINT_REASON = "SickbayCheckpointRequested"
# involvedObject.apiVersion when the pod's ownerReference did not carry one (older journaled plans, hand-
# made situations); otherwise the ownerReference's own apiVersion is used. `kubectl describe` matches an
# Event on uid, name and kind, so a missing apiVersion only makes the Event less complete.
API_VERSIONS = {
    "Job": "batch/v1",
    "CronJob": "batch/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "Deployment": "apps/v1",
    "JobSet": "jobset.x-k8s.io/v1alpha2",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
    "PyTorchJob": "kubeflow.org/v1",
    "TFJob": "kubeflow.org/v1",
}
PROACTIVE_KINDS = frozenset({ActionKind.TAINT_AT_RISK, ActionKind.CLEAR_AT_RISK})


class Ladder:
    def __init__(
        self, *, at_risk: AtRiskWriter, drainer: Drainer, recorder: Recorder, journal: Journal
    ) -> None:
        self._at_risk = at_risk
        self._drainer = drainer
        self._recorder = recorder
        self._journal = journal

    async def execute(self, plan: Plan, *, fault_id: int | None, known: NodeState | None) -> list[Outcome]:
        clear = next((a for a in plan.actions if a.kind is ActionKind.CLEAR_AT_RISK), None)
        if clear is not None:
            return [await self._at_risk.clear(clear)]
        taint = next(a for a in plan.actions if a.kind is ActionKind.TAINT_AT_RISK)
        result = await self._at_risk.mark(taint, known=known)
        outcomes = [result.outcome]
        rest = [a for a in plan.actions if a is not taint]
        if not rest:
            return outcomes
        status = result.outcome.status
        if result.level is not RiskLevel.ACT or status not in (OutcomeStatus.APPLIED, OutcomeStatus.DRY_RUN):
            why = _not_acting(result.level, result.outcome)
            return outcomes + [self._recorder.outcome(a, OutcomeStatus.SKIPPED, why) for a in rest]
        dry_run = status is OutcomeStatus.DRY_RUN
        asks = [a for a in rest if a.kind is ActionKind.REQUEST_CHECKPOINT]
        outcomes += await asyncio.gather(*(self._checkpoint(a, dry_run=dry_run) for a in asks))
        outcomes += self._drain(taint, rest, fault_id=fault_id)
        return outcomes

    async def _checkpoint(self, action: Action, *, dry_run: bool) -> Outcome:
        target = str(action.pod) if action.pod is not None else _owner(action)
        if dry_run:
            return self._recorder.outcome(action, OutcomeStatus.DRY_RUN, f"would ask {target} to checkpoint")
        params = action.params_as(CheckpointParams)
        owner = params.owner
        if action.pod is not None:
            written = await self._recorder.pod_event(
                action.pod, CHECKPOINT_REASON, action.reason, uid=params.uid, warning=True
            )
        elif owner is not None:
            written = await self._recorder.owner_event(
                kind=owner.kind,
                name=owner.name,
                namespace=params.namespace,
                api_version=owner.api_version or API_VERSIONS.get(owner.kind, ""),
                uid=owner.uid,
                reason=CHECKPOINT_REASON,
                message=action.reason,
                warning=True,
            )
        else:  # names neither: nothing to ask
            written = False
        if not written:
            return self._recorder.outcome(
                action, OutcomeStatus.FAILED, f"could not write the Event on {target}"
            )
        return self._recorder.outcome(
            action, OutcomeStatus.APPLIED, f"asked {target} to checkpoint (Event {CHECKPOINT_REASON})"
        )

    def _drain(self, taint: Action, rest: list[Action], *, fault_id: int | None) -> list[Outcome]:
        """Evict in the background, as for a quarantine: a PodDisruptionBudget may hold it for minutes."""
        pods = [a.pod for a in rest if a.kind is ActionKind.EVICT_POD and a.pod is not None]
        whole_node = any(a.kind is ActionKind.DRAIN for a in rest)
        node = taint.node
        if node is None or not (pods or whole_node):
            return []

        async def then(drained: drains.DrainResult) -> None:
            await self._journal.record_outcomes(fault_id, list(drained.outcomes))

        # Nothing is handed off after a proactive drain, so nothing waits for the pods to be gone.
        self._drainer.start(
            node, reason=taint.reason, pods=None if whole_node else pods, then=then, wait=False
        )
        return [
            self._recorder.outcome(
                taint, OutcomeStatus.RECORDED, f"proactive drain of {node} started in the background"
            )
        ]


def _not_acting(level: RiskLevel | None, outcome: Outcome) -> str:
    if level is RiskLevel.WARN:
        return "not done: the node is held at warn (the proactive budget), so no checkpoint request or drain"
    if level is RiskLevel.ACT:
        return "not done: the node was already at act, so its workloads were asked when it got there"
    return f"not done: the at-risk taint was {outcome.status.value} ({outcome.detail})"


def _owner(action: Action) -> str:
    params = action.params_as(CheckpointParams)
    owner = params.owner
    return f"{owner.kind} {params.namespace}/{owner.name}" if owner is not None else "nobody"
