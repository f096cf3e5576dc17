"""Scheduled retraining (APScheduler cron, weekly by default): a challenger replaces the model only if better.

Each run reads the last `retrain_window_s` from Prometheus, labels it with the XID gauge's hardware
failures and the journal's hardware faults, trains a challenger and promotes it only if it beats the
current model on the same holdout (`app.predict.retrain`). The run is blocking (HTTP, pandas,
scikit-learn) and goes to a worker thread with a few OpenMP threads, so the event loop, and with it the
alert path, never waits on it. After a promotion the scoring service reloads the model (`on_promoted`).

Only the leader retrains: the models directory has one writer. Prometheus down, too little data and even
an unexpected error are logged and counted (`sickbay_retrain_runs_total{outcome}`); none of them stops
the service or touches the current model. It enqueues and acts on nothing.

APScheduler 3 counts weekdays from Monday = 0, crontab from Sunday = 0: `cron_trigger` translates, so
`retrain_cron` means what it would mean in a crontab.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]
from prometheus_client import CollectorRegistry, Counter, Gauge

from app.config.settings import PredictionSettings
from app.predict import history as predict_history
from app.predict import prometheus as predict_prometheus
from app.predict import retrain as predict_retrain
from app.service import schedule

log = logging.getLogger(__name__)

JOB_ID = "predict-retrain"
# A month of every GPU's history per metric is a heavy range query: give Prometheus time to answer it.
QUERY_TIMEOUT_S = 120.0
OUTCOMES = (*(s.value for s in predict_retrain.Status), "failed")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def cron_trigger(expression: str) -> CronTrigger:
    """An APScheduler trigger for a standard crontab line (UTC), weekday numbers as crontab counts them."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"{expression!r} is not a crontab expression (minute hour day month weekday)")
    minute, hour, day, month, weekday = fields
    return CronTrigger(
        minute=minute,
        hour=hour,
        day=day,
        month=month,
        day_of_week=crontab_weekdays(weekday),
        timezone=UTC,
    )


def crontab_weekdays(field: str) -> str:
    """A crontab weekday field (0 or 7 = Sunday; lists, ranges, steps, names) as APScheduler day names."""
    if field == "*" or not re.search(r"\d", field):
        return field
    days: set[int] = set()
    for item in field.split(","):
        base, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        if base == "*":
            first, last = 0, 6
        elif "-" in base:
            lo, hi = base.split("-", 1)
            first, last = _weekday(lo), _weekday(hi, upper=True)
        else:
            first = _weekday(base)
            last = 6 if step_text else first
        if step < 1 or first > last:
            raise ValueError(f"weekday field {field!r}: bad item {item!r}")
        days.update(d % 7 for d in range(first, last + 1, step))
    return ",".join(_DAYS[d] for d in sorted(days))


def _weekday(text: str, *, upper: bool = False) -> int:
    if text.isdigit():
        value = int(text)
        if not 0 <= value <= 7:
            raise ValueError(f"weekday {value} is outside 0-7")
        return value if upper else value % 7
    name = text.lower()[:3]
    if name not in _DAYS:
        raise ValueError(f"unknown weekday {text!r}")
    return _DAYS.index(name)


@dataclass(frozen=True, slots=True)
class RetrainMetrics:
    runs: Counter
    last_run: Gauge
    last_promoted: Gauge
    last_seconds: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry) -> RetrainMetrics:
        metrics = cls(
            runs=Counter(
                "sickbay_retrain_runs",
                "Retraining runs by outcome (promoted, kept, prometheus-unavailable, too-little-data, failed)",
                ["outcome"],
                registry=registry,
            ),
            last_run=Gauge(
                "sickbay_retrain_last_run_timestamp_seconds",
                "When the last retraining run finished",
                registry=registry,
            ),
            last_promoted=Gauge(
                "sickbay_retrain_last_promoted_timestamp_seconds",
                "When retraining last promoted a challenger",
                registry=registry,
            ),
            last_seconds=Gauge(
                "sickbay_retrain_last_duration_seconds",
                "How long the last retraining run took",
                registry=registry,
            ),
        )
        for outcome in OUTCOMES:
            metrics.runs.labels(outcome=outcome)
        return metrics


