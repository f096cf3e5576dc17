"""Judging a replay's alarms and failures against ground truth (see `backtest` for the rules it applies).

Each alarm gets its outcome (`true`, `early`, `other`, `false`, `after-failure`), the failure it points
at and its GPU's trap kind; each in-range hardware failure whether a true alarm caught it, and with what
lead. Pure functions over frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import labels
from app.predict.replay import Replay, records

HOUR = 3600.0


def normalised_failures(fails: pd.DataFrame) -> pd.DataFrame:
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


def judge_alarms(
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


def judge_failures(
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


def mark_catches(alarms: pd.DataFrame, caught: pd.DataFrame) -> pd.DataFrame:
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
