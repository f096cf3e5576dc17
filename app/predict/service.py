"""The scoring job the scheduler runs every cycle: model → recent samples → risks → signals on change.

`ScoringService.run_once(now)` is blocking (HTTP to Prometheus, pandas, sklearn): call it from a worker
thread (`asyncio.to_thread`). It never raises for the two expected troubles, it reports them:

- no usable model (`registry.ModelUnavailable`) → status `rules-only`: an ERROR log line when it starts,
  the gauge `sickbay_predict_model_loaded` at 0, and the reason in every cycle's result;
- Prometheus unreachable (`prometheus.PrometheusUnavailable`) → status `paused`: a WARNING log line when it
  starts, `sickbay_predict_scoring_paused` at 1, scoring resumes by itself.

`signals(cycle)` turns level changes per node into `domain.Signal`s (source `prediction`, label
`sickbay_class=at-risk`, so classification maps them to the at-risk class). A node whose level drops to
`none` gets a resolved signal. It enqueues nothing itself: the scheduler does.

Hysteresis, so a score hovering at a threshold does not flap a node's taint: `hysteresis.settle`, the
step the backtest replays with too (`hysteresis.hold_levels`): up at once, down only after `clear_after`
consecutive cycles below the level's threshold less `clear_margin` of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path

import pandas as pd
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from app import domain
from app.predict import coverage, features, hysteresis, prometheus, recorded_reader, registry, score

log = logging.getLogger(__name__)

AT_RISK_ALERT = "GpuAtRisk"


class CycleStatus(StrEnum):
    SCORED = "scored"
    RULES_ONLY = "rules-only"
    PAUSED = "paused"


@dataclass(frozen=True, slots=True)
class Cycle:
    status: CycleStatus
    at: datetime
    reason: str = ""
    scores: score.Scores | None = None
    seconds: float = 0.0
    # The (warn, act) thresholds the levels were set with: the policy's, else the model card's.
    thresholds: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class PredictMetrics:
    model_loaded: Gauge
    scoring_paused: Gauge
    cycles: Counter
    cycle_seconds: Histogram
    nodes_at_risk: Gauge

    @classmethod
    def create(cls, registry_: CollectorRegistry) -> PredictMetrics:
        return cls(
            model_loaded=Gauge(
                "sickbay_predict_model_loaded",
                "1 when a checked risk model is loaded; 0 means rules-only",
                registry=registry_,
            ),
            scoring_paused=Gauge(
                "sickbay_predict_scoring_paused",
                "1 while scoring is paused because Prometheus cannot be read",
                registry=registry_,
            ),
            cycles=Counter(
                "sickbay_predict_cycles", "Scoring cycles by outcome", ["status"], registry=registry_
            ),
            cycle_seconds=Histogram(
                "sickbay_predict_cycle_seconds", "Time one scoring cycle took", registry=registry_
            ),
            nodes_at_risk=Gauge(
                "sickbay_predict_nodes_at_risk", "Nodes at each risk level", ["level"], registry=registry_
            ),
        )


@dataclass(slots=True)
class ScoringService:
    """Holds the model and the node levels between cycles; one owner (the scheduler's job)."""

    models_dir: Path
    read_recent: Callable[[datetime], pd.DataFrame] | None = None
    metrics: PredictMetrics | None = None
    # Reads the features themselves (`recorded_reader.FeatureReader.read`: the recording rules' path, or
    # the raw look-back when they are not installed); when set, `read_recent` is not used.
    read_features: Callable[[datetime, float], recorded_reader.FeatureRead] | None = None
    warn: float | None = None
    act: float | None = None
    rollup: score.Rollup = "max"
    threads: int = 1
    # No hysteresis unless asked: the scheduler passes the policy's (prediction.clear_margin, clear_after).
    clear_margin: float = 0.0
    clear_after: int = 1
    # A node at warn or act is signalled again after this long with no change (None: only on changes).
    # The ladder ignores a level the node already carries, so a repeat costs a lookup; it promotes a node
    # the proactive budget held at warn once a slot frees, and recovers a signal lost to a failover.
    resend_s: float | None = None
    _model: registry.RiskModel | None = None
    _model_error: str | None = None
    _paused: str | None = None
    _levels: dict[str, tuple[domain.RiskLevel, datetime]] = field(default_factory=dict)
    # node → its hysteresis state (level, cycles below its clear line, the best level those held)
    _falling: dict[str, hysteresis.Held] = field(default_factory=dict)
    _sent: dict[str, datetime] = field(default_factory=dict)
    _resend_now: bool = False
    # (model version, the model's source fields the fleet lacks) last warned about: said once, on change.
    _missing: tuple[str, tuple[str, ...]] | None = None

    @classmethod
    def from_prometheus(
        cls,
        models_dir: Path,
        settings: prometheus.ReaderSettings,
        *,
        path_metrics: recorded_reader.PathMetrics | None = None,
        **kwargs: object,
    ) -> ScoringService:
        """Scoring that reads the recording rules' long windows where they are installed, else raw."""
        reader = recorded_reader.FeatureReader(prometheus.Reader(settings), metrics=path_metrics)
        return cls(models_dir=models_dir, read_features=reader.read, **kwargs)  # type: ignore[arg-type]

    @property
    def model(self) -> registry.RiskModel | None:
        return self._model

    def reload(self) -> registry.RiskModel | None:
        """Load the current model again (after a promotion or a rollback); logs loudly when there is none."""
        try:
            model = registry.load_current(self.models_dir)
        except registry.ModelUnavailable as exc:
            if self._model_error != exc.reason:
                log.error("risk scoring is OFF, running rules-only: %s", exc)
            self._model, self._model_error = None, exc.reason
        else:
            if self._model is None or self._model.card.version != model.card.version:
                log.info(
                    "risk model %s loaded (act ≥ %.3f, warn ≥ %.3f)",
                    model.card.version,
                    model.card.act,
                    model.card.warn,
                )
            self._model, self._model_error = model, None
        if self.metrics is not None:
            self.metrics.model_loaded.set(1 if self._model is not None else 0)
        return self._model

    def run_once(self, now: datetime) -> Cycle:
        started = time.perf_counter()
        cycle = self._cycle(now)
        elapsed = time.perf_counter() - started
        if self.metrics is not None:
            self.metrics.cycles.labels(status=cycle.status.value).inc()
            self.metrics.cycle_seconds.observe(elapsed)
            self.metrics.scoring_paused.set(1 if cycle.status is CycleStatus.PAUSED else 0)
            if cycle.scores is not None:
                for level in domain.RiskLevel:
                    count = sum(1 for r in cycle.scores.nodes if r.level is level)
                    self.metrics.nodes_at_risk.labels(level=level.value).set(count)
        return replace(cycle, seconds=round(elapsed, 3))

    def _cycle(self, now: datetime) -> Cycle:
        model = self._model if self._model is not None else self.reload()
        if model is None:
            return Cycle(CycleStatus.RULES_ONLY, now, reason=self._model_error or "no model")
        try:
            frame, table = self._read(now, model)
        except prometheus.PrometheusUnavailable as exc:
            if self._paused is None:
                log.warning("risk scoring paused: %s", exc)
            self._paused = exc.reason
            return Cycle(CycleStatus.PAUSED, now, reason=exc.reason)
        if self._paused is not None:
            log.info("risk scoring resumed: Prometheus answers again")
            self._paused = None
        self._warn_missing(model, frame)
        with threadpool_limits(limits=self.threads):
            if table is None:
                table = features.compute_features(score.current_boards(frame), tail_s=model.card.sustain_s)
            scores = score.score_features(
                table, model, now=now, warn=self.warn, act=self.act, rollup=self.rollup
            )
        thresholds = (
            model.card.warn if self.warn is None else self.warn,
            model.card.act if self.act is None else self.act,
        )
        return Cycle(CycleStatus.SCORED, now, scores=scores, thresholds=thresholds)

    def _read(self, now: datetime, model: registry.RiskModel) -> tuple[pd.DataFrame, pd.DataFrame | None]:
        """The raw samples read and, from `read_features`, the features (else None: computed here)."""
        if self.read_features is not None:
            read = self.read_features(now, model.card.sustain_s)
            return read.frame, read.table
        if self.read_recent is None:
            raise ValueError("the scoring service needs read_recent or read_features")
        return self.read_recent(now), None

    def _warn_missing(self, model: registry.RiskModel, frame: pd.DataFrame) -> None:
        """Say (WARNING, once per model and set of fields) which of the model's inputs the fleet lacks."""
        if frame.empty:
            return
        missing = coverage.missing_fields(frame, model.card.features)
        key = (model.card.version, missing)
        if key != self._missing:
            self._missing = key
            warning = coverage.warning(missing, model.card.features)
            if warning:
                log.warning("risk model %s: %s", model.card.version, warning)

    def signals(self, cycle: Cycle) -> list[domain.Signal]:
        """Signals for the nodes whose level changed since the last scored cycle (see the module's hysteresis)."""
        if cycle.scores is None:
            return []
        out: list[domain.Signal] = []
        resend_now, self._resend_now = self._resend_now, False
        for risk in cycle.scores.nodes:
            before = self._levels.get(risk.node)
            current = before[0] if before is not None else domain.RiskLevel.NONE
            level = self._settle(risk, current, cycle.thresholds)
            if level is current:
                if level is not domain.RiskLevel.NONE and (resend_now or self._due(risk.node, cycle.at)):
                    # starts_at is the repeat's own time: the inbox would drop an identical key.
                    out.append(to_signal(replace(risk, level=level), now=cycle.at, since=cycle.at))
                    self._sent[risk.node] = cycle.at
                continue
            if level is domain.RiskLevel.NONE:
                self._levels.pop(risk.node, None)
                self._sent.pop(risk.node, None)
                if before is not None:
                    out.append(to_signal(risk, now=cycle.at, since=before[1], resolved=True))
                continue
            self._levels[risk.node] = (level, cycle.at)
            self._sent[risk.node] = cycle.at
            out.append(to_signal(replace(risk, level=level), now=cycle.at, since=cycle.at))
        return out

    def resend_all(self) -> None:
        """Signal every node at warn or act again in the next `signals` call (after a return to shadow)."""
        self._resend_now = True

    def _due(self, node: str, now: datetime) -> bool:
        if self.resend_s is None:
            return False
        last = self._sent.get(node)
        return last is None or (now - last).total_seconds() >= self.resend_s

    def _settle(
        self, risk: domain.Risk, current: domain.RiskLevel, thresholds: tuple[float, float] | None
    ) -> domain.RiskLevel:
        """The node's level after this cycle (`hysteresis.settle`)."""
        state = self._falling.get(risk.node, hysteresis.Held(_RANK[current]))
        state = hysteresis.settle(
            state, _RANK[risk.level], _RANK[self._held(risk, thresholds)], clear_after=self.clear_after
        )
        if state.below:
            self._falling[risk.node] = state
        else:
            self._falling.pop(risk.node, None)
        return _LEVEL[state.level]

    def _held(self, risk: domain.Risk, thresholds: tuple[float, float] | None) -> domain.RiskLevel:
        """The highest level whose clear line (threshold less the margin) the score still reaches."""
        if thresholds is None:  # a cycle without thresholds (built by hand): the levels as scored
            return risk.level
        hold = hysteresis.Hysteresis(clear_margin=self.clear_margin, clear_after=self.clear_after)
        warn, act = hysteresis.clear_lines(thresholds[0], thresholds[1], hold)
        return score.level_of(risk.score, warn=warn, act=act)


_RANK = {
    domain.RiskLevel.NONE: hysteresis.LEVEL_NONE,
    domain.RiskLevel.WARN: hysteresis.LEVEL_WARN,
    domain.RiskLevel.ACT: hysteresis.LEVEL_ACT,
}
_LEVEL = {code: level for level, code in _RANK.items()}


def to_signal(risk: domain.Risk, *, now: datetime, since: datetime, resolved: bool = False) -> domain.Signal:
    """A node's risk as a signal that classifies to `at-risk` (label `sickbay_class`)."""
    drivers = ", ".join(f"{name} +{weight:.2f}" for name, weight in risk.drivers)
    return domain.Signal(
        source=domain.SignalSource.PREDICTION,
        fingerprint=f"risk:{risk.node}",
        status=domain.SignalStatus.RESOLVED if resolved else domain.SignalStatus.FIRING,
        name=AT_RISK_ALERT,
        starts_at=since,
        received_at=now,
        node=risk.node,
        gpu=risk.gpu,
        ends_at=now if resolved else None,
        labels=domain.freeze_mapping(
            {
                "sickbay_class": domain.FaultClass.AT_RISK.value,
                "level": risk.level.value,
                "model_version": risk.model_version,
            }
        ),
        annotations=domain.freeze_mapping(
            {
                "score": f"{risk.score:.4f}",
                "drivers": drivers,
                "summary": f"predicted {risk.level.value} risk",
            }
        ),
    )
