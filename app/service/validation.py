"""The shadow-mode backtest job (APScheduler): may the current model act on this fleet yet?

After a model version loads (`soon`) and then every `prediction.shadow.revalidate_every` while the
ladder is in shadow, it backtests the current model over the last `prediction.shadow.history` of this
fleet's Prometheus (`app.predict.fleetcheck`: the replay `sickbay backtest` runs, labels from the XID
gauge, vanished GPUs and the journal's hardware faults) in a worker thread, and hands the figures to the
`ShadowKeeper`, which journals them with the decision (`decide.shadow.after_backtest`).

A scheduled run skips a ladder that acts, or whose shadow is held (a guard trip, an operator): only an
operator lifts that, with `sickbay model validate` (`run_once(requested=True)`). Only the leader runs it.
Prometheus down or no data: logged, nothing journaled, the standing stays. It never raises into the
service, and it writes nothing to the cluster.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from app.config import rules
from app.config.settings import PredictionSettings
from app.decide import shadow
from app.predict import backtest as predict_backtest
from app.predict import costs as predict_costs
from app.predict import fleetcheck
from app.predict import history as predict_history
from app.predict import prometheus as predict_prometheus
from app.predict import registry as predict_registry
from app.predict import retrain as predict_retrain
from app.service import schedule

log = logging.getLogger(__name__)
JOB_ID = "predict-validate"
QUERY_TIMEOUT_S = 120.0  # two weeks of every GPU per metric, as retraining reads a month


@dataclass(frozen=True, slots=True)
class Ran:
    """What one run found: the standing after it, and the figures (None when it could not run)."""

    standing: shadow.Standing
    figures: dict[str, Any] | None
    problem: str = ""


Check = Callable[[predict_registry.RiskModel, datetime], fleetcheck.FleetCheck]


class Standings(Protocol):
    """Where the verdict goes: `act.shadowing.ShadowKeeper` journals it, exports the gauge and posts the
    Event. The job only reads a standing and hands over figures, so it never imports act (jobs enqueue work,
    they never act directly: the `jobs-enqueue` contract)."""

    def standing(self, version: str | None = None) -> shadow.Standing: ...

    async def backtested(
        self, version: str, evidence: shadow.Evidence, *, requested: bool, figures: dict[str, Any]
    ) -> shadow.Standing: ...


class Validation:
    def __init__(
        self,
        settings: PredictionSettings,
        *,
        keeper: Standings,
        policy: rules.Policy,
        catalog: rules.XidCatalog,
        journal_path: Path | None,
        model: Callable[[], predict_registry.RiskModel | None],
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        reader: predict_prometheus.Reader | None = None,
        check: Check | None = None,
        scheduler: schedule.Scheduler | None = None,
    ) -> None:
        self._settings = settings
        self._keeper = keeper
        self._policy = policy
        self._xid_classes = predict_history.xid_classes(catalog, per_link=True)
        self._journal_path = journal_path
        self._model = model
        self._is_leader = is_leader
        self._clock = clock
        self._reader = reader
        self._check = check or self._backtest
        self._jobs = schedule.Jobs(scheduler)  # the service's scheduler, or one of its own (tests)
        self._running = asyncio.Lock()
        self.last: Ran | None = None

    async def start(self) -> None:
        # At once too: a model loaded before this job existed is backtested now, not in a day.
        every = self._policy.prediction.shadow.revalidate_every.total_seconds()
        self._jobs.every(JOB_ID, self.run_once, seconds=every, misfire_grace_s=3600, now=True)

    def soon(self) -> None:
        """Run now (a model version just loaded), then on the interval again."""
        self._jobs.scheduler.soon(JOB_ID)

    async def run_once(self, *, requested: bool = False) -> Ran | None:
        """One backtest; `requested` by an operator (it may lift a held shadow). Never raises."""
        if not self._is_leader():
            return None
        model = self._model()
        if model is None:
            return None
        version = model.card.version
        before = self._keeper.standing(version)
        if not requested and (before.acting or before.reason.held):
            log.debug("shadow backtest skipped: model %s is %s", version, before.reason.value)
            return None
        async with self._running:
            try:
                found = await asyncio.to_thread(self._check, model, self._clock())
            except (predict_prometheus.PrometheusUnavailable, predict_backtest.NoData) as exc:
                log.warning("shadow backtest of model %s could not run: %s; the standing stays", version, exc)
                self.last = Ran(before, None, problem=str(exc))
                return self.last
            except Exception as exc:
                log.exception("shadow backtest of model %s failed; the standing stays", version)
                self.last = Ran(before, None, problem=f"{type(exc).__name__}: {exc}")
                return self.last
            evidence = shadow.Evidence(
                false_alarms=found.false_alarms,
                node_days=found.node_days,
                history_days=found.history_days,
                alarms=found.alarms,
                failures=found.failures,
                caught=found.caught,
            )
            figures = found.as_dict()
            standing = await self._keeper.backtested(version, evidence, requested=requested, figures=figures)
            self.last = Ran(standing, figures)
            return self.last

    def _backtest(self, model: predict_registry.RiskModel, now: datetime) -> fleetcheck.FleetCheck:
        """The real check: the fleet's Prometheus and journal (blocking; runs in a worker thread)."""
        settings, prediction = self._settings, self._policy.prediction
        history_s = prediction.shadow.history.total_seconds()
        reader = self._reader or predict_prometheus.Reader(
            predict_prometheus.ReaderSettings(
                url=settings.prometheus_url or "",
                step_s=model.card.step_s or settings.retrain_step_s,
                timeout_s=QUERY_TIMEOUT_S,
                compress=settings.prometheus_compress,
                mmap_threshold_bytes=settings.mmap_threshold_bytes,
            )
        )
        journal = None
        if self._journal_path is not None:
            try:
                journal = predict_retrain.journal_failures(
                    self._journal_path, since=now - timedelta(seconds=history_s)
                )
            except predict_retrain.JournalUnreadable as exc:
                log.warning("shadow backtest labels come from Prometheus only: %s", exc)
        budgets = self._policy.budgets
        resend = prediction.resend.total_seconds()
        return fleetcheck.check(
            reader,
            model,
            end=now.timestamp(),
            history_s=history_s,
            xid_classes=self._xid_classes,
            journal_failures=journal,
            cost_model=predict_costs.CostModel(
                proactive_max_fraction=budgets.proactive_max_fraction,
                proactive_max_nodes=budgets.proactive_max_nodes,
                resend_h=resend / 3600.0 if resend > 0 else None,
            ),
            hold=predict_backtest.Hysteresis(
                clear_margin=prediction.clear_margin, clear_after=prediction.clear_after
            ),
            warn=prediction.warn,
            act=prediction.act,
            step_s=settings.validate_step_s,
            lookback_s=settings.lookback_s,
        )

    async def stop(self) -> None:
        self._jobs.stop()
