"""The reconciliation loop: moves owned nodes through remediation to release, and watches GPU capacity.

State of record is the Node objects, so this loop is also how a new leader resumes whatever the previous
one left half done: a node labelled `draining` gets its drain resumed, a `remediating` node is checked for
completion or timeout, a `verifying` node is released once it stayed healthy for `healthy-delay`.
A `drain-failed` node is drained again once `drain.retry_after` has passed since its last try, or at once
when its drainable pods are gone (a human moved them); the drain hands it off only if it empties it.
Relabelling it `draining` by hand resumes the drain on the next round; uncordoning it releases it.
It also turns a sustained drop of GPU allocatable below capacity (the device plugin marking a GPU
unhealthy) into a signal, since nothing else in Kubernetes links that to the pods on the GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from app.act.gatekeeper import GateKeeper
from app.act.handoff import HandOff
from app.act.nodes import NodeWriter
from app.act.recorder import Recorder
from app.config import rules
from app.decide import drains, evictions, footprint
from app.domain import (
    FaultClass,
    NodeState,
    RemediationState,
    Signal,
    SignalSource,
    SignalStatus,
    freeze_mapping,
)
from app.kube import errors, port
from app.obs.metrics import Metrics
from app.store.journal import Journal

log = logging.getLogger("app.act")
ALLOCATABLE_ALERT = "GpuAllocatableBelowCapacity"


class Reconciler:
    def __init__(
        self,
        *,
        kube: port.KubePort,
        nodes: NodeWriter,
        handoff: HandOff,
        gates: GateKeeper,
        recorder: Recorder,
        journal: Journal,
        policy: rules.Policy,
        metrics: Metrics,
        clock: Callable[[], datetime],
        emit: Callable[[Signal], Awaitable[None]],
        dry_run: bool,
    ) -> None:
        self._kube = kube
        self._nodes = nodes
        self._handoff = handoff
        self._gates = gates
        self._recorder = recorder
        self._journal = journal
        self._policy = policy
        self._metrics = metrics
        self._clock = clock
        self._emit = emit
        self._dry_run = dry_run
        self._healthy_since: dict[str, datetime] = {}
        self._short_since: dict[str, datetime] = {}
        self._reported_short: set[str] = set()

    async def run_once(self) -> None:
        try:
            all_nodes = await self._kube.list_nodes()
        except errors.KubeError as exc:
            self._metrics.kube_errors.labels(kind="reconcile").inc()
            log.warning("reconcile: cannot list nodes (%s); will try again next round", exc)
            return
        self._gates.observe(all_nodes)
        await self._gates.tick()
        counts: dict[str, int] = {s.value: 0 for s in RemediationState}
        for node in all_nodes:
            if node.state is not None:
                counts[node.state.value] += 1
            try:
                if node.owned_by_sickbay:
                    await self._owned(node)
                await self._capacity(node)
                await self._soft_condition(node)
            except errors.KubeError as exc:
                log.warning("reconcile: %s: %s; will try again next round", node.name, exc)
        for state, count in counts.items():
            self._metrics.nodes_by_state.labels(state=state).set(count)

    async def _owned(self, node: NodeState) -> None:
        added = (node.annotation(footprint.ADDED) or "").split(",")
        if "cordon" in added and not node.unschedulable:
            await self._nodes.release(
                node.name,
                why="an operator uncordoned the node by hand; Sickbay removes its marks and steps back",
            )
            self._healthy_since.pop(node.name, None)
            return
        fault_class = _class_of(node)
        if fault_class is not None and node.state is not RemediationState.VERIFYING:
            await self._restore_condition(node, fault_class)
        match node.state:
            case RemediationState.QUARANTINED | RemediationState.DRAINING:
                if fault_class in (FaultClass.DRIVER_MISMATCH, None):
                    await self._maybe_release(node)
                elif not self._handoff.running(node.name):
                    log.info("reconcile: resuming the drain of %s", node.name)
                    self._start_drain(node.name, fault_class, why="resumed")
            case RemediationState.DRAIN_FAILED:
                if fault_class is not None and not self._handoff.running(node.name):
                    await self._drain_failed(node, fault_class)
            case RemediationState.REMEDIATING:
                await self._remediating(node, fault_class)
            case RemediationState.VERIFYING:
                await self._maybe_release(node)
            case _:
                pass

    async def _restore_condition(self, node: NodeState, fault_class: FaultClass) -> None:
        """Re-write GpuHealthy=False if the write after the quarantine was lost (it is best-effort there)."""
        current = node.condition(footprint.CONDITION)
        if (current is not None and current.status == "False") or self._dry_run:
            return
        await self._kube.set_node_condition(
            node.name, footprint.quarantined_condition(node, fault_class, now=self._clock())
        )

    def _start_drain(self, name: str, fault_class: FaultClass, *, why: str) -> None:
        self._handoff.start(name, fault_class, reason=f"{fault_class.value}: drain {why} by reconciliation")

    async def _drain_failed(self, node: NodeState, fault_class: FaultClass) -> None:
        """Drain a `drain-failed` node again when its retry is due, or at once when nothing is left to move."""
        if drains.retry_due(node, self._policy.drain, now=self._clock()):
            log.info(
                "reconcile: retrying the drain of %s (%s)", node.name, node.annotation(footprint.DRAIN_FAILED)
            )
            self._start_drain(node.name, fault_class, why="retried")
            return
        pods = await self._kube.list_pods(node=node.name)
        if not any(evictions.drainable(p, self._policy.drain) for p in pods):
            log.info("reconcile: %s has no pods left to drain; handing it off", node.name)
            self._start_drain(node.name, fault_class, why="finished")

    async def _remediating(self, node: NodeState, fault_class: FaultClass | None) -> None:
        if node.annotation(footprint.REMEDIATION_DONE):
            await self._nodes.set_state(node.name, RemediationState.VERIFYING)
            await self._recorder.node_event(
                node.name, "SickbayVerifying", "remediation reported done; verifying"
            )
            return
        if fault_class is None:
            return
        remediator = self._policy.remediator(fault_class)
        requested = node.annotation(footprint.REMEDIATION_REQUESTED_AT)
        if remediator.kind == "none" or not requested:
            return
        overdue = self._clock() - datetime.fromisoformat(requested) > remediator.timeout
        if overdue and fault_class is not FaultClass.REPLACE:
            await self._recorder.node_event(
                node.name,
                "SickbayRemediationTimedOut",
                f"{fault_class.value} did not complete within {remediator.timeout}; escalating to replace",
                warning=True,
            )
            await self._nodes.set_state(
                node.name, RemediationState.REMEDIATING, remediation_requested="replace"
            )

    async def _maybe_release(self, node: NodeState) -> None:
        now = self._clock()
        active = await self._journal.active_alerts(node=node.name)
        hardware_active = [
            fp
            for fp, cls in active
            if cls in {c.value for c in FaultClass if c.is_hardware} | {"driver-mismatch"}
        ]
        short = node.gpu_capacity > 0 and node.gpu_allocatable < node.gpu_capacity
        if hardware_active or short:
            self._healthy_since.pop(node.name, None)
            return
        since = self._healthy_since.setdefault(node.name, now)
        if now - since < self._policy.release.healthy_delay:
            return
        released = await self._nodes.release(
            node.name,
            why=f"no active fault and healthy for {self._policy.release.healthy_delay}; remediation complete",
        )
        if released is not None or self._dry_run:
            self._healthy_since.pop(node.name, None)

    async def _soft_condition(self, node: NodeState) -> None:
        """Clear a soft-fault condition nothing keeps up: agent events never resolve, and a resolution
        can be lost; it stays while any soft alert on the node still fires."""
        transient = self._policy.transient
        current = node.condition(transient.condition)
        if current is None or current.status != "True" or current.last_transition is None:
            return
        if self._clock() - current.last_transition < transient.condition_ttl:
            return
        active = await self._journal.active_alerts(node=node.name)
        if any(cls == FaultClass.TRANSIENT.value for _, cls in active):
            return
        if self._dry_run:
            log.info("dry-run: would clear %s on %s", transient.condition, node.name)
            return
        why = f"no soft signal has fired on the node for {transient.condition_ttl}"
        await self._kube.set_node_condition(
            node.name, footprint.soft_cleared(transient.condition, message=why, now=self._clock())
        )
        await self._recorder.node_event(
            node.name, "SickbaySoftFaultCleared", f"{transient.condition}=False: {why}"
        )

    async def _capacity(self, node: NodeState) -> None:
        if node.gpu_capacity <= 0 or not node.managed:
            return
        if node.gpu_allocatable >= node.gpu_capacity:
            self._short_since.pop(node.name, None)
            self._reported_short.discard(node.name)
            return
        now = self._clock()
        since = self._short_since.setdefault(node.name, now)
        grace = self._policy.release.allocatable_grace
        if now - since < grace or node.name in self._reported_short or node.owned_by_sickbay:
            return
        self._reported_short.add(node.name)
        reason = (
            f"GPU allocatable {node.gpu_allocatable} below capacity {node.gpu_capacity} for longer than "
            f"{grace}: the device plugin marked a GPU unhealthy"
        )
        await self._emit(
            Signal(
                source=SignalSource.ALLOCATABLE,
                fingerprint=f"allocatable-{node.name}-{int(since.timestamp())}",
                status=SignalStatus.FIRING,
                name=ALLOCATABLE_ALERT,
                starts_at=since,
                received_at=now,
                node=node.name,
                labels=freeze_mapping(
                    {"alertname": ALLOCATABLE_ALERT, "node": node.name, "sickbay_class": "reset-gpu"}
                ),
                annotations=freeze_mapping({"summary": reason}),
            )
        )


def _class_of(node: NodeState) -> FaultClass | None:
    raw = footprint.fault_of(node).get("class") or (footprint.quarantined_class(node) or "")
    try:
        return FaultClass(str(raw)) if raw else None
    except ValueError:
        return None
