"""The reconciliation loop: moves owned nodes through remediation to release, and watches GPU capacity.

State of record is the Node objects, so this loop is also how a new leader resumes whatever the previous
one left half done: a node labelled `draining` gets its drain resumed, a `remediating` node is checked for
completion or timeout, a `verifying` node has its verification Job run (`act.verify`, when the policy
asks for one) and is released once that passed and it stayed healthy for `healthy-delay`, a
`drain-failed` node is drained again when its retry is due or its pods are gone, and a node an operator
uncordoned is let go. Each round observes a node, asks `decide.reconciling` what to do and does it: the
comparisons and the timers are there, and the timers are annotations on the node, so a new leader counts
from where the old one stopped.
It also turns a sustained drop of GPU allocatable below capacity (the device plugin marking a GPU
unhealthy) into a signal, since nothing else in Kubernetes links that to the pods on the GPU, and clears a
soft-fault condition nothing keeps up; those timers are on the node too (`allocatable-short-since`, the
condition's transition time). And it runs the pod restarts deferred in the journal that are due
(`workload.Restarter.run_due`), so a new leader runs those a previous one decided.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime

from app.act import nodes
from app.act.gatekeeper import GateKeeper
from app.act.handoff import HandOff
from app.act.nodes import NodeWriter
from app.act.recorder import Recorder
from app.act.requeue import Requeuer
from app.act.verify import Verifier
from app.act.workload import Restarter
from app.config import rules
from app.decide import footprint, reconciling
from app.domain import (
    FaultClass,
    NodeState,
    RemediationParams,
    RemediationState,
    Signal,
    freeze_mapping,
)
from app.kube import errors, port
from app.kube.viewgate import ViewGate
from app.obs.metrics import Metrics
from app.store.journal import Journal

log = logging.getLogger("app.act")
_READER = "reconcile"  # in the view's fallback metric


class Reconciler:
    def __init__(
        self,
        *,
        kube: port.KubePort,
        nodes: NodeWriter,
        handoff: HandOff,
        gates: GateKeeper,
        restarter: Restarter,
        recorder: Recorder,
        journal: Journal,
        policy: rules.Policy,
        metrics: Metrics,
        clock: Callable[[], datetime],
        emit: Callable[[Signal], Awaitable[None]],
        dry_run: bool,
        verifier: Verifier | None = None,
        requeuer: Requeuer | None = None,
        view: ViewGate | None = None,
    ) -> None:
        self._kube = kube
        # Nodes and GPU pods kept by watches (`kube.watch`): read while fresh, instead of a list a round;
        # a round at start-up waits for the view's first lists (`ViewGate.synced`) rather than list too.
        self._view = view
        self.rounds = 0  # rounds completed (whoever waits for one: tests, the watch benchmark)
        self._requeuer = requeuer
        self._nodes = nodes
        self._handoff = handoff
        self._gates = gates
        self._restarter = restarter
        self._recorder = recorder
        self._journal = journal
        self._policy = policy
        self._metrics = metrics
        self._clock = clock
        self._emit = emit
        self._dry_run = dry_run
        # Runs the verification Jobs (policy `verification`); None: verification is off.
        self._verifier = verifier
        # The allocatable drop each node was last signalled for (its mark): one signal per drop.
        self._signalled: dict[str, datetime] = {}
        self._dry_marks = DryMarks()

    async def run_once(self) -> None:
        try:
            await self._round()
        finally:
            self.rounds += 1

    async def _round(self) -> None:
        await self._restarter.run_due()  # journal and pods only: due whatever the node list says
        if self._requeuer is not None:
            await self._requeuer.resume()  # Workloads a requeue left deactivated, a previous leader's too
        try:
            all_nodes = await self._all_nodes()
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

    async def _all_nodes(self) -> list[NodeState]:
        """Every node: from the view when it can stand in for a list (listed, its watches up; at start-up
        after waiting for that), else listed, as before there was a view (the gate counts and logs it)."""
        view = await self._view.synced(_READER) if self._view is not None else None
        return view.nodes() if view is not None else await self._kube.list_nodes()

    async def _owned(self, node: NodeState) -> None:
        now = self._clock()
        step = reconciling.next_step(
            node, drain_running=self._handoff.running(node.name), policy=self._policy
        )
        lost = reconciling.lost_condition(node, step, now=now)
        if lost is not None and not self._dry_run:
            await self._kube.set_node_condition(node.name, lost)
        cls = step.fault_class
        match step.step:
            case reconciling.Step.STEP_BACK:
                await self._nodes.release(node.name, why=step.why)
            case reconciling.Step.RELEASE:
                await self._release(node, now=now)
            case reconciling.Step.RESUME_DRAIN if cls is not None:
                log.info("reconcile: resuming the drain of %s", node.name)
                self._start_drain(node, cls, how="resumed", remediation=step.remediation)
            case reconciling.Step.DRAIN_AGAIN if cls is not None:
                await self._drain_again(node, cls, now=now, remediation=step.remediation)
            case reconciling.Step.FOLLOW_REMEDIATION:
                await self._follow_remediation(node, cls, now=now)
            case reconciling.Step.VERIFY if self._verifier is not None:
                firing = [cls for _, cls in await self._journal.active_alerts(node=node.name)]
                await self._verifier.step(node, firing=firing)
            case _:
                pass

    def _start_drain(
        self, node: NodeState, fault_class: FaultClass, *, how: str, remediation: RemediationParams | None
    ) -> None:
        reason = f"{fault_class.value}: drain {how} by reconciliation"
        only = footprint.drain_pods(node)  # a partial drain moves the pods it started with, no others
        self._handoff.start(
            node.name,
            fault_class,
            reason=reason,
            remediation=remediation,
            pods=only,
            partial=only is not None,
        )

    async def _drain_again(
        self,
        node: NodeState,
        fault_class: FaultClass,
        *,
        now: datetime,
        remediation: RemediationParams | None,
    ) -> None:
        # Only GPU pods are drainable under `gpu_pods_only`, and the view has them all. This only decides
        # whether to drain again: the drain itself lists the node's pods from the API server.
        gpu_only = self._policy.drain.gpu_pods_only
        view = self._view.fresh(_READER) if self._view is not None and gpu_only else None
        if view is not None:
            pods = view.gpu_pods_on(node.name)
        else:
            pods = await self._kube.list_pods(node=node.name)
        decision = reconciling.drain_again(node, pods=pods, policy=self._policy.drain, now=now)
        match decision:
            case reconciling.DrainAgain(how=how, why=why):
                log.info("reconcile: %s: %s", node.name, why)
                self._start_drain(node, fault_class, how=how, remediation=remediation)
            case reconciling.Wait(why=why):
                log.debug("reconcile: %s: %s", node.name, why)

    async def _follow_remediation(self, node: NodeState, cls: FaultClass | None, *, now: datetime) -> None:
        match reconciling.remediation_step(node, cls, policy=self._policy, now=now):
            case reconciling.Verify(why=why):
                await self._nodes.set_state(node.name, RemediationState.VERIFYING)
                await self._recorder.node_event(node.name, "SickbayVerifying", why)
            case reconciling.Escalate(why=why, remediation=remediation):
                # The replace remediator is asked as after a drain: its custom resource or webhook too. The
                # request rewrites remediation-requested, so a later round has nothing left to escalate;
                # a request that failed leaves it as it was, and the next round asks again.
                await self._recorder.node_event(node.name, "SickbayRemediationTimedOut", why, warning=True)
                await self._handoff.request(node.name, remediation, reason=why)
            case reconciling.Wait(why=why):
                log.debug("reconcile: %s: %s", node.name, why)

    async def _release(self, node: NodeState, *, now: datetime) -> None:
        firing = [cls for _, cls in await self._journal.active_alerts(node=node.name)]
        match reconciling.release_step(node, firing=firing, policy=self._policy.release, now=now):
            case reconciling.Release(why=why):
                await self._nodes.release(node.name, why=why)
            case reconciling.Mark(since=since, why=why):
                await self._time_mark(node, footprint.HEALTHY_SINCE, since=since, why=why)
            case reconciling.Wait(why=why):
                log.debug("reconcile: %s: %s", node.name, why)

    async def _time_mark(self, node: NodeState, key: str, *, since: datetime | None, why: str) -> None:
        """Write a timer on the node, where the next leader reads it; a node changed since the list (409)
        is marked next round, from what it says then."""
        patch = footprint.time_mark_patch(node, key, since=since)
        if self._dry_run:
            log.info("dry-run: would patch %s: %s (%s)", node.name, nodes.describe(patch), why)
            return
        try:
            await self._kube.patch_node(patch)
        except errors.ConflictError:
            log.info("reconcile: %s changed since it was listed; its %s mark waits a round", node.name, key)
            return
        log.info("reconcile: %s: %s", node.name, why)

    async def _soft_condition(self, node: NodeState) -> None:
        now, transient = self._clock(), self._policy.transient
        if not reconciling.soft_condition_outlived(node, policy=transient, now=now):
            return  # the common case, decided without reading the journal
        firing = [cls for _, cls in await self._journal.active_alerts(node=node.name)]
        match reconciling.soft_condition_step(node, firing=firing, policy=transient, now=now):
            case reconciling.ClearSoft(condition=condition, why=why):
                if self._dry_run:
                    log.info("dry-run: would clear %s on %s", condition.type, node.name)
                    return
                await self._kube.set_node_condition(node.name, condition)
                await self._recorder.node_event(
                    node.name, "SickbaySoftFaultCleared", f"{condition.type}=False: {why}"
                )
            case reconciling.Wait(why=why):
                log.debug("reconcile: %s: %s", node.name, why)

    async def _capacity(self, node: NodeState) -> None:
        now = self._clock()
        if self._dry_run:  # nothing is written: the mark a real run would have left lives here instead
            node = self._dry_marks.as_marked(node)
        step = reconciling.capacity_step(
            node, policy=self._policy.release, now=now, signalled=self._signalled.get(node.name)
        )
        match step:
            case reconciling.MarkShort(since=since, why=why):
                await self._short_mark(node, since=since, why=why)
            case reconciling.SignalShort(signal=signal, mark=mark):
                if mark:
                    await self._short_mark(node, since=signal.starts_at, why="signalled")
                self._signalled[node.name] = signal.starts_at
                await self._emit(signal)
            case reconciling.Wait(why=why):
                log.debug("reconcile: %s: %s", node.name, why)

    async def _short_mark(self, node: NodeState, *, since: datetime | None, why: str) -> None:
        if self._dry_run:
            self._dry_marks.note(node.name, footprint.ALLOCATABLE_SHORT_SINCE, since)
        await self._time_mark(node, footprint.ALLOCATABLE_SHORT_SINCE, since=since, why=why)


class DryMarks:
    """The timer annotations a dry run would have written, laid over each listed node (a dry run writes
    nothing, yet its allocatable grace must run out as a real run's would)."""

    def __init__(self) -> None:
        self._marks: dict[str, dict[str, str]] = {}

    def note(self, node: str, key: str, since: datetime | None) -> None:
        self._marks.setdefault(node, {})[key] = since.isoformat() if since is not None else ""

    def as_marked(self, node: NodeState) -> NodeState:
        marks = self._marks.get(node.name)
        if not marks:
            return node
        merged = {**dict(node.annotations), **marks}
        return replace(node, annotations=freeze_mapping({k: v for k, v in merged.items() if v}))
