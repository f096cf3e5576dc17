"""Backtest: replay a stretch of history as if the scoring service had been running, and judge it.

Three steps, each usable alone:

1. `read_range` reads DCGM samples from Prometheus for [start - lookback, end] (the service reads a
   look-back before scoring; features need up to 7 days). `replay_range` does it in batches of hosts —
   one query per metric per batch, never one per node — and replays each batch before reading the next,
   so memory stays bounded by a batch, not by the fleet (1,600 GPUs x 21 days at 5 min is ~10M rows).
2. `replay` (pure) scores a samples frame at every `step_s` in [start, end] exactly as the service would
   have: features (`features.compute_features`), calibrated probabilities, the decision score
   min(p(t), p(t - sustain_s)) — the pair `score.score_frame` takes — and levels by the thresholds (the
   card's unless given), held on the way down by the service's hysteresis (`Hysteresis`; each step is one
   scoring cycle). Only the board in a slot at the time counts (the UUID last seen present at or before t,
   `score.current_boards`' rule, applied at each instant): a replaced board's old series is not judged
   after it left. It keeps every GPU's score series and the *alarms*: runs of consecutive act-level
   scoring steps of one GPU, with the features that drove the first flag (`score.occlusion_drivers`).
   A GPU's alarm holds its node at act (NoSchedule): the service rolls nodes up with the max.
3. `assess` (pure) judges the alarms against ground truth — a simulator's `truth.json`
   (`dataset.read_truth`: failures with precursor starts, repairs, trap GPUs) or failures read back from
   the samples (`history.from_samples`: XID gauge changes and GPUs that fell off the bus; precursors
   unknown, repairs taken from the counter resets the replay saw) — and prices them (`costs`), running the
   alarms through the proactive ladder: node holds, and the budget of nodes at act at once.

An alarm's outcome, decided at its first flag t0 on a GPU slot (node + index), with h the model horizon:
- `after-failure`: the slot failed before t0 and is not repaired (+ 1 h to settle): remediation owns it;
  neither true nor false, and it takes no capacity (the node is out either way);
- `true`: a hardware failure (reset-gpu, reboot-node, replace) hits the slot after t0 and before the
  alarm ends (one step after its last flag: the level is seen to drop then) or t0 + h, whichever is later;
- `early`: t0 falls in the known precursor of a later hardware failure of the slot (a real warning, more
  than a horizon ahead);
- `other`: a non-hardware failure (e.g. XID 94, contained ECC) follows within that window, or its known
  precursor is under way: the GPU degrades, but no hardware fault follows — as `evaluate` excludes them;
- `false`: anything else. The alarm also names the trap its GPU is (stable high SBE, noisy NVLink, hot
  rack, a buggy job's XIDs) when it is one.

Precision is true / (true + false) over alarms. A failure counts for recall and lead time when a whole
horizon of scoring precedes it (failure time > start + h, as `evaluate` has it); it is caught when a true
alarm covers it, and its lead time is the failure time minus that alarm's first flag. Costs count every
hardware failure in (start, end]. False alarms per 1,000 node-days use nodes x range days.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import costs as costing
from app.predict import dataset, evaluate, features, history, labels, prometheus, score
from app.predict.registry import RiskModel

HOUR = 3600.0
DAY = 86400.0
DEFAULT_STEP_S = 1800.0
DEFAULT_LOOKBACK_S = 7 * DAY
DEFAULT_NODE_BATCH = 25

LEVEL_NONE, LEVEL_WARN, LEVEL_ACT = 0, 1, 2
LEVELS = ("none", "warn", "act")  # the names of the level codes
SCORE_COLUMNS = ("node", "gpu", "uuid", "timestamp", "p", "score", "level")
ALARM_COLUMNS = ("node", "gpu", "uuid", "first", "last", "steps", "peak", "drivers")
OUTCOMES = ("true", "early", "other", "false", "after-failure")
TruthSource = Literal["truth", "xid", "none"]
_COMMON = (
    "precision is true / (true + false) alarms; early alarms (a known precursor under way, the failure "
    "more than a horizon ahead), other alarms (a non-hardware failure follows) and alarms after a failure "
    "count as neither",
    "recall and lead time count failures with a whole horizon of scoring before them; costs count every "
    "hardware failure in the range",
)
NOTES: Mapping[str, tuple[str, ...]] = {
    "truth": _COMMON,
    "xid": (
        *_COMMON,
        "ground truth read back from the samples: changes of the XID gauge to a hardware-class XID "
        "(per-link NVLink XIDs included) and GPUs that fell off the bus; precursors, non-hardware failures "
        "and traps are unknown, so an alarm more than a horizon ahead of its failure counts as false",
        "repairs are the counter resets the replay saw (reboots, GPU resets, new boards)",
    ),
    "none": ("no ground truth: every alarm not after a failure counts as false",),
}


# -- reading --------------------------------------------------------------------------------------------


def read_range(
    reader: prometheus.Reader,
    start: float,
    end: float,
    *,
    lookback_s: float,
    hosts: Sequence[prometheus.HostRef] = (),
) -> pd.DataFrame:
    """Samples of every source metric from `start - lookback_s` to `end` (Unix seconds), on the reader's
    step; all hosts, or only `hosts` (one batch).

    Instants before the first sample of any GPU are dropped: a look-back that reaches back before the
    history (a fresh Prometheus, a backfill) would otherwise read as days in which every GPU was missing.
    """
    frame = reader.read(_utc(start - lookback_s), _utc(end), hosts=hosts)
    present = frame["present"].to_numpy() > 0 if "present" in frame.columns else np.zeros(0, dtype=bool)
    if not present.any():
        return frame
    first = float(frame["timestamp"].to_numpy()[present].min())
    return frame.loc[frame["timestamp"].to_numpy() >= first].reset_index(drop=True)


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


# -- replaying ------------------------------------------------------------------------------------------


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
) -> Replay:
    """Score `frame` (samples with history before `start`) at every multiple of `step_s` in [start, end].

    Samples must lie on a grid the steps fall on (Prometheus' range reads do). Each step is one scoring
    cycle; `hold` is the service's hysteresis on the way down (none: levels as scored). Nodes are
    featurised `node_chunk` at a time (peers stay together), so a large frame needs no more memory than a
    chunk.
    """
    if step_s <= 0 or end < start:
        raise ValueError("need step_s > 0 and end >= start")
    card = model.card
    warn_t = card.warn if warn is None else warn
    act_t = card.act if act is None else act
    hold = hold or Hysteresis()
    host = features.host_column(frame)
    parts: list[_Part] = []
    if host is not None and len(frame):
        names = frame[host].astype(str)
        unique = np.sort(names.unique())
        for i in range(0, len(unique), max(1, node_chunk)):
            chunk = frame.loc[names.isin(unique[i : i + node_chunk]).to_numpy()]
            parts.append(
                _replay_chunk(
                    chunk,
                    model,
                    start=start,
                    end=end,
                    step_s=step_s,
                    warn=warn_t,
                    act=act_t,
                    hold=hold,
                    top=top,
                )
            )
    samples_from = float(np.nanmin(features.timestamps(frame))) if len(frame) else float("nan")
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
        resets=_drop_start_resets(_concat([p.resets for p in parts], ("node", "time")), samples_from),
        samples_from=samples_from,
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
) -> _Part:
    sustain = model.card.sustain_s
    every = _feature_every(step_s, sustain, _sample_step(features.timestamps(frame)))
    table = features.compute_features(frame, every_s=every)
    for column in ("node", "uuid"):
        table[column] = table[column].astype(str)
    resets = _resets(table)
    t = table["timestamp"].to_numpy(dtype=np.float64)
    first_step = math.ceil(start / step_s) * step_s
    table = table.loc[(t >= first_step - sustain - 1.0) & (t <= end)].reset_index(drop=True)
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
    alarms = _alarms(rows, x[keep], model, step_s=step_s, top=top)
    return _Part(scores=rows, alarms=alarms, resets=resets)


@dataclass(frozen=True, slots=True, kw_only=True)
class Hysteresis:
    """The service's hold on the way down (`service.ScoringService`, the policy's `prediction` section): a
    level rises at once and falls only after `clear_after` consecutive cycles below its threshold less
    `clear_margin` of it, to the highest level all those cycles still reached. The defaults hold nothing."""

    clear_margin: float = 0.0
    clear_after: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.clear_margin < 1.0 or self.clear_after < 1:
            raise ValueError("need 0 <= clear_margin < 1 and clear_after >= 1")


def levels_of(scores: npt.NDArray[np.float64], *, warn: float, act: float) -> npt.NDArray[np.int8]:
    """0/1/2 (none/warn/act) per score, as `score.level_of`."""
    return np.where(scores >= act, LEVEL_ACT, np.where(scores >= warn, LEVEL_WARN, LEVEL_NONE)).astype(
        np.int8
    )


def hold_levels(rows: pd.DataFrame, *, warn: float, act: float, hold: Hysteresis) -> npt.NDArray[np.int8]:
    """Each row's level (rows: node, gpu, uuid, timestamp, score) with the hysteresis applied per GPU."""
    raw = levels_of(rows["score"].to_numpy(dtype=np.float64), warn=warn, act=act)
    if (hold.clear_after <= 1 and hold.clear_margin == 0.0) or not len(rows):
        return raw
    keep = 1.0 - hold.clear_margin
    kept = levels_of(rows["score"].to_numpy(dtype=np.float64), warn=warn * keep, act=act * keep)
    order, group = _gpu_sorted(rows)
    out = raw.copy()
    # Only GPUs that ever rose above none can be held; a plain loop over their rows in time order.
    risen = np.unique(group[raw[order] > LEVEL_NONE])
    bounds = np.searchsorted(group, np.stack([risen, risen + 1]))
    for lo, hi in bounds.T:
        index = order[lo:hi]
        current, count, best = LEVEL_NONE, 0, LEVEL_NONE
        for i in index:
            if raw[i] >= current:
                current, count, best = int(raw[i]), 0, LEVEL_NONE
            elif kept[i] >= current:
                count, best = 0, LEVEL_NONE
            else:
                count, best = count + 1, max(best, int(kept[i]))
                if count >= hold.clear_after:
                    current, count, best = best, 0, LEVEL_NONE
            out[i] = current
    return out


