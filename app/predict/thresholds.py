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


def allowed_false_alarms(fa_budget: float, node_days: float) -> int:
    """The whole number of false alarms a budget (per 1,000 node-days) allows over `node_days`: the
    nearest count, and at least one when the budget is positive.

    Rounding down made it zero under 1,000 node-days, and then the lowest acceptable threshold was the
    score of the single highest-scoring negative on the validation fleets — one GPU, an order statistic,
    not a rate. On the protocol's 923 validation node-days that put `act` at 0.675 and cost 40-80% of the
    recall on every held-out fleet while removing no false alarm there (issue 12's protocol, 2026-12-01).
    """
    if fa_budget <= 0:
        return 0
    return max(1, int(np.floor(fa_budget * node_days / 1000.0 + 0.5)))


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
    allowed = allowed_false_alarms(fa_budget, evaluate.node_days(data.keys))
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
