"""`sickbay train` / `python -m app.predict.train`: arguments, a training run from datasets, and the service's
retraining run once from Prometheus (`--from-prometheus`)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from app.predict import history, prometheus, registry, split
from app.predict.train import Steps, TrainConfig, evaluate_on, fit, prepare

if TYPE_CHECKING:
    from app.predict import baseline


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
    parser.add_argument(
        "--field-dropout",
        type=float,
        default=0.0,
        help="chance that a training node loses each exporter field group (default 0)",
    )
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
        field_dropout=args.field_dropout,
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.predict.train", description="train a GPU risk model")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
