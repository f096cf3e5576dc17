"""Node writes: quarantine, state changes, release and the soft-fault condition, each one read and one
write, safe under races (the at-risk taint's are in `at_risk`).

Every write is computed from a fresh read and carries that read's `resourceVersion`; a 409 means someone
else changed the node in between, so we read again and recompute rather than overwrite their change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from app.act.conditions_in_order import InOrder
from app.act.gatekeeper import GateKeeper
from app.act.recorder import Recorder
from app.act.urgency import Urgency
from app.decide import conditions, footprint, soft
from app.domain import (
    Action,
    Condition,
    ConditionParams,
    Fault,
    FaultClass,
    NodePatch,
    NodeState,
    Outcome,
    OutcomeStatus,
    PodRef,
    QuarantineParams,
    RemediationState,
)
from app.kube import conflicts, errors, port

log = logging.getLogger("app.act")
_ANNOTATION_MAX = 1000  # an annotation is for a person reading `kubectl describe`, not a log


@dataclass(frozen=True)
class WriteResult:
    outcome: Outcome
    node: NodeState | None


class NodeWriter:
    def __init__(
        self,
        *,
        kube: port.KubePort,
        recorder: Recorder,
        gates: GateKeeper,
        identity: str,
        dry_run: bool,
        clock: Callable[[], datetime],
        urgency: Urgency | None = None,
    ) -> None:
        self._urgency = urgency or Urgency()
        self._kube = kube
        self._recorder = recorder
        self._gates = gates
        self._identity = identity
        self._dry_run = dry_run
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        self._conditions = InOrder()

    async def quarantine(
        self, action: Action, fault: Fault, *, known: NodeState | None = None
    ) -> WriteResult:
        """Taint + cordon + label + annotate in one write, after the gates; then the condition and an Event.

        `known` is the node as read just now while planning; it saves a second read, and a 409 on the
        write (the node changed since) makes us read it again.
        """
        name = action.node
        assert name is not None
        params = action.params_as(QuarantineParams)
        cls, cordon = params.fault_class, params.cordon

        async def attempt(number: int) -> WriteResult:
            try:
                node = known if known is not None and number == 1 else await self._kube.get_node(name)
            except errors.NotFoundError:
                return WriteResult(
                    self._recorder.outcome(action, OutcomeStatus.SKIPPED, "node not found"), None
                )
            if not node.managed:
                return WriteResult(
                    self._recorder.outcome(
                        action, OutcomeStatus.SKIPPED, "node opted out (sickbay.io/managed=false)"
                    ),
                    node,
                )
            if not footprint.needs_quarantine(node, cls, cordon=cordon):
                return WriteResult(
                    self._recorder.outcome(action, OutcomeStatus.SKIPPED, "already quarantined by Sickbay"),
                    node,
                )
            patch = footprint.quarantine_patch(
                node, _as_class(fault, cls), now=self._clock(), identity=self._identity, cordon=cordon
            )
            if self._dry_run:
                return WriteResult(
                    self._recorder.outcome(action, OutcomeStatus.DRY_RUN, f"would patch: {describe(patch)}"),
                    node,
                )
            fresh_quarantine = footprint.quarantined_class(node) is None
            if fresh_quarantine:
                verdict = await self._gates.admit(node)
                if not verdict.allowed:
                    await self._recorder.node_event(
                        name, "SickbayBreakerOpen", f"not quarantined: {verdict.reason}", warning=True
                    )
                    return WriteResult(
                        self._recorder.outcome(action, OutcomeStatus.BLOCKED, verdict.reason), node
                    )
            try:
                updated = await self._kube.patch_node(patch)
            except errors.KubeError as exc:
                if fresh_quarantine:
                    self._gates.withdraw(name)
                if isinstance(exc, errors.ConflictError):
                    raise
                return WriteResult(self._recorder.outcome(action, OutcomeStatus.FAILED, str(exc)), node)
            # The condition and the Event follow in the background: the node is out of the pool now,
            # and in a storm the next node's quarantine must not wait behind this one's paperwork.
            self._background(self._aftercare(name, fault, cls, self._conditions.ticket(name)))
            return WriteResult(
                self._recorder.outcome(action, OutcomeStatus.APPLIED, describe(patch), attempts=number),
                updated,
            )

        return await conflicts.retry_on_conflict(
            attempt, what=f"node {name}", gave_up=lambda: WriteResult(self._gave_up(action), None)
        )

    def _gave_up(self, action: Action) -> Outcome:
        return gave_up(self._recorder, action)

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain_background(self) -> None:
        """Wait for the conditions and Events still being written (shutdown, tests)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _aftercare(self, name: str, fault: Fault, cls: FaultClass, ticket: int) -> None:
        # Waiting for calm lets the drain that follows a quarantine (evictions are urgent) fail and write
        # DrainFailed first; the ticket, taken when the node was quarantined, keeps that newer word.
        await self._urgency.calm()
        await self._condition_of(
            name, conditions.unhealthy_condition(fault, now=self._clock()), ticket=ticket
        )
        await self._recorder.node_event(
            name, "SickbayQuarantined", f"{cls.value}: {fault.reason}", warning=True
        )

    async def soft_condition(self, action: Action, *, raise_it: bool) -> Outcome:
        """Raise (True) or clear (False) the soft-fault condition, with an Event when it changes.

        A lasting transient signal is made visible here, on the node, without touching its schedulability.
        What to write, if anything, is `decide.soft.condition_write`'s answer (idempotent: no Event twice).
        """
        name = action.node
        assert name is not None
        params = action.params_as(ConditionParams)
        kind = params.condition
        try:
            node = await self._kube.get_node(name)
        except errors.NotFoundError:
            return self._recorder.outcome(action, OutcomeStatus.SKIPPED, "node not found")
        except errors.KubeError as exc:
            return self._recorder.outcome(action, OutcomeStatus.FAILED, f"cannot read the node: {exc}")
        wanted = soft.condition_write(
            node,
            kind=kind,
            raise_it=raise_it,
            reason=params.reason,
            message=action.reason,
            now=self._clock(),
        )
        if isinstance(wanted, soft.Unchanged):
            return self._recorder.outcome(action, OutcomeStatus.SKIPPED, wanted.why)
        if self._dry_run:
            return self._recorder.outcome(
                action, OutcomeStatus.DRY_RUN, f"would set {kind}={wanted.status} ({wanted.reason})"
            )
        try:
            await self._kube.set_node_condition(name, wanted)
        except errors.KubeError as exc:
            return self._recorder.outcome(action, OutcomeStatus.FAILED, f"cannot set {kind}: {exc}")
        reason = "SickbaySoftFaultPersisting" if raise_it else "SickbaySoftFaultCleared"
        await self._recorder.node_event(
            name, reason, f"{kind}={wanted.status}: {action.reason}", warning=raise_it
        )
        return self._recorder.outcome(
            action, OutcomeStatus.APPLIED, f"{kind}={wanted.status} ({wanted.reason})"
        )

    async def set_state(self, name: str, state: RemediationState, **annotations: str) -> NodeState | None:
        """Move an owned node to its next remediation state; None if it is no longer ours."""
        return await self._write_state(
            name, state, lambda node: footprint.state_patch(node, state, **annotations)
        )

    async def _write_state(
        self, name: str, state: RemediationState, patch_of: Callable[[NodeState], NodePatch]
    ) -> NodeState | None:
        if self._dry_run:
            return None

        async def attempt(number: int) -> NodeState | None:
            node = await self._kube.get_node(name)
            if not node.owned_by_sickbay:
                return None
            patch = patch_of(node)
            if node.state is state and all((node.annotation(k) or "") == v for k, v in patch.annotations):
                return node
            return await self._kube.patch_node(patch)

        return await conflicts.retry_on_conflict(attempt, what=f"node {name}", gave_up=lambda: None)

    async def begin_drain(
        self, name: str, fault_class: FaultClass, *, only: list[PodRef] | None = None
    ) -> NodeState | None:
        """Mark an owned node `draining` with when its drain started (kept when a drain is resumed: the
        node returned carries it, for the deadline) and, for a partial drain, the pods it covers (`only`);
        a node coming out of `drain-failed` gets its class back as the GpuHealthy reason (the drain-failed
        marks go with the label, see `footprint.state_patch`)."""
        node = await self._write_state(
            name,
            RemediationState.DRAINING,
            lambda read: footprint.drain_start_patch(read, now=self._clock(), only=only),
        )
        current = node.condition(footprint.CONDITION) if node is not None else None
        if node is not None and current is not None and current.reason == footprint.DRAIN_FAILED_REASON:
            await self._condition_of(
                name, conditions.quarantined_condition(node, fault_class, now=self._clock())
            )
        return node

    async def mark_drain_failed(self, name: str, fault_class: FaultClass, *, why: str) -> NodeState | None:
        """Leave an owned node quarantined in `drain-failed`: the label, why and when (annotations), and
        GpuHealthy=False with reason DrainFailed; None when it is no longer ours (or in a dry run)."""
        now = self._clock()
        node = await self.set_state(
            name,
            RemediationState.DRAIN_FAILED,
            drain_failed=" ".join(why.split())[:_ANNOTATION_MAX],
            drain_failed_at=now.isoformat(),
        )
        if node is not None:
            await self._condition_of(name, conditions.drain_failed_condition(fault_class, why=why, now=now))
        return node

    async def _condition_of(self, name: str, condition: Condition, *, ticket: int | None = None) -> None:
        """Write GpuHealthy unless a write decided later has landed already; a failure is logged, not raised."""
        ticket = self._conditions.ticket(name) if ticket is None else ticket
        try:
            await self._conditions.write(name, ticket, lambda: self._kube.set_node_condition(name, condition))
        except errors.KubeError as exc:
            log.warning("could not set the %s condition on %s: %s", condition.type, name, exc)

    async def release(self, name: str, *, why: str) -> NodeState | None:
        """Remove exactly Sickbay's marks; an operator's cordon and taints stay."""

        async def attempt(number: int) -> NodeState | None:
            node = await self._kube.get_node(name)
            if not node.owned_by_sickbay:
                return None
            patch = footprint.release_patch(node)
            if self._dry_run:
                log.info("dry-run: would release %s (%s): %s", name, why, describe(patch))
                return None
            return await self._kube.patch_node(patch)

        updated = await conflicts.retry_on_conflict(attempt, what=f"node {name}", gave_up=lambda: None)
        if updated is None:
            return None
        self._gates.forget(name)
        await self._condition_of(name, conditions.healthy_condition(now=self._clock(), message=why))
        await self._recorder.node_event(name, "SickbayReleased", why)
        return updated


def _as_class(fault: Fault, cls: FaultClass) -> Fault:
    return fault if fault.fault_class is cls else replace(fault, fault_class=cls)


def gave_up(recorder: Recorder, action: Action) -> Outcome:
    return recorder.outcome(action, OutcomeStatus.FAILED, f"gave up after {conflicts.TRIES} conflicts")


def describe(patch: NodePatch) -> str:
    parts = []
    if patch.unschedulable is not None:
        parts.append("cordon" if patch.unschedulable else "uncordon")
    if patch.taints is not None:
        parts.append("taints=[" + ", ".join(f"{t.key}={t.value}:{t.effect}" for t in patch.taints) + "]")
    parts += [f"label {k}={v or '(removed)'}" for k, v in patch.labels]
    parts += [f"annotation {k}" + ("" if v else " (removed)") for k, v in patch.annotations]
    return "; ".join(parts) or "no change"
