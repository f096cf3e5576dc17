"""Training a risk model: dataset → features → labels → split → gradient boosting → calibration → card.

`python -m app.predict.train --dataset DIR --out models/` trains on one or more dataset directories (the
layout `sickbay simulate` writes), evaluates on the held-out future of held-out nodes (and on any
`--eval-dataset`), and installs the model as the current one in `--out`. `--from-prometheus URL` instead
runs the service's retraining once (`retrain.retrain`): a challenger from the last `--days` of history,
installed only if it beats the current model on the same holdout. Steps:

1. features on a coarser grid than the samples (`every_s`, default 30 min; windows use every sample);
2. labels: a hardware-class fault within the horizon (`labels.label_rows`);
3. split by time and node (`split.assign`): train < validation < holdout, holdout nodes unseen;
4. `HistGradientBoostingClassifier` on the train part, positives weighted up (`positive_weight`,
   default: so both classes weigh the same);
5. `CalibratedClassifierCV(FrozenEstimator(model))` fitted on the validation part — scikit-learn ≥ 1.6's
   replacement for `cv="prefit"` — so probabilities mean what they say (sigmoid by default: on this
   data isotonic steps made thresholds coarse and let more false alarms through);
6. thresholds on the validation part, on decision scores (probabilities sustained over `sustain_s`,
   default 30 min: `evaluate.sustain`): `act` is the lowest threshold whose flagged rows AND alarms reach
   the target precision (default 0.9) with at most `fa_budget` false alarms per 1,000 node-days (default
   1); `warn` the same with `warn_precision` (0.5) and `warn_fa_budget` (10);
7. metrics on the holdout (`evaluate.evaluate`), written to the card.

It reads files and the clock (for `created_at`); the model itself depends on the data and `seed` only.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from sklearn.calibration import CalibratedClassifierCV  # type: ignore[import-untyped]
from sklearn.ensemble import HistGradientBoostingClassifier  # type: ignore[import-untyped]
from sklearn.frozen import FrozenEstimator  # type: ignore[import-untyped]
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from app.predict import dataset, evaluate, features, history, labels, prometheus, registry, split

log = logging.getLogger(__name__)

Calibration = Literal["isotonic", "sigmoid"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    horizon_s: float = labels.DEFAULT_HORIZON_S
    every_s: float = 1800.0
    target_precision: float = 0.9
    warn_precision: float = 0.5
    fa_budget: float = 1.0
    warn_fa_budget: float = 10.0
    sustain_s: float = 1800.0
    min_alarm_rows: int = 20
    split: split.SplitSpec = field(default_factory=split.SplitSpec)
    max_iter: int = 200
    learning_rate: float = 0.1
    max_leaf_nodes: int = 31
    min_samples_leaf: int = 100
    l2_regularization: float = 1.0
    positive_weight: float | None = None
    calibration: Calibration = "sigmoid"
    censor_early: bool = True
    seed: int = 0
    primary_metric: str = "pr_auc"
    node_chunk: int = 25
    threads: int | None = None


@dataclass(frozen=True, slots=True)
class Prepared:
    """Featurised, labelled rows of one or more datasets, with their split."""

    data: evaluate.EvalSet
    part: npt.NDArray[np.int8]
    edges: split.Boundaries
    data_hash: str
    sources: tuple[str, ...]
    step_s: float | None
    timings: dict[str, float]
    raw_rows: int

    def part_of(self, which: split.Part) -> evaluate.EvalSet:
        return self.data.subset(self.part == which)


@dataclass(frozen=True, slots=True)
class TrainResult:
    model: registry.RiskModel
    metrics: dict[str, evaluate.Metrics]
    timings: dict[str, float]


# -- progress -------------------------------------------------------------------------------------------


class Steps:
    """Named steps with rich progress bars on stderr (or silent), and their wall times."""

    def __init__(self, *, show: bool) -> None:
        self.show = show
        self.timings: dict[str, float] = {}
        self._progress = (
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            if show
            else None
        )

    def __enter__(self) -> Steps:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    @contextmanager
    def step(self, name: str, total: int = 1) -> Iterator[Any]:
        started = time.perf_counter()
        task = self._progress.add_task(name, total=total) if self._progress is not None else None

        def advance(amount: int = 1) -> None:
            if self._progress is not None and task is not None:
                self._progress.advance(task, amount)

        try:
            yield advance
        finally:
            if self._progress is not None and task is not None:
                self._progress.update(task, completed=total)
            self.timings[name] = round(time.perf_counter() - started, 3)


# -- preparing data -------------------------------------------------------------------------------------


def featurise(
    frame: pd.DataFrame, *, every_s: float | None, node_chunk: int, steps: Steps, name: str
) -> pd.DataFrame:
    """Features node chunk by node chunk (peers stay together), with a progress bar."""
    host = features.host_column(frame)
    if host is None:
        raise dataset.DatasetError("the time series has no host column")
    nodes = frame[host].astype(str)
    unique = np.sort(nodes.unique())
    chunks = [unique[i : i + node_chunk] for i in range(0, len(unique), node_chunk)]
    parts: list[pd.DataFrame] = []
    with steps.step(name, total=len(chunks)) as advance:
        for chunk in chunks:
            parts.append(features.compute_features(frame.loc[nodes.isin(chunk).to_numpy()], every_s=every_s))
            advance()
    out = pd.concat(parts, ignore_index=True)
    for column in ("node", "uuid"):
        out[column] = out[column].astype(str)
    return out


def _step_s(frame: pd.DataFrame) -> float | None:
    if "timestamp" not in frame.columns:
        return None
    instants = np.unique(frame["timestamp"].to_numpy(dtype=np.float64))
    return float(np.median(np.diff(instants))) if instants.size > 1 else None


@dataclass(frozen=True, slots=True)
class Source:
    """One labelled time series for `prepare_sources`: a dataset directory's, or Prometheus history with
    failures from the journal and the XID series (`history`)."""

    name: str
    frame: pd.DataFrame
    truth: dataset.Truth


def prepare(
    directories: Sequence[Path], config: TrainConfig, *, steps: Steps, whole: bool = False
) -> Prepared:
    """Read, featurise and label datasets; `whole` puts every warmed-up row in the holdout (evaluation)."""

    def read() -> Iterator[Source]:
        for directory in directories:
            with steps.step(f"read {directory.name}"):
                frame = dataset.read_timeseries(directory)
                truth = dataset.read_truth(directory)
            yield Source(directory.name, frame, truth)

    def digest() -> str:
        with steps.step("hash data"):
            return dataset.dataset_hash(list(directories))

    return prepare_sources(
        read(),
        config,
        steps=steps,
        whole=whole,
        tag_nodes=len(directories) > 1,
        data_hash=digest,
        names=tuple(str(d) for d in directories),
    )


def prepare_sources(
    sources: Iterable[Source],
    config: TrainConfig,
    *,
    steps: Steps,
    data_hash: Callable[[], str],
    names: tuple[str, ...],
    whole: bool = False,
    tag_nodes: bool = False,
) -> Prepared:
    """Featurise and label sources one at a time (a frame is dropped once featurised). `tag_nodes`
    prefixes node names and failure ids with the source's name, so several sources never mix."""
    keys: list[pd.DataFrame] = []
    label_parts: list[labels.Labels] = []
    failures: list[pd.DataFrame] = []
    traps: list[npt.NDArray[np.object_]] = []
    step_s: float | None = None
    raw_rows = 0
    for index, source in enumerate(sources):
        frame, truth, name = source.frame, source.truth, source.name
        raw_rows += len(frame)
        step_s = step_s or _step_s(frame)
        table = featurise(
            frame,
            every_s=config.every_s,
            node_chunk=config.node_chunk,
            steps=steps,
            name=f"features {name}",
        )
        del frame, source
        with steps.step(f"labels {name}"):
            lab = labels.label_rows(
                table,
                truth.failures,
                repairs=truth.repairs,
                horizon_s=config.horizon_s,
                censor_early=config.censor_early,
            )
            kinds = dataset.trap_kinds(truth.traps, table)
        if tag_nodes:
            tag = f"{name}:"
            table["node"] = tag + table["node"]
            fails = truth.failures.assign(
                node=tag + truth.failures["node"], id=f"{index}:" + truth.failures["id"]
            )
            lab = labels.Labels(
                label=lab.label,
                status=lab.status,
                time_to_failure_s=lab.time_to_failure_s,
                failure_id=np.array(
                    [None if v is None else f"{index}:{v}" for v in lab.failure_id], dtype=object
                ),
            )
        else:
            fails = truth.failures
        keys.append(table)
        label_parts.append(lab)
        failures.append(fails)
        traps.append(kinds)
    if not keys:
        raise dataset.DatasetError("no data to prepare")
    table = pd.concat(keys, ignore_index=True)
    merged = labels.Labels(
        label=np.concatenate([lab.label for lab in label_parts]),
        status=np.concatenate([lab.status for lab in label_parts]),
        time_to_failure_s=np.concatenate([lab.time_to_failure_s for lab in label_parts]),
        failure_id=np.concatenate([lab.failure_id for lab in label_parts]),
    )
    x = table[list(features.FEATURES)].to_numpy(dtype=np.float32)
    key_frame = table[list(features.KEY_COLUMNS)].copy()
    data = evaluate.EvalSet(
        keys=key_frame,
        x=x,
        labels=merged,
        failures=pd.concat(failures, ignore_index=True),
        trap_kind=np.concatenate(traps),
        horizon_s=config.horizon_s,
    )
    timestamps = key_frame["timestamp"].to_numpy(dtype=np.float64)
    if whole:
        edges = split.boundaries(timestamps, config.split)
        warm = timestamps >= edges.start + config.split.warmup_s
        part = np.where(warm, split.Part.HOLDOUT, split.Part.NONE).astype(np.int8)
    else:
        part, edges = split.assign(key_frame["node"].to_numpy(dtype=object), timestamps, config.split)
    return Prepared(
        data=data,
        part=part,
        edges=edges,
        data_hash=data_hash(),
        sources=names,
        step_s=step_s,
        timings=dict(steps.timings),
        raw_rows=raw_rows,
    )


