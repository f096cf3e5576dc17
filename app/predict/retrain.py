"""Retraining: a challenger trained on recent Prometheus history, promoted only if it beats the current model.

`retrain` is the one path both `sickbay train --from-prometheus` and the service's weekly job
(`app.service.retraining_job`) run:

1. read [now - window, now] from Prometheus (`prometheus.Reader`: one range query per metric for all
   GPUs, cut into chunks under Prometheus' point limit);
2. label it: hardware failures from changes of the XID gauge (`history.from_xid_series`, classes from the
   operator's XID catalog) merged with the journal's hardware faults (`journal_failures`, read by the
   caller); the journal records no repairs, so a failed slot stays excluded to the end of the window; no
   traps (nothing in production says which GPUs only look sick);
3. prepare and fit a challenger (`train.prepare_sources`, `train.fit`) — without an explicit config, with
   the current card's horizon, grid, sustain, target precision and primary metric, so both models are
   judged against one definition of a positive;
4. score the challenger AND the current model on the challenger's holdout — the same `EvalSet`: the last
   part of the window on nodes the challenger never trained on — and promote the challenger only if it
   beats the rules baseline on those rows (`promotion.beats_baseline`) and its primary metric is higher
   than the current model's without more false alarms (`promotion.promote_if_better`: an atomic swap that
   keeps the old model as `previous`, for `registry.rollback`);
5. the comparison is written into the challenger's card (`metrics["promotion"]`: both versions, both
   metrics, the baseline's figures, the verdict and its reason). A rejected challenger is saved too, NOT activated, so an operator
   can inspect it; `registry.prune` then keeps only the newest few versions besides current and previous.

Two expected troubles are outcomes, never exceptions, and change nothing in the models directory:
Prometheus unreachable (`Status.PROMETHEUS_UNAVAILABLE`) and too little data (`Status.TOO_LITTLE_DATA`:
no series, too few failures, or a split part without the positives fitting and comparing need).

Blocking (HTTP, pandas, scikit-learn): the service calls it from a worker thread. `journal_failures`
(`journal_labels`) reads the service's SQLite journal read-only; it is the only journal I/O here, kept at
the edge. What the run trains on is `retrain_inputs`', what it reports `retrain_outcome`'s.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd

from app.predict import baseline, dataset, prometheus, promotion, registry, split, train
from app.predict.journal_labels import JournalUnreadable, journal_failures
from app.predict.retrain_inputs import config_for, data_hash, label_failures, redact, thin_data
from app.predict.retrain_outcome import RetrainOutcome, Run, Status, iso

# The names the service's job, the command line and the fleet check use, from here.
__all__ = ["JournalUnreadable", "RetrainOutcome", "Status", "journal_failures", "retrain"]

log = logging.getLogger(__name__)

DEFAULT_WINDOW_S = 28 * 86400.0
DEFAULT_MIN_FAILURES = 5
DEFAULT_KEEP = 3  # versions kept besides current and previous (rejected challengers, older models)


def retrain(
    *,
    reader: prometheus.Reader,
    models_dir: Path,
    window_s: float = DEFAULT_WINDOW_S,
    now: datetime,
    failures_from_journal: pd.DataFrame | None,
    xid_classes: Mapping[int, str],
    config: train.TrainConfig | None = None,
    steps: train.Steps | None = None,
    threads: int | None = None,
    min_failures: int = DEFAULT_MIN_FAILURES,
    min_gain: float = 0.0,
    keep: int = DEFAULT_KEEP,
    rules: baseline.Baseline | None = None,
    gate: bool = True,
    force: bool = False,
) -> RetrainOutcome:
    """Train a challenger on [now - window_s, now] and promote it only if it beats the rules baseline (the
    shipped `rules/prediction-baseline.yaml` unless `rules` is given; `gate=False` skips it, for tests of
    the rest) and the current model; `force` (an operator's) promotes it regardless, recorded as forced."""
    started = time.perf_counter()
    end = now.astimezone(UTC)
    start = end - timedelta(seconds=window_s)
    run = Run(at=end, start=start, end=end, started=started)
    try:
        frame = reader.read(start, end)
    except prometheus.PrometheusUnavailable as exc:
        log.warning("retraining skipped, the current model stays: %s", exc)
        return run.outcome(Status.PROMETHEUS_UNAVAILABLE, str(exc), models_dir)
    run.raw_rows = len(frame)
    if frame.empty:
        reason = f"Prometheus has no DCGM series between {iso(start)} and {iso(end)}"
        return run.skip(reason, models_dir)

    failures, run.failures = label_failures(frame, failures_from_journal, xid_classes, start=start, end=end)
    if run.failures["window"] < min_failures:
        reason = (
            f"{run.failures['window']} hardware failures in the window ({run.failures['xid']} from the XID "
            f"gauge, {run.failures['journal']} from the journal); at least {min_failures} are needed"
        )
        return run.skip(reason, models_dir)

    current = _load_current(models_dir)
    chosen = config if config is not None else config_for(current)
    if threads is not None:
        chosen = dataclasses.replace(chosen, threads=threads)
    truth = dataset.Truth(
        start=start.timestamp(),
        end=end.timestamp(),
        failures=failures,
        repairs=pd.DataFrame(columns=["node", "time", "kind"]),  # the journal records no repairs yet
        traps=pd.DataFrame(columns=list(dataset.TRAP_COLUMNS)),
    )
    where = redact(reader.settings.url)
    steps = steps if steps is not None else train.Steps(show=False)
    digest = data_hash(frame, failures)
    prepared = train.prepare_sources(
        [train.Source("prometheus", frame, truth)],
        chosen,
        steps=steps,
        data_hash=lambda: digest,
        names=(f"prometheus:{where}",),
    )
    del frame  # the samples are featurised: free them before fitting
    thin = thin_data(prepared)
    if thin is not None:
        return run.skip(thin, models_dir)
    provenance = [
        f"prometheus {where} {iso(start)}..{iso(end)} step {reader.settings.step_s:g}s",
        f"failures: {run.failures['xid']} from the XID gauge, {run.failures['journal']} from the journal, "
        f"{run.failures['merged']} merged",
    ]
    try:
        challenger = train.fit(prepared, chosen, now=end, steps=steps, provenance=provenance).model
    except ValueError as exc:  # the data checks of fitting and calibrating (train._weights, train.calibrate)
        return run.skip(str(exc), models_dir)

    challenger = _unique_version(models_dir, challenger)
    holdout = prepared.part_of(split.Part.HOLDOUT)
    verdict = promotion.promote_if_better(
        challenger,
        current,
        holdout,
        models_dir=models_dir,
        min_gain=min_gain,
        rules=(rules if rules is not None else baseline.load()) if gate else None,
        force=force,
    )
    run.promotion = verdict.record()
    run.challenger = challenger.card.version
    if verdict.promoted:
        log.info("retraining promoted risk model %s: %s", challenger.card.version, verdict.reason)
        status = Status.PROMOTED
    else:
        _keep_rejected(models_dir, promotion.with_promotion(challenger, verdict))
        log.info(
            "retraining kept risk model %s: challenger %s %s",
            verdict.current_version,
            challenger.card.version,
            verdict.reason,
        )
        status = Status.KEPT
    run.pruned = tuple(registry.prune(models_dir, keep=keep))
    return run.outcome(status, verdict.reason, models_dir)


def _load_current(models_dir: Path) -> registry.RiskModel | None:
    try:
        return registry.load_current(models_dir)
    except registry.ModelUnavailable as exc:
        log.warning("retraining has no usable current model (%s): a challenger will be installed", exc)
        return None


def _unique_version(models_dir: Path, model: registry.RiskModel) -> registry.RiskModel:
    """A version name not yet taken: two runs at the same instant on the same data get distinct ones."""
    version, n = model.card.version, 1
    while (models_dir / version).exists():
        n += 1
        version = f"{model.card.version}-{n}"
    if version == model.card.version:
        return model
    card = dataclasses.replace(model.card, version=version)
    return registry.RiskModel(card=card, estimator=model.estimator, path=model.path)


def _keep_rejected(models_dir: Path, model: registry.RiskModel) -> None:
    """Save a rejected challenger (not activated) for inspection; a failure to do so changes nothing."""
    try:
        registry.save(models_dir, model)
    except OSError as exc:  # FileExistsError too: a rerun on the same data within the same second
        log.warning("could not keep rejected challenger %s: %s", model.card.version, exc)
