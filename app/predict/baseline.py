"""The rules baseline: a few readable threshold rules (`rules/prediction-baseline.yaml`) a model must beat.

The rules read the same features frame the model scores (`features.compute_features`: `KEY_COLUMNS` then
feature columns), so the backtest runs them in the same pass (`replay`) and the promotion gate
(`promotion`) scores them on the same holdout rows as the model. A rule fires on a row when its feature
is at or above `above` (times the GPU's own `relative_to` column when given) and its floor column at or
above `at_least`; it must hold on every row of the GPU's last `sustain` (`evaluate.sustain`). A row's
baseline score is 1 when any rule fires, else 0: one threshold, 0.5, for warn and act alike.

A rule whose columns the frame lacks is skipped (`Baseline.missing`), never read as zero: a NaN feature
(a field the fleet does not export) never fires either. Loading is pydantic (`load`), evaluating is pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

from app.config import errors
from app.config.durations import Duration
from app.config.settings import RULES_DIR
from app.predict import evaluate

DEFAULT_FILE = RULES_DIR / "prediction-baseline.yaml"
THRESHOLD = 0.5  # the baseline's scores are 0 or 1
VERSION_PREFIX = "rules:"


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    feature: str = Field(min_length=1)
    above: float
    relative_to: str | None = None
    at_least: float | None = None
    at_least_feature: str | None = None  # the column `at_least` applies to (default: `feature`)
    sustain: Duration = timedelta(0)
    why: str = Field(min_length=1)

    @property
    def columns(self) -> tuple[str, ...]:
        extra = (self.relative_to, self.at_least_feature)
        return (self.feature, *(c for c in extra if c is not None))


class Baseline(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: tuple[Rule, ...] = Field(min_length=1)
    name: str = "prediction-baseline"

    @pydantic.model_validator(mode="after")
    def _distinct(self) -> Baseline:
        names = [r.name for r in self.rules]
        if len(set(names)) != len(names):
            raise ValueError("rule names must be distinct")
        return self

    @property
    def version(self) -> str:
        """What the backtest and the promotion record call it, beside a model version."""
        return VERSION_PREFIX + self.name

    def missing(self, columns: Sequence[str]) -> tuple[str, ...]:
        """The rules this frame cannot evaluate (a column they read is absent)."""
        have = set(columns)
        return tuple(r.name for r in self.rules if not set(r.columns) <= have)


def load(path: Path = DEFAULT_FILE) -> Baseline:
    """The baseline rules file; `ConfigError` names what is wrong."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise errors.ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise errors.ConfigError(f"{path} is not valid YAML: {exc}") from None
    try:
        baseline = Baseline.model_validate(data)
    except pydantic.ValidationError as exc:
        raise errors.describe(exc, source=path) from None
    return baseline.model_copy(update={"name": path.stem}) if "name" not in (data or {}) else baseline


@dataclass(frozen=True, slots=True)
class Firing:
    """Per row of the frame: the baseline score (0/1) and the rules that fired (a tuple of names)."""

    score: npt.NDArray[np.float64]
    rules: tuple[tuple[str, ...], ...]
    skipped: tuple[str, ...]


def fire(baseline: Baseline, table: pd.DataFrame) -> Firing:
    """Evaluate every rule on `table` (node, gpu, uuid, timestamp and feature columns)."""
    n = len(table)
    skipped = baseline.missing(list(table.columns))
    keys = table[["node", "gpu", "uuid", "timestamp"]]
    fired: list[tuple[str, npt.NDArray[np.bool_]]] = []
    for rule in baseline.rules:
        if rule.name in skipped or n == 0:
            continue
        raw = condition(rule, table)
        held = evaluate.sustain(keys, raw.astype(np.float64), sustain_s=rule.sustain.total_seconds())
        fired.append((rule.name, held >= 1.0))
    any_fired = np.zeros(n, dtype=bool)
    for _, mask in fired:
        any_fired |= mask
    names: list[tuple[str, ...]] = [()] * n
    for i in np.flatnonzero(any_fired).tolist():
        names[i] = tuple(name for name, mask in fired if mask[i])
    return Firing(score=any_fired.astype(np.float64), rules=tuple(names), skipped=skipped)


def condition(rule: Rule, table: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """The rule's threshold per row, before its sustain window (NaN never fires)."""
    value = table[rule.feature].to_numpy(dtype=np.float64)
    limit = np.full(len(table), rule.above, dtype=np.float64)
    if rule.relative_to is not None:
        limit = rule.above * table[rule.relative_to].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = value >= limit
        if rule.at_least is not None:
            floor_of = table[rule.at_least_feature or rule.feature].to_numpy(dtype=np.float64)
            ok &= floor_of >= rule.at_least
    return np.asarray(ok & np.isfinite(value), dtype=bool)


def holdout_scores(baseline: Baseline, data: evaluate.EvalSet, feature_names: Sequence[str]) -> Firing:
    """The baseline on an evaluation set whose `x` columns are `feature_names` (the promotion gate)."""
    table = data.keys.reset_index(drop=True).copy()
    table[list(feature_names)] = pd.DataFrame(data.x, columns=list(feature_names))
    return fire(baseline, table)
