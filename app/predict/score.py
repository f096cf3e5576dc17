"""Scoring: recent DCGM samples for all GPUs → features → calibrated probabilities → `Risk` per GPU and node.

A GPU's score is its *decision score*: the lower of its calibrated probabilities now and `sustain_s` ago
(the card's, 30 min by default; `evaluate.sustain`), the same rule the thresholds were chosen with, so a
single hot reading never raises a level. Levels: `act` when the score is at or above the act threshold
(the card's, unless the policy gives one), `warn` at or above the warn threshold, else `none`. A node's risk is the highest of its GPUs'
(`rollup="max"`, the default: a calibrated per-GPU probability stays readable) or the noisy-OR
1 - prod(1 - p) (`rollup="noisy-or"`: the chance that any GPU fails, which grows with the GPU count).

Drivers ("what drove it") use **median occlusion** on the model's log-odds: for each feature f, the
uncalibrated model's log-odds again with f replaced by its training median (stored in the card); the
driver weight is m(x) - m(x with f := median), in log-odds. It is exact for the model (no surrogate), costs
one extra prediction per feature per explained GPU (a few dozen rows, well under a millisecond), and reads
as "this feature alone lifted the risk by that much". Log-odds rather than calibrated probabilities,
because isotonic calibration is a step function: near a step every feature looks decisive. It ignores
interactions (two features that only matter together each look small), which is the honest price of
being cheap. Only GPUs at `warn` or above are explained unless `explain_all`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from app import domain
from app.predict import evaluate, features
from app.predict.registry import RiskModel

Rollup = Literal["max", "noisy-or"]


@dataclass(frozen=True, slots=True)
class Scores:
    """One scoring cycle's results; `gpus` and `nodes` sorted by descending score."""

    at: datetime
    model_version: str
    gpus: tuple[domain.Risk, ...]
    nodes: tuple[domain.Risk, ...]

    def at_least(self, level: domain.RiskLevel) -> tuple[domain.Risk, ...]:
        rank = _RANK[level]
        return tuple(r for r in self.nodes if _RANK[r.level] >= rank)


_RANK = {domain.RiskLevel.NONE: 0, domain.RiskLevel.WARN: 1, domain.RiskLevel.ACT: 2}


def level_of(score: float, *, warn: float, act: float) -> domain.RiskLevel:
    if score >= act:
        return domain.RiskLevel.ACT
    if score >= warn:
        return domain.RiskLevel.WARN
    return domain.RiskLevel.NONE


def occlusion_drivers(
    model: RiskModel, x: npt.NDArray[np.float32], *, top: int
) -> list[tuple[tuple[str, float], ...]]:
    """Per row of `x`, the `top` features whose replacement by the training median lowers the log-odds most."""
    names = features.FEATURES
    medians = np.array(
        [
            np.nan if model.card.feature_medians.get(n) is None else model.card.feature_medians[n]
            for n in names
        ],
        dtype=np.float32,
    )
    k = len(names)
    out: list[tuple[tuple[str, float], ...]] = []
    if len(x) == 0:
        return out
    # One batch: for each row, k copies with one feature each set to its median.
    batch = np.repeat(x, k, axis=0)
    cols = np.tile(np.arange(k), len(x))
    batch[np.arange(len(batch)), cols] = medians[cols]
    occluded = model.margin(batch).reshape(len(x), k)
    deltas = model.margin(x)[:, None] - occluded
    for row in range(len(x)):
        order = np.argsort(-deltas[row])[:top]
        out.append(tuple((names[i], round(float(deltas[row, i]), 4)) for i in order if deltas[row, i] > 0))
    return out


def _latest_pairs(table: pd.DataFrame) -> pd.DataFrame:
    """Each GPU's first and last row of the table (the rows `sustain_s` apart, and now)."""
    ordered = table.sort_values(["node", "gpu", "uuid", "timestamp"], kind="stable")
    grouped = ordered.groupby(["node", "gpu", "uuid"], sort=False, observed=True)
    firsts, lasts = grouped.head(1), grouped.tail(1)
    return pd.concat([firsts, lasts]).drop_duplicates().sort_values(["node", "gpu", "uuid", "timestamp"])