def _gpu_sorted(keys: pd.DataFrame) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
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


def _sustained(
    keys: pd.DataFrame, p: npt.NDArray[np.float64], *, sustain_s: float
) -> npt.NDArray[np.float64]:
    """min(p now, p at the GPU's first row at or after t - sustain_s); 0 when that row is now itself.

    `score.score_frame`'s pair: the first and last rows of the last `sustain_s`.
    """
    if sustain_s <= 0 or len(p) == 0:
        return np.asarray(p, dtype=np.float64)
    order, group = _gpu_sorted(keys)
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


def _alarms(
    rows: pd.DataFrame, x: npt.NDArray[np.float32], model: RiskModel, *, step_s: float, top: int
) -> pd.DataFrame:
    """Runs of consecutive act-level steps per GPU, with the drivers of each run's first flag."""
    if rows.empty:
        return _concat([], ALARM_COLUMNS)
    order, group = _gpu_sorted(rows)
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
    drivers = score.occlusion_drivers(model, x[first_rows], top=top)
    out = rows.iloc[first_rows][["node", "gpu", "uuid"]].reset_index(drop=True)
    out["first"] = agg["first"].to_numpy()
    out["last"] = agg["last"].to_numpy()
    out["steps"] = agg["steps"].to_numpy(dtype=np.int64)
    out["peak"] = agg["peak"].to_numpy()
    out["drivers"] = pd.Series(drivers, dtype=object)
    ordered: pd.DataFrame = out[list(ALARM_COLUMNS)]
    return ordered


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a frame as dicts keyed by column name."""
    return [{str(k): v for k, v in row.items()} for row in frame.to_dict("records")]


# -- replaying a Prometheus range in batches ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RangeReplay:
    """A replay read from Prometheus, with the hardware failures the XID gauge showed (when asked)."""

    replay: Replay
    xid_failures: pd.DataFrame | None
    hosts: int
    batches: int
    queries: int


class NoData(Exception):
    """Prometheus has no DCGM series in the range."""


def replay_range(
    reader: prometheus.Reader,
    model: RiskModel,
    *,
    start: float,
    end: float,
    step_s: float = DEFAULT_STEP_S,
    lookback_s: float = DEFAULT_LOOKBACK_S,
    warn: float | None = None,
    act: float | None = None,
    hold: Hysteresis | None = None,
    node_batch: int = DEFAULT_NODE_BATCH,
    xid_classes: Mapping[int, str] | None = None,
    hosts: Sequence[prometheus.HostRef] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RangeReplay:
    """Find the hosts with DCGM series (one query; or take `hosts`), then read and replay them
    `node_batch` at a time.

    `progress(done, total)` is called after each batch. With `xid_classes`, hardware failures are also
    read off each batch's samples: XID gauge changes and vanished GPUs (`history.from_samples`). Raises `prometheus.PrometheusUnavailable`
    when Prometheus cannot be read, `NoData` when it has no GPU series in the range.
    """
    if hosts is None:
        hosts = find_hosts(reader, start=start, end=end, lookback_s=lookback_s)
    if not hosts:
        raise NoData(f"no {features.GPU_TEMP} series between {_utc(start - lookback_s)} and {_utc(end)}")
    batches = [hosts[i : i + max(1, node_batch)] for i in range(0, len(hosts), max(1, node_batch))]
    parts: list[Replay] = []
    failures: list[pd.DataFrame] = []
    for done, batch in enumerate(batches, 1):
        frame = read_range(reader, start, end, lookback_s=lookback_s, hosts=batch)
        parts.append(replay(frame, model, start=start, end=end, step_s=step_s, warn=warn, act=act, hold=hold))
        if xid_classes is not None:
            failures.append(history.from_samples(frame, xid_classes))
        del frame
        if progress is not None:
            progress(done, len(batches))
    return RangeReplay(
        replay=concat(parts),
        xid_failures=renumber(failures, prefix="X") if xid_classes is not None else None,
        hosts=len(hosts),
        batches=len(batches),
        queries=reader.queries,
    )


def find_hosts(
    reader: prometheus.Reader, *, start: float, end: float, lookback_s: float
) -> list[prometheus.HostRef]:
    """The hosts with GPU series in [start - lookback_s, end] (one query)."""
    return reader.hosts(_utc(start - lookback_s), _utc(end))


def batch_count(hosts: int, node_batch: int) -> int:
    return math.ceil(hosts / max(1, node_batch))


def renumber(tables: Iterable[pd.DataFrame], *, prefix: str) -> pd.DataFrame:
    """Failure tables of separate batches as one, with ids unique again."""
    parts = [t for t in tables if not t.empty]
    if not parts:
        return history.empty()
    out = pd.concat(parts, ignore_index=True).sort_values(["failure_time", "node", "gpu"], kind="stable")
    out = out.reset_index(drop=True)
    out["id"] = [f"{prefix}{i + 1:05d}" for i in range(len(out))]
    return out


# -- assessing ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BacktestResult:
    """The verdict on a replay: alarms with outcomes, failures with catches, metrics, costs."""

    replay: Replay
    source: TruthSource
    alarms: pd.DataFrame
    failures: pd.DataFrame
    summary: dict[str, Any]
    costs: costing.CostModel
    priced: Pricing
    unbudgeted: Pricing | None
    row_metrics: evaluate.Metrics
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The whole result as JSON-ready values (times ISO-8601 UTC, hours rounded, NaN as null)."""
        r = self.replay
        gpus = r.gpus_per_node()
        days = (r.end - r.start) / DAY
        body: dict[str, Any] = {
            "range": {
                "start": _iso(r.start),
                "end": _iso(r.end),
                "step_s": r.step_s,
                "days": round(days, 4),
                "samples_from": _iso(r.samples_from),
            },
            "model": {
                "version": r.model_version,
                "warn": round(r.warn, 6),
                "act": round(r.act, 6),
                "sustain_s": r.sustain_s,
                "horizon_s": r.horizon_s,
                "clear_margin": r.hold.clear_margin,
                "clear_after_steps": r.hold.clear_after,
            },
            "ground_truth": self.source,
            "notes": list(NOTES[self.source]),
            "fleet": {
                "nodes": len(gpus),
                "gpus": int(sum(gpus.values())),
                "node_days": round(len(gpus) * days, 4),
                "gpu_hours": round(sum(gpus.values()) * days * 24.0, 4),
            },
            "summary": _jsonable(self.summary),
            "costs": {
                "assumptions": self.costs.assumptions(),
                **self.priced.as_dict(),
                "without_budget": None if self.unbudgeted is None else self.unbudgeted.as_dict(),
            },
            "alarms": [_alarm_dict(a) for a in records(self.alarms)],
            "failures": [_failure_dict(f) for f in records(self.failures)],
            "row_metrics": self.row_metrics.as_dict(),
        }
        if self.extra:
            body["source"] = _jsonable(self.extra)
        return body


