"""`sickbay train`'s training (`train_gate` puts the promotion gate around it): a run from datasets, and the
service's retraining run once from Prometheus (`--from-prometheus`). `commands` declares the arguments."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from app.predict import history, prometheus, registry, split
from app.predict.train import Steps, TrainConfig, evaluate_on, fit, prepare

if TYPE_CHECKING:
    from app.predict import baseline


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
        field_dropout=args.field_dropout,
        negative_rate=args.negative_rate,
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


def run_from_prometheus(
    args: argparse.Namespace,
    *,
    now: datetime | None = None,
    rules_baseline: baseline.Baseline | None = None,
    force: bool = False,
    models_dir: Path | None = None,
) -> int:
    """`--from-prometheus`: the service's retraining run, once, from the command line.

    `rules_baseline` is the baseline the challenger must beat (retrain's shipped one when None), `force`
    an operator's override, `models_dir` where `--out` defaults to (`sickbay train` passes serve's).
    """
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
            models_dir=args.out or models_dir or Path("models"),
            window_s=window_s,
            now=now,
            failures_from_journal=journal,
            xid_classes=history.xid_classes(catalog),
            config=config_from(args),
            steps=steps,
            threads=args.threads,
            min_failures=args.min_failures,
            rules=rules_baseline,
            force=force,
        )
    print(json.dumps(outcome.as_dict(), indent=2, ensure_ascii=False))
    if outcome.status is retrain.Status.PROMETHEUS_UNAVAILABLE:
        return 4
    if outcome.status is retrain.Status.TOO_LITTLE_DATA:
        return 5
    return 0


def _card_fields(card: registry.ModelCard) -> dict[str, Any]:
    return {name: getattr(card, name) for name in card.__dataclass_fields__}
