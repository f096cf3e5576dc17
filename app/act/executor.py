"""Carries out one Plan: the global switches, then the hardware and workload tracks.

Order matters only at the start: the quarantine write comes first (one read, one write), so no evicted
pod lands back on the sick node; then the workload track (gang restarts, pod restarts) and the hardware
track (drain, then hand-off to a remediator once the drained pods are gone: see `handoff`) proceed without
waiting on each other. The drain runs in the background, so a PodDisruptionBudget that holds an eviction
for minutes, or a pod's grace period, never stalls the pipeline.
A proactive (at-risk) plan has its own, gentler order: see `ladder`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from app.act import ladder
from app.act.at_risk import AtRiskWriter
from app.act.drain import Drainer
from app.act.handoff import HandOff
from app.act.nodes import NodeWriter
from app.act.recorder import Recorder
from app.act.requeue import Requeuer
from app.act.workload import Restarter
from app.domain import (
    Action,
    ActionKind,
    NodeState,
    Outcome,
    OutcomeStatus,
    Plan,
    QuarantineParams,
    RecheckParams,
    RemediationParams,
)
from app.store.journal import Journal

log = logging.getLogger("app.act")
SOFT_KINDS = frozenset({ActionKind.RECHECK, ActionKind.RAISE_CONDITION, ActionKind.CLEAR_CONDITION})


class Executor:
    def __init__(
        self,
        *,
        nodes: NodeWriter,
        at_risk: AtRiskWriter,
        drainer: Drainer,
        handoff: HandOff,
        restarter: Restarter,
        recorder: Recorder,
        journal: Journal,
        paused: Callable[[], bool],
        clock: Callable[[], datetime],
        requeuer: Requeuer | None = None,
    ) -> None:
        self._nodes = nodes
        self._requeuer = requeuer
        self._handoff = handoff
        self._restarter = restarter
        self._recorder = recorder
        self._journal = journal
        self._paused = paused
        self._clock = clock
        self._ladder = ladder.Ladder(at_risk=at_risk, drainer=drainer, recorder=recorder, journal=journal)

    async def execute(
        self, plan: Plan, *, fault_id: int | None = None, node: NodeState | None = None
    ) -> list[Outcome]:
        """Carry out `plan`; `node` is the Node as read while planning, if it was."""
        outcomes = await self._execute(plan, fault_id=fault_id, known=node)
        await self._journal.record_outcomes(fault_id, outcomes)
        return outcomes

    async def _execute(self, plan: Plan, *, fault_id: int | None, known: NodeState | None) -> list[Outcome]:
        if plan.is_noop:
            return [self._recorder.outcome(a, OutcomeStatus.RECORDED, plan.summary) for a in plan.actions]
        soft = [a for a in plan.actions if a.kind in SOFT_KINDS]
        if soft:  # a transient signal's plan; an escalated one carries the hardware track as well
            others = replace(plan, actions=tuple(a for a in plan.actions if a.kind not in SOFT_KINDS))
            done = await self._execute(others, fault_id=fault_id, known=known) if others.actions else []
            return done + [await self._soft(a, plan) for a in soft]
        if self._paused():
            return [
                self._recorder.outcome(a, OutcomeStatus.SKIPPED, "Sickbay is paused") for a in plan.actions
            ]
        if any(a.kind in ladder.PROACTIVE_KINDS for a in plan.actions):
            return await self._ladder.execute(plan, fault_id=fault_id, known=known)
        outcomes: list[Outcome] = []
        quarantine = next((a for a in plan.actions if a.kind is ActionKind.QUARANTINE), None)
        if quarantine is not None:
            result = await self._nodes.quarantine(quarantine, plan.fault, known=known)
            outcomes.append(result.outcome)
            ours = result.node is not None and result.node.owned_by_sickbay
            proceed = result.outcome.status in (OutcomeStatus.APPLIED, OutcomeStatus.DRY_RUN) or (
                result.outcome.status is OutcomeStatus.SKIPPED and ours
            )
            if not proceed:
                rest = [a for a in plan.actions if a is not quarantine]
                why = f"not done: the quarantine was {result.outcome.status.value} ({result.outcome.detail})"
                outcomes += [self._recorder.outcome(a, OutcomeStatus.SKIPPED, why) for a in rest]
                return outcomes
        workload = [a for a in plan.actions if a.kind in (ActionKind.RESTART_GANG, ActionKind.RESTART_POD)]
        evictions = [a for a in plan.actions if a.kind is ActionKind.EVICT_POD]
        remediation = next((a for a in plan.actions if a.kind is ActionKind.REQUEST_REMEDIATION), None)
        drain_whole_node = any(a.kind is ActionKind.DRAIN for a in plan.actions)
        if quarantine is not None and (evictions or drain_whole_node or remediation):
            node = quarantine.node
            assert node is not None
            fault_class = quarantine.params_as(QuarantineParams).fault_class
            outcomes.append(
                self._recorder.outcome(
                    quarantine, OutcomeStatus.RECORDED, f"drain of {node} started in the background"
                )
            )
            pods = None if drain_whole_node else [a.pod for a in evictions if a.pod is not None]
            self._handoff.start(
                node,
                fault_class,
                reason=plan.fault.reason,
                pods=pods,
                fault_id=fault_id,
                remediation=remediation.params_as(RemediationParams) if remediation else None,
                # No cordon: a partial drain (`decide.partial`), whose other pods stay on the node.
                partial=pods is not None and not quarantine.params_as(QuarantineParams).cordon,
            )
        outcomes += await asyncio.gather(*(self._restarter.restart(a, fault_id=fault_id) for a in workload))
        outcomes += [
            self._requeuer.start(a, fault_id=fault_id)
            if self._requeuer is not None
            else self._recorder.outcome(a, OutcomeStatus.SKIPPED, "no Kueue client: evicted only")
            for a in plan.actions
            if a.kind is ActionKind.REQUEUE_WORKLOAD
        ]
        return outcomes

    async def _soft(self, action: Action, plan: Plan) -> Outcome:
        """Re-checks are Sickbay's own bookkeeping (they run even when paused); conditions are node writes."""
        if action.kind is ActionKind.RECHECK:
            due = action.not_before or self._clock()
            check = action.params_as(RecheckParams).check
            await self._journal.schedule_recheck(plan.fault.signal, due=due, check=check)
            return self._recorder.outcome(
                action, OutcomeStatus.RECORDED, f"re-check {check} at {due.isoformat()}"
            )
        if self._paused():
            return self._recorder.outcome(action, OutcomeStatus.SKIPPED, "Sickbay is paused")
        return await self._nodes.soft_condition(action, raise_it=action.kind is ActionKind.RAISE_CONDITION)
