"""How good a risk model is, on rows it never trained on: row metrics, alarms, failures caught, lead time.

Pure given scores: the caller (train, `sickbay evaluate`, the registry's promotion) computes the
probabilities. The *decision score* of a row is the lowest probability of its GPU over the last
`sustain_s` (`sustain`): one hot reading does not raise an alarm, half an hour of them does. A GPU is
*flagged* on a row when its decision score is at or above the threshold. Definitions:

- precision / recall / PR-AUC: over rows with a clean label (`labels.Status` positive or negative).
- alarm: a run of consecutive flagged rows of one GPU. It is *true* when its first row is a positive
  (a hardware failure follows within the horizon), *false* when its first row is a clean negative,
  *early* when it starts during a known precursor more than a horizon before the failure (an early
  warning, not a false alarm), and *other* when it starts on an ambiguous or censored row.
  Rows after a failure and before its repair are never flagged.
- false alarms per 1,000 node-days: false alarms / (nodes x days covered) x 1000.
- failures caught: hardware failures inside the evaluated rows' time range with at least one flagged
  row in the horizon before; lead time = failure time - first such flag (so it is at most the horizon).
- trap GPUs flagged: GPUs that look sick and are not (stable high SBE, noisy NVLink, hot racks, GPUs a
  buggy job raised XIDs on) flagged on a clean-negative row; ideally none. (A GPU on a hot rack can
  still really fail: a flag in the horizon before its failure is a catch, not a trap.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from sklearn.metrics import average_precision_score  # type: ignore[import-untyped]

from app.predict.labels import Labels, Status

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class EvalSet:
    """Rows to evaluate on: keys (node, gpu, uuid, timestamp), features, labels, and the truth around them."""

    keys: pd.DataFrame
    x: npt.NDArray[np.float32]
    labels: Labels
    failures: pd.DataFrame
    trap_kind: npt.NDArray[np.object_]
    horizon_s: float

    def __len__(self) -> int:
        return len(self.keys)

    def subset(self, mask: npt.NDArray[np.bool_]) -> EvalSet:
        return EvalSet(
            keys=self.keys.loc[mask].reset_index(drop=True),
            x=self.x[mask],
            labels=Labels(
                label=self.labels.label[mask],
                status=self.labels.status[mask],
                time_to_failure_s=self.labels.time_to_failure_s[mask],
                failure_id=self.labels.failure_id[mask],
            ),
            failures=self.failures,
            trap_kind=self.trap_kind[mask],
            horizon_s=self.horizon_s,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Metrics:
    threshold: float
    rows: int
    positives: int
    flagged: int
    precision: float
    recall: float
    pr_auc: float
    node_days: float
    alarms: int
    true_alarms: int
    false_alarms: int
    early_alarms: int
    false_alarms_per_1000_node_days: float
    failures: int
    failures_caught: int
    failures_with_precursor: int
    failures_with_precursor_caught: int
    event_recall: float
    event_recall_with_precursor: float
    lead_time_h: dict[str, float | None] = field(default_factory=dict)
    trap_gpus: int = 0
    trap_gpus_flagged: int = 0
    trap_gpus_flagged_by_kind: dict[str, int] = field(default_factory=dict)
    # Per failure mode: failures, those with a precursor, and how many of those were caught; trap GPUs
    # per kind (flagged ones are in `trap_gpus_flagged_by_kind`).
    failures_by_mode: dict[str, dict[str, int]] = field(default_factory=dict)
    trap_gpus_by_kind: dict[str, int] = field(default_factory=dict)
    # False alarms by the trap kind their first row was under ('none': a GPU that was no trap then), so
    # alarms on a precursor that later recovered read apart from alarms on quiet hardware.
    false_alarms_by_trap: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: _json_number(v) for k, v in asdict(self).items()}


def _json_number(value: Any) -> Any:
    if isinstance(value, float):
        return None if not np.isfinite(value) else round(value, 6)
    if isinstance(value, dict):
        return {k: _json_number(v) for k, v in value.items()}
    return value


def _sorted_groups(
    keys: pd.DataFrame,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Row order by (node, gpu, time), the sorted times, and each sorted row's GPU group id."""
    node_codes = pd.factorize(keys["node"].astype(str))[0]
    gpu = keys["gpu"].to_numpy(dtype=np.int64)
    t = keys["timestamp"].to_numpy(dtype=np.float64)
    order = np.lexsort((t, gpu, node_codes)).astype(np.int64)
    n_s, g_s = node_codes[order], gpu[order]
    change = np.ones(len(order), dtype=bool)
    change[1:] = (n_s[1:] != n_s[:-1]) | (g_s[1:] != g_s[:-1])
    return order, t[order], np.cumsum(change).astype(np.int64) - 1


