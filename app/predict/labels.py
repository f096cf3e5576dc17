"""Training labels: did a hardware-class fault hit this GPU within the horizon after the feature time?

Pure (pandas and numpy only). The inputs are tables, whatever made them: the simulator's ground truth
(`predict.dataset`) or, in production, the journal's faults and releases.

A row (GPU slot = node + GPU index, time t) gets one status:
- `POSITIVE`: a hardware-class fault (reset-gpu, reboot-node, replace) on the slot in (t, t + horizon];
- `NEGATIVE`: none;
- `AFTER_FAILURE`: the slot failed at or before t and is not repaired yet, or was repaired less than
  `settle_s` ago (rebooting, being verified: Sickbay's remediation owns the node then, not the model) —
  excluded;
- `AMBIGUOUS`: a non-hardware failure (e.g. XID 94, contained ECC: restart the workload) follows within the
  horizon, or its known precursor is under way: the GPU is degrading, yet no hardware fault follows —
  excluded rather than guessed;
- `EARLY`: the slot's next hardware failure has a known precursor under way at t, but is more than a
  horizon away — neither a clean negative nor a positive, excluded when `censor_early` (the default);
- `CENSORED`: closer than a horizon to `label_end` with no failure seen: the future is unknown — excluded.

The slot, not the UUID, is the unit: a replaced board takes the slot after the repair, and faults from the
journal may not carry a UUID.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt
import pandas as pd

DEFAULT_HORIZON_S = 24 * 3600.0
HARDWARE_CLASSES = frozenset({"reset-gpu", "reboot-node", "replace"})
FAILURE_COLUMNS = ("node", "gpu", "failure_time", "fault_class")


class Status(IntEnum):
    NEGATIVE = 0
    POSITIVE = 1
    AFTER_FAILURE = 2
    AMBIGUOUS = 3
    EARLY = 4
    CENSORED = 5


@dataclass(frozen=True, slots=True)
class Labels:
    """Per row, in the order of the rows given: label (0/1), status, and the next hardware failure."""

    label: npt.NDArray[np.int8]
    status: npt.NDArray[np.int8]
    time_to_failure_s: npt.NDArray[np.float64]
    failure_id: npt.NDArray[np.object_]

    @property
    def usable(self) -> npt.NDArray[np.bool_]:
        """Rows with a clean label (positive or negative)."""
        return self.status <= Status.POSITIVE

    def counts(self) -> dict[str, int]:
        values, counts = np.unique(self.status, return_counts=True)
        return {Status(int(v)).name.lower(): int(c) for v, c in zip(values, counts, strict=True)}


def _slot(node: pd.Series, gpu: pd.Series) -> pd.Series:
    return node.astype(str) + "/" + pd.to_numeric(gpu).astype(np.int64).astype(str)


def label_rows(
    rows: pd.DataFrame,
    failures: pd.DataFrame,
    *,
    repairs: pd.DataFrame | None = None,
    horizon_s: float = DEFAULT_HORIZON_S,
    censor_early: bool = True,
    label_end: float | None = None,
    settle_s: float = 3600.0,
) -> Labels:
    """Label each row of `rows` (columns node, gpu, timestamp).

    `failures`: node, gpu, failure_time (Unix s), fault_class (the class the fault resolved to), and
    optionally id and precursor_start (NaN when unknown). `repairs`: node, time — the first repair of the
    node at or after a failure ends that failure's exclusion (none: excluded to the end).
    """
    missing = [c for c in FAILURE_COLUMNS if c not in failures.columns]
    if missing:
        raise ValueError(f"failures lack columns: {', '.join(missing)}")
    n = len(rows)
    left = pd.DataFrame(
        {
            "slot": _slot(rows["node"], rows["gpu"]).to_numpy(),
            "node": rows["node"].astype(str).to_numpy(),
            "t": rows["timestamp"].to_numpy(dtype=np.float64),
            "row": np.arange(n),
        }
    ).sort_values("t", kind="stable")
    fails = _failures(failures, repairs)
    hardware = fails[fails["hardware"]]
    other = fails[~fails["hardware"]]

    nxt = _next(left, hardware, allow_exact=False)
    ttf = nxt["failure_time"].to_numpy() - left["t"].to_numpy()
    positive = ttf <= horizon_s
    last = _previous(left, hardware)
    after = left["t"].to_numpy() < last["repaired_at"].to_numpy() + settle_s
    nxt_other = _next(left, other, allow_exact=False)
    with np.errstate(invalid="ignore"):
        ambiguous = ((nxt_other["failure_time"].to_numpy() - left["t"].to_numpy()) <= horizon_s) | (
            left["t"].to_numpy() >= nxt_other["precursor_start"].to_numpy()
        )
    early = np.zeros(n, dtype=bool)
    if censor_early:
        with np.errstate(invalid="ignore"):
            early = (left["t"].to_numpy() >= nxt["precursor_start"].to_numpy()) & (ttf > horizon_s)
    censored = np.zeros(n, dtype=bool)
    if label_end is not None:
        censored = left["t"].to_numpy() + horizon_s > label_end

    status = np.full(n, Status.NEGATIVE, dtype=np.int8)
    status[censored] = Status.CENSORED
    status[early] = Status.EARLY
    status[ambiguous] = Status.AMBIGUOUS
    status[positive] = Status.POSITIVE
    status[after] = Status.AFTER_FAILURE

    order = left["row"].to_numpy()
    out_status = np.empty(n, dtype=np.int8)
    out_status[order] = status
    out_ttf = np.full(n, np.nan)
    out_ttf[order] = ttf
    out_id = np.empty(n, dtype=object)
    out_id[order] = nxt["id"].to_numpy(dtype=object)
    return Labels(
        label=(out_status == Status.POSITIVE).astype(np.int8),
        status=out_status,
        time_to_failure_s=out_ttf,
        failure_id=out_id,
    )


def _failures(failures: pd.DataFrame, repairs: pd.DataFrame | None) -> pd.DataFrame:
    fails = pd.DataFrame(
        {
            "slot": _slot(failures["node"], failures["gpu"]).to_numpy(),
            "node": failures["node"].astype(str).to_numpy(),
            "failure_time": pd.to_numeric(failures["failure_time"]).to_numpy(dtype=np.float64),
            "hardware": failures["fault_class"].astype(str).isin(HARDWARE_CLASSES).to_numpy(),
            "id": (
                failures["id"].astype(str).to_numpy()
                if "id" in failures.columns
                else np.array([f"row{i}" for i in range(len(failures))], dtype=object)
            ),
            "precursor_start": (
                pd.to_numeric(failures["precursor_start"]).to_numpy(dtype=np.float64)
                if "precursor_start" in failures.columns
                else np.full(len(failures), np.nan)
            ),
        }
    ).sort_values("failure_time", kind="stable")
    fails["repaired_at"] = np.inf
    if repairs is not None and len(repairs) and len(fails):
        fixes = pd.DataFrame(
            {"node": repairs["node"].astype(str).to_numpy(), "repair_time": repairs["time"].to_numpy(float)}
        ).sort_values("repair_time", kind="stable")
        joined = pd.merge_asof(
            fails,
            fixes,
            left_on="failure_time",
            right_on="repair_time",
            by="node",
            direction="forward",
        )
        fails["repaired_at"] = joined["repair_time"].fillna(np.inf).to_numpy()
    return fails.reset_index(drop=True)


def _next(left: pd.DataFrame, fails: pd.DataFrame, *, allow_exact: bool) -> pd.DataFrame:
    """The first failure of the slot strictly after each row (NaN/inf columns when none)."""
    right = fails[["slot", "failure_time", "precursor_start", "id"]]
    if right.empty:
        return _none(len(left))
    joined = pd.merge_asof(
        left[["slot", "t"]],
        right,
        left_on="t",
        right_on="failure_time",
        by="slot",
        direction="forward",
        allow_exact_matches=allow_exact,
    )
    joined["failure_time"] = joined["failure_time"].fillna(np.inf)
    return joined


def _previous(left: pd.DataFrame, fails: pd.DataFrame) -> pd.DataFrame:
    """The last failure of the slot at or before each row, with its repair time (-inf when none)."""
    right = fails[["slot", "failure_time", "repaired_at"]]
    if right.empty:
        return pd.DataFrame({"repaired_at": np.full(len(left), -np.inf)})
    joined = pd.merge_asof(
        left[["slot", "t"]], right, left_on="t", right_on="failure_time", by="slot", direction="backward"
    )
    joined["repaired_at"] = joined["repaired_at"].fillna(-np.inf)
    return joined


def _none(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "failure_time": np.full(n, np.inf),
            "precursor_start": np.full(n, np.nan),
            "id": np.full(n, None, dtype=object),
        }
    )
