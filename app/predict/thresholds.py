"""Choosing the `act` and `warn` thresholds on validation scores: the lowest threshold whose flagged rows and
alarms reach a precision target within a false-alarm budget."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.predict import evaluate, labels


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
