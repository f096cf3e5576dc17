"""The service's parts, created and handed to each other: scheduler, storage, cluster client, actuators.

Each `cleanup_ctx` step here creates its parts on start-up and closes them, in reverse, on shutdown;
`build_app` orders the steps. Composition only: no decisions, no HTTP handling, no leadership.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from app.act.at_risk import AtRiskWriter
from app.act.drain import Drainer
from app.act.executor import Executor
from app.act.gatekeeper import GateKeeper
from app.act.handoff import HandOff
from app.act.nodes import NodeWriter
from app.act.reconcile import Reconciler
from app.act.recorder import Recorder
from app.act.remediate import Remediators
from app.act.requeue import Requeuer
from app.act.shadowing import ShadowKeeper
from app.act.urgency import Urgency
from app.act.verify import Verifier
from app.act.workload import Restarter
from app.audit.checks import AuditConfig
from app.config import verification
from app.domain import PodRef, Signal
from app.ingest import signals
from app.kube import client as kube_client
from app.kube import port
from app.kube.informer import Hooks
from app.kube.ratelimit import TokenBucket
from app.kube.retries import RetryPolicy
from app.kube.viewgate import ViewGate
from app.kube.views import ClusterView
from app.service import audit_job, lanes, pipeline, retention_job, schedule
from app.service.runtime import reads
from app.service.runtime.reviewing import KubeReviewer
from app.service.runtime.services import SERVICES, Services
from app.store import deadletter
from app.store.inbox import Inbox, record_of
from app.store.inbox import connect as connect_journal_db
from app.store.journal import Journal
from app.store.retention import Pruner
from app.store.validation import ValidationLog

log = logging.getLogger(__name__)


async def run_scheduler(app: web.Application) -> AsyncIterator[None]:
    """The one scheduler every periodic job runs on; it stops last, after everything that registered jobs."""
    services = app[SERVICES]
    services.scheduler = schedule.Scheduler(failures=services.metrics.job_failures)
    services.scheduler.start()
    try:
        yield
    finally:
        services.scheduler.shutdown()


async def open_storage(app: web.Application) -> AsyncIterator[None]:
    services = app[SERVICES]
    settings = services.settings
    path = Path(settings.inbox.path)
    write_lock = asyncio.Lock()
    inbox = await Inbox.open(
        path,
        max_batch_rows=settings.inbox.max_batch_rows,
        on_commit=services.metrics.commit_requests.observe,
        write_lock=write_lock,
        lane_of=functools.partial(lanes.lane_of, rules=services.rules),
    )
    journal_db = await connect_journal_db(path, durable=False)
    services.inbox, services.journal = inbox, await Journal.open(journal_db, write_lock=write_lock)
    services.shadow = ShadowKeeper(
        validation_log=await ValidationLog.open(journal_db, write_lock=write_lock),
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
    pruner = await Pruner.open(
        path,
        write_lock=write_lock,
        batch_rows=settings.retention.batch_rows,
        vacuum_pages=settings.retention.vacuum_pages,
    )
    services.retention = retention_job.RetentionJob(
        pruner,
        settings=settings.retention,
        held=functools.partial(_held_nodes, services),
        metrics=services.metrics,
        clock=services.clock,
    )
    log.info("inbox %s: %d pending rows to resume", path, await inbox.depth())
    try:
        yield
    finally:
        await pruner.close()
        await inbox.close()
        await services.dead_letters.close()
        await journal_db.close()


def _held_nodes(services: Services) -> frozenset[str] | None:
    """The nodes whose rows retention keeps: without a cluster none are held; with one, those of the last
    node list (None until the reconciler's first, so nothing is pruned before it)."""
    if services.kube is None:
        return frozenset()
    return services.gates.held() if services.gates is not None else None


async def connect_cluster(app: web.Application) -> AsyncIterator[None]:
    """Kubernetes client and the actuators; without a cluster the pipeline journals plans only."""
    services = app[SERVICES]
    settings = services.settings
    inbox, journal = services.inbox, services.journal
    assert inbox is not None
    assert journal is not None
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
    view = services.view = _start_view(services, kube)
    services.read_cache = reads.ReadCache(
        ttl_s=settings.reads.cache_ttl_s, max_entries=settings.reads.max_entries
    )
    services.read_pace = TokenBucket(qps=settings.reads.requests_per_s, burst=settings.reads.requests_burst)
    if kube is not None:
        services.reads = _reads(services, kube, own_client, services.read_cache)
    if services.reviews is None and isinstance(kube, kube_client.KubeClient):
        services.reviews = kube
    operator = settings.auth.operator
    if settings.auth.mode != "none" and operator.token is None and not operator.kubernetes:
        log.warning(
            "no operator credential (auth.operator.token or auth.operator.kubernetes): breaker reset and model "
            "validation are refused to everyone; the webhook's token may post alerts only"
        )
    if services.reviews is not None:
        services.callers.reviewer = KubeReviewer(services.reviews)
    elif settings.auth.mode != "none" and settings.auth.agents.mode == "serviceaccount":
        log.warning(
            "auth.agents.mode is 'serviceaccount' but there is no Kubernetes connection to verify agent "
            "tokens with: agent events will be answered 503 until kube.enabled is set (or auth.agents.mode)"
        )
    executor: Executor | None = None
    drainer: Drainer | None = None
    restarter: Restarter | None = None
    writer: NodeWriter | None = None
    urgency = services.urgency = Urgency()
    if kube is not None:
        executor, drainer, restarter, writer = await _actuators(services, kube, journal, inbox, urgency)
        assert services.shadow is not None
        services.shadow.speaks_through(
            Recorder(kube=kube, metrics=services.metrics, clock=services.clock, events=not settings.dry_run),
            PodRef(settings.pod_namespace, settings.identity),
        )
    services.pipeline = pipeline.Pipeline(
        inbox=inbox,
        journal=journal,
        rules=services.rules,
        settings=settings.pipeline,
        node_keys=signals.NodeKeys.of(settings),
        metrics=services.metrics,
        kube=kube,
        executor=executor,
        urgency=urgency,
        shadow=services.shadow,
        dead_letters=services.dead_letters,
        clock=services.clock,
        view=services.view_gate,
    )
    try:
        yield
    finally:
        services.callers.reviewer = None
        if drainer is not None:
            await drainer.stop()
        if writer is not None:
            await writer.drain_background()
        if restarter is not None:
            await restarter.stop()
        if view is not None:
            await view.stop()
        if own_client is not None:
            await own_client.close()


async def run_audits(app: web.Application) -> AsyncIterator[None]:
    """The scheduled audit (`audit_interval_s`, 0: none), on our own client with a token bucket of its own
    (the read routes' rate), so its lists of every pod and Job never spend remediation's tokens."""
    services = app[SERVICES]
    every = services.settings.audit_interval_s
    client = services.kube
    if not every or not isinstance(client, kube_client.KubeClient) or services.scheduler is None:
        yield
        return
    budget = services.settings.reads
    services.audits = audit_job.Audits(
        client.with_own_limiter(qps=budget.qps, burst=budget.burst),
        metrics=services.metrics,
        clock=services.clock,
        config=AuditConfig(pool_label=services.rules.policy.budgets.pool_label),
        view=services.view_gate,
    )
    jobs = schedule.Jobs(services.scheduler)
    services.audits.start(jobs, every_s=every)
    try:
        yield
    finally:
        jobs.stop()


def _start_view(services: Services, kube: port.KubePort | None) -> ClusterView | None:
    """The cluster view (`kube.watch`), started: only on the real client (a test's fake port has no
    watches), on a token bucket of its own at the read routes' rate, reporting to the metrics."""
    if not services.settings.kube.watch or not isinstance(kube, kube_client.KubeClient):
        return None
    metrics, budget = services.metrics, services.settings.reads
    hooks = Hooks(
        event=lambda resource, kind: metrics.watch_view_events.labels(resource=resource, type=kind).inc(),
        relist=lambda resource, why: metrics.watch_view_relists.labels(resource=resource, reason=why).inc(),
        stale=lambda resource, stale: metrics.watch_view_stale.labels(resource=resource).set(int(stale)),
    )
    view = kube.cluster_view(qps=budget.qps, burst=budget.burst, hooks=hooks)
    for resource in (view.node_informer.resource, view.pod_informer.resource):
        metrics.watch_view_stale.labels(resource=resource).set(1)  # until its first list and watch
    view.start()
    services.view_gate = _gate(services, view)  # the start-up window counts from the view's start
    return view


def _gate(services: Services, view: ClusterView) -> ViewGate:
    """Who reads the view when: the periodic readers wait for its first lists up to `kube.view_sync_wait_s`;
    a read it cannot answer lists instead, counted in `sickbay_watch_view_fallbacks_total`."""
    fallbacks = services.metrics.watch_view_fallbacks
    return ViewGate(
        view,
        sync_wait_s=services.settings.kube.view_sync_wait_s,
        fallback=lambda reader, reason: fallbacks.labels(reader=reader, reason=reason).inc(),
    )


def _reads(
    services: Services,
    kube: port.KubePort,
    own_client: kube_client.KubeClient | None,
    cache: reads.ReadCache,
) -> reads.NodeReads:
    """The read routes' view of the cluster: cached, on its own budget and, with our own client, on a
    token bucket of its own (the same connection pool), so readers never spend remediation's tokens."""
    budget = services.settings.reads
    source: port.KubePort = kube
    if own_client is not None:
        source = own_client.with_own_limiter(qps=budget.qps, burst=budget.burst)
    return reads.NodeReads(source, cache=cache, qps=budget.qps, burst=budget.burst, view=services.view_gate)


async def _actuators(
    services: Services, kube: port.KubePort, journal: Journal, inbox: Inbox, urgency: Urgency
) -> tuple[Executor, Drainer, Restarter, NodeWriter]:
    settings, policy, clock, metrics = (
        services.settings,
        services.rules.policy,
        services.clock,
        services.metrics,
    )
    dry_run = settings.dry_run
    recorder = Recorder(kube=kube, metrics=metrics, clock=clock, events=not dry_run)
    gates = GateKeeper(policy=policy.budgets, journal=journal, metrics=metrics, clock=clock)
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
    restarter = Restarter(kube=kube, recorder=recorder, journal=journal, clock=clock, dry_run=dry_run)
    remediators = Remediators(kube=kube, nodes=nodes, recorder=recorder, clock=clock, dry_run=dry_run)
    handoff = HandOff(
        nodes=nodes,
        drainer=drainer,
        remediators=remediators,
        recorder=recorder,
        journal=journal,
        metrics=metrics,
    )
    requeuer = (
        Requeuer(queue=kube, recorder=recorder, journal=journal, dry_run=dry_run)
        if isinstance(kube, port.QueuePort)
        else None
    )
    executor = Executor(
        nodes=nodes,
        at_risk=AtRiskWriter(kube=kube, recorder=recorder, gates=gates, dry_run=dry_run, clock=clock),
        drainer=drainer,
        handoff=handoff,
        restarter=restarter,
        recorder=recorder,
        journal=journal,
        paused=lambda: services.settings.pause,
        clock=clock,
        requeuer=requeuer,
    )

    async def emit(signal: Signal) -> None:
        await inbox.append([record_of(signal)])

    verifier = None
    if policy.verification.enabled:
        template = verification.load_template(policy.verification, policy_dir=settings.policy_file.parent)
        verifier = Verifier(
            kube=kube,
            nodes=nodes,
            handoff=handoff,
            recorder=recorder,
            policy=policy,
            template=template,
            clock=clock,
            dry_run=dry_run,
        )
    services.gates = gates
    services.reconciler = Reconciler(
        kube=kube,
        nodes=nodes,
        handoff=handoff,
        gates=gates,
        restarter=restarter,
        recorder=recorder,
        journal=journal,
        policy=policy,
        metrics=metrics,
        clock=clock,
        emit=emit,
        dry_run=dry_run,
        verifier=verifier,
        requeuer=requeuer,
        view=services.view_gate,
    )
    return executor, drainer, restarter, nodes