def assess(
    replay: Replay,
    truth: dataset.Truth | None,
    *,
    failures: pd.DataFrame | None,
    costs: costing.CostModel,
) -> BacktestResult:
    """Judge a replay against `truth` (preferred) or `failures` (e.g. from the XID gauge; repairs are then
    the counter resets the replay saw). With neither, every alarm not after a failure is false."""
    if truth is not None:
        fails, repairs, traps = truth.failures, truth.repairs, truth.traps
        source: TruthSource = "truth"
    else:
        fails = failures if failures is not None else history.empty()
        repairs = replay.resets
        traps = pd.DataFrame(columns=["kind", "node", "gpu", "uuid"])
        source = "xid" if failures is not None else "none"
    fails = _normalised_failures(fails)
    keys = replay.scores[["node", "gpu", "uuid", "timestamp"]]
    status = labels.label_rows(keys, fails, repairs=repairs, horizon_s=replay.horizon_s)
    trap_kind = dataset.trap_kinds(traps, keys)
    alarms = _judge_alarms(replay, fails, status.status, trap_kind)
    caught = _judge_failures(replay, fails, alarms, known_precursors=source == "truth")
    alarms = _mark_catches(alarms, caught)
    row_metrics = evaluate.evaluate(
        replay.scores["score"].to_numpy(dtype=np.float64),
        evaluate.EvalSet(
            keys=keys,
            x=np.zeros((len(keys), 0), dtype=np.float32),
            labels=status,
            failures=fails,
            trap_kind=trap_kind,
            horizon_s=replay.horizon_s,
        ),
        threshold=replay.act,
    )
    known = source == "truth"
    alarms, caught, priced = _price(replay, alarms, caught, fails, costs=costs, known_precursors=known)
    unbudgeted: Pricing | None = None
    off = replace(costs, proactive_max_fraction=1.0, proactive_max_nodes=None, resend_h=None)
    if costs.node_limit(replay.nodes) < off.node_limit(replay.nodes):
        unbudgeted = _price(replay, alarms, caught, fails, costs=off, known_precursors=known)[2]
    return BacktestResult(
        replay=replay,
        source=source,
        alarms=alarms,
        failures=caught,
        summary=_summary(replay, alarms, caught, trap_kind, keys, known_precursors=known),
        costs=costs,
        priced=priced,
        unbudgeted=unbudgeted,
        row_metrics=row_metrics,
    )


