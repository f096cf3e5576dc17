"""Command lines for the predictor: `train`, `evaluate`, `score`, `backtest` (what `sickbay <cmd>` runs).

Each command is a pair: `add_<cmd>_arguments(parser)` and `run_<cmd>(args) -> exit code`, so `app.cli`
can mount them as subcommands; `python -m app.predict <cmd> ...` works on its own. Output: JSON on stdout
(`--json`, or `--format json` for backtest) or a rich table; progress and logs on stderr.

Exit codes: 0 done, 1 nothing to work on (no GPU series in the range), 2 bad arguments or unreadable
inputs, 3 no usable model, 4 Prometheus unreachable.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from app.predict import cli_common as common
from app.predict import (
    coverage,
    dataset,
    features,
    prometheus,
    recent_window,
    registry,
    score,
    split,
    train,
    train_gate,
)
from app.predict.backtest_cli import add_backtest_arguments, run_backtest

__all__ = [
    "add_backtest_arguments",
    "add_evaluate_arguments",
    "add_models_arguments",
    "add_score_arguments",
    "add_train_arguments",
    "main",
    "run_backtest",
    "run_evaluate",
    "run_models",
    "run_score",
    "run_train",
]

add_train_arguments = train_gate.add_arguments
run_train = train_gate.run


# -- evaluate -------------------------------------------------------------------------------------------


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", type=Path, action="append", required=True, help="dataset directory")
    common.add_models_argument(parser)
    parser.add_argument("--version", help="a version in the models directory (default: the current one)")
    parser.add_argument(
        "--warmup-hours", type=float, default=24.0, help="data skipped at the start (default 24)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run_evaluate(args: argparse.Namespace) -> int:
    """Metrics of a model over whole datasets (every GPU counts as unseen)."""
    model = common.load_model(args.models, args.version, command="sickbay evaluate")
    if model is None:
        return 3
    config = train.TrainConfig(
        horizon_s=model.card.horizon_s,
        every_s=model.card.every_s,
        sustain_s=model.card.sustain_s,
        split=split.SplitSpec(warmup_s=args.warmup_hours * 3600.0),
    )
    with train.Steps(show=not args.quiet) as steps:
        metrics = train.evaluate_on(model, args.dataset, config, steps=steps)
    body = {"version": model.card.version, "datasets": [str(d) for d in args.dataset], **metrics.as_dict()}
    print(json.dumps(body, indent=2))
    return 0


# -- score ----------------------------------------------------------------------------------------------


def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", type=Path, help="score a dataset directory at --at (default: its end)")
    source.add_argument("--prometheus", metavar="URL", help="score the fleet now from Prometheus")
    common.add_models_argument(parser)
    parser.add_argument("--version", help="a version in the models directory (default: the current one)")
    parser.add_argument("--at", help="ISO-8601 time to score a dataset at (default: its last sample)")
    parser.add_argument("--top", type=int, default=20, help="rows to show (default 20)")
    parser.add_argument("--gpus", action="store_true", help="show GPUs, not nodes")
    parser.add_argument("--json", action="store_true", help="JSON instead of a table")
    parser.add_argument("--lookback-hours", type=float, default=168.0, help="history read (default 168)")


def run_score(args: argparse.Namespace) -> int:
    model = common.load_model(args.models, args.version, command="sickbay score")
    if model is None:
        return 3
    lookback = args.lookback_hours * 3600.0
    if args.prometheus:
        now = datetime.now(UTC)
        settings = prometheus.ReaderSettings(
            url=args.prometheus, step_s=model.card.step_s or 300.0, lookback_s=lookback
        )
        try:
            frame = recent_window.RecentWindow(prometheus.Reader(settings)).refresh(now)
        except prometheus.PrometheusUnavailable as exc:
            print(f"sickbay score: {exc}", file=sys.stderr)
            return 4
    else:
        frame = dataset.read_timeseries(args.dataset)
        stamps = features.timestamps(frame)
        end = float(stamps.max()) if args.at is None else common.parse_time(args.at)
        frame = frame.loc[(stamps > end - lookback) & (stamps <= end)]
        now = datetime.fromtimestamp(end, UTC)
    warning = coverage.warning(coverage.missing_fields(frame, model.card.features), model.card.features)
    if warning:
        print(f"sickbay score: WARNING: {warning}", file=sys.stderr)
    scores = score.score_frame(frame, model, now=now, explain_all=False)
    risks = scores.gpus if args.gpus else scores.nodes
    shown = risks[: args.top]
    if args.json:
        print(
            json.dumps(
                {
                    "at": now.isoformat(),
                    "model_version": scores.model_version,
                    "risks": [_risk(r) for r in shown],
                },
                indent=2,
            )
        )
        return 0
    table = Table(title=f"risk at {now:%Y-%m-%d %H:%M}Z (model {scores.model_version})")
    for column in ("node", "gpu", "score", "level", "what drove it"):
        table.add_column(column)
    for risk in shown:
        drivers = ", ".join(f"{name} {weight:+.2f}" for name, weight in risk.drivers)
        table.add_row(risk.node, str(risk.gpu), f"{risk.score:.3f}", risk.level.value, drivers)
    Console().print(table)
    return 0


def _risk(risk: Any) -> dict[str, Any]:
    return {
        "node": risk.node,
        "gpu": risk.gpu,
        "score": risk.score,
        "level": risk.level.value,
        "drivers": [list(d) for d in risk.drivers],
    }


# -- models ---------------------------------------------------------------------------------------------


def add_models_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_models_argument(parser)
    parser.add_argument(
        "--rollback", action="store_true", help="make the previous model current again (atomic)"
    )


def run_models(args: argparse.Namespace) -> int:
    """The versions in a models directory (current and previous marked), or a rollback."""
    args.models = common.models_dir(args.models)
    try:
        if args.rollback:
            version = registry.rollback(args.models)
            print(f"sickbay models: {version} is current again (restart or wait for the next reload)")
            return 0
        pointer = registry.read_pointer(args.models)
    except registry.ModelUnavailable as exc:
        print(f"sickbay models: {exc}", file=sys.stderr)
        return 3
    table = Table(title=f"models in {args.models}")
    for column in ("version", "role", "created", "act", "holdout precision", "recall", "PR-AUC"):
        table.add_column(column)
    for directory in sorted(p for p in args.models.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            card = registry.read_card(directory)
        except registry.ModelUnavailable:
            continue
        role = "current" if card.version == pointer["current"] else ""
        role = role or ("previous" if card.version == pointer["previous"] else "")
        holdout = card.metrics.get("holdout", {})
        table.add_row(
            card.version,
            role,
            card.created_at,
            f"{card.act:.3f}",
            _figure(holdout.get("precision")),
            _figure(holdout.get("recall")),
            _figure(holdout.get("pr_auc")),
        )
    Console().print(table)
    return 0


def _figure(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3f}"


# -- python -m app.predict ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sickbay", description="GPU failure prediction")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    for name, add, run, help_ in (
        ("train", add_train_arguments, run_train, "train a model on datasets and install it"),
        ("evaluate", add_evaluate_arguments, run_evaluate, "measure a model on datasets"),
        ("score", add_score_arguments, run_score, "score a fleet (dataset or Prometheus)"),
        ("backtest", add_backtest_arguments, run_backtest, "replay a Prometheus range and judge the alarms"),
        ("models", add_models_arguments, run_models, "list the installed models, or roll back"),
    ):
        command = sub.add_parser(name, help=help_)
        add(command)
        command.set_defaults(run=run)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    code: int = args.run(args)
    return code