class Retraining:
    """The cron job: `start` schedules it, `run_once` is one run (the job itself; tests call it directly)."""

    def __init__(
        self,
        settings: PredictionSettings,
        *,
        catalog: Any,
        journal_path: Path | None,
        registry: CollectorRegistry,
        on_promoted: Callable[[], object] | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        reader: predict_prometheus.Reader | None = None,
        scheduler: schedule.Scheduler | None = None,
    ) -> None:
        if not settings.prometheus_url and reader is None:
            raise ValueError("retraining needs prediction.prometheus_url")
        self._settings = settings
        self._xid_classes = predict_history.xid_classes(catalog)
        self._journal_path = journal_path
        self._on_promoted = on_promoted
        self._is_leader = is_leader
        self._clock = clock
        self._reader = reader or predict_prometheus.Reader(
            predict_prometheus.ReaderSettings(
                url=settings.prometheus_url or "",
                step_s=settings.retrain_step_s,
                timeout_s=QUERY_TIMEOUT_S,
                compress=settings.prometheus_compress,
                mmap_threshold_bytes=settings.mmap_threshold_bytes,
            )
        )
        self.metrics = RetrainMetrics.create(registry)
        self.trigger = cron_trigger(settings.retrain_cron)
        self.last: predict_retrain.RetrainOutcome | None = None
        self._jobs = schedule.Jobs(scheduler)  # the service's scheduler, or one of its own (tests)
        self._running = asyncio.Lock()

    async def start(self) -> None:
        self._jobs.add(JOB_ID, self.run_once, self.trigger, misfire_grace_s=3600)
        log.info(
            "retraining scheduled (%s UTC, %g days of history); next run %s",
            self._settings.retrain_cron,
            self._settings.retrain_window_s / 86400.0,
            self.next_run(),
        )

    def next_run(self) -> datetime | None:
        return self._jobs.scheduler.next_run(JOB_ID)

    async def run_once(self) -> predict_retrain.RetrainOutcome | None:
        """One retraining run in a worker thread; never raises (the service must not notice a failure)."""
        if not self._is_leader():
            log.info("retraining skipped: this replica is not the leader")
            return None
        if self._running.locked():
            log.info("retraining skipped: a run is still in progress")
            return None
        async with self._running:
            return await self._run()

    async def _run(self) -> predict_retrain.RetrainOutcome | None:
        started = time.perf_counter()
        try:
            outcome = await asyncio.to_thread(self._retrain, self._clock())
        except Exception:
            log.exception("retraining failed; the current model stays")
            self._count("failed", time.perf_counter() - started)
            return None
        self.last = outcome
        self._count(outcome.status.value, outcome.seconds)
        log.log(
            logging.WARNING if outcome.skipped else logging.INFO,
            "retraining %s in %.0fs: %s (current %s, challenger %s)",
            outcome.status.value,
            outcome.seconds,
            outcome.reason,
            outcome.current,
            outcome.challenger,
        )
        if outcome.promoted:
            self.metrics.last_promoted.set(self._clock().timestamp())
            await self._reload()
        return outcome

    def _retrain(self, now: datetime) -> predict_retrain.RetrainOutcome:
        window_s = self._settings.retrain_window_s
        journal = None
        if self._journal_path is not None:
            try:
                journal = predict_retrain.journal_failures(
                    self._journal_path, since=now - timedelta(seconds=window_s)
                )
            except predict_retrain.JournalUnreadable as exc:
                log.warning("retraining labels come from the XID gauge only: %s", exc)
        return predict_retrain.retrain(
            reader=self._reader,
            models_dir=self._settings.models_dir,
            window_s=window_s,
            now=now,
            failures_from_journal=journal,
            xid_classes=self._xid_classes,
            config=None,
            threads=self._settings.retrain_threads,
        )

    async def _reload(self) -> None:
        if self._on_promoted is None:
            return
        try:
            await asyncio.to_thread(self._on_promoted)
        except Exception:
            log.exception("the promoted model could not be reloaded; scoring keeps the model it has")

    def _count(self, outcome: str, seconds: float) -> None:
        self.metrics.runs.labels(outcome=outcome).inc()
        self.metrics.last_run.set(self._clock().timestamp())
        self.metrics.last_seconds.set(seconds)

    async def stop(self) -> None:
        self._jobs.stop()
