"""Negative down-sampling for training at fleet scale: every positive, a share `rate` of the negatives.

Pure. A fleet of 10,000 GPUs over 28 days is tens of millions of feature rows, about one in a thousand
positive: the negatives are nearly all of the memory and fitting time, and most of them say the same thing. So
training keeps every positive and a fraction `rate` of the negatives, and weighs each kept negative 1 / rate,
so the weighted training objective equals the full data's in expectation. This is the negative down-sampling
of He et al. 2014, "Practical Lessons from Predicting Clicks on Ads at Facebook" (ADKDD '14,
doi:10.1145/2648584.2648589, section 6.2), which undoes it after training without weights by the
re-calibration of section 6.3, q = p / (p + (1 - p) / w) with w the rate. We need no such correction: the kept
negatives carry their weight during fitting, and probabilities are calibrated afterwards on the validation
part, which is NEVER down-sampled (nor is the holdout) — thresholds count sustained alarms and false alarms
per node-day on every row of it — so calibration fits to the true base rate directly, which also absorbs any
bias the weighting leaves.

Which rows are down-sampled: only those that can be nothing but training (or unused) rows whatever the final
data span (`region`), judged against lower bounds of the split's time boundaries known before the features are
computed (`lower_bounds`), so validation and holdout rows are kept, every one; rows that can only be unused
(warm-up, a training node after validation: `unused`) are dropped while down-sampling. Which negatives are
kept: stratified by GPU and time — each GPU keeps `rate` of its down-sampled rows, evenly spaced in time
(systematic sampling from a seeded offset per GPU), so no GPU and no period is left out, and the choice
depends on the seed and the row only, never on how the rows were chunked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import split

# Auto rate: keep about this many rows of all the data's feature rows (every positive kept besides), a size
# `HistGradientBoostingClassifier` fits in about a minute on 2 cores; smaller data keeps every row.
AUTO_KEEP_ROWS = 4_000_000


@dataclass(frozen=True, slots=True)
class Scan:
    """A time series' size and span, known before its features are computed: rows, first and last
    instant, and the sampling step (the median gap between distinct instants; None with one instant)."""

    rows: int
    start: float
    end: float
    step_s: float | None


def scan_timestamps(batches: Iterable[npt.NDArray[np.float64]]) -> Scan:
    """The scan of timestamps arriving in batches (at most one batch and the distinct instants in memory)."""
    rows, start, end = 0, np.inf, -np.inf
    instants: set[float] = set()
    for batch in batches:
        t = np.asarray(batch, dtype=np.float64)
        t = t[np.isfinite(t)]
        if not t.size:
            continue
        rows += len(t)
        start, end = min(start, float(t.min())), max(end, float(t.max()))
        instants.update(np.unique(t).tolist())
    ordered = np.sort(np.fromiter(instants, dtype=np.float64, count=len(instants)))
    step = float(np.median(np.diff(ordered))) if ordered.size > 1 else None
    return Scan(rows=rows, start=float(start), end=float(end), step_s=step)


def auto_rate(rows: int, *, keep_rows: int = AUTO_KEEP_ROWS) -> float:
    """The share of negatives to keep for data of `rows` feature rows: 1 up to `keep_rows`, then less."""
    return 1.0 if rows <= keep_rows else keep_rows / rows


def check_rate(rate: float) -> float:
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"the negative sampling rate must be in (0, 1], not {rate}")
    return rate


def estimated_feature_rows(raw_rows: int, *, step_s: float | None, every_s: float | None) -> int:
    """Feature rows that `raw_rows` samples give on the training grid (one per GPU per `every_s`)."""
    if every_s is None or step_s is None or step_s <= 0:
        return raw_rows
    return round(raw_rows * min(1.0, step_s / every_s))


def lower_bounds(
    start: float, end: float, spec: split.SplitSpec, *, every_s: float | None
) -> split.Boundaries:
    """Boundaries no later than the final split's: the features' span starts at the samples' first
    instant (each GPU's first row is kept) and ends less than `every_s` before their last; the split's
    boundaries only move later with a later end."""
    return split.boundaries(np.array([start, end - (every_s or 0.0)]), spec)


def region(
    nodes: pd.Series,
    timestamps: npt.NDArray[np.float64],
    spec: split.SplitSpec,
    bounds: split.Boundaries,
) -> npt.NDArray[np.bool_]:
    """Rows that `split.assign` can only make TRAIN or NONE: before the train part's end on a training
    node, before the validation part's end on a holdout node."""
    held = split.holdout_nodes(nodes, fraction=spec.holdout_node_fraction, salt=spec.salt)
    t = np.asarray(timestamps, dtype=np.float64)
    return np.where(held, t < bounds.validation_end, t < bounds.train_end)


def upper_bounds(start: float, end: float, spec: split.SplitSpec) -> split.Boundaries:
    """Boundaries no earlier than the final split's: the features' span lies within the samples'."""
    return split.boundaries(np.array([start, end]), spec)


def unused(
    nodes: pd.Series,
    timestamps: npt.NDArray[np.float64],
    spec: split.SplitSpec,
    upper: split.Boundaries,
) -> npt.NDArray[np.bool_]:
    """Rows `split.assign` can only make NONE: the warm-up (its start is the samples' first instant), and
    a training node's rows after the validation part's latest possible end. Training drops them."""
    held = split.holdout_nodes(nodes, fraction=spec.holdout_node_fraction, salt=spec.salt)
    t = np.asarray(timestamps, dtype=np.float64)
    return np.asarray((t < upper.start + spec.warmup_s) | (~held & (t >= upper.validation_end)), dtype=bool)


def _unit(text: str) -> float:
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "big") / float(1 << 64)


