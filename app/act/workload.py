"""The workload track: restart a pod in place (with backoff), or restart a whole gang.

A restart is a delete: the pod's controller recreates it. Every delete carries the UID of the pod the cluster
confirmed on the faulty GPU (decide refuses a restart it cannot confirm), so a replayed or deferred plan
never deletes the replacement pod that the controller created under the same name.

A restart decided for later (the backoff's `not_before`) is kept in the journal (`store.restart_queue`),
not in a task: a wake-up runs it when it is due, and each reconciliation round runs what is due and wakes
for the rest, so a new leader on the same journal restarts the pod at the time the first one set. When it
is due is `decide.restart_policy.restart_wait`'s answer; this sleeps, deletes and reports.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from app.act.recorder import Recorder
from app.decide import restart_policy
from app.domain import Action, ActionKind, Outcome, OutcomeStatus, PodRef, RestartParams
from app.kube import errors, port
from app.store.journal import Journal

log = logging.getLogger("app.act")
_EVENTS = {ActionKind.RESTART_GANG: "SickbayGangRestarted", ActionKind.RESTART_POD: "SickbayRestarted"}


class Restarter:
    def __init__(
        self,
        *,
        kube: port.KubePort,
        recorder: Recorder,
        journal: Journal,
        clock: Callable[[], datetime],
        dry_run: bool,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._kube = kube
        self._recorder = recorder
        self._journal = journal
        self._clock = clock
        self._dry_run = dry_run
        self._sleep = sleep
        # Wake-ups for the deferred restarts, by pod: only a prompt, the journal holds what is due.
        self._wakes: dict[PodRef, asyncio.Task[None]] = {}

    async def restart(self, action: Action, *, fault_id: int | None = None) -> Outcome:
        """Restart now, or keep the restart in the journal until its `not_before` (one per pod)."""
        pod = action.pod
        assert pod is not None
        wait = restart_policy.restart_wait(action.not_before, now=self._clock())
        if wait <= 0:
            return await self._now(action)
        if not await self._journal.defer_restart(action, fault_id=fault_id):
            return self._recorder.outcome(action, OutcomeStatus.SKIPPED, "a restart is already scheduled")
        self._wake(pod, wait)
        return self._recorder.outcome(
            action, OutcomeStatus.RECORDED, f"restart deferred {wait:.0f}s (backoff)"
        )

    async def run_due(self) -> list[Outcome]:
        """Run every deferred restart that is due (journaling what came of it) and wake for the others:
        the reconciler calls this each round, so a new leader runs what the old one deferred."""
        done: list[Outcome] = []
        for deferred in await self._journal.deferred_restarts():
            action = deferred.action
            assert action.pod is not None
            wait = restart_policy.restart_wait(action.not_before, now=self._clock())
            if wait > 0:
                self._wake(action.pod, wait)
                continue
            if not await self._journal.claim_restart(action):
                continue  # run by another wake-up meanwhile
            outcome = await self._now(action)
            await self._journal.record_outcomes(deferred.fault_id, [outcome])
            done.append(outcome)
        return done

    def _wake(self, pod: PodRef, wait: float) -> None:
        running = self._wakes.get(pod)
        if running is not None and not running.done():
            return
        self._wakes[pod] = asyncio.create_task(self._wake_after(wait), name=f"restart-{pod}")

    async def _wake_after(self, wait: float) -> None:
        await self._sleep(wait)
        try:
            await self.run_due()
        except Exception:  # the next reconciliation round runs it instead
            log.exception("deferred restarts could not be run; the next reconciliation tries again")

    async def _now(self, action: Action) -> Outcome:
        pod = action.pod
        assert pod is not None
        if self._dry_run:
            return self._recorder.outcome(
                action, OutcomeStatus.DRY_RUN, "would delete the pod for its controller to recreate"
            )
        uid = action.params_as(RestartParams).uid or None
        if uid is None:  # decide confirms the pod and passes its UID; without one this could be any pod
            return self._recorder.outcome(
                action, OutcomeStatus.SKIPPED, "no confirmed pod UID on the action: not restarted"
            )
        try:
            await self._kube.delete_pod(pod.namespace, pod.name, uid=uid)
        except errors.NotFoundError:
            return self._recorder.outcome(action, OutcomeStatus.SKIPPED, "pod already gone")
        except errors.ConflictError:
            return self._recorder.outcome(
                action, OutcomeStatus.SKIPPED, "pod was already replaced (UID changed)"
            )
        except errors.KubeError as exc:
            return self._recorder.outcome(action, OutcomeStatus.FAILED, str(exc))
        await self._recorder.pod_event(pod, _EVENTS[action.kind], action.reason, uid=uid)
        return self._recorder.outcome(action, OutcomeStatus.APPLIED, "deleted; its controller recreates it")

    async def stop(self) -> None:
        """Cancel the wake-ups; what they were for stays in the journal, for the next leader."""
        for task in self._wakes.values():
            task.cancel()
        await asyncio.gather(*self._wakes.values(), return_exceptions=True)