# -- fitting --------------------------------------------------------------------------------------------


def _weights(y: npt.NDArray[np.int8], positive_weight: float | None) -> npt.NDArray[np.float64]:
    positives = int(y.sum())
    if positives == 0:
        raise ValueError("the training part has no positive rows: more failures (or a longer window) needed")
    weight = positive_weight if positive_weight is not None else (len(y) - positives) / positives
    return np.where(y == 1, weight, 1.0)


def fit_estimator(x: npt.NDArray[np.float32], y: npt.NDArray[np.int8], config: TrainConfig) -> Any:
    model = HistGradientBoostingClassifier(
        max_iter=config.max_iter,
        learning_rate=config.learning_rate,
        max_leaf_nodes=config.max_leaf_nodes,
        min_samples_leaf=config.min_samples_leaf,
        l2_regularization=config.l2_regularization,
        early_stopping=False,
        random_state=config.seed,
    )
    model.fit(x, y, sample_weight=_weights(y, config.positive_weight))
    return model


def calibrate(model: Any, x: npt.NDArray[np.float32], y: npt.NDArray[np.int8], method: Calibration) -> Any:
    if int(y.sum()) < 5 or int((y == 0).sum()) < 5:
        raise ValueError("the validation part needs at least 5 positive and 5 negative rows to calibrate")
    calibrated = CalibratedClassifierCV(FrozenEstimator(model), method=method)
    calibrated.fit(x, y)
    return calibrated