def sustain(
    keys: pd.DataFrame, scores: npt.NDArray[np.float64], *, sustain_s: float
) -> npt.NDArray[np.float64]:
    """Each row's lowest score of its GPU over [t - sustain_s, t]; 0 when no earlier row is in that window.

    With rows on a grid of `sustain_s` (training's `every_s`), that is min(p now, p one step ago).
    """
    if sustain_s <= 0 or len(scores) == 0:
        return np.asarray(scores, dtype=np.float64)
    order, t, group = _sorted_groups(keys)
    stride = float(t.max() - t.min()) + 2 * sustain_s + 1.0
    key = group * stride + (t - t.min())
    start = np.searchsorted(key, key - sustain_s - 1e-6, side="left")
    index = np.arange(len(order))
    depth = index - start
    ranked = np.asarray(scores, dtype=np.float64)[order]
    out = ranked.copy()
    for lag in range(1, int(depth.max(initial=0)) + 1):
        deep = depth >= lag
        out[deep] = np.minimum(out[deep], ranked[index[deep] - lag])
    out[depth < 1] = 0.0
    result = np.empty_like(out)
    result[order] = out
    return result


def alarm_counts(
    keys: pd.DataFrame,
    scores: npt.NDArray[np.float64],
    status: npt.NDArray[np.int8],
    thresholds: npt.NDArray[np.float64],
) -> dict[int, npt.NDArray[np.int64]]:
    """For many thresholds at once: alarms (runs of flagged rows) by the status of their first row.

    A row starts an alarm at threshold t when its score ≥ t and its GPU's previous row's score < t, so
    t ∈ (previous, score]; counting those intervals per threshold is two `searchsorted` calls.
    """
    order, _, group = _sorted_groups(keys)
    s = np.asarray(scores, dtype=np.float64)[order]
    st = status[order]
    before = np.full(len(s), -np.inf)
    same = np.zeros(len(s), dtype=bool)
    same[1:] = group[1:] == group[:-1]
    before[1:] = np.where(same[1:], s[:-1], -np.inf)
    # Rows after a failure are never flagged: treat them as score -inf for starts and for "before".
    after = st == Status.AFTER_FAILURE
    s = np.where(after, -np.inf, s)
    before[1:] = np.where(same[1:] & ~after[:-1], before[1:], -np.inf)
    out: dict[int, npt.NDArray[np.int64]] = {}
    for value in np.unique(st):
        mask = (st == value) & (s > before)
        hi = np.sort(s[mask])
        lo = np.sort(before[mask])
        n_hi = len(hi) - np.searchsorted(hi, thresholds, side="left")
        n_lo = len(lo) - np.searchsorted(lo, thresholds, side="left")
        out[int(value)] = (n_hi - n_lo).astype(np.int64)
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def evaluate(scores: npt.NDArray[np.float64], data: EvalSet, *, threshold: float) -> Metrics:
    """Every metric above for one threshold."""
    status = data.labels.status
    usable = data.labels.usable
    y = data.labels.label[usable]
    p = scores[usable]
    flagged_rows = (scores >= threshold) & (status != Status.AFTER_FAILURE)
    tp = int(np.sum(flagged_rows[usable] & (y == 1)))
    fp = int(np.sum(flagged_rows[usable] & (y == 0)))
    positives = int(np.sum(y))
    pr_auc = float(average_precision_score(y, p)) if 0 < positives < len(y) else float("nan")
    alarms, false_by_trap = _alarms(data, flagged_rows)
    days = node_days(data.keys)
    caught = _failures_caught(data, flagged_rows)
    with_precursor = caught[caught["has_precursor"]]
    leads = with_precursor.loc[with_precursor["caught"], "lead_s"].to_numpy() / 3600.0
    traps = _traps(data, flagged_rows & (status == Status.NEGATIVE))
    false_alarms = int(alarms.get(Status.NEGATIVE, 0))
    return Metrics(
        threshold=float(threshold),
        rows=int(usable.sum()),
        positives=positives,
        flagged=int(flagged_rows.sum()),
        precision=_ratio(tp, tp + fp),
        recall=_ratio(tp, positives),
        pr_auc=pr_auc,
        node_days=days,
        alarms=int(sum(alarms.values())),
        true_alarms=int(alarms.get(Status.POSITIVE, 0)),
        false_alarms=false_alarms,
        early_alarms=int(alarms.get(Status.EARLY, 0)),
        false_alarms_per_1000_node_days=_ratio(false_alarms * 1000.0, days),
        failures=len(caught),
        failures_caught=int(caught["caught"].sum()),
        failures_with_precursor=len(with_precursor),
        failures_with_precursor_caught=int(with_precursor["caught"].sum()),
        event_recall=_ratio(float(caught["caught"].sum()), len(caught)),
        event_recall_with_precursor=_ratio(float(with_precursor["caught"].sum()), len(with_precursor)),
        lead_time_h=_quantiles(leads),
        trap_gpus=traps[0],
        trap_gpus_flagged=traps[1],
        trap_gpus_flagged_by_kind=traps[2],
        failures_by_mode=_by_mode(caught),
        trap_gpus_by_kind=traps[3],
        false_alarms_by_trap=false_by_trap,
    )