def keep(
    keys: pd.DataFrame,
    candidate: npt.NDArray[np.bool_],
    rate: float,
    *,
    seed: int,
    salt: str,
) -> npt.NDArray[np.bool_]:
    """Which rows to keep: every non-candidate row and `rate` of each GPU's candidates, systematically:
    the j-th candidate of a GPU (in time order) is kept when floor((j + 1) r + u) > floor(j r + u), with u
    in [0, 1) drawn from the seed, the salt and the GPU (node, gpu, uuid) alone."""
    kept = np.ones(len(keys), dtype=bool)
    if rate >= 1.0 or not candidate.any():
        return kept
    rows = np.flatnonzero(candidate)
    # A GPU's code from its node's, its index's and its uuid's (factorising ints is far quicker than tuples).
    node_codes, node_names = pd.factorize(keys["node"].to_numpy()[rows].astype(str))
    uuid_codes, uuid_names = pd.factorize(keys["uuid"].to_numpy()[rows].astype(str))
    gpu = keys["gpu"].to_numpy(dtype=np.int64)[rows]
    slots = int(gpu.max()) - int(gpu.min()) + 1
    combined = (node_codes.astype(np.int64) * slots + (gpu - gpu.min())) * len(uuid_names) + uuid_codes
    codes, unique = pd.factorize(combined)
    first_row = np.zeros(len(unique), dtype=np.int64)
    first_row[codes[::-1]] = np.arange(len(codes))[::-1]
    offsets = np.array(
        [
            _unit(f"{seed}:{salt}:{node_names[node_codes[i]]}/{gpu[i]}/{uuid_names[uuid_codes[i]]}")
            for i in first_row
        ]
    )
    order = np.lexsort((keys["timestamp"].to_numpy(dtype=np.float64)[rows], codes))
    group = codes[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = group[1:] != group[:-1]
    starts = np.flatnonzero(first)
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
    u = offsets[group]
    chosen = np.floor((rank + 1) * rate + u) > np.floor(rank * rate + u)
    kept[rows[order]] = chosen
    return kept


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """How one training run down-samples: the rate, how it was chosen, and the region's bounds."""

    rate: float
    auto: bool
    estimated_rows: int
    bounds: split.Boundaries | None  # None: no row is down-sampled (rate 1, or evaluation)
    upper: split.Boundaries | None = None

    @property
    def active(self) -> bool:
        return self.rate < 1.0 and self.bounds is not None


@dataclass(frozen=True, slots=True)
class Record:
    """What down-sampling did, for the model card."""

    plan: Plan
    rows_seen: int
    region_rows: int
    region_negatives: int
    kept_negatives: int
    unused_dropped: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "rate": self.plan.rate,
            "chosen": "auto" if self.plan.auto else "config",
            "auto_keep_rows": AUTO_KEEP_ROWS,
            "estimated_feature_rows": self.plan.estimated_rows,
            "negative_weight": 1.0 / self.plan.rate,
            "rows_seen": self.rows_seen,
            "down_sampled_region_rows": self.region_rows,
            "region_negatives": self.region_negatives,
            "region_negatives_kept": self.kept_negatives,
            "unused_rows_dropped": self.unused_dropped,
            "stratified": "per GPU, evenly in time (systematic, seeded offset per GPU)",
            "calibration": "sigmoid/isotonic on the validation part, which is never down-sampled",
            "holdout": "never down-sampled",
        }


def plan(
    scans: Sequence[Scan],
    *,
    negative_rate: float | None,
    every_s: float | None,
    spec: split.SplitSpec,
    whole: bool = False,
) -> Plan:
    """The run's down-sampling: its rate (`negative_rate`, or None: auto from the feature rows the scans
    promise) and the bounds of the rows it may down-sample (none when evaluating, or at rate 1)."""
    estimated = sum(estimated_feature_rows(s.rows, step_s=s.step_s, every_s=every_s) for s in scans)
    rate = auto_rate(estimated) if negative_rate is None else check_rate(negative_rate)
    spanned = [s for s in scans if s.rows]
    bounds = upper = None
    if not whole and rate < 1.0 and spanned:
        start, end = min(s.start for s in spanned), max(s.end for s in spanned)
        bounds = lower_bounds(start, end, spec, every_s=every_s)
        upper = upper_bounds(start, end, spec)
    return Plan(rate=rate, auto=negative_rate is None, estimated_rows=estimated, bounds=bounds, upper=upper)