@dataclass(frozen=True, slots=True)
class ThresholdChoice:
    threshold: float
    met: bool
    row_precision: float
    alarm_precision: float
    false_alarms: int
    allowed_false_alarms: int

    def as_dict(self) -> dict[str, Any]:
        return {
            k: (round(v, 6) if isinstance(v, float) and np.isfinite(v) else v)
            for k, v in asdict(self).items()
        }


def choose_threshold(
    data: evaluate.EvalSet,
    scores: npt.NDArray[np.float64],
    *,
    precision: float,
    fa_budget: float,
    min_rows: int,
    max_candidates: int = 4000,
) -> ThresholdChoice:
    """The lowest threshold whose flagged rows and alarms reach `precision` on `data` with at most
    `fa_budget` false alarms per 1,000 node-days (and at least `min_rows` flagged rows).

    When none qualifies (met=False): the one with the fewest false alarms, then the best row precision.
    """
    usable = data.labels.usable
    y = data.labels.label[usable]
    p = scores[usable]
    candidates = np.unique(p[p > 0])
    if candidates.size > max_candidates:
        candidates = np.unique(np.quantile(candidates, np.linspace(0.0, 1.0, max_candidates)))
    if candidates.size == 0:
        return ThresholdChoice(1.0, False, float("nan"), float("nan"), 0, 0)
    ordered = np.sort(p)
    positives = np.sort(p[y == 1])
    flagged = len(ordered) - np.searchsorted(ordered, candidates, side="left")
    hits = len(positives) - np.searchsorted(positives, candidates, side="left")
    with np.errstate(invalid="ignore", divide="ignore"):
        row_precision = np.where(flagged > 0, hits / flagged, np.nan)
    alarms = evaluate.alarm_counts(data.keys, scores, data.labels.status, candidates)
    zero = np.zeros(candidates.size, dtype=np.int64)
    false = alarms.get(labels.Status.NEGATIVE, zero)
    true = alarms.get(labels.Status.POSITIVE, zero)
    with np.errstate(invalid="ignore", divide="ignore"):
        alarm_precision = np.where(true + false > 0, true / (true + false), np.nan)
    allowed = int(np.floor(fa_budget * evaluate.node_days(data.keys) / 1000.0))
    ok = (
        (flagged >= min_rows)
        & (row_precision >= precision)
        & (alarm_precision >= precision)
        & (false <= allowed)
    )
    found = np.flatnonzero(ok)
    met = bool(found.size)
    if met:
        i = int(found[0])
    else:
        enough = np.flatnonzero(flagged >= min_rows)
        pool = enough if enough.size else np.arange(candidates.size)
        i = int(pool[np.lexsort((-np.nan_to_num(row_precision[pool]), false[pool]))[0]])
    return ThresholdChoice(
        threshold=float(candidates[i]),
        met=met,
        row_precision=float(row_precision[i]),
        alarm_precision=float(alarm_precision[i]),
        false_alarms=int(false[i]),
        allowed_false_alarms=allowed,
    )


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
            base = fit_estimator(train.x[tr], train.labels.label[tr], config)
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
            "censor_early": config.censor_early,
            "fit_seconds": round(fit_seconds, 2),
            "timings_s": {**prepared.timings, **steps.timings},
        },
        metrics=registry.card_metrics(metrics),
    )
    return TrainResult(
        model=registry.RiskModel(card=card, estimator=model), metrics=metrics, timings=steps.timings
    )


