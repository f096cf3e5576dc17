"""A judged backtest's figures: alarms by outcome, precision, recall, lead time, false-alarm rate, traps.

The same keys for the model and the rules baseline (`backtest.assess`), so the two read side by side.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict.replay import Replay

DAY = 86400.0


def summarise(
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
    false_alarms = alarms[alarms["outcome"] == "false"]
    trapped = false_alarms[false_alarms["trap"] != ""]
    # A GPU flagged under two kinds (an episode on a standing trap's GPU) counts once in all, once per kind.
    flagged_traps = trapped.assign(
        gpu=trapped["node"].astype(str) + "/" + trapped["gpu"].astype(str) + "/" + trapped["uuid"].astype(str)
    ).drop_duplicates(["gpu", "trap"])
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
        # By the trap kind the GPU was when the alarm began ('none': no trap then), so alarms on a
        # precursor that later recovered (`recovered-precursor`) read apart from those on quiet hardware.
        "false_alarms_by_trap": {
            str(k): int(v)
            for k, v in false_alarms["trap"].replace("", "none").value_counts().sort_index().items()
        },
        "traps": {
            "gpus": len(trap_gpus),
            "flagged": int(flagged_traps["gpu"].nunique()),
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
