"""The hardware track's drain and what follows it: the hand-off to a remediator only once the node is
really empty, `drain-failed` otherwise.

A reset or a reboot requested while a pod is still Terminating kills it mid-checkpoint, so the remediator
is asked only when the drain's `DrainResult` says every pod it covered is gone. When it is not (an
eviction failed for good, a budget held a pod past the deadline under `on_deadline: leave`, a pod stuck
Terminating), the node stays quarantined and says so: the `drain-failed` state label with why and when
(annotations), GpuHealthy=False with reason DrainFailed, a Warning Event `SickbayDrainFailed`, the
`sickbay_drains_failed` metric and a journaled outcome. The reconciler moves it on later (`reconcile`).

The quarantine path (`executor`) and the reconciler both start drains here, so the rule has one home.
"""

from __future__ import annotations

import asyncio
import logging

from app.act.drain import Drainer
from app.act.nodes import NodeWriter
from app.act.recorder import Recorder
from app.act.remediate import Remediators
from app.decide import drains
from app.domain import (
    Action,
    ActionKind,
    FaultClass,
    NodeState,
    Outcome,
    OutcomeStatus,
    PodRef,
    RemediationParams,
    Track,
)
from app.kube import errors
from app.obs.metrics import Metrics
from app.store.journal import Journal

log = logging.getLogger("app.act")
DRAIN_FAILED_EVENT = "SickbayDrainFailed"


class HandOff:
    def __init__(
        self,
        *,
        nodes: NodeWriter,
        drainer: Drainer,
        remediators: Remediators,
        recorder: Recorder,
        journal: Journal,
        metrics: Metrics,
    ) -> None:
        self._nodes = nodes
        self._drainer = drainer
        self._remediators = remediators
        self._recorder = recorder
        self._journal = journal
        self._metrics = metrics

    def running(self, node: str) -> bool:
        return self._drainer.running(node)

    def start(
        self,
        node: str,
        fault_class: FaultClass,
        *,
        reason: str,
        pods: list[PodRef] | None = None,
        fault_id: int | None = None,
        remediation: RemediationParams | None = None,
        partial: bool = False,
    ) -> asyncio.Task[drains.DrainResult]:
        """Drain `node` in the background (the listed pods, or all its drainable pods), then hand it to the
        remediator decide chose (`remediation`, if any) if the drain emptied it, else mark it `drain-failed`.

        `partial`: the listed pods are all the drain may move (the node's other work stays); they are kept
        on the node (`footprint.DRAIN_PODS`), so a resumed or retried drain moves the same pods."""

        async def first() -> NodeState | None:
            return await self._nodes.begin_drain(node, fault_class, only=pods if partial else None)

        async def then(result: drains.DrainResult) -> None:
            await self._after(result, fault_class, reason=reason, fault_id=fault_id, remediation=remediation)

        return self._drainer.start(node, reason=reason, pods=pods, first=first, then=then)

    async def _after(
        self,
        result: drains.DrainResult,
        fault_class: FaultClass,
        *,
        reason: str,
        fault_id: int | None,
        remediation: RemediationParams | None,
    ) -> None:
        await self._journal.record_outcomes(fault_id, list(result.outcomes))
        if not result.drained:
            await self._failed(result, fault_class, reason=reason, fault_id=fault_id, remediation=remediation)
            return
        if remediation is not None:
            await self.request(result.node, remediation, reason=reason, fault_id=fault_id)

    async def request(
        self, node: str, remediation: RemediationParams, *, reason: str, fault_id: int | None = None
    ) -> Outcome:
        """Hand an empty node to the remediator decide chose and journal the outcome: after its drain, and
        for `replace` when reconciliation escalates a remediation that timed out."""
        done = await self._remediators.request(node, remediation, reason=reason)
        await self._journal.record_outcomes(fault_id, [done])
        return done

    async def _failed(
        self,
        result: drains.DrainResult,
        fault_class: FaultClass,
        *,
        reason: str,
        fault_id: int | None,
        remediation: RemediationParams | None,
    ) -> None:
        why = result.summary()
        for label in result.reasons:
            self._metrics.drains_failed.labels(reason=label).inc()
        try:
            await self._nodes.mark_drain_failed(result.node, fault_class, why=why)
        except errors.KubeError as exc:  # the reconciler finds the node still `draining` and drains again
            log.warning("could not mark %s as drain-failed: %s", result.node, exc)
        await self._recorder.node_event(
            result.node,
            DRAIN_FAILED_EVENT,
            f"{fault_class.value}: not handed off to the remediator, the drain did not empty the node: {why}",
            warning=True,
        )
        action = Action(
            kind=ActionKind.REQUEST_REMEDIATION,
            track=Track.HARDWARE,
            node=result.node,
            reason=reason,
            params=remediation or RemediationParams(fault_class),
        )
        held = self._recorder.outcome(action, OutcomeStatus.BLOCKED, f"not handed off: drain failed: {why}")
        await self._journal.record_outcomes(fault_id, [held])
