"""The predictor's commands as `sickbay` mounts them: `train`, `evaluate`, `score`, `backtest`, `models`.

Arguments only, with nothing heavier than the settings below them: `app.predict.cli` runs each command
and is imported when one runs, so only these commands load pandas, scikit-learn and skops. A default
whose value lives in such a module (the rules baseline's file, the hosts per read, a cost) is None
here and resolved by the command; its help says the value.

`--models` defaults to the directory `sickbay serve` loads models from (`installed_models_dir`): the
`SICKBAY_PREDICTION__MODELS_DIR` variable, else `prediction.models_dir` in the `$SICKBAY_CONFIG` file,
else the install's `models/` — never `models/` relative to the current directory.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import yaml

from app.config.settings import CONFIG_ENV, RULES_DIR, PredictionSettings

MODELS_ENV = "SICKBAY_PREDICTION__MODELS_DIR"
TRUTH_HELP = (
    'ground truth: a dataset directory or a truth.json — {"failures": [{"id", "node", "gpu", '
    '"failure_time_ts" (Unix s), "fault_class" (reset-gpu|reboot-node|replace|...), optional '
    '"uuid", "precursor_start_ts", "mode"}], optional "ops" (repairs), "traps", "pending"} '
    "(see README, 'Backtest'); default: failures read off the XID gauge"
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, add, text in (
        ("train", add_train_arguments, "train a degradation model from simulator or Prometheus datasets"),
        ("evaluate", add_evaluate_arguments, "evaluate the current model on a dataset"),
        (
            "score",
            add_score_arguments,
            "print the current top-risk GPUs with the features that drove each score",
        ),
        (
            "backtest",
            add_backtest_arguments,
            "replay a Prometheus range: when nodes would have been flagged, and was it worth it",
        ),
        (
            "models",
            add_models_arguments,
            "list the installed risk models (current, previous) or roll back to the previous one",
        ),
    ):
        parser = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        add(parser)
        parser.set_defaults(handler=f"app.predict.cli:run_{name}")


def installed_models_dir() -> Path:
    """The models directory `sickbay serve` would load from with this environment."""
    if os.environ.get(MODELS_ENV):
        return Path(os.environ[MODELS_ENV])
    config = os.environ.get(CONFIG_ENV)
    if config:
        try:
            data = yaml.safe_load(Path(config).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            data = None  # `serve` reports a bad file; the default is the best guess here
        prediction = data.get("prediction") if isinstance(data, dict) else None
        if isinstance(prediction, dict) and prediction.get("models_dir"):
            return Path(str(prediction["models_dir"]))
    return PredictionSettings().models_dir


def models_dir(value: Path | None) -> Path:
    """`--models` as given, else the installed directory."""
    return installed_models_dir() if value is None else value


def add_models_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models",
        type=Path,
        default=None,
        help=f"models directory (default: the installed one serve uses, ${MODELS_ENV} or "
        f"prediction.models_dir in ${CONFIG_ENV}; here {installed_models_dir()})",
    )


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument(
        "--negative-rate",
        type=float,
        default=None,
        help="share of training negatives kept, each weighing 1/rate; every positive, validation and holdout "
        "row is kept (default: auto from the row count, 1 up to 4M feature rows)",
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
    gate = parser.add_argument_group("promotion gate")
    gate.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="the rules baseline a model must beat (default rules/prediction-baseline.yaml)",
    )
    gate.add_argument(
        "--force",
        action="store_true",
        help="make the model current even if it does not beat the baseline (recorded as forced)",
    )


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", type=Path, action="append", required=True, help="dataset directory")
    add_models_argument(parser)
    parser.add_argument("--version", help="a version in the models directory (default: the current one)")
    parser.add_argument(
        "--warmup-hours", type=float, default=24.0, help="data skipped at the start (default 24)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", type=Path, help="score a dataset directory at --at (default: its end)")
    source.add_argument("--prometheus", metavar="URL", help="score the fleet now from Prometheus")
    add_models_argument(parser)
    parser.add_argument("--version", help="a version in the models directory (default: the current one)")
    parser.add_argument("--at", help="ISO-8601 time to score a dataset at (default: its last sample)")
    parser.add_argument("--top", type=int, default=20, help="rows to show (default 20)")
    parser.add_argument("--gpus", action="store_true", help="show GPUs, not nodes")
    parser.add_argument("--json", action="store_true", help="JSON instead of a table")
    parser.add_argument("--lookback-hours", type=float, default=168.0, help="history read (default 168)")


def add_models_arguments(parser: argparse.ArgumentParser) -> None:
    add_models_argument(parser)
    parser.add_argument(
        "--rollback", action="store_true", help="make the previous model current again (atomic)"
    )


def add_backtest_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prometheus-url", required=True, metavar="URL", help="Prometheus (or its HTTP API)")
    parser.add_argument(
        "--start", required=True, help="ISO-8601 start of the replayed range (UTC if no zone)"
    )
    parser.add_argument("--end", required=True, help="ISO-8601 end of the replayed range")
    parser.add_argument("--step", default="30m", help="scoring interval replayed (default 30m)")
    parser.add_argument("--lookback", default="7d", help="history read before --start (default 7d)")
    parser.add_argument(
        "--resolution", help="sample step read from Prometheus (default: the model card's, else 5m)"
    )
    add_models_argument(parser)
    parser.add_argument("--version", help="a version in the models directory (default: the current one)")
    parser.add_argument(
        "--warmup",
        default="auto",
        help="history the features need before a step is scored: 'auto' (the features' longest window, "
        "7d), a duration, or 0. Scoring starts at the first sample + warm-up when that is after --start, "
        "and the output says so",
    )
    parser.add_argument("--truth", type=Path, help=TRUTH_HELP)
    parser.add_argument(
        "--xid-catalog",
        type=Path,
        default=RULES_DIR / "xid-catalog.yaml",
        help="XID classes for failures read off the XID gauge (default rules/xid-catalog.yaml)",
    )
    parser.add_argument(
        "--policy",
        type=Path,
        default=RULES_DIR / "policy.yaml",
        help="thresholds, hysteresis and proactive budget as the service uses them (default rules/policy.yaml)",
    )
    parser.add_argument("--warn", type=float, help="warn threshold (default: the policy's, else the card's)")
    parser.add_argument("--act", type=float, help="act threshold (default: the policy's, else the card's)")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="stdout format")
    parser.add_argument("--html", type=Path, metavar="PATH", help="also write an HTML report here")
    parser.add_argument(
        "--flags-out",
        type=Path,
        metavar="FILE",
        help="write every flagged scoring step (warn or act) as JSON lines: node, gpu, uuid, time, risk, level",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="rules baseline replayed beside the model (default rules/prediction-baseline.yaml)",
    )
    parser.add_argument("--no-baseline", action="store_true", help="replay the model alone")
    cost = parser.add_argument_group("costs (see app/predict/costs.py)")
    cost.add_argument("--job-gpus", type=int, default=None, help="GPUs a failure stops (8)")
    cost.add_argument("--checkpoint-interval", default="1h", help="workload checkpoint interval (1h)")
    cost.add_argument("--detect-time", default="15m", help="time to notice a failure (15m)")
    cost.add_argument("--restart-time", default="15m", help="time to restart from a checkpoint (15m)")
    cost.add_argument("--min-lead", default="1h", help="warning needed for a planned restart (1h)")
    cost.add_argument(
        "--no-budget", action="store_true", help="act on every alarm (ignore the policy's proactive budget)"
    )
    parser.add_argument("--node-batch", type=int, default=None, help="hosts per read (25)")
    parser.add_argument("--timeout", default="60s", help="per-query timeout (60s)")
    parser.add_argument("--retries", type=int, default=3, help="retries per query (3)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
