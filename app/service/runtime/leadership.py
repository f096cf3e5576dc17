"""Leadership: only the leader consumes the inbox and runs the leader's jobs; every replica serves.

With leader election on, a Lease decides (`app.kube.leader`) and the leader labels its own pod; without
it, this replica leads from start-up. Taking the lead starts the inbox consumer (restarted if it crashes)
and the periodic jobs (reconcile, re-checks, Alertmanager sync); losing it cancels them, runs included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from app import backoff
from app.ingest import signals
from app.kube import client as kube_client
from app.kube import errors as kube_errors
from app.kube import leader as kube_leader
from app.service import alertsync, rechecks
from app.service.runtime.services import SERVICES, Services

log = logging.getLogger(__name__)
_RESTART = backoff.Backoff(base=1.0, cap=60.0)  # a crashed inbox consumer restarts after 1 s, 2 s, … 60 s


async def lead_when_elected(app: web.Application) -> AsyncIterator[None]:
    """Only the leader consumes the inbox and reconciles. Without leader election, this replica leads."""
    services = app[SERVICES]
    settings = services.settings
    elector: kube_leader.LeaderElector | None = None
    if settings.leader.enabled and isinstance(services.kube, kube_client.KubeClient):
        # A replica restarted in place (same pod) may still carry the label its previous process set.
        await _label_own_pod(services, leader=False)
        # Its own client on the same connection, so its own token bucket (as controller-runtime gives leader
        # election its own client): a storm of node writes must not queue the renewals past their deadline.
        lease_client = kube_client.KubeClient(
            services.kube.api, qps=settings.kube.qps, burst=settings.kube.burst, now=services.clock
        )
        elector = kube_leader.LeaderElector(
            lease_client,
            name=settings.leader.lease_name,
            namespace=settings.leader.namespace,
            identity=settings.identity,
            lease_duration=settings.leader.lease_duration_s,
            renew_deadline=settings.leader.renew_deadline_s,
            retry_period=settings.leader.retry_period_s,
            now=services.clock,
        )

        async def lead() -> None:
            await _start_leading(services)

        async def follow() -> None:
            await _stop_leading(services)

        runner = asyncio.create_task(elector.run(lead, follow), name="leader-election")
    else:
        runner = None
        await _start_leading(services)
    services.ready = True
    try:
        yield
    finally:
        services.ready = False
        if runner is not None:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
        await _stop_leading(services)
        if elector is not None:
            with contextlib.suppress(kube_errors.KubeError):
                await elector.release()


async def _start_leading(services: Services) -> None:
    if services.leader:
        return
    services.leader = True
    services.metrics.leader.set(1)
    log.info("%s is the leader: consuming the inbox and reconciling", services.settings.identity)
    await _label_own_pod(services, leader=True)
    assert services.pipeline is not None
    services.tasks.append(asyncio.create_task(_guarded(services.pipeline.run, "pipeline"), name="pipeline"))
    for job, run, seconds in _leader_jobs(services):
        assert services.scheduler is not None
        services.scheduler.every(job, run, seconds=seconds, now=True)


def _leader_jobs(services: Services) -> list[tuple[str, Callable[[], Awaitable[object]], float]]:
    """The leader's periodic work, each run at once on taking the lead and then every interval."""
    settings = services.settings
    jobs: list[tuple[str, Callable[[], Awaitable[object]], float]] = []
    if services.reconciler is not None:
        jobs.append(("reconcile", services.reconciler.run_once, settings.reconcile_interval_s))
    jobs.append(("recheck", lambda: _recheck_once(services), settings.pipeline.recheck_poll_s))
    if settings.alertmanager_url:
        jobs.append(
            ("alert-sync", lambda: _sync_alerts_once(services), settings.alertmanager_sync_interval_s)
        )
    if services.retention is not None and settings.retention.enabled:
        jobs.append(("retention", services.retention.run_once, settings.retention.interval.total_seconds()))
    return jobs


async def _stop_leading(services: Services) -> None:
    if not services.leader:
        return
    services.leader = False
    services.metrics.leader.set(0)
    if services.scheduler is not None:  # the leader's jobs end with its lead, runs in flight included
        await asyncio.gather(*(services.scheduler.cancel(job) for job, _, _ in _leader_jobs(services)))
    for task in services.tasks:
        task.cancel()
    await asyncio.gather(*services.tasks, return_exceptions=True)
    services.tasks.clear()
    await _label_own_pod(services, leader=False)


async def _label_own_pod(services: Services, *, leader: bool) -> None:
    settings = services.settings
    if not settings.leader.enabled or services.kube is None:
        return
    try:
        await services.kube.patch_pod_labels(
            settings.pod_namespace, settings.identity, {settings.leader.pod_label: "true" if leader else None}
        )
    except kube_errors.KubeError as exc:
        log.warning(
            "could not label pod %s/%s as leader=%s: %s",
            settings.pod_namespace,
            settings.identity,
            leader,
            exc,
        )


async def _recheck_once(services: Services) -> None:
    """Hand due re-checks of transient signals to the pipeline (leader only, like the pipeline itself)."""
    assert services.journal is not None
    assert services.inbox is not None
    await rechecks.enqueue_due(journal=services.journal, inbox=services.inbox, clock=services.clock)


async def _sync_alerts_once(services: Services) -> None:
    """On becoming leader and then periodically: catch up with what Alertmanager says is firing."""
    settings = services.settings
    assert settings.alertmanager_url is not None
    assert services.inbox is not None
    assert services.journal is not None
    try:
        await alertsync.sync(
            url=settings.alertmanager_url,
            receiver=settings.alertmanager_receiver,
            inbox=services.inbox,
            journal=services.journal,
            keys=signals.NodeKeys.of(settings),
            clock=services.clock,
        )
    except alertsync.AlertSyncError as exc:
        log.warning("alert reconciliation skipped: %s; will try again", exc)


async def _guarded(run: Callable[[], Awaitable[None]], name: str) -> None:
    """Keep the inbox consumer alive: an unexpected error is logged loudly and the loop restarts."""
    crashes = 0
    while True:
        try:
            await run()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            crashes += 1
            delay = _RESTART.delay(crashes)
            log.exception("background task %s crashed; restarting in %.0fs", name, delay)
            await asyncio.sleep(delay)