@dataclass(frozen=True, slots=True)
class Pricing:
    """Cost reports over all in-range failures and over those with a known precursor (None: unknown)."""

    all_failures: costing.CostReport
    with_precursor: costing.CostReport | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "all_failures": self.all_failures.as_dict(),
            "failures_with_precursor": None if self.with_precursor is None else self.with_precursor.as_dict(),
        }


def _price(
    replay: Replay,
    alarms: pd.DataFrame,
    caught: pd.DataFrame,
    fails: pd.DataFrame,
    *,
    costs: costing.CostModel,
    known_precursors: bool,
) -> tuple[pd.DataFrame, pd.DataFrame, Pricing]:
    """Run the ladder (budget included) over the alarms and price the outcome."""
    gpus = replay.gpus_per_node()
    limit = costs.node_limit(len(gpus))
    resend_s = None if costs.resend_h is None else costs.resend_h * HOUR
    ladder = _ladder(replay, alarms, fails, limit=limit, resend_s=resend_s)
    alarms = ladder.alarms
    fleet_gpu_h = sum(gpus.values()) * (replay.end - replay.start) / HOUR
    catching = alarms.loc[alarms["catch"] & alarms["acted"]]
    acted_from = dict(zip(catching["failure_id"], catching["acted_from"], strict=True))
    caught = caught.assign(
        acted=caught["id"].isin(set(acted_from)),
        acted_lead_h=(caught["failure_time"] - caught["id"].map(acted_from).astype(float)) / HOUR,
    )
    needless = int((alarms["acted"] & ~alarms["catch"] & ~alarms["beyond_range"]).sum())

    def report(rows: pd.DataFrame) -> costing.CostReport:
        return costing.compare(
            leads_h=[None if not np.isfinite(lead) else float(lead) for lead in rows["acted_lead_h"]],
            needless_restarts=needless,
            holds=ladder.admitted,
            gpus_per_node=gpus,
            fleet_gpu_h=fleet_gpu_h,
            costs=costs,
            max_nodes_at_act=limit,
            holds_refused=ladder.refused,
            holds_delayed=ladder.delayed,
        )

    with_precursor = report(caught[caught["has_precursor"]]) if known_precursors else None
    return alarms, caught, Pricing(all_failures=report(caught), with_precursor=with_precursor)