def _decision(model: Any, data: evaluate.EvalSet, sustain_s: float) -> npt.NDArray[np.float64]:
    p = np.asarray(model.predict_proba(data.x)[:, 1], dtype=np.float64) if len(data) else np.zeros(0)
    return evaluate.sustain(data.keys, p, sustain_s=sustain_s)


def evaluate_on(
    model: registry.RiskModel, directories: Sequence[Path], config: TrainConfig, *, steps: Steps
) -> evaluate.Metrics:
    """Metrics of a model over whole datasets (every node is unseen when the seed differs)."""
    prepared = prepare(directories, config, steps=steps, whole=True)
    data = prepared.part_of(split.Part.HOLDOUT)
    return evaluate.evaluate(model.decision_scores(data), data, threshold=model.card.act)


# -- command line ---------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", type=Path, action="append", help="dataset directory (repeatable)")
    source.add_argument(
        "--from-prometheus",
        metavar="URL",
        help="retrain on Prometheus history: a challenger replaces the current model only if it is better "
        "on the same holdout (prints the outcome; exit 4: Prometheus unreachable, 5: too little data)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="models directory; with --dataset (required) the new model becomes current; "
        "with --from-prometheus (default models/) only a better one does",
    )
    parser.add_argument(
        "--eval-dataset", type=Path, action="append", default=[], help="also evaluate on (repeatable)"
    )
    parser.add_argument("--horizon-hours", type=float, default=24.0, help="label horizon (default 24)")
    parser.add_argument(
        "--warmup-hours",
        type=float,
        default=24.0,
        help="data skipped at the start: windows fill (default 24)",
    )
    parser.add_argument(
        "--holdout-nodes", type=float, default=0.3, help="share of nodes held out (default 0.3)"
    )
    parser.add_argument("--every-minutes", type=float, default=30.0, help="training grid (default 30)")
    parser.add_argument("--target-precision", type=float, default=0.9)
    parser.add_argument("--warn-precision", type=float, default=0.5)
    parser.add_argument("--calibration", choices=("isotonic", "sigmoid"), default="sigmoid")
    parser.add_argument("--max-iter", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads for fitting (default: all)")
    parser.add_argument("--provenance", action="append", default=[], help="how the data was made (recorded)")
    parser.add_argument("--no-activate", action="store_true", help="save the model without making it current")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    prom = parser.add_argument_group("retraining (--from-prometheus)")
    prom.add_argument("--days", type=float, default=28.0, help="history to train on, up to now (default 28)")
    prom.add_argument("--step-seconds", type=float, default=300.0, help="query resolution (default 300)")
    prom.add_argument(
        "--journal", type=Path, help="the service's SQLite journal: its hardware faults are labels too"
    )
    prom.add_argument("--xid-catalog", type=Path, help="XID catalog (default: rules/xid-catalog.yaml)")
    prom.add_argument(
        "--min-failures",
        type=int,
        default=5,
        help="hardware failures the window needs (default 5)",
    )


def config_from(args: argparse.Namespace) -> TrainConfig:
    horizon = args.horizon_hours * 3600.0
    return TrainConfig(
        horizon_s=horizon,
        split=split.SplitSpec(
            embargo_s=horizon, warmup_s=args.warmup_hours * 3600.0, holdout_node_fraction=args.holdout_nodes
        ),
        every_s=args.every_minutes * 60.0,
        target_precision=args.target_precision,
        warn_precision=args.warn_precision,
        calibration=args.calibration,
        max_iter=args.max_iter,
        seed=args.seed,
        threads=args.threads,
    )


def run(args: argparse.Namespace, *, now: datetime | None = None) -> int:
    if args.from_prometheus:
        return run_from_prometheus(args, now=now)
    if args.out is None:
        print("sickbay train: --out is required with --dataset", file=sys.stderr)
        return 2
    config = config_from(args)
    with Steps(show=not args.quiet) as steps:
        prepared = prepare(args.dataset, config, steps=steps)
        result = fit(prepared, config, now=now or datetime.now(UTC), steps=steps, provenance=args.provenance)
        model = result.model
        extra: dict[str, Any] = {}
        for directory in args.eval_dataset:
            metrics = evaluate_on(model, [directory], config, steps=steps)
            extra[f"independent:{directory.name}"] = metrics.as_dict()
    if extra:
        card = model.card
        model = registry.RiskModel(
            card=registry.ModelCard(**{**_card_fields(card), "metrics": {**card.metrics, **extra}}),
            estimator=model.estimator,
        )
    saved = registry.save(args.out, model)
    if not args.no_activate:
        registry.activate(args.out, saved.card.version)
    holdout = model.card.metrics["holdout"]
    summary = {
        "version": saved.card.version,
        "path": str(saved.path),
        "thresholds": saved.card.thresholds,
        "holdout": {
            k: holdout[k] for k in ("precision", "recall", "pr_auc", "false_alarms_per_1000_node_days")
        },
        "fit_seconds": saved.card.training["fit_seconds"],
    }
    print(pd.Series(summary).to_json(indent=2))
    return 0


def run_from_prometheus(args: argparse.Namespace, *, now: datetime | None = None) -> int:
    """`--from-prometheus`: the service's retraining run, once, from the command line."""
    from app.config import rules  # noqa: PLC0415 - the XID catalog, for this command only
    from app.config.settings import RULES_DIR  # noqa: PLC0415
    from app.predict import retrain  # noqa: PLC0415 - retrain imports this module

    if args.eval_dataset or args.no_activate:
        print("sickbay train: --eval-dataset and --no-activate go with --dataset", file=sys.stderr)
        return 2
    now = now or datetime.now(UTC)
    window_s = args.days * 86400.0
    journal: pd.DataFrame | None = None
    if args.journal is not None:
        try:
            journal = retrain.journal_failures(args.journal, since=now - timedelta(seconds=window_s))
        except retrain.JournalUnreadable as exc:
            print(f"sickbay train: {exc}", file=sys.stderr)
            return 2
    catalog = rules.load_catalog(args.xid_catalog or RULES_DIR / "xid-catalog.yaml")
    reader = prometheus.Reader(prometheus.ReaderSettings(url=args.from_prometheus, step_s=args.step_seconds))
    with Steps(show=not args.quiet) as steps:
        outcome = retrain.retrain(
            reader=reader,
            models_dir=args.out or Path("models"),
            window_s=window_s,
            now=now,
            failures_from_journal=journal,
            xid_classes=history.xid_classes(catalog),
            config=config_from(args),
            steps=steps,
            threads=args.threads,
            min_failures=args.min_failures,
        )
    print(json.dumps(outcome.as_dict(), indent=2, ensure_ascii=False))
    if outcome.status is retrain.Status.PROMETHEUS_UNAVAILABLE:
        return 4
    if outcome.status is retrain.Status.TOO_LITTLE_DATA:
        return 5
    return 0


def _card_fields(card: registry.ModelCard) -> dict[str, Any]:
    return {name: getattr(card, name) for name in card.__dataclass_fields__}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.predict.train", description="train a GPU risk model")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
