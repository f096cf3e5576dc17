"""The workload track through Kueue: requeue a queued job by deactivating its Workload and, once Kueue has
evicted it and its quota is released, reactivating it (why this and not an eviction: `decide.queueing`).

Each requeue runs in the background, since Kueue's eviction and the job's pods stopping take as long as
they take: the plan's outcome says it started, and the requeue's own outcome is journaled when it ends.
A Workload Sickbay deactivated carries the label `sickbay.io/requeued` until it is reactivated, so each
reconciliation round (`resume`) carries on with any requeue that no task is moving, such as one a
previous leader began.
What to write at each turn is `decide.queueing.next_step`'s answer; this reads, writes, waits and reports.
It must not decide: a Workload someone else deactivated is left as it is (`not-ours`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from app.act.recorder import Recorder
from app.decide import queueing
from app.domain import (
    Action,
    ActionKind,
    Outcome,
    OutcomeStatus,
    OwnerRef,
    RequeueParams,
    Track,
    WorkloadState,
)
from app.kube import errors, port
from app.store.journal import Journal

log = logging.getLogger("app.act")
EVENT = "SickbayRequeued"


class Requeuer:
    def __init__(
        self,
        *,
        queue: port.QueuePort,
        recorder: Recorder,
        journal: Journal,
        dry_run: bool,
        poll_s: float = 1.0,
        wait_s: float = 300.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._queue = queue
        self._recorder = recorder
        self._journal = journal
        self._dry_run = dry_run
        self._poll_s = poll_s
        self._wait_s = wait_s  # how long Kueue may take to release the quota before Sickbay says so
        self._sleep = sleep
        self._tasks: set[asyncio.Task[None]] = set()
        self._driving: set[tuple[str, str]] = set()  # Workloads being moved now (namespace, name)
        self._no_kueue = False  # the cluster serves no Workloads: `resume` stops asking

    def start(self, action: Action, *, fault_id: int | None) -> Outcome:
        """Start the requeue in the background; its outcome is journaled under `fault_id` when it ends."""
        if self._dry_run:
            return self._recorder.outcome(
                action, OutcomeStatus.DRY_RUN, "would deactivate the job's Workload, then reactivate it"
            )
        self._spawn(self.requeue(action), action, fault_id=fault_id)
        return self._recorder.outcome(action, OutcomeStatus.RECORDED, "requeue through Kueue started")

    async def resume(self) -> int:
        """Carry on with every requeue Sickbay began and did not finish (a leader that stopped between the
        deactivation and the reactivation): the reconciler calls this each round. Returns how many."""
        if self._dry_run:
            return 0
        if self._no_kueue:
            return 0
        try:
            held = await self._queue.list_requeued_workloads()
        except errors.NotFoundError:  # the Workload resource is not served: Kueue is not installed
            self._no_kueue = True
            log.info("no workloads.kueue.x-k8s.io on this cluster: no Kueue requeues to carry on")
            return 0
        except errors.KubeError as exc:
            log.warning("cannot list the Workloads Sickbay requeues (%s); next round", exc)
            return 0
        resumed = 0
        for workload in held:
            if (workload.namespace, workload.name) in self._driving:
                continue
            action = _resumed_action(workload)
            self._spawn(self._drive(action, workload), action, fault_id=None)
            resumed += 1
        return resumed

    def _spawn(self, work: Awaitable[Outcome], action: Action, *, fault_id: int | None) -> None:
        task = asyncio.create_task(self._journaled(work, action, fault_id), name=f"requeue-{action.pod}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _journaled(self, work: Awaitable[Outcome], action: Action, fault_id: int | None) -> None:
        try:
            outcome = await work
        except Exception as exc:  # reported, never raised into the loop
            log.exception("requeue through Kueue failed")
            outcome = self._recorder.outcome(action, OutcomeStatus.FAILED, str(exc))
        await self._journal.record_outcomes(fault_id, [outcome])

    async def requeue(self, action: Action) -> Outcome:
        """Deactivate, wait for Kueue to evict and release, reactivate: the whole requeue, awaited."""
        params = action.params_as(RequeueParams)
        try:
            found = await self._queue.list_workloads(params.namespace, job_uid=params.owner.uid)
        except errors.KubeError as exc:
            return self._recorder.outcome(action, OutcomeStatus.FAILED, f"cannot find the Workload: {exc}")
        if not found:
            return self._recorder.outcome(
                action, OutcomeStatus.SKIPPED, f"no Workload for {params.owner.kind} {params.owner.name}"
            )
        return await self._drive(action, found[0])

    async def _drive(self, action: Action, workload: WorkloadState) -> Outcome:
        key = (workload.namespace, workload.name)
        if key in self._driving:
            return self._recorder.outcome(action, OutcomeStatus.SKIPPED, "its requeue is under way")
        self._driving.add(key)
        try:
            return await self._steps(action, workload)
        finally:
            self._driving.discard(key)

    async def _steps(self, action: Action, workload: WorkloadState) -> Outcome:
        params = action.params_as(RequeueParams)
        node = action.node or workload.requeued_from
        deactivated = bool(workload.requeued_from)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        while True:
            step = queueing.next_step(workload, node=node)
            detail = queueing.explain(step, workload, node=node)
            try:
                if step == "deactivate" and not deactivated:
                    workload = await self._queue.set_workload_active(
                        workload, active=False, requeued_from=node
                    )
                    deactivated = True
                    await self._event(params, detail)
                    continue
                if step == "reactivate":
                    await self._queue.set_workload_active(workload, active=True, requeued_from=None)
                    await self._event(params, detail)
                    return self._recorder.outcome(action, OutcomeStatus.APPLIED, detail)
                if step not in ("wait", "deactivate"):
                    status = OutcomeStatus.APPLIED if deactivated else OutcomeStatus.SKIPPED
                    return self._recorder.outcome(action, status, detail)
                if loop.time() >= deadline:
                    return self._recorder.outcome(
                        action,
                        OutcomeStatus.FAILED,
                        f"{detail}; still waiting after {self._wait_s:g}s: reconciliation carries on with it",
                    )
                await self._sleep(self._poll_s)
                workload = await self._queue.get_workload(workload.namespace, workload.name)
            except errors.ConflictError:  # Kueue wrote it meanwhile: read again, decide again
                workload = await self._queue.get_workload(workload.namespace, workload.name)
            except errors.KubeError as exc:
                return self._recorder.outcome(action, OutcomeStatus.FAILED, f"{detail}: {exc}")

    async def _event(self, params: RequeueParams, message: str) -> None:
        owner = params.owner
        await self._recorder.owner_event(
            kind=owner.kind,
            name=owner.name,
            namespace=params.namespace,
            api_version=owner.api_version,
            reason=EVENT,
            message=message,
            uid=owner.uid,
        )

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _resumed_action(workload: WorkloadState) -> Action:
    owner = workload.owner or OwnerRef(kind="Workload", name=workload.name, uid=workload.uid)
    return Action(
        kind=ActionKind.REQUEUE_WORKLOAD,
        track=Track.WORKLOAD,
        node=workload.requeued_from or None,
        reason=f"carry on with the requeue of {workload.namespace}/{workload.name} begun before",
        params=RequeueParams(owner, namespace=workload.namespace, queue=workload.queue_name),
    )