def _normalised_failures(fails: pd.DataFrame) -> pd.DataFrame:
    out = fails.copy()
    for column, default in (("pending", False), ("precursor_start", np.nan), ("mode", ""), ("uuid", "")):
        if column not in out.columns:
            out[column] = default
    if "id" not in out.columns:
        out["id"] = [f"F{i + 1:05d}" for i in range(len(out))]
    out["pending"] = out["pending"].fillna(False).astype(bool)
    out["hardware"] = out["fault_class"].astype(str).isin(labels.HARDWARE_CLASSES)
    out["slot"] = out["node"].astype(str) + "/" + pd.to_numeric(out["gpu"]).astype(np.int64).astype(str)
    return out.sort_values("failure_time", kind="stable").reset_index(drop=True)


def _by_slot(fails: pd.DataFrame) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for record in records(fails):
        out.setdefault(str(record["slot"]), []).append(record)
    return out


def _judge_alarms(
    replay: Replay,
    fails: pd.DataFrame,
    row_status: npt.NDArray[np.int8],
    trap_kind: npt.NDArray[np.object_],
) -> pd.DataFrame:
    """Each alarm's outcome, the failure it points at, and its GPU's trap kind."""
    alarms = replay.alarms.copy().reset_index(drop=True)
    keys = replay.scores[["node", "gpu", "uuid", "timestamp"]].assign(status=row_status, trap=trap_kind)
    at_first = alarms.merge(
        keys.rename(columns={"timestamp": "first"}), on=["node", "gpu", "uuid", "first"], how="left"
    )
    hardware = _by_slot(fails[fails["hardware"]])
    other = _by_slot(fails[~fails["hardware"]])
    outcomes: list[str] = []
    failure_ids: list[str | None] = []
    failure_times: list[float] = []
    for i, alarm in enumerate(records(alarms)):
        slot = f"{alarm['node']}/{int(alarm['gpu'])}"
        t0, t1 = float(alarm["first"]), float(alarm["last"])
        # The level is seen to drop one step after the last flag: a failure before that hits a held node.
        window_end = max(t1 + replay.step_s, t0 + replay.horizon_s)
        nxt = next((f for f in hardware.get(slot, []) if f["failure_time"] > t0), None)
        nxt_other = next((f for f in other.get(slot, []) if f["failure_time"] > t0), None)
        outcome: str
        if at_first["status"].iloc[i] == labels.Status.AFTER_FAILURE:
            outcome = "after-failure"
        elif nxt is not None and nxt["failure_time"] <= window_end:
            outcome = "true"
        elif nxt is not None and _started(nxt, t0):
            outcome = "early"
        elif nxt_other is not None and (nxt_other["failure_time"] <= window_end or _started(nxt_other, t0)):
            outcome = "other"
        else:
            outcome = "false"
        outcomes.append(outcome)
        failure_ids.append(str(nxt["id"]) if nxt is not None and outcome in ("true", "early") else None)
        failure_times.append(float(nxt["failure_time"]) if nxt is not None else np.inf)
    alarms["outcome"] = outcomes
    alarms["failure_id"] = pd.Series(failure_ids, dtype=object)
    alarms["next_failure"] = np.asarray(failure_times, dtype=np.float64)
    trap = at_first["trap"].fillna("").astype(str).to_numpy()
    alarms["trap"] = trap
    alarms["beyond_range"] = (alarms["outcome"] == "true") & (alarms["next_failure"] > replay.end)
    return alarms


