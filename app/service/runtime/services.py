"""The live parts of a running service, in one container the handlers, the jobs and the tests reach.

A plain holder: each part is set by the start-up step that creates it (`wiring`, `leadership`,
`prediction`) and read by the others; nothing here starts, stops or decides anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from aiohttp import web

from app.act.gatekeeper import GateKeeper
from app.act.reconcile import Reconciler
from app.act.shadowing import ShadowKeeper
from app.act.urgency import Urgency
from app.classify import classifier
from app.config import errors, rules
from app.config.settings import Settings
from app.decide import retention
from app.ingest import callers as callers_mod
from app.kube import port
from app.kube.ratelimit import TokenBucket
from app.kube.viewgate import ViewGate
from app.kube.views import ClusterView
from app.obs.metrics import Metrics
from app.service import pipeline, schedule
from app.store import deadletter, inbox, journal

if TYPE_CHECKING:
    from app.service import audit_job, retention_job, retraining_job, scoring_job, validation
    from app.service.runtime import reads

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Services:
    """The live parts of a running service, reachable from handlers and tests."""

    settings: Settings
    metrics: Metrics
    rules: classifier.Rules
    # Who may call what; its reviewer is set once the cluster client exists (`wiring.connect_cluster`).
    callers: callers_mod.Callers
    clock: Clock = utc_now
    inbox: inbox.Inbox | None = None
    dead_letters: deadletter.DeadLetters | None = None
    journal: journal.Journal | None = None
    pipeline: pipeline.Pipeline | None = None
    kube: port.KubePort | None = None
    # The read routes' answers, kept a few seconds; and the nodes they show, read on their own budget
    # (None without a cluster). Both set by `wiring.connect_cluster`.
    read_cache: reads.ReadCache | None = None
    read_pace: TokenBucket | None = None  # the read routes' requests per second, cached or not
    reads: reads.NodeReads | None = None
    # Nodes and GPU pods kept by watches (`kube.watch`, with a real client); reconcile and reads use it.
    view: ClusterView | None = None
    # Who reads the view when (`kube.view_sync_wait_s` at start-up, then only while fresh); None without it.
    view_gate: ViewGate | None = None
    # Marks the stretches in which the pipeline turns signals into actions; reads wait for a calm moment.
    urgency: Urgency | None = None
    # TokenReview and SubjectAccessReview: the real client's, or a test's.
    reviews: port.ReviewPort | None = None
    gates: GateKeeper | None = None
    reconciler: Reconciler | None = None
    scheduler: schedule.Scheduler | None = None
    scoring: scoring_job.Scoring | None = None
    retraining: retraining_job.Retraining | None = None
    shadow: ShadowKeeper | None = None
    validation: validation.Validation | None = None
    retention: retention_job.RetentionJob | None = None  # the store's pruning (`retention.enabled`)
    audits: audit_job.Audits | None = None  # the scheduled audit's last result (`audit_interval_s`)
    leader: bool = False
    ready: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    prediction_start: asyncio.Task[None] | None = None

    async def prediction_started(self) -> None:
        """Wait until risk scoring (and retraining) started, or failed to: it starts in the background."""
        if self.prediction_start is not None:
            await asyncio.shield(self.prediction_start)


SERVICES = web.AppKey("services", Services)


def load_rules(settings: Settings) -> classifier.Rules:
    """The rules files, checked against the retention settings: a table kept shorter than a feature
    reading it needs is refused here, at start-up, with the feature named."""
    loaded = classifier.Rules(
        catalog=rules.load_catalog(settings.xid_catalog_file),
        policy=rules.load_policy(settings.policy_file),
    )
    wanted = retention.needs(
        loaded.policy,
        retrain_window=timedelta(seconds=settings.prediction.retrain_window_s),
        context_window=timedelta(seconds=settings.pipeline.context_window_s),
    )
    if found := retention.problems(settings.retention, wanted):
        raise errors.ConfigError("retention shorter than the features reading it need: " + "; ".join(found))
    return loaded