def score_features(
    table: pd.DataFrame,
    model: RiskModel,
    *,
    now: datetime,
    warn: float | None = None,
    act: float | None = None,
    top: int = 3,
    explain_all: bool = False,
    rollup: Rollup = "max",
) -> Scores:
    """Risks from a features table (`features.KEY_COLUMNS` + `features.FEATURES`): each GPU's rows of
    the last `sustain_s` (or just its last row, which then cannot be sustained: score 0)."""
    warn_t = model.card.warn if warn is None else warn
    act_t = model.card.act if act is None else act
    pairs = _latest_pairs(table).reset_index(drop=True)
    x_all = pairs[list(features.FEATURES)].to_numpy(dtype=np.float32)
    p_all = model.predict(x_all)
    decided = evaluate.sustain(pairs[list(features.KEY_COLUMNS)], p_all, sustain_s=model.card.sustain_s)
    last = (
        pairs.groupby(["node", "gpu", "uuid"], sort=False, observed=True)["timestamp"]
        .transform("max")
        .to_numpy()
        == pairs["timestamp"].to_numpy()
    )
    table = pairs.loc[last].reset_index(drop=True)
    x = x_all[last]
    p = decided[last]
    levels = [level_of(float(v), warn=warn_t, act=act_t) for v in p]
    explain = np.array([explain_all or lv is not domain.RiskLevel.NONE for lv in levels], dtype=bool)
    drivers: list[tuple[tuple[str, float], ...]] = [()] * len(p)
    if explain.any():
        idx = np.flatnonzero(explain)
        for i, found in zip(idx, occlusion_drivers(model, x[idx], top=top), strict=True):
            drivers[int(i)] = found
    version = model.card.version
    nodes = table["node"].astype(str).to_numpy()
    gpus = table["gpu"].to_numpy()
    gpu_risks = [
        domain.Risk(
            node=str(nodes[i]),
            gpu=int(gpus[i]),
            score=round(float(p[i]), 6),
            level=levels[i],
            model_version=version,
            at=now,
            drivers=drivers[i],
        )
        for i in range(len(p))
    ]
    node_risks = _roll_up(gpu_risks, warn=warn_t, act=act_t, rollup=rollup, version=version, now=now)
    gpu_risks.sort(key=lambda r: (-r.score, r.node, r.gpu or 0))
    return Scores(at=now, model_version=version, gpus=tuple(gpu_risks), nodes=node_risks)


def _roll_up(
    risks: Sequence[domain.Risk], *, warn: float, act: float, rollup: Rollup, version: str, now: datetime
) -> tuple[domain.Risk, ...]:
    by_node: dict[str, list[domain.Risk]] = {}
    for risk in risks:
        by_node.setdefault(risk.node, []).append(risk)
    out: list[domain.Risk] = []
    for node, members in by_node.items():
        worst = max(members, key=lambda r: r.score)
        if rollup == "noisy-or":
            score = 1.0 - float(np.prod([1.0 - r.score for r in members]))
        else:
            score = worst.score
        drivers = tuple((f"gpu{worst.gpu}:{name}", weight) for name, weight in worst.drivers)
        out.append(
            domain.Risk(
                node=node,
                gpu=worst.gpu,
                score=round(score, 6),
                level=level_of(score, warn=warn, act=act),
                model_version=version,
                at=now,
                drivers=drivers,
            )
        )
    out.sort(key=lambda r: (-r.score, r.node))
    return tuple(out)


def current_boards(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of the UUID last seen present in each (host, gpu) slot; the frame as is without UUIDs."""
    host = features.host_column(frame)
    uuid = "uuid" if "uuid" in frame.columns else "UUID" if "UUID" in frame.columns else None
    if host is None or uuid is None or "gpu" not in frame.columns or frame.empty:
        return frame
    boards = frame[[host, "gpu", uuid]].drop_duplicates()
    if not boards.duplicated([host, "gpu"]).any():
        return frame  # one board per slot: nothing was replaced
    if "present" in frame.columns:
        present = pd.to_numeric(frame["present"], errors="coerce").fillna(0).to_numpy() > 0
    else:
        values = [c for c in frame.columns if c.startswith("DCGM_")]
        present = frame[values].notna().any(axis=1).to_numpy()
    seen = pd.DataFrame(
        {
            "host": frame[host].astype(str).to_numpy(),
            "gpu": frame["gpu"].to_numpy(),
            "uuid": frame[uuid].astype(str).to_numpy(),
            "t": np.where(present, features.timestamps(frame), -np.inf),
        }
    )
    latest = seen.groupby(["host", "gpu", "uuid"], sort=False)["t"].max().reset_index()
    current = latest.loc[latest.groupby(["host", "gpu"], sort=False)["t"].idxmax(), ["host", "gpu", "uuid"]]
    marked = seen[["host", "gpu", "uuid"]].merge(current.assign(current=True), how="left")
    return frame.loc[marked["current"].fillna(False).to_numpy(dtype=bool)]


def score_frame(
    frame: pd.DataFrame,
    model: RiskModel,
    *,
    now: datetime,
    warn: float | None = None,
    act: float | None = None,
    top: int = 3,
    explain_all: bool = False,
    rollup: Rollup = "max",
) -> Scores:
    """Risks from recent samples (the features' input frame): each GPU's latest row is scored.

    Only the board now in each slot is scored: a replaced board's old UUID (whose series the reader keeps,
    as missing, to the end of the window) would otherwise be judged on the errors that got it replaced.
    """
    table = features.compute_features(current_boards(frame), tail_s=model.card.sustain_s)
    return score_features(
        table, model, now=now, warn=warn, act=act, top=top, explain_all=explain_all, rollup=rollup
    )
