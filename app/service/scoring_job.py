"""The risk-scoring job, on the service's one scheduler (`app.service.schedule`): it enqueues signals, never acts.

Each cycle scores every GPU from Prometheus in a worker thread and turns level changes into `at-risk`
signals in the inbox, where the pipeline handles them like any alert. A missing or corrupt model means
rules-only (logged at start and on every reload); Prometheus being down pauses scoring; neither touches
the alert path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from app.config import rules
from app.config.settings import PredictionSettings
from app.obs.metrics import Metrics
from app.predict import prometheus as predict_prometheus
from app.predict import recorded_reader
from app.predict import registry as predict_registry
from app.predict import service as predict_service
from app.service import schedule
from app.store.inbox import Inbox, record_of
from app.store.journal import Journal

log = logging.getLogger(__name__)
STOP_GRACE_S = 10.0
JOB_ID = "predict-score"
ScoredCycle = predict_service.Cycle
SHIPPED_MODELS = PredictionSettings().models_dir  # the install's models/, whatever models_dir is set to


class Scoring:
    def __init__(
        self,
        settings: PredictionSettings,
        *,
        inbox: Inbox,
        metrics: Metrics,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        policy: rules.PredictionPolicy | None = None,
        journal: Journal | None = None,
        on_model: Callable[[str], Awaitable[object]] | None = None,
        guard: Callable[[predict_service.Cycle], Awaitable[bool]] | None = None,
        scheduler: schedule.Scheduler | None = None,
    ) -> None:
        # `on_model(version)` when a model version is first seen loaded (shadow mode starts a new one in
        # shadow); `guard(cycle)` after each scored cycle, True when it sent the ladder back to shadow.
        self._on_model = on_model
        self._guard = guard
        self._announced: str | None = None
        self._metrics = metrics
        self._settings = settings
        self._inbox = inbox
        self._journal = journal
        self._clock = clock
        reader = predict_prometheus.ReaderSettings(
            url=settings.prometheus_url or "http://127.0.0.1:9090",
            lookback_s=settings.lookback_s,
            compress=settings.prometheus_compress,
            mmap_threshold_bytes=settings.mmap_threshold_bytes,
        )
        ladder = policy or rules.PredictionPolicy()  # thresholds and hysteresis of the at-risk levels
        self.service = predict_service.ScoringService.from_prometheus(
            settings.models_dir,
            reader,
            metrics=predict_service.PredictMetrics.create(metrics.registry),
            path_metrics=recorded_reader.PathMetrics.create(metrics.registry),
            warn=ladder.warn,
            act=ladder.act,
            clear_margin=ladder.clear_margin,
            clear_after=ladder.clear_after,
            resend_s=ladder.resend.total_seconds(),
        )
        self.last: predict_service.Cycle | None = None
        # The service's scheduler; without one (a job on its own, in tests) it runs on a scheduler of its own.
        self._jobs = schedule.Jobs(scheduler)
        self._loading: asyncio.Task[None] | None = None
        self._cycle: asyncio.Task[object] | None = None

    async def start(self) -> None:
        """Load the model in the background (start-up and readiness never wait on it), then schedule."""
        self._loading = asyncio.create_task(self._load_and_schedule(), name="predict-start")

    async def loaded(self) -> None:
        """Wait until the first model load finished (tests; the status page does not need to)."""
        if self._loading is not None:
            await asyncio.shield(self._loading)

    async def _load_and_schedule(self) -> None:
        await asyncio.to_thread(self._seed)
        await asyncio.to_thread(self.service.reload)  # says loudly when the model is missing or bad
        self._export_card()
        await self._announce()
        if not self._settings.prometheus_url:
            log.info(
                "risk scoring has no Prometheus URL (prediction.prometheus_url): the model is loaded, not run"
            )
            return
        self._jobs.every(
            JOB_ID, self.score_once, seconds=self._settings.interval_s, misfire_grace_s=60, now=True
        )

    def _seed(self) -> None:
        """A fresh, writable models directory starts from the shipped model (retraining then improves it)."""
        if not self._settings.seed_from_shipped:
            return
        source = SHIPPED_MODELS
        try:
            version = predict_registry.seed(self._settings.models_dir, source)
        except (predict_registry.ModelUnavailable, OSError) as exc:
            log.error("could not seed %s from %s: %s", self._settings.models_dir, source, exc)
            return
        if version is not None:
            log.info("risk model %s copied from %s into %s", version, source, self._settings.models_dir)

    def reload(self) -> None:
        """Load the current model again (after a promotion or a rollback) and export its card. Blocking."""
        self.service.reload()
        self._export_card()

    async def score_once(self) -> None:
        self._cycle = asyncio.current_task()
        cycle = await asyncio.to_thread(self.service.run_once, self._clock())
        await self._announce()
        await self.handle(cycle)

    async def handle(self, cycle: predict_service.Cycle) -> None:
        """A cycle's results: gauges, the journal, the runtime guard, then the signals of level changes."""
        self.last = cycle
        self._export_scores(cycle)
        await self._journal_risks(cycle)
        if cycle.scores is not None and self._guard is not None and await self._guard(cycle):
            # Back to shadow: every flagged node's level goes out again now, and in shadow each signal
            # for a tainted node plans the taint's removal, so the taints go within this cycle.
            self.service.resend_all()
        signals = self.service.signals(cycle)
        if signals:
            await self._inbox.append([record_of(signal) for signal in signals])

    async def _announce(self) -> None:
        """Tell `on_model` about a model version loaded since the last call (the first, or a promotion)."""
        model = self.service.model
        if model is None or self._on_model is None or model.card.version == self._announced:
            return
        try:
            await self._on_model(model.card.version)
        except Exception:  # the scorer scores on; the ladder stays in shadow for a version it cannot record
            log.exception("could not record risk model %s's standing", model.card.version)
            return
        self._announced = model.card.version

    async def _journal_risks(self, cycle: predict_service.Cycle) -> None:
        """Keep what the model saw at warn and above; a journal fault loses this record, not the cycle."""
        if self._journal is None or cycle.scores is None:
            return
        try:
            await self._journal.record_risks(cycle.at, cycle.scores.gpus)
        except Exception:
            log.exception("could not journal this cycle's risks")

    def _export_card(self) -> None:
        model = self.service.model
        self._metrics.model_info.clear()
        if model is None:
            return
        holdout = model.card.metrics.get("holdout", {})
        self._metrics.model_info.labels(version=model.card.version).set(1)
        self._metrics.model_precision.set(float(holdout.get("precision", 0.0)))
        self._metrics.model_recall.set(float(holdout.get("recall", 0.0)))

    def _export_scores(self, cycle: predict_service.Cycle) -> None:
        if cycle.scores is None:
            return
        self._metrics.gpu_risk.clear()
        self._metrics.node_risk.clear()
        for risk in cycle.scores.gpus:
            self._metrics.gpu_risk.labels(node=risk.node, gpu=str(risk.gpu)).set(risk.score)
        for risk in cycle.scores.nodes:
            self._metrics.node_risk.labels(node=risk.node).set(risk.score)

    async def stop(self) -> None:
        if self._loading is not None and not self._loading.done():
            self._loading.cancel()
            await asyncio.gather(self._loading, return_exceptions=True)
        self._jobs.stop()
        # A cycle in flight runs in a worker thread that cannot be interrupted: let it finish (it is
        # bounded by the Prometheus timeouts) rather than cancel it and have APScheduler log the
        # cancellation as the job's failure.
        cycle = self._cycle
        if cycle is not None and not cycle.done() and cycle is not asyncio.current_task():
            _, pending = await asyncio.wait({cycle}, timeout=STOP_GRACE_S)
            for task in pending:
                task.cancel()
