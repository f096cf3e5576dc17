"""Leader election on a `coordination.k8s.io/v1` Lease, so exactly one Sickbay replica acts at a time.

Why our own elector rather than `kubernetes.aio.leaderelection` (v37 ships one, with a LeaseLock):
- it refuses a retry period, renew deadline or lease duration under one second (the tests use 0.2 s);
- it stamps lease times from the *local* wall clock labelled as UTC ("Z"), wrong on any host not set to UTC,
  and leaves `renewTime` unwritten whenever the clock sits on a whole second (its parser needs a fraction);
- it never increments `leaseTransitions`, has no `release()` (a successor waits a whole lease duration after
  every rollout), no `is_leader()`, and measures intervals with `time.time()`, so no fake clock can drive it;
- its lock swallows every API error into a logged stack trace, a 409 from a lost race included.

The semantics follow client-go's `leaderelection` package:
- a candidate takes the lease when it is free (no holder, e.g. released) or expired: the record it observes
  has not changed for `leaseDurationSeconds` on the candidate's own monotonic clock. Trusting the observer's
  clock rather than comparing `renewTime` with local wall time keeps clock skew between hosts out of it;
- every write carries the read resourceVersion, so when two candidates race, the API server's 409 picks one;
- the leader renews every `retry_period`; it steps down as soon as a renewal sees another holder, or when
  `renew_deadline` has passed since the start of its last successful renewal. Because `renew_deadline` <
  `lease_duration`, the old leader stops before any follower may consider the lease expired;
- `leaseTransitions` counts holder changes; `acquireTime` is kept across renewals;
- `release()` writes an empty holder (and a one-second duration), so a successor takes over on its next try.

Intervals use the event loop's clock (injectable); lease timestamps use wall-clock UTC (injectable).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from app import backoff
from app.kube import convert, errors
from app.kube.client import KubeClient, utc_now
from app.kube.ratelimit import Clock, Sleep, loop_clock
from app.kube.retries import RetryPolicy

log = logging.getLogger(__name__)

JsonObj = dict[str, Any]
Callback = Callable[[], Awaitable[None]]

LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
LEASE_PATH = LEASES_PATH + "/{name}"


class LeaderElector:
    """Campaign for one Lease and run a callback while holding it.

    elector = LeaderElector(kube, name="sickbay", namespace="sickbay-system", identity=pod_name)
    task = asyncio.create_task(elector.run(start_leading, stop_leading))
    ...
    task.cancel()              # on shutdown: stops leading (on_stopped_leading runs) ...
    await elector.release()    # ... then hands the lease over at once
    """

    def __init__(
        self,
        kube: KubeClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        jitter: float = 0.2,
        clock: Clock = loop_clock,
        sleep: Sleep = asyncio.sleep,
        now: Callable[[], datetime] = utc_now,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if not identity:
            raise ValueError("a leader election identity must not be empty")
        if not 0 < renew_deadline < lease_duration:
            raise ValueError(
                f"renew_deadline ({renew_deadline}s) must be below lease_duration ({lease_duration}s)"
            )
        if not 0 < retry_period * (1 + jitter) < renew_deadline:
            raise ValueError(
                f"retry_period * (1 + jitter) ({retry_period * (1 + jitter):g}s) must be below "
                f"renew_deadline ({renew_deadline}s)"
            )
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.jitter = jitter
        # Every Lease call goes through the client's one request path (paced by its token bucket), tried
        # once: the campaign itself is the retry, every `retry_period`.
        self._kube = kube
        self._once = RetryPolicy(attempts=1, timeout=max(retry_period, 0.1))
        self._tries = backoff.Backoff(base=retry_period, factor=1.0, jitter=jitter)
        self._clock = clock
        self._sleep = sleep
        self._now = now
        self._rand = rand
        self._observed: JsonObj = {}  # the lease spec last seen or written
        self._observed_at = 0.0  # loop time when `_observed` last changed
        self._leading = False
        self._deadline = 0.0  # loop time until which our leadership is certain
        self._closing = False
        self._task: asyncio.Future[None] | None = None  # the leader's work, while leading
        self._runner: asyncio.Task[Any] | None = None  # the task running `run()`

    @property
    def lease(self) -> str:
        return f"{self.namespace}/{self.name}"

    # --- what others may ask -------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True while this replica holds the lease and its last renewal is recent enough to be sure of it."""
        return self._leading and self._clock() < self._deadline

    @property
    def leader_identity(self) -> str | None:
        """The holder in the lease as last observed (None when nobody holds it or it was never read)."""
        return str(self._observed.get("holderIdentity") or "") or None

    # --- the campaign --------------------------------------------------------------------------------

    async def run(self, on_started_leading: Callback, on_stopped_leading: Callback | None = None) -> None:
        """Campaign until cancelled or released: lead whenever the lease is ours, follow otherwise.

        `on_started_leading()` runs as a task while leading and is cancelled when leadership ends (if it fails,
        this replica steps down, releases the lease and sits out one lease duration); `on_stopped_leading()`
        is awaited after that.
        Losing the lease is not the end: the replica campaigns again.
        """
        self._runner = asyncio.current_task()
        try:
            while not self._closing:
                if not await self._acquire():
                    return
                failed = await self._lead(on_started_leading)
                await self._stop_leading(on_stopped_leading)
                if failed:
                    # Hand over at once, then let the other replicas have a lease duration to take it, so a
                    # replica whose work keeps failing does not keep the role to itself.
                    await self._write_release()
                    await self._sleep(self.lease_duration)
        finally:
            await self._stop_leading(on_stopped_leading)

    async def release(self) -> None:
        """Stop campaigning and, if this replica holds the lease, clear its holder so a successor need not wait.

        Call it on shutdown. A `run()` still going is cancelled first (so the leader's work stops and
        `on_stopped_leading` runs before anyone else can take over).
        """
        self._closing = True
        runner = self._runner
        if runner is not None and not runner.done() and runner is not asyncio.current_task():
            runner.cancel()
            await asyncio.wait({runner})
        await self._write_release()

    # --- following and leading -----------------------------------------------------------------------

    async def _acquire(self) -> bool:
        announced: str | None = None
        while not self._closing:
            if await self._try_acquire_or_renew():
                return not self._closing
            holder = self.leader_identity
            if holder != announced:
                log.info("lease %s is held by %s; %s follows", self.lease, holder, self.identity)
                announced = holder
            await self._sleep(self._tries.delay(1, rand=self._rand()))
        return False

    async def _lead(self, on_started_leading: Callback) -> bool:
        """Hold the lease until it is lost; returns True if it ended because the leader's own work failed."""
        self._leading = True
        log.info(
            "%s became the leader of lease %s (transitions: %s)",
            self.identity,
            self.lease,
            self._observed.get("leaseTransitions", 0),
        )
        task = self._task = asyncio.ensure_future(on_started_leading())
        while True:
            # Wake for the next renewal, or at the renew deadline if that comes first, so the leader's work
            # never outlives the certainty of holding the lease.
            wait = min(self.retry_period, max(0.0, self._deadline - self._clock()))
            pause = asyncio.ensure_future(self._sleep(wait))
            try:
                if not task.done():
                    await asyncio.wait({pause, task}, return_when=asyncio.FIRST_COMPLETED)
                if task.done() and not task.cancelled() and task.exception() is not None:
                    log.error(
                        "the leader's work failed; %s steps down from lease %s",
                        self.identity,
                        self.lease,
                        exc_info=task.exception(),
                    )
                    return True
                await pause  # work that ended normally leaves us leading: renew on schedule
            finally:
                pause.cancel()
            if not await self._renew():
                if self.leader_identity not in (None, self.identity):
                    log.warning("%s lost lease %s to %s", self.identity, self.lease, self.leader_identity)
                    return False
                if self._clock() >= self._deadline:
                    log.warning(
                        "%s could not renew lease %s within %gs; stepping down",
                        self.identity,
                        self.lease,
                        self.renew_deadline,
                    )
                    return False

    async def _renew(self) -> bool:
        """One renewal, abandoned when the renew deadline passes while it is in flight."""
        left = self._deadline - self._clock()
        if left <= 0:
            return False
        try:
            async with asyncio.timeout(left):
                return await self._try_acquire_or_renew()
        except TimeoutError:
            return False

    async def _stop_leading(self, on_stopped_leading: Callback | None) -> None:
        task, self._task = self._task, None
        was_leading, self._leading = self._leading, False
        if task is not None and not task.done():
            task.cancel()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if was_leading:
            log.info("%s stopped leading lease %s", self.identity, self.lease)
            if on_stopped_leading is not None:
                await on_stopped_leading()

    # --- one round against the API server ------------------------------------------------------------

    async def _try_acquire_or_renew(self) -> bool:
        """client-go's tryAcquireOrRenew: create the lease, take it if free or expired, or renew our hold."""
        started = self._clock()
        now = convert.format_micro_time(self._now())
        duration = max(1, math.ceil(self.lease_duration))
        try:
            lease = await self._get()
        except errors.NotFoundError:
            mine = {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": duration,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            }
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": self.name}}
            return await self._write("POST", {**body, "spec": mine}, started=started)
        except errors.KubeError as error:
            log.warning("cannot read lease %s: %s", self.lease, error)
            return False

        spec: JsonObj = lease.get("spec") or {}
        self._observe(spec, at=self._clock())
        holder = str(spec.get("holderIdentity") or "")
        held_by_us = holder == self.identity
        if holder and not held_by_us and not self._expired(spec):
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        mine = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": duration,
            "acquireTime": spec.get("acquireTime") if held_by_us and spec.get("acquireTime") else now,
            "renewTime": now,
            "leaseTransitions": transitions if held_by_us else transitions + 1,
        }
        if not held_by_us:
            log.info("%s takes lease %s (held by %r)", self.identity, self.lease, holder or None)
        return await self._write("PUT", {**lease, "spec": mine}, started=started)

    def _expired(self, spec: JsonObj) -> bool:
        duration = float(spec.get("leaseDurationSeconds") or 0)
        return self._clock() >= self._observed_at + duration

    def _observe(self, spec: JsonObj, *, at: float) -> None:
        if spec != self._observed:
            self._observed = dict(spec)
            self._observed_at = at

    async def _write(self, method: str, lease: JsonObj, *, started: float) -> bool:
        try:
            written = await self._send(method, lease)
        except errors.ConflictError:
            log.debug("%s lost a race for lease %s", self.identity, self.lease)
            return False
        except errors.KubeError as error:
            log.warning("cannot write lease %s: %s", self.lease, error)
            return False
        self._observe(written.get("spec") or {}, at=self._clock())
        self._deadline = started + self.renew_deadline
        return True

    async def _write_release(self) -> None:
        try:
            lease = await self._get()
        except errors.KubeError as error:
            log.warning("cannot read lease %s to release it: %s", self.lease, error)
            return
        spec: JsonObj = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            return
        now = convert.format_micro_time(self._now())
        released = {
            **spec,
            "holderIdentity": None,
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
        }
        try:
            written = await self._send("PUT", {**lease, "spec": released})
        except errors.KubeError as error:
            log.warning("cannot release lease %s: %s", self.lease, error)
            return
        self._observe(written.get("spec") or {}, at=self._clock())
        log.info("%s released lease %s", self.identity, self.lease)

    async def _get(self) -> JsonObj:
        return await self._send("GET", None)

    async def _send(self, method: str, body: JsonObj | None) -> JsonObj:
        return await self._kube.call(
            method,
            LEASE_PATH if method != "POST" else LEASES_PATH,
            what=f"{method} lease {self.lease}",
            body=body,
            retry=self._once,
            path_params={"namespace": self.namespace, "name": self.name},
        )