def _by_mode(caught: pd.DataFrame) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for mode, group in caught.groupby("mode", sort=True):
        with_precursor = group[group["has_precursor"]]
        out[str(mode) or "unknown"] = {
            "failures": len(group),
            "with_precursor": len(with_precursor),
            "with_precursor_caught": int(with_precursor["caught"].sum()),
            "caught": int(group["caught"].sum()),
        }
    return out


def _quantiles(hours: npt.NDArray[np.float64]) -> dict[str, float | None]:
    if hours.size == 0:
        return {"median": None, "p10": None, "p90": None, "count": 0}
    return {
        "median": float(np.median(hours)),
        "p10": float(np.percentile(hours, 10)),
        "p90": float(np.percentile(hours, 90)),
        "count": int(hours.size),
    }


def _order(keys: pd.DataFrame) -> npt.NDArray[np.int64]:
    node = keys["node"].astype(str).to_numpy()
    return np.lexsort((keys["timestamp"].to_numpy(), keys["gpu"].to_numpy(), node)).astype(np.int64)


def _alarms(data: EvalSet, flagged: npt.NDArray[np.bool_]) -> tuple[dict[int, int], dict[str, int]]:
    """Alarm runs by the status of their first row, and the false ones (first row negative) by the trap
    kind of that row ('none' where it is no trap)."""
    if not len(data):
        return {}, {}
    order = _order(data.keys)
    node = data.keys["node"].astype(str).to_numpy()[order]
    gpu = data.keys["gpu"].to_numpy()[order]
    f = flagged[order]
    same = np.zeros(len(order), dtype=bool)
    same[1:] = (node[1:] == node[:-1]) & (gpu[1:] == gpu[:-1])
    previous = np.zeros(len(order), dtype=bool)
    previous[1:] = f[:-1]
    starts = f & ~(same & previous)
    status = data.labels.status[order]
    values, counts = np.unique(status[starts], return_counts=True)
    false_starts = starts & (status == Status.NEGATIVE)
    kinds = pd.Series(data.trap_kind[order][false_starts], dtype=object).replace("", "none")
    by_trap = {str(k): int(v) for k, v in kinds.value_counts().sort_index().items()}
    return {int(v): int(c) for v, c in zip(values, counts, strict=True)}, by_trap


