"""Builds the aiohttp application and wires every part; owns start-up and shutdown order.

Composition only: the inbox, journal, Kubernetes client, actuators, pipeline and reconciler are created
here and handed to each other. Periodic background work runs as jobs on the one scheduler
(`app.schedule`), the inbox consumer as a guarded task; both inside a `cleanup_ctx`, so shutdown cancels
and awaits them. Only the leader consumes the inbox and reconciles; every replica
serves health and metrics. Reads no argv or environment (that is `cli`'s job).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app import alertsync, api, backoff, pipeline, rechecks, schedule, status
from app.act.drain import Drainer
from app.act.executor import Executor
from app.act.gatekeeper import GateKeeper
from app.act.handoff import HandOff
from app.act.nodes import NodeWriter
from app.act.reconcile import Reconciler
from app.act.recorder import Recorder
from app.act.remediate import Remediators
from app.act.shadowing import ShadowKeeper
from app.act.urgency import Urgency
from app.act.workload import Restarter
from app.classify import signals as classify
from app.config import rules
from app.config.settings import Settings
from app.decide import footprint, gates, shadow
from app.domain import PodRef, RiskLevel, Signal
from app.ingest import auth, handlers, signals
from app.kube import client as kube_client
from app.kube import errors as kube_errors
from app.kube import leader as kube_leader
from app.kube import port
from app.kube.retries import RetryPolicy
from app.obs.metrics import Metrics, create_metrics
from app.store import deadletter, inbox, journal
from app.store.validation import ValidationLog

if TYPE_CHECKING:
    from app import retraining, scoring, validation

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]
_STATUS_ROWS = 20  # refused and unattributed alerts listed on the status page
_RESTART = backoff.Backoff(base=1.0, cap=60.0)  # a crashed inbox consumer restarts after 1 s, 2 s, … 60 s


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Services:
    """The live parts of a running service, reachable from handlers and tests."""

    settings: Settings
    metrics: Metrics
    rules: classify.Rules
    clock: Clock = utc_now
    inbox: inbox.Inbox | None = None
    dead_letters: deadletter.DeadLetters | None = None
    journal: journal.Journal | None = None
    pipeline: pipeline.Pipeline | None = None
    kube: port.KubePort | None = None
    gates: GateKeeper | None = None
    reconciler: Reconciler | None = None
    scheduler: schedule.Scheduler | None = None
    scoring: scoring.Scoring | None = None
    retraining: retraining.Retraining | None = None
    shadow: ShadowKeeper | None = None
    validation: validation.Validation | None = None
    leader: bool = False
    ready: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    prediction_start: asyncio.Task[None] | None = None

    async def prediction_started(self) -> None:
        """Wait until risk scoring (and retraining) started, or failed to: it starts in the background."""
        if self.prediction_start is not None:
            await asyncio.shield(self.prediction_start)


SERVICES = web.AppKey("services", Services)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def load_rules(settings: Settings) -> classify.Rules:
    return classify.Rules(
        catalog=rules.load_catalog(settings.xid_catalog_file),
        policy=rules.load_policy(settings.policy_file),
    )


def build_app(
    settings: Settings,
    *,
    metrics: Metrics | None = None,
    kube: port.KubePort | None = None,
    clock: Clock = utc_now,
) -> web.Application:
    """The whole service. `kube` overrides the client built from `settings.kube` (tests pass their own)."""
    services = Services(
        settings=settings,
        metrics=metrics or create_metrics(),
        rules=load_rules(settings),
        clock=clock,
        kube=kube,
    )
    # Our own size check streams the body and answers 413 with JSON; aiohttp's limit must not pre-empt it.
    app = web.Application(client_max_size=settings.max_body_bytes * 2, middlewares=[_observe])
    app[SERVICES] = services
    app.cleanup_ctx.append(_scheduling)
    app.cleanup_ctx.append(_storage)
    app.cleanup_ctx.append(_cluster)
    app.cleanup_ctx.append(_leadership)
    app.cleanup_ctx.append(_prediction)
    app.router.add_post("/api/v1/alerts", _alerts)
    app.router.add_post("/api/v1/gpu-events", _gpu_events)
    app.router.add_get("/api/v1/actions", _actions)
    app.router.add_get("/api/v1/rejected", _rejected)
    app.router.add_get("/api/v1/nodes", _nodes)
    app.router.add_get("/api/v1/nodes/{name}", _node)
    app.router.add_get("/api/v1/breaker", _breaker)
    app.router.add_post("/api/v1/breaker/reset", _breaker_reset)
    app.router.add_get("/api/v1/model", _model)
    app.router.add_post("/api/v1/model/validate", _model_validate)
    app.router.add_post("/api/v1/model/shadow", _model_shadow)
    app.router.add_get("/", _status_page)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


async def _scheduling(app: web.Application) -> AsyncIterator[None]:
    """The one scheduler every periodic job runs on; it stops last, after everything that registered jobs."""
    services = app[SERVICES]
    services.scheduler = schedule.Scheduler(failures=services.metrics.job_failures)
    services.scheduler.start()
    try:
        yield
    finally:
        services.scheduler.shutdown()


async def _storage(app: web.Application) -> AsyncIterator[None]:
    services = app[SERVICES]
    settings = services.settings
    path = Path(settings.inbox.path)
    write_lock = asyncio.Lock()
    box = await inbox.Inbox.open(
        path,
        max_batch_rows=settings.inbox.max_batch_rows,
        on_commit=services.metrics.commit_requests.observe,
        write_lock=write_lock,
    )
    journal_db = await inbox.connect(path, durable=False)
    services.inbox, services.journal = box, await journal.Journal.open(journal_db, write_lock=write_lock)
    services.shadow = ShadowKeeper(
        book=await ValidationLog.open(journal_db, write_lock=write_lock),
        journal=services.journal,
        policy=services.rules.policy,
        fleet=settings.prediction.fleet,
        metrics=services.metrics,
        clock=services.clock,
    )
    await services.shadow.load()
    services.dead_letters = await deadletter.DeadLetters.open(
        path, max_rows=settings.inbox.dead_letter_rows, write_lock=write_lock
    )
    log.info("inbox %s: %d pending rows to resume", path, await box.depth())
    try:
        yield
    finally:
        await box.close()
        await services.dead_letters.close()
        await journal_db.close()


async def _cluster(app: web.Application) -> AsyncIterator[None]:
    """Kubernetes client and the actuators; without a cluster the pipeline journals plans only."""
    services = app[SERVICES]
    settings = services.settings
    box, book = services.inbox, services.journal
    assert box is not None
    assert book is not None
    own_client: kube_client.KubeClient | None = None
    if services.kube is None and settings.kube.enabled:
        own_client = await kube_client.connect(
            kubeconfig=settings.kube.kubeconfig,
            context=settings.kube.context,
            in_cluster=settings.kube.in_cluster,
            qps=settings.kube.qps,
            burst=settings.kube.burst,
            retry=RetryPolicy(attempts=settings.kube.retry_attempts, timeout=settings.kube.request_timeout_s),
            gpu_resources=settings.kube.gpu_resources,
            now=services.clock,
        )
        services.kube = own_client
    kube = services.kube
    executor: Executor | None = None
    drainer: Drainer | None = None
    restarter: Restarter | None = None
    writer: NodeWriter | None = None
    urgency = Urgency()
    if kube is not None:
        executor, drainer, restarter, writer = await _actuators(services, kube, book, box, urgency)
        assert services.shadow is not None
        services.shadow.speaks_through(
            Recorder(kube=kube, metrics=services.metrics, clock=services.clock, events=not settings.dry_run),
            PodRef(settings.pod_namespace, settings.identity),
        )
    services.pipeline = pipeline.Pipeline(
        inbox_=box,
        journal_=book,
        rules=services.rules,
        settings=settings.pipeline,
        node_keys=signals.NodeKeys.of(settings),
        metrics=services.metrics,
        kube=kube,
        executor=executor,
        urgency=urgency,
        shadow=services.shadow,
        clock=services.clock,
    )
    try:
        yield
    finally:
        if drainer is not None:
            await drainer.stop()
        if writer is not None:
            await writer.drain_background()
        if restarter is not None:
            await restarter.stop()
        if own_client is not None:
            await own_client.close()


async def _actuators(
    services: Services, kube: port.KubePort, book: journal.Journal, box: inbox.Inbox, urgency: Urgency
) -> tuple[Executor, Drainer, Restarter, NodeWriter]:
    settings, policy, clock, metrics = (
        services.settings,
        services.rules.policy,
        services.clock,
        services.metrics,
    )
    dry_run = settings.dry_run
    recorder = Recorder(kube=kube, metrics=metrics, clock=clock, events=not dry_run)
    gates = GateKeeper(policy=policy.budgets, journal=book, metrics=metrics, clock=clock)
    await gates.load()
    nodes = NodeWriter(
        kube=kube,
        recorder=recorder,
        gates=gates,
        identity=settings.identity,
        dry_run=dry_run,
        clock=clock,
        urgency=urgency,
    )
    drainer = Drainer(
        kube=kube,
        recorder=recorder,
        policy=policy.drain,
        metrics=metrics,
        clock=clock,
        dry_run=dry_run,
        urgency=urgency,
    )
    restarter = Restarter(kube=kube, recorder=recorder, clock=clock, dry_run=dry_run)
    remediators = Remediators(
        kube=kube, nodes=nodes, recorder=recorder, policy=policy, clock=clock, dry_run=dry_run
    )
    handoff = HandOff(
        nodes=nodes,
        drainer=drainer,
        remediators=remediators,
        recorder=recorder,
        journal=book,
        metrics=metrics,
    )
    executor = Executor(
        nodes=nodes,
        drainer=drainer,
        handoff=handoff,
        restarter=restarter,
        recorder=recorder,
        journal=book,
        paused=lambda: services.settings.pause,
        clock=clock,
    )

    async def emit(signal: Signal) -> None:
        await box.append([inbox.record_of(signal)])

    services.gates = gates
    services.reconciler = Reconciler(
        kube=kube,
        nodes=nodes,
        handoff=handoff,
        gates=gates,
        recorder=recorder,
        journal=book,
        policy=policy,
        metrics=metrics,
        clock=clock,
        emit=emit,
        dry_run=dry_run,
    )
    return executor, drainer, restarter, nodes


async def _leadership(app: web.Application) -> AsyncIterator[None]:
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


async def _prediction(app: web.Application) -> AsyncIterator[None]:
    """Risk scoring: loaded on every replica (so a bad model is reported at once), scheduled on start.

    It starts in the background: scikit-learn, pandas and skops take seconds of CPU to import and the
    model to load, and the alert path must be serving meanwhile (a fatal XID does not wait for a model).
    """
    services = app[SERVICES]
    if not services.settings.prediction.enabled or services.inbox is None:
        yield
        return
    starting = asyncio.create_task(_start_prediction(services), name="prediction-start")
    services.prediction_start = starting
    try:
        yield
    finally:
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        if services.retraining is not None:
            await services.retraining.stop()
        if services.validation is not None:
            await services.validation.stop()
        if services.scoring is not None:
            await services.scoring.stop()


async def _start_prediction(services: Services) -> None:
    assert services.inbox is not None
    try:
        # In a worker thread: an import this heavy would stall the event loop that serves alerts.
        scoring_module = await asyncio.to_thread(importlib.import_module, "app.scoring")
        scorer: scoring.Scoring = scoring_module.Scoring(
            services.settings.prediction,
            box=services.inbox,
            metrics=services.metrics,
            clock=services.clock,
            policy=services.rules.policy.prediction,
            journal_=services.journal,
            on_model=lambda version: _model_loaded(services, version),
            guard=lambda cycle: _guard(services, cycle),
            scheduler=services.scheduler,
        )
        await scorer.start()
    except Exception:  # prediction must never stop the alert path from serving (a cancel passes through)
        log.exception("risk scoring could not start; remediating from alerts only")
        return
    services.scoring = scorer
    services.validation = await _start_validation(services, scorer)
    services.retraining = await _start_retraining(services, scorer)


async def _model_loaded(services: Services, version: str) -> None:
    """A model version loaded: new to this fleet, it starts in shadow; backtest it soon if so."""
    assert services.shadow is not None
    standing = await services.shadow.model_loaded(version)
    if services.validation is not None and not standing.acting and not standing.reason.held:
        services.validation.soon()


async def _guard(services: Services, cycle: scoring.ScoredCycle) -> bool:
    """The runtime guard on one scored cycle; True when it sent the ladder back to shadow."""
    keeper, scores = services.shadow, cycle.scores
    if keeper is None or scores is None or not services.leader:  # the leader's ladder is the one that acts
        return False
    flagged = sum(1 for r in scores.gpus if r.level is not RiskLevel.NONE)
    keeper_gates = services.gates
    full = keeper_gates is not None and gates.proactive_full(
        keeper_gates.proactive_fleet(), services.rules.policy.budgets
    )
    reading = shadow.Reading(flagged_gpus=flagged, gpus=len(scores.gpus), budget_full=full)
    return await keeper.guard(scores.model_version, reading) is not None


async def _start_validation(services: Services, scoring: scoring.Scoring) -> validation.Validation | None:
    """The shadow-mode backtest, with a Prometheus URL only; the leader runs it."""
    settings = services.settings.prediction
    if not settings.validate_enabled or not settings.prometheus_url or services.shadow is None:
        return None
    try:
        validating = await asyncio.to_thread(importlib.import_module, "app.validation")
        job: validation.Validation = validating.Validation(
            settings,
            keeper=services.shadow,
            policy=services.rules.policy,
            catalog=services.rules.catalog,
            journal_path=Path(services.settings.inbox.path),
            model=lambda: scoring.service.model,
            is_leader=lambda: services.leader,
            clock=services.clock,
            scheduler=services.scheduler,
        )
        await job.start()
    except Exception:  # the backtest must never stop the service; the ladder then stays in shadow
        log.exception("the shadow-mode backtest could not start; the ladder stays in shadow until validated")
        return None
    return job


async def _start_retraining(services: Services, scoring: scoring.Scoring) -> retraining.Retraining | None:
    """The weekly retraining job, with a Prometheus URL only; it runs on the leader and reloads scoring."""
    settings = services.settings.prediction
    if not settings.retrain_enabled or not settings.prometheus_url:
        return None
    try:
        training = await asyncio.to_thread(importlib.import_module, "app.retraining")
        job: retraining.Retraining = training.Retraining(
            settings,
            catalog=services.rules.catalog,
            journal_path=Path(services.settings.inbox.path),
            registry=services.metrics.registry,
            on_promoted=scoring.reload,
            is_leader=lambda: services.leader,
            clock=services.clock,
            scheduler=services.scheduler,
        )
        await job.start()
    except Exception:  # retraining must never stop the service from serving
        log.exception("retraining could not start; the current model stays until it does")
        return None
    return job


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
    await rechecks.enqueue_due(book=services.journal, box=services.inbox, clock=services.clock)


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
            box=services.inbox,
            book=services.journal,
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


def _intake(request: web.Request) -> handlers.Intake:
    services = request.app[SERVICES]
    if services.inbox is None or services.dead_letters is None:
        raise web.HTTPServiceUnavailable(text='{"error":"starting"}', content_type="application/json")
    return handlers.Intake(
        settings=services.settings,
        inbox=services.inbox,
        dead_letters=services.dead_letters,
        metrics=services.metrics,
        accepting=lambda: services.leader,
        clock=services.clock,
    )


def _unauthorised(request: web.Request) -> web.Response | None:
    """The 401 answer when the caller's credentials fail the webhook's auth; None when they pass."""
    verdict = auth.check(request.headers.get("Authorization"), request.app[SERVICES].settings.auth)
    if verdict.ok:
        return None
    return web.json_response({"error": "unauthorized", "message": verdict.problem}, status=401)


async def _alerts(request: web.Request) -> web.StreamResponse:
    return await handlers.handle_alerts(request, _intake(request))


async def _gpu_events(request: web.Request) -> web.StreamResponse:
    return await handlers.handle_gpu_events(request, _intake(request))


def _journal(request: web.Request) -> journal.Journal:
    book = request.app[SERVICES].journal
    if book is None:
        raise web.HTTPServiceUnavailable(text='{"error":"starting"}', content_type="application/json")
    return book


async def _actions(request: web.Request) -> web.StreamResponse:
    return await api.actions(request, _journal(request))


async def _rejected(request: web.Request) -> web.StreamResponse:
    letters = request.app[SERVICES].dead_letters
    if letters is None:
        raise web.HTTPServiceUnavailable(text='{"error":"starting"}', content_type="application/json")
    return await api.rejected(request, letters)


async def _nodes(request: web.Request) -> web.StreamResponse:
    return await api.nodes(request, request.app[SERVICES].kube)


async def _node(request: web.Request) -> web.StreamResponse:
    return await api.node(request, request.app[SERVICES].kube, _journal(request))


async def _breaker(request: web.Request) -> web.StreamResponse:
    return await api.breaker(request, request.app[SERVICES].gates)


async def _breaker_reset(request: web.Request) -> web.StreamResponse:
    if (refusal := _unauthorised(request)) is not None:
        return refusal
    return await api.breaker_reset(request, request.app[SERVICES].gates)


async def _model(request: web.Request) -> web.StreamResponse:
    return await api.model(request, request.app[SERVICES].shadow)


async def _model_validate(request: web.Request) -> web.StreamResponse:
    if (refusal := _unauthorised(request)) is not None:
        return refusal
    services = request.app[SERVICES]
    job = services.validation

    async def backtest() -> tuple[dict[str, object] | None, str] | None:
        assert job is not None
        ran = await job.run_once(requested=True)
        return None if ran is None else (ran.figures, ran.problem)

    return await api.model_validate(request, services.shadow, backtest if job is not None else None)


async def _model_shadow(request: web.Request) -> web.StreamResponse:
    if (refusal := _unauthorised(request)) is not None:
        return refusal
    return await api.model_shadow(request, request.app[SERVICES].shadow)


async def _status_page(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    book = _journal(request)
    nodes = None
    if services.kube is not None:
        try:
            nodes = await services.kube.list_nodes(label_selector=footprint.STATE)
        except kube_errors.KubeError as exc:
            log.warning("status page: cannot list nodes: %s", exc)
    html = status.render(
        identity=services.settings.identity,
        leader=services.leader,
        dry_run=services.settings.dry_run,
        paused=services.settings.pause,
        now=services.clock(),
        nodes=nodes,
        entries=await book.entries(limit=50),
        outcomes=await book.outcomes(limit=300),
        gates=services.gates,
        intake=await _intake_problems(services),
        shadow=await _shadow_view(services),
    )
    return web.Response(text=html, content_type="text/html")


async def _shadow_view(services: Services) -> dict[str, object] | None:
    if services.shadow is None:
        return None
    try:
        return api.model_view(services.shadow, await services.shadow.history(limit=_STATUS_ROWS))
    except sqlite3.Error as exc:
        log.warning("status page: cannot read the validation log: %s", exc)
        return api.model_view(services.shadow, [])


async def _intake_problems(services: Services) -> status.IntakeProblems | None:
    """What the status page shows of refused and unattributed alerts; None (said so) if unreadable."""
    if services.inbox is None or services.dead_letters is None:
        return None
    try:
        unattributed, newest = await services.inbox.unattributed(limit=_STATUS_ROWS)
        return status.IntakeProblems(
            rejected_total=await services.dead_letters.count(),
            rejected=tuple(await services.dead_letters.recent(limit=_STATUS_ROWS)),
            unattributed_total=unattributed,
            unattributed=tuple(newest),
        )
    except (deadletter.DeadLetterError, sqlite3.Error, ValueError) as exc:
        log.warning("status page: cannot read refused or unattributed alerts: %s", exc)
        return None


async def _healthz(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    if not services.ready:
        return web.json_response({"status": "starting"}, status=503)
    return web.json_response({"status": "ready", "leader": services.leader})


async def _metrics(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    if services.inbox is not None:
        services.metrics.inbox_depth.set(await services.inbox.depth())
    body = generate_latest(services.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


@web.middleware
async def _observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    code = 500
    try:
        response = await handler(request)
        code = response.status
        return response
    except web.HTTPException as exc:
        code = exc.status
        raise
    finally:
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "unmatched"
        request.app[SERVICES].metrics.request_seconds.labels(
            route=name, method=request.method, code=str(code)
        ).observe(time.perf_counter() - started)