def _started(failure: Mapping[str, Any], t: float) -> bool:
    start = failure.get("precursor_start")
    return start is not None and bool(np.isfinite(start)) and float(start) <= t


def _judge_failures(
    replay: Replay, fails: pd.DataFrame, alarms: pd.DataFrame, *, known_precursors: bool
) -> pd.DataFrame:
    """Hardware failures in (start, end] of the replayed slots: caught by which alarm, with what lead."""
    slots = set(replay.scores["node"].astype(str) + "/" + replay.scores["gpu"].astype(np.int64).astype(str))
    rows = fails[
        fails["hardware"]
        & ~fails["pending"]
        & (fails["failure_time"] > replay.start)
        & (fails["failure_time"] <= replay.end)
        & fails["slot"].isin(slots)
    ].reset_index(drop=True)
    true = alarms[alarms["outcome"] == "true"]
    first_flag = true.groupby("failure_id")["first"].min() if len(true) else pd.Series(dtype=float)
    out = pd.DataFrame(
        {
            "id": rows["id"].astype(str),
            "node": rows["node"].astype(str),
            "gpu": rows["gpu"].astype(np.int64),
            "uuid": rows["uuid"].fillna("").astype(str),
            "mode": rows["mode"].fillna("").astype(str),
            "fault_class": rows["fault_class"].astype(str),
            "failure_time": rows["failure_time"].astype(float),
            "precursor_start": rows["precursor_start"].astype(float),
        }
    )
    out["has_precursor"] = out["precursor_start"].notna() if known_precursors else False
    out["first_flag"] = out["id"].map(first_flag).astype(float)
    out["caught"] = out["first_flag"].notna()
    out["lead_h"] = (out["failure_time"] - out["first_flag"]) / HOUR
    # Recall and lead time count failures with a whole horizon of scoring before them.
    out["scored"] = out["failure_time"] > replay.start + replay.horizon_s
    return out


