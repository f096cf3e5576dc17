"""Train / validation / holdout split by time AND by node, so the holdout is the future on unseen GPUs.

Pure. Time: the earliest period trains, the next validates (calibration and threshold), the last is held
out; each period but the last stops a horizon short of the next (an embargo), so no label of an earlier
period looks into a later one. Nodes: a stable hash of the node name puts a share of nodes (and so all of
their GPUs, and the peers their features compare with) in the holdout only — they never appear in training
or validation. The first `warmup_s` of data is skipped: its windows are not full yet.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt
import pandas as pd

DAY = 86400.0


class Part(IntEnum):
    NONE = 0
    TRAIN = 1
    VALIDATION = 2
    HOLDOUT = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitSpec:
    train_fraction: float = 0.55
    validation_fraction: float = 0.2
    holdout_node_fraction: float = 0.3
    embargo_s: float = DAY
    warmup_s: float = DAY
    salt: str = "sickbay-split-v1"

    def __post_init__(self) -> None:
        if self.train_fraction <= 0 or self.validation_fraction <= 0:
            raise ValueError("train and validation fractions must be positive")
        if self.train_fraction + self.validation_fraction >= 1:
            raise ValueError("train + validation fractions must leave time for the holdout")
        if not 0 < self.holdout_node_fraction < 1:
            raise ValueError("holdout_node_fraction must be between 0 and 1")


@dataclass(frozen=True, slots=True)
class Boundaries:
    start: float
    train_end: float
    validation_end: float
    end: float


def holdout_nodes(
    nodes: pd.Series | npt.NDArray[np.object_], *, fraction: float, salt: str
) -> npt.NDArray[np.bool_]:
    """Whether each node is a holdout node: sha256(salt/node) as a number in [0, 1) below `fraction`."""
    codes, unique = pd.factorize(pd.Series(nodes, dtype=object).astype(str))
    chosen = np.array([_unit(f"{salt}/{name}") < fraction for name in unique], dtype=bool)
    return chosen[codes]


def _unit(text: str) -> float:
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "big") / float(1 << 64)


def boundaries(timestamps: npt.NDArray[np.float64], spec: SplitSpec) -> Boundaries:
    start, end = float(np.min(timestamps)), float(np.max(timestamps))
    usable = max(0.0, end - start - spec.warmup_s)
    first = start + spec.warmup_s
    train_end = first + usable * spec.train_fraction
    validation_end = train_end + usable * spec.validation_fraction
    return Boundaries(start=start, train_end=train_end, validation_end=validation_end, end=end)


def assign(
    nodes: pd.Series | npt.NDArray[np.object_],
    timestamps: npt.NDArray[np.float64],
    spec: SplitSpec,
    *,
    edges: Boundaries | None = None,
) -> tuple[npt.NDArray[np.int8], Boundaries]:
    """The part of each row (a `Part` value) and the time boundaries used: `edges`, or those of the rows'
    span (a caller that dropped rows passes the boundaries of all of them)."""
    t = np.asarray(timestamps, dtype=np.float64)
    if t.size == 0:
        return np.zeros(0, dtype=np.int8), Boundaries(0.0, 0.0, 0.0, 0.0)
    edges = edges if edges is not None else boundaries(t, spec)
    held = holdout_nodes(nodes, fraction=spec.holdout_node_fraction, salt=spec.salt)
    warm = t >= edges.start + spec.warmup_s
    part = np.full(t.shape, Part.NONE, dtype=np.int8)
    train = warm & ~held & (t < edges.train_end - spec.embargo_s)
    validation = ~held & (t >= edges.train_end) & (t < edges.validation_end - spec.embargo_s)
    holdout = held & (t >= edges.validation_end)
    part[train] = Part.TRAIN
    part[validation] = Part.VALIDATION
    part[holdout] = Part.HOLDOUT
    return part, edges


def by_fleet(
    nodes: pd.Series | npt.NDArray[np.object_],
    timestamps: npt.NDArray[np.float64],
    validation_fleet: npt.NDArray[np.bool_],
    spec: SplitSpec,
    *,
    edges: Boundaries | None = None,
) -> tuple[npt.NDArray[np.int8], Boundaries]:
    """Whole fleets apart instead of time and nodes: every warmed-up row of a training fleet trains; a
    validation fleet's rows validate on most of its nodes and are the holdout on the others. No fleet is
    on both sides, so nothing leaks from training into calibration, thresholds or the holdout. `edges`:
    as in `assign`."""
    t = np.asarray(timestamps, dtype=np.float64)
    if t.size == 0:
        return np.zeros(0, dtype=np.int8), Boundaries(0.0, 0.0, 0.0, 0.0)
    edges = edges if edges is not None else boundaries(t, spec)
    held = holdout_nodes(nodes, fraction=spec.holdout_node_fraction, salt=spec.salt)
    warm = t >= edges.start + spec.warmup_s
    part = np.full(t.shape, Part.NONE, dtype=np.int8)
    part[warm & ~validation_fleet] = Part.TRAIN
    part[warm & validation_fleet & ~held] = Part.VALIDATION
    part[warm & validation_fleet & held] = Part.HOLDOUT
    return part, edges
