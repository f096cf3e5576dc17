"""Training a risk model: dataset → features → labels → split → gradient boosting → calibration → card.

`sickbay train --dataset DIR --out models/` trains on one or more dataset directories (the layout
`sickbay simulate` writes), evaluates on the held-out future of held-out nodes (and on any
`--eval-dataset`), and installs the model as the current one in `--out` if it beats the rules baseline
(`train_gate`; `--force`: whether or not). `--from-prometheus URL` instead
runs the service's retraining once (`retrain.retrain`): a challenger from the last `--days` of history,
installed only if it beats the current model on the same holdout. Steps:

1. features on a coarser grid than the samples (`every_s`, default 30 min; windows use every sample);
2. labels: a hardware-class fault within the horizon (`labels.label_rows`);
3. split by time and node (`split.assign`): train < validation < holdout, holdout nodes unseen;
4. `HistGradientBoostingClassifier` on the train part, positives weighted up (`positive_weight`,
   default: so both classes weigh the same); at fleet scale on all positives and a share of the
   negatives, each kept negative weighing 1 / rate (`sampling`, `negative_rate`, auto by default);
5. `CalibratedClassifierCV(FrozenEstimator(model))` fitted on the validation part — scikit-learn ≥ 1.6's
   replacement for `cv="prefit"` — so probabilities mean what they say (sigmoid by default: on this
   data isotonic steps made thresholds coarse and let more false alarms through); the validation part is
   never down-sampled, so this calibrates to the true base rate (`calibration`: scored in chunks);
6. thresholds on the validation part, on decision scores (probabilities sustained over `sustain_s`,
   default 30 min: `evaluate.sustain`): `act` is the lowest threshold whose flagged rows AND alarms reach
   the target precision (default 0.9) with at most `fa_budget` false alarms per 1,000 node-days (default
   1); `warn` the same with `warn_precision` (0.5) and `warn_fa_budget` (10);
7. metrics on the holdout (`evaluate.evaluate`), written to the card.

It reads files and the clock (for `created_at`); the model itself depends on the data and `seed` only.
Modules: `train_config` (TrainConfig), `prepare` (steps 1 to 3, and `field_dropout`: exporter field groups
dropped per node at random), `thresholds` (step 6), `steps` (progress), `train_cli` (the command's run);
this one fits, calibrates and writes the card, and re-exports the others' names.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.ensemble import HistGradientBoostingClassifier  # type: ignore[import-untyped]
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from app.predict import calibration, evaluate, features, registry, split
from app.predict.prepare import Prepared, Source, drop_fields, featurise, prepare, prepare_sources
from app.predict.steps import Steps
from app.predict.thresholds import ThresholdChoice, choose_threshold
from app.predict.train_config import Calibration, TrainConfig

__all__ = [
    "Calibration",
    "Prepared",
    "Source",
    "Steps",
    "ThresholdChoice",
    "TrainConfig",
    "TrainResult",
    "calibrate",
    "choose_threshold",
    "drop_fields",
    "evaluate_on",
    "featurise",
    "fit",
    "fit_estimator",
    "prepare",
    "prepare_sources",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TrainResult:
    model: registry.RiskModel
    metrics: dict[str, evaluate.Metrics]
    timings: dict[str, float]


# -- fitting --------------------------------------------------------------------------------------------


def _weights(
    y: npt.NDArray[np.int8],
    positive_weight: float | None,
    sample_weight: npt.NDArray[np.float32] | None = None,
) -> npt.NDArray[np.float64]:
    """Per row: positives weigh `positive_weight` (default: the negatives' total weight over the count of
    positives, so both classes weigh the same); negatives their sample weight (1 / rate when kept by
    down-sampling, so they stand for the negatives left out)."""
    positives = int(y.sum())
    if positives == 0:
        raise ValueError("the training part has no positive rows: more failures (or a longer window) needed")
    base = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    weight = positive_weight if positive_weight is not None else float(base[y != 1].sum()) / positives
    return np.where(y == 1, weight, base)


def fit_estimator(
    x: npt.NDArray[np.float32],
    y: npt.NDArray[np.int8],
    config: TrainConfig,
    *,
    sample_weight: npt.NDArray[np.float32] | None = None,
) -> Any:
    model = HistGradientBoostingClassifier(
        max_iter=config.max_iter,
        learning_rate=config.learning_rate,
        max_leaf_nodes=config.max_leaf_nodes,
        min_samples_leaf=config.min_samples_leaf,
        l2_regularization=config.l2_regularization,
        early_stopping=False,
        random_state=config.seed,
    )
    model.fit(x, y, sample_weight=_weights(y, config.positive_weight, sample_weight))
    return model


def calibrate(model: Any, x: npt.NDArray[np.float32], y: npt.NDArray[np.int8], method: Calibration) -> Any:
    """`CalibratedClassifierCV(FrozenEstimator(model))` on the validation rows (`calibration`, in chunks)."""
    return calibration.calibrate(model, x, y, method)


def _medians(x: npt.NDArray[np.float32]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for i, name in enumerate(features.FEATURES):
        column = x[:, i]
        finite = column[np.isfinite(column)]
        out[name] = float(np.median(finite)) if finite.size else None
    return out


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def fit(
    prepared: Prepared,
    config: TrainConfig,
    *,
    now: datetime,
    steps: Steps,
    provenance: Sequence[str] = (),
) -> TrainResult:
    """Train, calibrate, choose thresholds and measure on the holdout; returns an unsaved model."""
    train = prepared.part_of(split.Part.TRAIN)
    validation = prepared.part_of(split.Part.VALIDATION)
    holdout = prepared.part_of(split.Part.HOLDOUT)
    tr = train.labels.usable
    va = validation.labels.usable
    with steps.step(f"fit ({int(tr.sum())} rows)"):
        fit_started = time.perf_counter()
        with threadpool_limits(limits=config.threads):
            weight = prepared.weight_of(split.Part.TRAIN)[tr]
            base = fit_estimator(train.x[tr], train.labels.label[tr], config, sample_weight=weight)
        fit_seconds = time.perf_counter() - fit_started
    with steps.step("calibrate"):
        model = calibrate(base, validation.x[va], validation.labels.label[va], config.calibration)
    y_val = validation.labels.label[va]
    with steps.step("thresholds"):
        s_val = _decision(model, validation, config.sustain_s)
        act_choice = choose_threshold(
            validation,
            s_val,
            precision=config.target_precision,
            fa_budget=config.fa_budget,
            min_rows=config.min_alarm_rows,
        )
        warn_choice = choose_threshold(
            validation,
            s_val,
            precision=config.warn_precision,
            fa_budget=config.warn_fa_budget,
            min_rows=config.min_alarm_rows,
        )
    act = act_choice.threshold
    warn = min(warn_choice.threshold, act)
    if not act_choice.met:
        log.warning(
            "no threshold reaches precision %.2f with ≤ %.1f false alarms per 1,000 node-days on validation; act=%.4f",
            config.target_precision,
            config.fa_budget,
            act,
        )
    with steps.step("evaluate"):
        s_hold = _decision(model, holdout, config.sustain_s)
        metrics = {
            "holdout": evaluate.evaluate(s_hold, holdout, threshold=act),
            "holdout_warn": evaluate.evaluate(s_hold, holdout, threshold=warn),
            "validation": evaluate.evaluate(s_val, validation, threshold=act),
        }
    created = now.astimezone(UTC)
    version = f"{created:%Y%m%dT%H%M%SZ}-{prepared.data_hash[:8]}"
    edges = prepared.edges
    card = registry.ModelCard(
        version=version,
        created_at=created.isoformat().replace("+00:00", "Z"),
        features=features.FEATURES,
        thresholds={"warn": warn, "act": act},
        horizon_s=config.horizon_s,
        data_hash=prepared.data_hash,
        primary_metric=config.primary_metric,
        target_precision=config.target_precision,
        every_s=config.every_s,
        sustain_s=config.sustain_s,
        step_s=prepared.step_s,
        feature_medians=_medians(train.x[tr]),
        training={
            "sources": list(prepared.sources),
            "provenance": list(provenance),
            "window": {
                "start": _iso(edges.start),
                "train_end": _iso(edges.train_end),
                "validation_end": _iso(edges.validation_end),
                "end": _iso(edges.end),
            },
            "split": asdict(config.split),
            "rows": {
                "raw": prepared.raw_rows,
                "train": int(tr.sum()),
                "train_positive": int(train.labels.label[tr].sum()),
                "validation": int(va.sum()),
                "validation_positive": int(y_val.sum()),
                "holdout": int(holdout.labels.usable.sum()),
                "holdout_positive": int(holdout.labels.label[holdout.labels.usable].sum()),
            },
            "threshold_choice": {"act": act_choice.as_dict(), "warn": warn_choice.as_dict()},
            "fa_budget_per_1000_node_days": {"act": config.fa_budget, "warn": config.warn_fa_budget},
            "estimator": {
                "kind": "HistGradientBoostingClassifier",
                "max_iter": config.max_iter,
                "learning_rate": config.learning_rate,
                "max_leaf_nodes": config.max_leaf_nodes,
                "min_samples_leaf": config.min_samples_leaf,
                "l2_regularization": config.l2_regularization,
                "positive_weight": config.positive_weight,
                "calibration": config.calibration,
                "seed": config.seed,
            },
            "negative_sampling": prepared.sampling.as_dict(),
            "censor_early": config.censor_early,
            "field_dropout": config.field_dropout,
            "source_fields": list(features.source_fields()),
            "fit_seconds": round(fit_seconds, 2),
            "timings_s": {**prepared.timings, **steps.timings},
        },
        metrics=registry.card_metrics(metrics),
    )
    return TrainResult(
        model=registry.RiskModel(card=card, estimator=model), metrics=metrics, timings=steps.timings
    )


def _decision(model: Any, data: evaluate.EvalSet, sustain_s: float) -> npt.NDArray[np.float64]:
    p = calibration.probabilities(model, data.x)
    return evaluate.sustain(data.keys, p, sustain_s=sustain_s)


def evaluate_on(
    model: registry.RiskModel, directories: Sequence[Path], config: TrainConfig, *, steps: Steps
) -> evaluate.Metrics:
    """Metrics of a model over whole datasets (every node is unseen when the seed differs)."""
    prepared = prepare(directories, config, steps=steps, whole=True)
    data = prepared.part_of(split.Part.HOLDOUT)
    return evaluate.evaluate(model.decision_scores(data), data, threshold=model.card.act)
