"""Draining a quarantined node: evictions through the Eviction API, so PodDisruptionBudgets hold.

A 429 from a budget means "not now": retry with backoff until the drain deadline, then follow policy
(`leave` with an Event and a metric, or `delete`). A 404 means the pod is already gone: done. One drain
task per node; the pods being evicted are remembered so concurrent plans never evict a pod twice.
After the drain the node is handed to its remediator.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime

from app.act.recorder import Recorder
from app.act.urgency import Urgency
from app.config import rules
from app.decide import evictions
from app.domain import Action, ActionKind, Outcome, OutcomeStatus, PodRef, Track
from app.kube import errors, port
from app.obs.metrics import Metrics

log = logging.getLogger("app.act")
_MAX_PARALLEL_EVICTIONS = 8


class Drainer:
    def __init__(
        self,
        *,
        kube: port.KubePort,
        recorder: Recorder,
        policy: rules.DrainPolicy,
        metrics: Metrics,
        clock: Callable[[], datetime],
        dry_run: bool,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        urgency: Urgency | None = None,
    ) -> None:
        self._urgency = urgency or Urgency()
        self._kube = kube
        self._recorder = recorder
        self._policy = policy
        self._metrics = metrics
        self._clock = clock
        self._dry_run = dry_run
        self._sleep = sleep
        self._in_flight: set[tuple[str, str]] = set()
        self._tasks: dict[str, asyncio.Task[list[Outcome]]] = {}

    def running(self, node: str) -> bool:
        task = self._tasks.get(node)
        return task is not None and not task.done()

    def start(
        self,
        node: str,
        *,
        reason: str,
        pods: list[PodRef] | None = None,
        first: Callable[[], Awaitable[None]] | None = None,
        then: Callable[[list[Outcome]], Awaitable[None]] | None = None,
    ) -> asyncio.Task[list[Outcome]]:
        """Drain `node` in the background (the listed pods, or every drainable GPU pod found on it).

        `first` runs before the evictions (marking the node `draining`), `then` after them (hand-off).
        """
        if self.running(node):
            return self._tasks[node]
        task = asyncio.create_task(
            self._drain(node, reason=reason, pods=pods, first=first, then=then), name=f"drain-{node}"
        )
        self._tasks[node] = task
        return task

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def _drain(
        self,
        node: str,
        *,
        reason: str,
        pods: list[PodRef] | None,
        first: Callable[[], Awaitable[None]] | None,
        then: Callable[[list[Outcome]], Awaitable[None]] | None,
    ) -> list[Outcome]:
        await self._urgency.calm()  # other nodes' quarantines go first
        started = time.monotonic()
        if first is not None:
            try:
                await first()
            except errors.KubeError as exc:  # the label is cosmetic; the evictions must still happen
                log.warning("could not mark %s as draining (%s); draining anyway", node, exc)
        if pods is None:
            found = await self._kube.list_pods(node=node)
            pods = [p.ref for p in found if evictions.drainable(p, self._policy)]
        slots = asyncio.Semaphore(_MAX_PARALLEL_EVICTIONS)

        async def one(pod: PodRef) -> Outcome:
            async with slots:
                return await self.evict(pod, node=node, reason=reason)

        outcomes = list(await asyncio.gather(*(one(p) for p in pods)))
        self._metrics.drain_seconds.observe(time.monotonic() - started)
        if then is not None:
            await then(outcomes)
        return outcomes

    async def evict(self, pod: PodRef, *, node: str, reason: str) -> Outcome:
        action = Action(kind=ActionKind.EVICT_POD, track=Track.WORKLOAD, node=node, pod=pod, reason=reason)
        key = (pod.namespace, pod.name)
        if key in self._in_flight:
            return self._recorder.outcome(action, OutcomeStatus.SKIPPED, "eviction already in progress")
        if self._dry_run:
            return self._recorder.outcome(
                action, OutcomeStatus.DRY_RUN, "would evict through the Eviction API"
            )
        self._in_flight.add(key)
        try:
            return await self._evict_until_deadline(action, pod)
        finally:
            self._in_flight.discard(key)

    async def _evict_until_deadline(self, action: Action, pod: PodRef) -> Outcome:
        # The event loop's clock, not the wall clock: monotonic, and fast-forwarded in tests (looptime).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._policy.deadline.total_seconds()
        delay = 1.0
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._kube.evict_pod(pod.namespace, pod.name)
            except errors.NotFoundError:
                return self._recorder.outcome(
                    action, OutcomeStatus.SKIPPED, "pod already gone", attempts=attempt
                )
            except errors.TooManyRequestsError as exc:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return await self._past_deadline(action, pod, attempt, str(exc))
                wait = min(delay, remaining, max(exc.retry_after or 0.0, delay))
                log.info(
                    "eviction of %s refused (attempt %d: %s); will retry in %.1fs, %.0fs left before the drain deadline",
                    pod,
                    attempt,
                    "disruption budget" if exc.budget else "throttled",
                    wait,
                    remaining,
                )
                await self._sleep(wait)
                delay = min(delay * 2, 30.0)
                continue
            except errors.KubeError as exc:
                self._metrics.kube_errors.labels(kind="evict").inc()
                return self._recorder.outcome(action, OutcomeStatus.FAILED, str(exc), attempts=attempt)
            await self._recorder.pod_event(
                pod, "SickbayEvicted", f"evicted from node {action.node}: {action.reason}"
            )
            return self._recorder.outcome(action, OutcomeStatus.APPLIED, "evicted", attempts=attempt)

    async def _past_deadline(self, action: Action, pod: PodRef, attempts: int, why: str) -> Outcome:
        self._metrics.evictions_blocked.inc()
        if self._policy.on_deadline == "delete":
            try:
                await self._kube.delete_pod(pod.namespace, pod.name)
            except errors.NotFoundError:
                return self._recorder.outcome(
                    action, OutcomeStatus.SKIPPED, "pod already gone", attempts=attempts
                )
            await self._recorder.pod_event(
                pod,
                "SickbayDeleted",
                "drain deadline passed with the eviction still refused; deleted per policy",
                warning=True,
            )
            return self._recorder.outcome(
                action, OutcomeStatus.APPLIED, "deleted after the drain deadline", attempts=attempts
            )
        await self._recorder.pod_event(
            pod,
            "SickbayEvictionBlocked",
            f"a PodDisruptionBudget kept refusing the eviction until the drain deadline; left in place ({why})",
            warning=True,
        )
        return self._recorder.outcome(
            action,
            OutcomeStatus.BLOCKED,
            "left in place after the drain deadline (policy: leave)",
            attempts=attempts,
        )
