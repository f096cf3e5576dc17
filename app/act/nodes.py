"""Node writes: quarantine, state changes and release, each one read and one write, safe under races.

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

from app.act.gatekeeper import GateKeeper
from app.act.recorder import Recorder
from app.act.urgency import Urgency
from app.decide import footprint
from app.domain import (
    Action,
    Fault,
    FaultClass,
    NodePatch,
    NodeState,
    Outcome,
    OutcomeStatus,
    RemediationState,
)
from app.kube import errors, port

log = logging.getLogger("app.act")
_CONFLICT_RETRIES = 5


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

    async def quarantine(
        self, action: Action, fault: Fault, *, known: NodeState | None = None
    ) -> WriteResult:
        """Taint + cordon + label + annotate in one write, after the gates; then the condition and an Event.

        `known` is the node as read just now while planning; it saves a second read, and a 409 on the
        write (the node changed since) makes us read it again.
        """
        name = action.node
        assert name is not None
        cls = FaultClass(action.param("class") or fault.fault_class.value)
        cordon = action.param("cordon") != "false"
        for attempt in range(1, _CONFLICT_RETRIES + 1):
            try:
                node = known if known is not None and attempt == 1 else await self._kube.get_node(name)
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
            if not footprint.needs_quarantine(node, cls):
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
            except errors.ConflictError:
                if fresh_quarantine:
                    self._gates.forget(name)
                log.info("node %s changed under us (attempt %d); reading it again", name, attempt)
                continue
            except errors.KubeError as exc:
                if fresh_quarantine:
                    self._gates.forget(name)
                return WriteResult(self._recorder.outcome(action, OutcomeStatus.FAILED, str(exc)), node)
            # The condition and the Event follow in the background: the node is out of the pool now,
            # and in a storm the next node's quarantine must not wait behind this one's paperwork.
            self._background(self._aftercare(name, fault, cls))
            return WriteResult(
                self._recorder.outcome(action, OutcomeStatus.APPLIED, describe(patch), attempts=attempt),
                updated,
            )
        return WriteResult(
            self._recorder.outcome(
                action, OutcomeStatus.FAILED, f"gave up after {_CONFLICT_RETRIES} conflicts"
            ),
            None,
        )

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain_background(self) -> None:
        """Wait for the conditions and Events still being written (shutdown, tests)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _aftercare(self, name: str, fault: Fault, cls: FaultClass) -> None:
        await self._urgency.calm()
        await self._condition(name, fault)
        await self._recorder.node_event(
            name, "SickbayQuarantined", f"{cls.value}: {fault.reason}", warning=True
        )

    async def _condition(self, name: str, fault: Fault) -> None:
        try:
            await self._kube.set_node_condition(name, footprint.unhealthy_condition(fault, now=self._clock()))
        except errors.KubeError as exc:
            log.warning("could not set the GpuHealthy condition on %s: %s", name, exc)

    async def set_state(self, name: str, state: RemediationState, **annotations: str) -> NodeState | None:
        """Move an owned node to its next remediation state; None if it is no longer ours."""
        if self._dry_run:
            return None
        for _ in range(_CONFLICT_RETRIES):
            node = await self._kube.get_node(name)
            if not node.owned_by_sickbay:
                return None
            if node.state is state and all(
                node.annotation(footprint.PREFIX + k.replace("_", "-")) == v for k, v in annotations.items()
            ):
                return node
            try:
                return await self._kube.patch_node(footprint.state_patch(node, state, **annotations))
            except errors.ConflictError:
                continue
        return None

    async def release(self, name: str, *, why: str) -> NodeState | None:
        """Remove exactly Sickbay's marks; an operator's cordon and taints stay."""
        for _ in range(_CONFLICT_RETRIES):
            node = await self._kube.get_node(name)
            if not node.owned_by_sickbay:
                return None
            patch = footprint.release_patch(node)
            if self._dry_run:
                log.info("dry-run: would release %s (%s): %s", name, why, describe(patch))
                return None
            try:
                updated = await self._kube.patch_node(patch)
            except errors.ConflictError:
                continue
            self._gates.forget(name)
            try:
                await self._kube.set_node_condition(
                    name, footprint.healthy_condition(now=self._clock(), message=why)
                )
            except errors.KubeError as exc:
                log.warning("could not set GpuHealthy=True on %s: %s", name, exc)
            await self._recorder.node_event(name, "SickbayReleased", why)
            return updated
        return None


def _as_class(fault: Fault, cls: FaultClass) -> Fault:
    return fault if fault.fault_class is cls else replace(fault, fault_class=cls)


def describe(patch: NodePatch) -> str:
    parts = []
    if patch.unschedulable is not None:
        parts.append("cordon" if patch.unschedulable else "uncordon")
    if patch.taints is not None:
        parts.append("taints=[" + ", ".join(f"{t.key}={t.value}:{t.effect}" for t in patch.taints) + "]")
    parts += [f"label {k}={v or '(removed)'}" for k, v in patch.labels]
    parts += [f"annotation {k}" + ("" if v else " (removed)") for k, v in patch.annotations]
    return "; ".join(parts) or "no change"