def node_days(keys: pd.DataFrame) -> float:
    """Sum over nodes of the days between each node's first and last row."""
    if keys.empty:
        return 0.0
    spans = keys.groupby(keys["node"].astype(str), observed=True)["timestamp"].agg(["min", "max"])
    return float(((spans["max"] - spans["min"]) / DAY).sum())


def _failures_caught(data: EvalSet, flagged: npt.NDArray[np.bool_]) -> pd.DataFrame:
    """One row per hardware failure inside the evaluated slots' time range: caught, lead time."""
    columns = ["id", "mode", "has_precursor", "caught", "lead_s"]
    failures = data.failures
    if failures.empty or not len(data):
        return pd.DataFrame(columns=columns).astype({"caught": bool, "has_precursor": bool})
    keys = data.keys
    slot = keys["node"].astype(str) + "/" + keys["gpu"].astype(np.int64).astype(str)
    ranges = keys.assign(slot=slot).groupby("slot")["timestamp"].agg(["min", "max"])
    fails = failures[failures["fault_class"].isin(["reset-gpu", "reboot-node", "replace"])]
    if "pending" in fails.columns:
        fails = fails[~fails["pending"].astype(bool)]
    fails = fails.assign(slot=fails["node"].astype(str) + "/" + fails["gpu"].astype(np.int64).astype(str))
    fails = fails.join(ranges, on="slot", how="inner")
    # In range: the horizon before the failure lies inside the evaluated rows.
    fails = fails[
        (fails["failure_time"] > fails["min"] + data.horizon_s) & (fails["failure_time"] <= fails["max"])
    ]
    hits = pd.DataFrame(
        {
            "id": data.labels.failure_id,
            "t": keys["timestamp"].to_numpy(),
            "hit": flagged & (data.labels.status == Status.POSITIVE),
        }
    )
    first = hits[hits["hit"]].groupby("id")["t"].min()
    out = pd.DataFrame(
        {
            "id": fails["id"].to_numpy(),
            "mode": fails["mode"].astype(str).to_numpy() if "mode" in fails.columns else "",
            "has_precursor": fails["precursor_start"].notna().to_numpy(),
            "failure_time": fails["failure_time"].to_numpy(),
        }
    )
    out["first_flag"] = out["id"].map(first)
    out["caught"] = out["first_flag"].notna()
    out["lead_s"] = out["failure_time"] - out["first_flag"]
    return out[columns]


def _traps(data: EvalSet, flagged: npt.NDArray[np.bool_]) -> tuple[int, int, dict[str, int], dict[str, int]]:
    """Trap GPUs, those flagged while a trap, and both by kind. A GPU is counted under each kind it was
    (`dataset.trap_kinds`: an episode and a standing trap on one GPU are two kinds at different times),
    and flagged under the kind of the rows flagged."""
    is_trap = data.trap_kind != ""
    if not is_trap.any():
        return 0, 0, {}, {}
    keys = data.keys.loc[is_trap]
    gpu_key = keys["node"].astype(str) + "/" + keys["gpu"].astype(str) + "/" + keys["uuid"].astype(str)
    frame = pd.DataFrame(
        {"gpu": gpu_key.to_numpy(), "kind": data.trap_kind[is_trap], "flagged": flagged[is_trap]}
    )
    per_kind = frame.groupby(["gpu", "kind"], sort=False)["flagged"].any().reset_index()
    hit = per_kind[per_kind["flagged"]]
    by_kind = {str(k): int(v) for k, v in hit["kind"].value_counts().items()}
    every_kind = {str(k): int(v) for k, v in per_kind["kind"].value_counts().items()}
    return int(per_kind["gpu"].nunique()), int(hit["gpu"].nunique()), by_kind, every_kind
