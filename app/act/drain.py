"""Draining a quarantined node: evictions through the Eviction API, so PodDisruptionBudgets hold, and then
waiting until the evicted pods are really gone.

A 429 from a budget means "not now": retry with backoff until the drain deadline, then follow policy
(`leave` with an Event and a metric, or `delete`). A 404, or a 409 on the pod's UID (its name now belongs
to a new pod), means the pod is already gone: done. Any other failure is for good (403 RBAC, a webhook's
400, a 5xx after the client's retries). Accepted is not gone: each moved pod is then waited for
(`departures`) until the later of the drain deadline and its own grace period after it was accepted, so a
`delete` after the deadline still waits for the deletion. The drain ends in a `DrainResult`; what follows
it (a hand-off, or `drain-failed`) is `handoff`'s business.

When to retry, what the deadline then means and how long a pod is waited for are `decide.drain_deadline`'s
answers; this keeps the time, sleeps, calls the API and reports, and compares nothing with the deadline.
The deadline counts from the start the node carries (`sickbay.io/draining-since`, written by `first`), so
a drain resumed by a new leader ends when the old leader's would have; only the waits run on the event
loop's clock.

One drain task per node; the pods being evicted are remembered so concurrent plans never evict a pod twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from app.act import departures
from app.act.recorder import Recorder
from app.act.urgency import Urgency
from app.config import rules
from app.decide import drain_deadline, drains, evictions
from app.domain import Action, ActionKind, NodeState, Outcome, OutcomeStatus, PodRef, PodState, Track
from app.kube import errors, port
from app.obs.metrics import Metrics

log = logging.getLogger("app.act")
_MAX_PARALLEL_EVICTIONS = 8
_IN_PROGRESS = "eviction already in progress"


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
        self._tasks: dict[str, asyncio.Task[drains.DrainResult]] = {}

    def running(self, node: str) -> bool:
        task = self._tasks.get(node)
        return task is not None and not task.done()

    def start(
        self,
        node: str,
        *,
        reason: str,
        pods: list[PodRef] | None = None,
        first: Callable[[], Awaitable[NodeState | None]] | None = None,
        then: Callable[[drains.DrainResult], Awaitable[None]] | None = None,
        wait: bool = True,
    ) -> asyncio.Task[drains.DrainResult]:
        """Drain `node` in the background (the listed pods, or every drainable GPU pod found on it).

        `first` runs before the evictions (marking the node `draining` and when it started: the node it
        returns carries the start the deadline counts from), `then` after the pods are gone or their wait ended (the hand-off, or `drain-failed`). `wait=False` returns once the evictions are
        answered, for a drain nothing is handed off after (the proactive ladder's).
        """
        if self.running(node):
            return self._tasks[node]
        task = asyncio.create_task(
            self._drain(node, reason=reason, pods=pods, first=first, then=then, wait=wait),
            name=f"drain-{node}",
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
        first: Callable[[], Awaitable[NodeState | None]] | None,
        then: Callable[[drains.DrainResult], Awaitable[None]] | None,
        wait: bool,
    ) -> drains.DrainResult:
        await self._urgency.calm()  # other nodes' quarantines go first
        # The waits run on the event loop's clock, not the wall clock: monotonic, and fast-forwarded in
        # tests (looptime); the deadline is placed on it from the start the node carries.
        loop = asyncio.get_running_loop()
        started = loop.time()
        marked: NodeState | None = None
        if first is not None:
            try:
                marked = await first()
            except errors.KubeError as exc:  # the label is cosmetic; the evictions must still happen
                log.warning("could not mark %s as draining (%s); draining anyway", node, exc)
        deadline = loop.time() + drain_deadline.time_left(marked, self._policy, now=self._clock())
        try:
            targets, elsewhere = await self._targets(node, pods)
        except errors.KubeError as exc:
            self._metrics.kube_errors.labels(kind="drain").inc()
            result = drains.DrainResult(node=node, problem=f"cannot list the pods on the node: {exc}")
        else:
            result = await self._evict_all(
                node, targets, reason=reason, deadline=deadline, wait=wait, elsewhere=elsewhere
            )
        self._metrics.drain_seconds.observe(loop.time() - started)
        if then is not None:
            await then(result)
        return result

    async def _targets(self, node: str, pods: list[PodRef] | None) -> tuple[list[PodState], list[PodRef]]:
        """The pods to move, as found on the node now (their UIDs pin each eviction to that incarnation),
        and the listed pods that are not on it (gone, or never there: never evicted from elsewhere).

        Listed from the API server, never from the cluster view: a drain empties the node before it is
        rebooted or replaced, so it must see every pod bound to it now (one bound an event ago included),
        and it is one LIST on a field selector (`spec.nodeName`) per drain, not a periodic or fleet-wide read."""
        found = await self._kube.list_pods(node=node)
        if pods is None:
            return [p for p in found if evictions.drainable(p, self._policy)], []
        here = {(p.namespace, p.name): p for p in found}
        wanted = list(dict.fromkeys((p.namespace, p.name) for p in pods))
        targets = [here[key] for key in wanted if key in here]
        elsewhere = [PodRef(namespace=ns, name=name) for ns, name in wanted if (ns, name) not in here]
        return targets, elsewhere

    async def _evict_all(
        self,
        node: str,
        targets: list[PodState],
        *,
        reason: str,
        deadline: float,
        wait: bool,
        elsewhere: list[PodRef],
    ) -> drains.DrainResult:
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(_MAX_PARALLEL_EVICTIONS)
        leaving: list[departures.Departure] = []

        async def one(pod: PodState) -> Outcome:
            async with slots:
                outcome = await self.evict(pod, node=node, reason=reason, deadline=deadline)
            if outcome.status is OutcomeStatus.APPLIED or outcome.detail == _IN_PROGRESS:
                until = drain_deadline.departure_wait_until(
                    deadline=deadline, grace_period_s=pod.grace_period_s, now=loop.time()
                )
                leaving.append(departures.Departure(pod.ref, pod.uid, until, pod.grace_period_s))
            return outcome

        outcomes = list(await asyncio.gather(*(one(p) for p in targets)))
        outcomes += [self._not_here(pod, node=node, reason=reason) for pod in elsewhere]
        lingering = (
            await departures.wait_until_gone(self._kube, node, leaving, sleep=self._sleep) if wait else {}
        )
        return drains.settle(node, outcomes, lingering=lingering)

    def _not_here(self, pod: PodRef, *, node: str, reason: str) -> Outcome:
        action = Action(kind=ActionKind.EVICT_POD, track=Track.WORKLOAD, node=node, pod=pod, reason=reason)
        return self._recorder.outcome(action, OutcomeStatus.SKIPPED, f"not on {node} (already gone)")

    async def evict(self, pod: PodState, *, node: str, reason: str, deadline: float) -> Outcome:
        action = Action(
            kind=ActionKind.EVICT_POD, track=Track.WORKLOAD, node=node, pod=pod.ref, reason=reason
        )
        key = (pod.namespace, pod.name)
        if key in self._in_flight:
            return self._recorder.outcome(action, OutcomeStatus.SKIPPED, _IN_PROGRESS)
        if self._dry_run:
            return self._recorder.outcome(
                action, OutcomeStatus.DRY_RUN, "would evict through the Eviction API"
            )
        self._in_flight.add(key)
        try:
            return await self._evict_until_deadline(action, pod, deadline=deadline)
        finally:
            self._in_flight.discard(key)

    async def _evict_until_deadline(self, action: Action, pod: PodState, *, deadline: float) -> Outcome:
        loop = asyncio.get_running_loop()
        ref = pod.ref
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._kube.evict_pod(pod.namespace, pod.name, uid=pod.uid or None)
            except (errors.NotFoundError, errors.ConflictError) as exc:
                gone = (
                    "pod already gone"
                    if isinstance(exc, errors.NotFoundError)
                    else "pod already gone (its name now belongs to another pod)"
                )
                return self._recorder.outcome(action, OutcomeStatus.SKIPPED, gone, attempts=attempt)
            except errors.TooManyRequestsError as exc:
                next_step = drain_deadline.after_refusal(
                    attempt=attempt, deadline=deadline, policy=self._policy, now=loop.time()
                )
                if not isinstance(next_step, drain_deadline.RetryIn):
                    return await self._past_deadline(
                        action, pod, then=next_step, attempts=attempt, why=str(exc)
                    )
                log.info(
                    "eviction of %s refused (attempt %d: %s); will retry in %.1fs, %.0fs left before the drain deadline",
                    ref,
                    attempt,
                    "disruption budget" if exc.budget else "throttled",
                    next_step.seconds,
                    next_step.left,
                )
                await self._sleep(next_step.seconds)
                continue
            except errors.KubeError as exc:
                self._metrics.kube_errors.labels(kind="evict").inc()
                return self._recorder.outcome(action, OutcomeStatus.FAILED, str(exc), attempts=attempt)
            await self._recorder.pod_event(
                ref, "SickbayEvicted", f"evicted from node {action.node}: {action.reason}", uid=pod.uid
            )
            return self._recorder.outcome(action, OutcomeStatus.APPLIED, "evicted", attempts=attempt)

    async def _past_deadline(
        self,
        action: Action,
        pod: PodState,
        *,
        then: drain_deadline.DeleteAtDeadline | drain_deadline.LeaveAtDeadline,
        attempts: int,
        why: str,
    ) -> Outcome:
        self._metrics.evictions_blocked.inc()
        ref = pod.ref
        if isinstance(then, drain_deadline.DeleteAtDeadline):
            try:
                await self._kube.delete_pod(pod.namespace, pod.name, uid=pod.uid or None)
            except (errors.NotFoundError, errors.ConflictError):
                return self._recorder.outcome(
                    action, OutcomeStatus.SKIPPED, "pod already gone", attempts=attempts
                )
            except errors.KubeError as exc:
                self._metrics.kube_errors.labels(kind="delete").inc()
                return self._recorder.outcome(
                    action,
                    OutcomeStatus.FAILED,
                    f"delete after the drain deadline failed: {exc}",
                    attempts=attempts,
                )
            await self._recorder.pod_event(
                ref,
                "SickbayDeleted",
                "drain deadline passed with the eviction still refused; deleted per policy",
                warning=True,
            )
            return self._recorder.outcome(
                action, OutcomeStatus.APPLIED, "deleted after the drain deadline", attempts=attempts
            )
        await self._recorder.pod_event(
            ref,
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
