"""The workload track through Kueue: requeue a queued job by deactivating its Workload and, once Kueue has
evicted it and its quota is released, reactivating it (why this and not an eviction: `decide.queueing`).

Each requeue runs in the background, since Kueue's eviction and the job's pods stopping take as long as
they take: the plan's outcome says it started, and the requeue's own outcome is journaled when it ends.
What to write at each turn is `decide.queueing.next_step`'s answer; this reads, writes, waits and reports.
It must not decide: a Workload someone else deactivated is left as it is (`not-ours`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from app.act.recorder import Recorder
from app.decide import queueing
from app.domain import Action, Outcome, OutcomeStatus, RequeueParams
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

    def start(self, action: Action, *, fault_id: int | None) -> Outcome:
        """Start the requeue in the background; its outcome is journaled under `fault_id` when it ends."""
        if self._dry_run:
            return self._recorder.outcome(
                action, OutcomeStatus.DRY_RUN, "would deactivate the job's Workload, then reactivate it"
            )
        task = asyncio.create_task(self._journaled(action, fault_id), name=f"requeue-{action.pod}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return self._recorder.outcome(action, OutcomeStatus.RECORDED, "requeue through Kueue started")

    async def _journaled(self, action: Action, fault_id: int | None) -> None:
        try:
            outcome = await self.requeue(action)
        except Exception as exc:  # reported, never raised into the loop
            log.exception("requeue through Kueue failed")
            outcome = self._recorder.outcome(action, OutcomeStatus.FAILED, str(exc))
        await self._journal.record_outcomes(fault_id, [outcome])

    async def requeue(self, action: Action) -> Outcome:
        """Deactivate, wait for Kueue to evict and release, reactivate: the whole requeue, awaited."""
        params = action.params_as(RequeueParams)
        node = action.node or ""
        try:
            found = await self._queue.list_workloads(params.namespace, job_uid=params.owner.uid)
        except errors.KubeError as exc:
            return self._recorder.outcome(action, OutcomeStatus.FAILED, f"cannot find the Workload: {exc}")
        if not found:
            return self._recorder.outcome(
                action, OutcomeStatus.SKIPPED, f"no Workload for {params.owner.kind} {params.owner.name}"
            )
        workload = found[0]
        deactivated = False
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
                        f"{detail}; gave up after {self._wait_s:g}s, left deactivated for an operator",
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