def _mark_catches(alarms: pd.DataFrame, caught: pd.DataFrame) -> pd.DataFrame:
    """Flag the alarm that caught each in-range failure (its restart is the failure's planned one)."""
    catching = set(
        zip(caught.loc[caught["caught"], "id"], caught.loc[caught["caught"], "first_flag"], strict=True)
    )
    alarms = alarms.copy()
    alarms["catch"] = [
        (fid, first) in catching for fid, first in zip(alarms["failure_id"], alarms["first"], strict=True)
    ]
    lead = np.where(
        alarms["outcome"].isin(["true", "early"]), (alarms["next_failure"] - alarms["first"]) / HOUR, np.nan
    )
    alarms["lead_h"] = np.where(np.isfinite(lead), lead, np.nan)
    return alarms


def _holds(replay: Replay, alarms: pd.DataFrame, fails: pd.DataFrame) -> pd.DataFrame:
    """Each alarm's node hold at act: from the first flag until the level drops (one step after the last
    flag), the range ends, or a hardware failure hits the node — after which it is out either way."""
    start = alarms["first"].to_numpy(dtype=np.float64)
    end = np.maximum(np.minimum(alarms["last"].to_numpy(dtype=np.float64) + replay.step_s, replay.end), start)
    hard = fails[fails["hardware"]]
    by_node: dict[str, npt.NDArray[np.float64]] = {
        str(k): np.sort(v.to_numpy(dtype=np.float64))
        for k, v in hard.groupby(hard["node"].astype(str))["failure_time"]
    }
    for i, node in enumerate(alarms["node"].astype(str)):
        times = by_node.get(node)
        if times is not None:
            j = int(np.searchsorted(times, start[i], side="right"))
            if j < len(times):
                end[i] = min(end[i], float(times[j]))
    return pd.DataFrame({"node": alarms["node"].astype(str).to_numpy(), "start": start, "end": end})


@dataclass(frozen=True, slots=True)
class _Ladder:
    alarms: pd.DataFrame  # with hold_end, acted, acted_from
    admitted: pd.DataFrame  # the node holds at act (HOLD_COLUMNS), admitted parts only
    refused: int
    delayed: int


def _ladder(
    replay: Replay, alarms: pd.DataFrame, fails: pd.DataFrame, *, limit: int, resend_s: float | None
) -> _Ladder:
    """What the ladder does with the alarms: node holds (its alarms' holds merged) reach act in order,
    within the proactive budget of `limit` nodes at act, a refused node asking again every `resend_s`
    (`costs.admit`). An alarm is acted on when its node reached act before the alarm's hold ended, from
    `acted_from` on. Alarms after a failure are the hardware track's."""
    alarms = alarms.copy()
    holds = _holds(replay, alarms, fails)
    alarms["hold_end"] = holds["end"].to_numpy()
    live = (alarms["outcome"] != "after-failure").to_numpy()
    merged = costing.merged_holds(holds.loc[live])
    admitted_at = costing.admit(merged, limit, resend_s=resend_s)
    acted_from = np.full(len(alarms), np.nan)
    first = alarms["first"].to_numpy(dtype=np.float64)
    hold_end = alarms["hold_end"].to_numpy(dtype=np.float64)
    nodes = alarms["node"].astype(str).to_numpy()
    for node, lo, hi, at in zip(merged["node"], merged["start"], merged["end"], admitted_at, strict=True):
        if not np.isfinite(at):
            continue
        inside = live & (nodes == str(node)) & (first >= lo) & (first <= hi) & (hold_end >= at)
        acted_from[inside] = np.maximum(first[inside], at)
    alarms["acted"] = np.isfinite(acted_from)
    alarms["acted_from"] = acted_from
    ok = np.isfinite(admitted_at)
    admitted = merged.loc[ok].assign(start=admitted_at[ok]).reset_index(drop=True)
    started = merged["start"].to_numpy(dtype=np.float64)
    return _Ladder(
        alarms=alarms,
        admitted=admitted,
        refused=int((~ok).sum()),
        delayed=int((ok & (admitted_at > started)).sum()),
    )


