"""The proactive ladder replayed over a backtest's alarms, and the GPU-hours it would have saved.

Each alarm holds its node at act from its first flag until the level drops (one step after its last
flag), the range ends, or a hardware failure hits the node. A node's holds are merged and reach act in
order within the proactive budget — `costs.admit`, which asks `decide.gates.admit_proactive`, the very
check the ladder makes in serve — a refused node asking again every `prediction.resend`. `price` then
runs `costs.compare` over what was acted on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import costs as costing
from app.predict.replay import Replay

HOUR = 3600.0


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


def price(
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
    budget = costs.budget(len(gpus))
    limit = budget.limit
    resend_s = None if costs.resend_h is None else costs.resend_h * HOUR
    ladder = run_ladder(replay, alarms, fails, budget=budget, resend_s=resend_s)
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


def holds_of(replay: Replay, alarms: pd.DataFrame, fails: pd.DataFrame) -> pd.DataFrame:
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
class Ladder:
    alarms: pd.DataFrame  # with hold_end, acted, acted_from
    admitted: pd.DataFrame  # the node holds at act (HOLD_COLUMNS), admitted parts only
    refused: int
    delayed: int


def run_ladder(
    replay: Replay,
    alarms: pd.DataFrame,
    fails: pd.DataFrame,
    *,
    budget: costing.Budget | int,
    resend_s: float | None,
) -> Ladder:
    """What the ladder does with the alarms: node holds (its alarms' holds merged) reach act in order,
    within the proactive budget (`costs.admit`: the serve path's `decide.gates.admit_proactive`), a
    refused node asking again every `resend_s`. An alarm is acted on when its node reached act before the alarm's hold ended, from
    `acted_from` on. Alarms after a failure are the hardware track's."""
    alarms = alarms.copy()
    holds = holds_of(replay, alarms, fails)
    alarms["hold_end"] = holds["end"].to_numpy()
    live = (alarms["outcome"] != "after-failure").to_numpy()
    merged = costing.merged_holds(holds.loc[live])
    admitted_at = costing.admit(merged, budget, resend_s=resend_s)
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
    return Ladder(
        alarms=alarms,
        admitted=admitted,
        refused=int((~ok).sum()),
        delayed=int((ok & (admitted_at > started)).sum()),
    )
