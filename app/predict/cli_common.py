"""What the predictor's commands share when they run: loading a model, times, durations, the usage error.

`commands` declares the arguments (and where `--models` defaults to); this is the other side, imported by
the commands' handlers only.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from app.config.durations import parse_duration
from app.predict import commands, registry


class Usage(Exception):
    """A bad argument or an unreadable input: exit code 2."""


def load_model(
    models: Path | None, version: str | None, *, command: str = "sickbay"
) -> registry.RiskModel | None:
    directory = commands.models_dir(models)
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