def _summary(
    replay: Replay,
    alarms: pd.DataFrame,
    caught: pd.DataFrame,
    trap_kind: npt.NDArray[np.object_],
    keys: pd.DataFrame,
    *,
    known_precursors: bool,
) -> dict[str, Any]:
    by_outcome = {str(k): int(v) for k, v in alarms["outcome"].value_counts().items()}
    true, false = by_outcome.get("true", 0), by_outcome.get("false", 0)
    node_days = replay.nodes * (replay.end - replay.start) / DAY
    scored = caught[caught["scored"]]
    with_precursor = scored[scored["has_precursor"]]
    leads = scored.loc[scored["caught"], "lead_h"].to_numpy(dtype=np.float64)
    leads_precursor = with_precursor.loc[with_precursor["caught"], "lead_h"].to_numpy(dtype=np.float64)
    is_trap = trap_kind != ""
    trap_gpus = pd.DataFrame(
        {
            "gpu": (
                keys["node"].astype(str) + "/" + keys["gpu"].astype(str) + "/" + keys["uuid"].astype(str)
            )[is_trap],
            "kind": trap_kind[is_trap],
        }
    ).drop_duplicates("gpu")
    trapped = alarms[(alarms["trap"] != "") & (alarms["outcome"] == "false")]
    flagged_traps = trapped.assign(
        gpu=trapped["node"].astype(str) + "/" + trapped["gpu"].astype(str) + "/" + trapped["uuid"].astype(str)
    ).drop_duplicates("gpu")
    return {
        "alarms": len(alarms),
        "alarms_by_outcome": by_outcome,
        "precision": _ratio(true, true + false),
        "failures_in_range": len(caught),
        "failures_scored": len(scored),
        "failures_caught": int(scored["caught"].sum()),
        "recall": _ratio(int(scored["caught"].sum()), len(scored)),
        "failures_with_precursor": len(with_precursor) if known_precursors else None,
        "failures_with_precursor_caught": int(with_precursor["caught"].sum()) if known_precursors else None,
        "recall_with_precursor": _ratio(int(with_precursor["caught"].sum()), len(with_precursor))
        if known_precursors
        else None,
        "lead_time_h": _distribution(leads),
        "lead_time_h_with_precursor": _distribution(leads_precursor) if known_precursors else None,
        "false_alarms": false,
        "node_days": node_days,
        "false_alarms_per_1000_node_days": _ratio(false * 1000.0, node_days),
        "traps": {
            "gpus": len(trap_gpus),
            "flagged": len(flagged_traps),
            "flagged_by_kind": {str(k): int(v) for k, v in flagged_traps["trap"].value_counts().items()},
        },
        "nodes_flagged": int(alarms.loc[alarms["outcome"] != "after-failure", "node"].nunique()),
    }


def _distribution(hours: npt.NDArray[np.float64]) -> dict[str, Any]:
    if hours.size == 0:
        return {"median": None, "p10": None, "p90": None, "count": 0, "values": []}
    return {
        "median": float(np.median(hours)),
        "p10": float(np.percentile(hours, 10)),
        "p90": float(np.percentile(hours, 90)),
        "count": int(hours.size),
        "values": sorted(round(float(v), 3) for v in hours),
    }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


# -- JSON -----------------------------------------------------------------------------------------------


def _iso(t: float) -> str | None:
    if not np.isfinite(t):
        return None
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return round(float(value), 6) if np.isfinite(value) else None
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def _alarm_dict(a: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "node": str(a["node"]),
        "gpu": int(a["gpu"]),
        "uuid": str(a["uuid"]),
        "first_flag": _iso(float(a["first"])),
        "last_flag": _iso(float(a["last"])),
        "steps": int(a["steps"]),
        "peak": _jsonable(float(a["peak"])),
        "outcome": str(a["outcome"]),
        "acted": bool(a["acted"]),
        "acted_from": _iso(float(a["acted_from"])),
        "hold_end": _iso(float(a["hold_end"])),
        "trap": str(a["trap"]) or None,
        "failure_id": a["failure_id"] if isinstance(a["failure_id"], str) else None,
        "lead_h": _jsonable(float(a["lead_h"])),
        "drivers": [[str(name), _jsonable(float(w))] for name, w in (a["drivers"] or ())],
    }


def _failure_dict(f: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": str(f["id"]),
        "node": str(f["node"]),
        "gpu": int(f["gpu"]),
        "mode": str(f["mode"]) or None,
        "fault_class": str(f["fault_class"]),
        "failure_time": _iso(float(f["failure_time"])),
        "precursor_start": _iso(float(f["precursor_start"])),
        "has_precursor": bool(f["has_precursor"]),
        "scored": bool(f["scored"]),
        "caught": bool(f["caught"]),
        "acted": bool(f["acted"]),
        "acted_lead_h": _jsonable(float(f["acted_lead_h"])),
        "first_flag": _iso(float(f["first_flag"])),
        "lead_h": _jsonable(float(f["lead_h"])),
    }
