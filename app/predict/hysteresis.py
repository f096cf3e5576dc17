"""The hold on the way down, one implementation for the scoring service and the backtest.

A level goes **up** at once, and comes **down** only after `clear_after` consecutive scored cycles in
which the score is below that level's threshold less `clear_margin` of it (act: below
act * (1 - clear_margin)). It then drops to the highest level all those cycles still held (warn if any of
them stayed at or above warn * (1 - margin), else none). A cycle back inside the margin starts the count
again. So a score hovering at a threshold never flaps a node's taint.

`settle` is the step: `service.ScoringService` runs it per node and cycle, `hold_levels` per GPU over a
replayed score series (`replay`), so both say the same levels for the same scores. Pure (numpy, pandas).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

LEVEL_NONE, LEVEL_WARN, LEVEL_ACT = 0, 1, 2
LEVELS = ("none", "warn", "act")  # the names of the level codes


@dataclass(frozen=True, slots=True, kw_only=True)
class Hysteresis:
    """The policy's `prediction.clear_margin` and `clear_after` (cycles). The defaults hold nothing."""

    clear_margin: float = 0.0
    clear_after: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.clear_margin < 1.0 or self.clear_after < 1:
            raise ValueError("need 0 <= clear_margin < 1 and clear_after >= 1")

    @property
    def holds(self) -> bool:
        return self.clear_after > 1 or self.clear_margin > 0.0


@dataclass(frozen=True, slots=True)
class Held:
    """One series' state: its level, the cycles in a row below that level's clear line, and the highest
    level those cycles still reached (what it falls to)."""

    level: int = LEVEL_NONE
    below: int = 0
    best: int = LEVEL_NONE


RESTING = Held()


def settle(state: Held, raw: int, kept: int, *, clear_after: int) -> Held:
    """The state after one cycle whose score has level `raw` at the thresholds and `kept` at the clear lines
    (the thresholds less the margin; `kept >= raw`)."""
    if raw >= state.level:
        return Held(raw)
    if kept >= state.level:  # inside the margin: not falling (any more)
        return Held(state.level)
    below, best = state.below + 1, max(state.best, kept)
    if below < clear_after:
        return Held(state.level, below, best)
    return Held(best)


def levels_of(scores: npt.NDArray[np.float64], *, warn: float, act: float) -> npt.NDArray[np.int8]:
    """0/1/2 (none/warn/act) per score, as `score.level_of`."""
    return np.where(scores >= act, LEVEL_ACT, np.where(scores >= warn, LEVEL_WARN, LEVEL_NONE)).astype(
        np.int8
    )


def clear_lines(warn: float, act: float, hold: Hysteresis) -> tuple[float, float]:
    """The thresholds a held level must fall below to count a cycle as clear."""
    keep = 1.0 - hold.clear_margin
    return warn * keep, act * keep


def hold_levels(rows: pd.DataFrame, *, warn: float, act: float, hold: Hysteresis) -> npt.NDArray[np.int8]:
    """Each row's level (rows: node, gpu, uuid, timestamp, score) with `settle` run per GPU in time order."""
    scores = rows["score"].to_numpy(dtype=np.float64)
    raw = levels_of(scores, warn=warn, act=act)
    if not hold.holds or not len(rows):
        return raw
    warn_line, act_line = clear_lines(warn, act, hold)
    kept = levels_of(scores, warn=warn_line, act=act_line)
    order, group = gpu_sorted(rows)
    out = raw.copy()
    # Only GPUs that ever rose above none can be held; a plain loop over their rows in time order.
    risen = np.unique(group[raw[order] > LEVEL_NONE])
    bounds = np.searchsorted(group, np.stack([risen, risen + 1]))
    raw_list, kept_list = raw.tolist(), kept.tolist()
    for lo, hi in bounds.T:
        state = RESTING
        for i in order[lo:hi].tolist():
            state = settle(state, raw_list[i], kept_list[i], clear_after=hold.clear_after)
            out[i] = state.level
    return out


def gpu_sorted(keys: pd.DataFrame) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Row order by (node, gpu, uuid, time) and each sorted row's GPU group number."""
    node = pd.factorize(keys["node"])[0]
    uuid = pd.factorize(keys["uuid"])[0]
    gpu = keys["gpu"].to_numpy(dtype=np.int64)
    t = keys["timestamp"].to_numpy(dtype=np.float64)
    order = np.lexsort((t, uuid, gpu, node)).astype(np.int64)
    change = np.ones(len(order), dtype=bool)
    n_s, g_s, u_s = node[order], gpu[order], uuid[order]
    change[1:] = (n_s[1:] != n_s[:-1]) | (g_s[1:] != g_s[:-1]) | (u_s[1:] != u_s[:-1])
    return order, np.cumsum(change).astype(np.int64) - 1
