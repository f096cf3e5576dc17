"""What the predictor's commands share: the installed models directory, loading a model, times, durations.

`installed_models_dir` is where `serve` loads models from (`settings.prediction.models_dir`): the
`SICKBAY_PREDICTION__MODELS_DIR` variable, else `prediction.models_dir` in the `$SICKBAY_CONFIG` file,
else the install's `models/` — never `models/` relative to the current directory.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import yaml

from app.config.durations import parse_duration
from app.config.settings import CONFIG_ENV, PredictionSettings
from app.predict import registry

MODELS_ENV = "SICKBAY_PREDICTION__MODELS_DIR"


class Usage(Exception):
    """A bad argument or an unreadable input: exit code 2."""


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


def add_models_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models",
        type=Path,
        default=None,
        help=f"models directory (default: the installed one serve uses, ${MODELS_ENV} or "
        f"prediction.models_dir in ${CONFIG_ENV}; here {installed_models_dir()})",
    )


def models_dir(value: Path | None) -> Path:
    return installed_models_dir() if value is None else value


def load_model(
    models: Path | None, version: str | None, *, command: str = "sickbay"
) -> registry.RiskModel | None:
    directory = models_dir(models)
    try:
        return registry.load(directory / version) if version else registry.load_current(directory)
    except registry.ModelUnavailable as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None


def parse_time(text: str) -> float:
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def seconds(text: str, *, name: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError:
        raise Usage(f"{name}: expected a duration like 30m, 5m, 1h or 7d, got {text!r}") from None


def instant(text: str, *, name: str) -> float:
    try:
        return parse_time(text)
    except ValueError:
        raise Usage(f"{name}: expected an ISO-8601 time, got {text!r}") from None
