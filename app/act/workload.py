"""The workload track: restart a pod in place (with backoff), or restart a whole gang.

A restart is a delete: the pod's controller recreates it. Every delete carries the UID of the pod the cluster
confirmed on the faulty GPU (decide refuses a restart it cannot confirm), so a replayed or deferred plan
never deletes the replacement pod that the controller created under the same name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from app.act.recorder import Recorder
from app.domain import Action, Outcome, OutcomeStatus, RestartParams
from app.kube import errors, port

log = logging.getLogger("app.act")


class Restarter:
    def __init__(
        self,
        *,
        kube: port.KubePort,
        recorder: Recorder,
        clock: Callable[[], datetime],
        dry_run: bool,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._kube = kube
        self._recorder = recorder
        self._clock = clock
        self._dry_run = dry_run
        self._sleep = sleep
        self._deferred: dict[tuple[str, str], asyncio.Task[Outcome]] = {}

    async def restart(self, action: Action, *, event_reason: str = "SickbayRestarted") -> Outcome:
        pod = action.pod
        assert pod is not None
        wait = (action.not_before - self._clock()).total_seconds() if action.not_before else 0.0
        if wait > 0:
            key = (pod.namespace, pod.name)
            if key in self._deferred and not self._deferred[key].done():
                return self._recorder.outcome(action, OutcomeStatus.SKIPPED, "a restart is already scheduled")
            self._deferred[key] = asyncio.create_task(
                self._later(action, wait, event_reason), name=f"restart-{pod}"
            )
            return self._recorder.outcome(
                action, OutcomeStatus.RECORDED, f"restart deferred {wait:.0f}s (backoff)"
            )
        return await self._now(action, event_reason)

    async def _later(self, action: Action, wait: float, event_reason: str) -> Outcome:
        await self._sleep(wait)
        return await self._now(action, event_reason)

    async def _now(self, action: Action, event_reason: str) -> Outcome:
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
        await self._recorder.pod_event(pod, event_reason, action.reason, uid=uid)
        return self._recorder.outcome(action, OutcomeStatus.APPLIED, "deleted; its controller recreates it")

    async def stop(self) -> None:
        for task in self._deferred.values():
            task.cancel()
        await asyncio.gather(*self._deferred.values(), return_exceptions=True)
