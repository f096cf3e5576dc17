"""What `sickbay train|evaluate|score|backtest|models` run (`commands` declares their arguments).

Each `run_<command>(args)` sends logs to stderr and runs the command: `train_gate` trains behind the
promotion gate, `backtest_cli` replays a range, evaluate, score and models are here. Output: JSON on
stdout (`--json`, or `--format json` for backtest) or a rich table; progress and logs on stderr.

Exit codes: 0 done, 1 nothing to work on (no GPU series in the range), 2 bad arguments or unreadable
inputs, 3 no usable model, 4 Prometheus unreachable, 5 too little data to retrain, 6 trained but kept
from becoming current by the promotion gate.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from app.predict import (
    backtest_cli,
    commands,
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
from app.predict import cli_common as common


def run_train(args: argparse.Namespace) -> int:
    """`sickbay train`: a model from datasets, made current only if it beats the rules baseline."""
    _log_to_stderr()
    return train_gate.run(args)


def run_backtest(args: argparse.Namespace) -> int:
    """`sickbay backtest`: a Prometheus range replayed as the scoring service would have, judged, priced."""
    _log_to_stderr()
    return backtest_cli.run_backtest(args)


def run_evaluate(args: argparse.Namespace) -> int:
    """`sickbay evaluate`: metrics of a model over whole datasets (every GPU counts as unseen)."""
    _log_to_stderr()
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


def run_score(args: argparse.Namespace) -> int:
    """`sickbay score`: the top-risk nodes or GPUs now (Prometheus) or at a dataset's time."""
    _log_to_stderr()
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


def run_models(args: argparse.Namespace) -> int:
    """`sickbay models`: the versions in a models directory (current and previous marked), or a rollback."""
    _log_to_stderr()
    args.models = commands.models_dir(args.models)
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


def _log_to_stderr() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
