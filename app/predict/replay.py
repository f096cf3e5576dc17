"""Replay: score a samples frame at every step of a range exactly as the scoring service would have.

`replay` (pure) scores a frame at every `step_s` in [start, end]: features (`features.compute_features`),
calibrated probabilities, the decision score min(p(t), p(t - sustain_s)) — the pair `score.score_frame`
takes — and levels by the thresholds (the card's unless given), held on the way down by the service's
own hysteresis (`hysteresis.hold_levels`, the step `service.ScoringService` runs; each step is one
scoring cycle). Only the board in a slot at the time counts (the UUID last seen present at or before t,
`score.current_boards`' rule, applied at each instant): a replaced board's old series is not judged
after it left. It keeps every GPU's score series and the *alarms*: runs of consecutive act-level scoring
steps of one GPU, with the features that drove the first flag (`score.occlusion_drivers`). A GPU's alarm
holds its node at act (NoSchedule): the service rolls nodes up with the max.

With `rules` (`baseline`), the rules baseline is replayed in the same pass on the same feature rows, steps
and hysteresis, its alarms' drivers the rules that fired: `Replay.baseline`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import baseline, features, score
from app.predict.hysteresis import LEVEL_ACT, Hysteresis, gpu_sorted, hold_levels
from app.predict.model_card import RiskModel

HOUR = 3600.0
DEFAULT_NODE_BATCH = 25
SCORE_COLUMNS = ("node", "gpu", "uuid", "timestamp", "p", "score", "level")
ALARM_COLUMNS = ("node", "gpu", "uuid", "first", "last", "steps", "peak", "drivers")
Drivers = Callable[[npt.NDArray[np.int64]], Sequence[tuple[tuple[str, float], ...]]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Replay:
    """What the service would have seen: per-GPU scores at each step, alarms, counter resets.

    `scores`: `SCORE_COLUMNS` — p the calibrated probability, score the decision score, level 0/1/2
    (none/warn/act, `LEVELS`) as the hysteresis holds it. `alarms`: `ALARM_COLUMNS` — first/last flagged step, steps flagged, the peak score and
    the drivers of the first flag (a tuple of (feature, log-odds lift)). `resets`: (node, time) of
    counter resets seen (reboots, GPU resets, a new board): the repairs when no truth says otherwise.
    """

    start: float
    end: float
    step_s: float
    model_version: str
    warn: float
    act: float
    hold: Hysteresis
    sustain_s: float
    horizon_s: float
    scores: pd.DataFrame
    alarms: pd.DataFrame
    resets: pd.DataFrame
    samples_from: float = float("nan")
    # The rules baseline replayed in the same pass (scores 0/1, drivers the rules that fired), or None.
    baseline: Replay | None = None
    # Rules of the baseline the frame could not evaluate (a feature it lacks).
    baseline_skipped: tuple[str, ...] = ()

    @property
    def nodes(self) -> int:
        return int(self.scores["node"].nunique())

    def gpus_per_node(self) -> dict[str, int]:
        """GPU slots per node (distinct indices seen)."""
        counts = self.scores.groupby("node", observed=True)["gpu"].nunique()
        return {str(k): int(v) for k, v in counts.items()}

    def node_risk(self) -> pd.DataFrame:
        """Per node and step, the highest decision score of its GPUs (the `max` roll-up)."""
        return (
            self.scores.groupby(["node", "timestamp"], observed=True, sort=True)["score"].max().reset_index()
        )


def replay(
    frame: pd.DataFrame,
    model: RiskModel,
    *,
    start: float,
    end: float,
    step_s: float,
    warn: float | None = None,
    act: float | None = None,
    hold: Hysteresis | None = None,
    top: int = 3,
    node_chunk: int = DEFAULT_NODE_BATCH,
    rules: baseline.Baseline | None = None,
) -> Replay:
    """Score `frame` (samples with history before `start`) at every multiple of `step_s` in [start, end].

    Samples must lie on a grid the steps fall on (Prometheus' range reads do). Each step is one scoring
    cycle; `hold` is the service's hysteresis on the way down (none: levels as scored). Nodes are
    featurised `node_chunk` at a time (peers stay together), so a large frame needs no more memory than a
    chunk. With `rules`, the baseline is replayed on the same features, steps and hysteresis (`baseline`).
    """
    if step_s <= 0 or end < start:
        raise ValueError("need step_s > 0 and end >= start")
    card = model.card
    warn_t = card.warn if warn is None else warn
    act_t = card.act if act is None else act
    hold = hold or Hysteresis()
    host = features.host_column(frame)
    parts: list[_Part] = []
    base_parts: list[_Part] = []
    skipped: tuple[str, ...] = ()
    if host is not None and len(frame):
        names = frame[host].astype(str)
        unique = np.sort(names.unique())
        for i in range(0, len(unique), max(1, node_chunk)):
            chunk = frame.loc[names.isin(unique[i : i + node_chunk]).to_numpy()]
            part, base, skipped = _replay_chunk(
                chunk,
                model,
                start=start,
                end=end,
                step_s=step_s,
                warn=warn_t,
                act=act_t,
                hold=hold,
                top=top,
                rules=rules,
            )
            parts.append(part)
            if base is not None:
                base_parts.append(base)
    samples_from = float(np.nanmin(features.timestamps(frame))) if len(frame) else float("nan")
    resets = _drop_start_resets(_concat([p.resets for p in parts], ("node", "time")), samples_from)
    rules_replay = None
    if rules is not None:
        rules_replay = Replay(
            start=start,
            end=end,
            step_s=step_s,
            model_version=rules.version,
            warn=baseline.THRESHOLD,
            act=baseline.THRESHOLD,
            hold=hold,
            sustain_s=0.0,
            horizon_s=card.horizon_s,
            scores=_concat([p.scores for p in base_parts], SCORE_COLUMNS),
            alarms=_concat([p.alarms for p in base_parts], ALARM_COLUMNS),
            resets=resets,
            samples_from=samples_from,
        )
    return Replay(
        start=start,
        end=end,
        step_s=step_s,
        model_version=card.version,
        warn=warn_t,
        act=act_t,
        hold=hold,
        sustain_s=card.sustain_s,
        horizon_s=card.horizon_s,
        scores=_concat([p.scores for p in parts], SCORE_COLUMNS),
        alarms=_concat([p.alarms for p in parts], ALARM_COLUMNS),
        resets=resets,
        samples_from=samples_from,
        baseline=rules_replay,
        baseline_skipped=skipped,
    )


def concat(parts: Sequence[Replay]) -> Replay:
    """One replay from replays of disjoint node batches over the same range."""
    if not parts:
        raise ValueError("nothing to concatenate")
    first = parts[0]
    return Replay(
        start=first.start,
        end=first.end,
        step_s=first.step_s,
        model_version=first.model_version,
        warn=first.warn,
        act=first.act,
        hold=first.hold,
        sustain_s=first.sustain_s,
        horizon_s=first.horizon_s,
        scores=_concat([p.scores for p in parts], SCORE_COLUMNS),
        alarms=_concat([p.alarms for p in parts], ALARM_COLUMNS),
        resets=_concat([p.resets for p in parts], ("node", "time")),
        samples_from=float(np.nanmin([p.samples_from for p in parts])),
        baseline=None
        if any(p.baseline is None for p in parts)
        else concat([p.baseline for p in parts if p.baseline is not None]),
        baseline_skipped=first.baseline_skipped,
    )


@dataclass(frozen=True, slots=True)
class _Part:
    scores: pd.DataFrame
    alarms: pd.DataFrame
    resets: pd.DataFrame


def _concat(frames: Sequence[pd.DataFrame], columns: Sequence[str]) -> pd.DataFrame:
    kept = [f for f in frames if len(f)]
    if not kept:
        return pd.DataFrame(
            {c: pd.Series(dtype=object if c in ("node", "uuid", "drivers") else float) for c in columns}
        )
    return pd.concat(kept, ignore_index=True)[list(columns)]


def _feature_every(step_s: float, sustain_s: float, sample_s: float) -> float:
    """The coarsest feature grid holding every scoring instant and the instant sustain_s before it."""
    every = math.gcd(round(step_s), round(sustain_s)) if sustain_s > 0 else round(step_s)
    return float(max(every, sample_s, 1.0))


def _sample_step(t: npt.NDArray[np.float64]) -> float:
    instants = np.unique(t[np.isfinite(t)])
    return float(np.median(np.diff(instants))) if instants.size > 1 else 0.0


def _replay_chunk(
    frame: pd.DataFrame,
    model: RiskModel,
    *,
    start: float,
    end: float,
    step_s: float,
    warn: float,
    act: float,
    hold: Hysteresis,
    top: int,
    rules: baseline.Baseline | None,
) -> tuple[_Part, _Part | None, tuple[str, ...]]:
    sustain = model.card.sustain_s
    every = _feature_every(step_s, sustain, _sample_step(features.timestamps(frame)))
    table = features.compute_features(frame, every_s=every)
    for column in ("node", "uuid"):
        table[column] = table[column].astype(str)
    resets = _resets(table)
    t = table["timestamp"].to_numpy(dtype=np.float64)
    first_step = math.ceil(start / step_s) * step_s
    # The rules' sustain windows reach further back than the model's: fire them before the cut.
    fired = baseline.fire(rules, table) if rules is not None else None
    window = (t >= first_step - sustain - 1.0) & (t <= end)
    table = table.loc[window].reset_index(drop=True)
    t = table["timestamp"].to_numpy(dtype=np.float64)
    x = table[list(features.FEATURES)].to_numpy(dtype=np.float32)
    p = model.predict(x)
    decided = _sustained(table, p, sustain_s=sustain)
    on_grid = (np.abs(t - np.round(t / step_s) * step_s) < 1.0) & (t >= first_step - 1.0)
    keep = on_grid & _current_board(frame, table)
    rows = table.loc[keep, ["node", "gpu", "uuid", "timestamp"]].reset_index(drop=True)
    rows["p"] = p[keep]
    rows["score"] = decided[keep]
    rows["level"] = hold_levels(rows, warn=warn, act=act, hold=hold)
    x_kept = x[keep]
    alarms = _alarms(rows, lambda first: score.occlusion_drivers(model, x_kept[first], top=top), step_s)
    part = _Part(scores=rows, alarms=alarms, resets=resets)
    if fired is None:
        return part, None, ()
    assert rules is not None
    at = np.flatnonzero(window)[keep]
    base = table.loc[keep, ["node", "gpu", "uuid", "timestamp"]].reset_index(drop=True)
    base["p"] = fired.score[at]
    base["score"] = fired.score[at]
    base["level"] = hold_levels(base, warn=baseline.THRESHOLD, act=baseline.THRESHOLD, hold=hold)
    names = [fired.rules[i] for i in at.tolist()]
    base_alarms = _alarms(base, lambda first: [tuple((n, 1.0) for n in names[i]) for i in first], step_s)
    return part, _Part(scores=base, alarms=base_alarms, resets=resets), fired.skipped


def _sustained(
    keys: pd.DataFrame, p: npt.NDArray[np.float64], *, sustain_s: float
) -> npt.NDArray[np.float64]:
    """min(p now, p at the GPU's first row at or after t - sustain_s); 0 when that row is now itself.

    `score.score_frame`'s pair: the first and last rows of the last `sustain_s`.
    """
    if sustain_s <= 0 or len(p) == 0:
        return np.asarray(p, dtype=np.float64)
    order, group = gpu_sorted(keys)
    t = keys["timestamp"].to_numpy(dtype=np.float64)[order]
    stride = float(t.max() - t.min()) + 2 * sustain_s + 1.0
    key = group * stride + (t - t.min())
    first = np.searchsorted(group, group, side="left")
    found = np.maximum(np.searchsorted(key, key - sustain_s - 1e-6, side="left"), first)
    ranked = np.asarray(p, dtype=np.float64)[order]
    index = np.arange(len(order))
    out = np.where(found < index, np.minimum(ranked, ranked[found]), 0.0)
    result = np.empty_like(out)
    result[order] = out
    return result


def _current_board(frame: pd.DataFrame, rows: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """Per row (node, gpu, uuid, timestamp): is its board the one last seen present in the slot by then?"""
    host = features.host_column(frame)
    uuid_col = "uuid" if "uuid" in frame.columns else "UUID" if "UUID" in frame.columns else None
    everything = np.ones(len(rows), dtype=bool)
    if host is None or uuid_col is None or rows.empty:
        return everything
    node = frame[host].astype(str)
    if host == "instance":
        node = node.str.replace(r":\d+$", "", regex=True)
    slot = node + "/" + pd.to_numeric(frame["gpu"], errors="coerce").fillna(-1).astype(np.int64).astype(str)
    boards = pd.DataFrame(
        {"slot": slot.to_numpy(), "uuid": frame[uuid_col].fillna("").astype(str).to_numpy()}
    )
    if not boards.drop_duplicates().duplicated("slot").any():
        return everything  # one board per slot: nothing was replaced
    if "present" in frame.columns:
        present = pd.to_numeric(frame["present"], errors="coerce").fillna(0).to_numpy() > 0
    else:
        values = [c for c in frame.columns if c.startswith("DCGM_")]
        present = frame[values].notna().any(axis=1).to_numpy()
    seen = boards.loc[present].assign(t=features.timestamps(frame)[present])
    seen = seen.rename(columns={"uuid": "current"}).sort_values("t", kind="stable")
    asked = pd.DataFrame(
        {
            "slot": (rows["node"].astype(str) + "/" + rows["gpu"].astype(np.int64).astype(str)).to_numpy(),
            "uuid": rows["uuid"].astype(str).to_numpy(),
            "t": rows["timestamp"].to_numpy(dtype=np.float64),
            "row": np.arange(len(rows)),
        }
    ).sort_values("t", kind="stable")
    joined = pd.merge_asof(asked, seen, on="t", by="slot", direction="backward")
    current = joined["current"].isna() | (joined["current"] == joined["uuid"])
    out = np.empty(len(rows), dtype=bool)
    out[joined["row"].to_numpy()] = current.to_numpy()
    return out


def _resets(table: pd.DataFrame) -> pd.DataFrame:
    """Counter resets per node, read off `hours_since_reset` (capped values say nothing)."""
    hours = table["hours_since_reset"].to_numpy(dtype=np.float64)
    known = np.isfinite(hours) & (hours < features.MAX_HOURS_SINCE_RESET - 0.01)
    if not known.any():
        return pd.DataFrame({"node": pd.Series(dtype=object), "time": pd.Series(dtype=float)})
    at = table["timestamp"].to_numpy(dtype=np.float64)[known] - hours[known] * HOUR
    # Hours are float32: round to the minute, then keep one per node and instant.
    out = pd.DataFrame({"node": table["node"].to_numpy()[known], "time": np.round(at / 60.0) * 60.0})
    return out.drop_duplicates().sort_values(["node", "time"], kind="stable").reset_index(drop=True)


def _drop_start_resets(resets: pd.DataFrame, samples_from: float) -> pd.DataFrame:
    """A series' first sample reads as a reset; at the start of the read it is just the window's edge."""
    if resets.empty or not np.isfinite(samples_from):
        return resets
    return resets.loc[resets["time"] > samples_from + 600.0].reset_index(drop=True)


def _alarms(rows: pd.DataFrame, explain: Drivers, step_s: float) -> pd.DataFrame:
    """Runs of consecutive act-level steps per GPU, with the drivers of each run's first flag
    (`explain(row indices of the first flags)`: per first flag, (feature or rule, weight) pairs)."""
    if rows.empty:
        return _concat([], ALARM_COLUMNS)
    order, group = gpu_sorted(rows)
    t = rows["timestamp"].to_numpy(dtype=np.float64)[order]
    flagged = (rows["level"].to_numpy() == LEVEL_ACT)[order]
    continues = np.zeros(len(order), dtype=bool)
    continues[1:] = (group[1:] == group[:-1]) & flagged[:-1] & (t[1:] - t[:-1] <= 1.5 * step_s)
    starts = flagged & ~continues
    if not starts.any():
        return _concat([], ALARM_COLUMNS)
    run = np.cumsum(starts) - 1
    member = np.flatnonzero(flagged)
    scores = rows["score"].to_numpy(dtype=np.float64)[order]
    table = pd.DataFrame({"run": run[member], "t": t[member], "score": scores[member]})
    agg = table.groupby("run", sort=True).agg(
        first=("t", "min"), last=("t", "max"), steps=("t", "size"), peak=("score", "max")
    )
    first_rows = order[starts]
    drivers = explain(first_rows)
    out = rows.iloc[first_rows][["node", "gpu", "uuid"]].reset_index(drop=True)
    out["first"] = agg["first"].to_numpy()
    out["last"] = agg["last"].to_numpy()
    out["steps"] = agg["steps"].to_numpy(dtype=np.int64)
    out["peak"] = agg["peak"].to_numpy()
    out["drivers"] = pd.Series(list(drivers), dtype=object)
    ordered: pd.DataFrame = out[list(ALARM_COLUMNS)]
    return ordered


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a frame as dicts keyed by column name."""
    return [{str(k): v for k, v in row.items()} for row in frame.to_dict("records")]
