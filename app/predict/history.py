"""Failures read back from history, for labels where no simulator ground truth exists.

Three sources, all turned into the failures table `labels.label_rows` and `evaluate` read (the columns of
`dataset.Truth.failures`):

- the `DCGM_FI_DEV_XID_ERRORS` gauge in a samples frame: it holds the LAST XID, so a failure is a change
  of the value to an XID whose class is hardware (reset-gpu, reboot-node, replace) — the class comes from
  the XID catalog the caller passes, so the operator's overrides count;
- GPUs that vanish from a samples frame (`from_vanished`): a GPU that fell off the bus (XID 79) stops
  reporting, often before the exporter ever showed the 79. A GPU that stops reporting while another GPU
  of its node still reports (so not a reboot, nor a hung exporter), for `VANISHED_S` or more, failed
  (reboot-node). `from_samples` merges both;
- the remediation journal's hardware faults (the caller reads the journal; `from_records` takes rows).

Precursor starts are unknown in production (`precursor_start` is NaN): metrics that need them
("failures with precursors") then count nothing, while precision, recall, lead time and false alarms do.
Pure: pandas and numpy only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import features, labels

FAILURE_COLUMNS: tuple[str, ...] = (
    "id",
    "node",
    "gpu",
    "uuid",
    "mode",
    "failure_time",
    "precursor_start",
    "fault_class",
    "pending",
)
# Two reports of one failure (the XID gauge and the journal, or a fault that repeats while the node is
# being drained) closer than this are the same failure.
SAME_FAILURE_S = 3600.0
# A GPU missing for this long while a peer on its node still reports has fallen off the bus.
VANISHED_S = 900.0


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(FAILURE_COLUMNS))


def from_xid_series(frame: pd.DataFrame, xid_classes: Mapping[int, str]) -> pd.DataFrame:
    """Hardware failures from changes of the XID gauge; `xid_classes` maps an XID to its fault class."""
    data = features.normalise(frame)
    values = data.fields.get(features.XID)
    if values is None or not len(data):
        return empty()
    # Rows are sorted by GPU then time; `group` numbers the GPUs (node, index, uuid).
    same = np.zeros(len(data), dtype=bool)
    same[1:] = data.group[1:] == data.group[:-1]
    # The gauge's value before each row, carried over gaps (a gap is not a change).
    carried = pd.Series(values).groupby(data.group).ffill().to_numpy(dtype=np.float64)
    before = np.full(len(data), np.nan)
    before[1:] = np.where(same[1:], carried[:-1], np.nan)
    with np.errstate(invalid="ignore"):
        changed = ~np.isnan(values) & (values != 0) & (values != before) & same
    hardware = {int(x): cls for x, cls in xid_classes.items() if cls in labels.HARDWARE_CLASSES}
    codes = np.where(changed, values, 0).astype(np.int64)
    hit = changed & np.isin(codes, list(hardware))
    events = data.keys.loc[hit].assign(xid=codes[hit])
    rows = [
        {
            "node": str(e.node),
            "gpu": int(e.gpu),
            "uuid": str(e.uuid),
            "mode": f"xid-{int(e.xid)}",
            "failure_time": float(e.timestamp),
            "fault_class": hardware[int(e.xid)],
        }
        for e in events.itertuples(index=False)
    ]
    return _table(rows, prefix="X")


def from_vanished(frame: pd.DataFrame, *, min_missing_s: float = VANISHED_S) -> pd.DataFrame:
    """Reboot-node failures at the first missing sample of GPUs that stopped reporting while a peer on
    the same node still reported, and stayed away at least `min_missing_s` (or to the end of the frame)."""
    data = features.normalise(frame)
    if not len(data):
        return empty()
    if data.present is not None:
        present = data.present
    else:
        present = np.zeros(len(data), dtype=bool)
        for values in data.fields.values():
            present |= ~np.isnan(values)
    t = data.keys["timestamp"].to_numpy(dtype=np.float64)
    same = np.zeros(len(data), dtype=bool)
    same[1:] = data.group[1:] == data.group[:-1]
    before = np.zeros(len(data), dtype=bool)
    before[1:] = present[:-1]
    gone = same & before & ~present
    if not gone.any():
        return empty()
    # Peers reporting at the same instant on the same node.
    instant = pd.DataFrame({"node": data.node_codes, "t": t, "present": present.astype(np.int64)})
    reporting = instant.groupby(["node", "t"], sort=False)["present"].transform("sum").to_numpy()
    # How long each absence lasts: until the GPU's next present row, or the end of its series.
    index = np.arange(len(data))
    last_row = np.flip(np.minimum.accumulate(np.flip(np.where(_last_of_group(data.group), index, len(data)))))
    next_present = np.flip(np.minimum.accumulate(np.flip(np.where(present, index, len(data)))))
    back = np.where(next_present <= last_row, t[np.minimum(next_present, len(data) - 1)], np.inf)
    lasting = np.where(np.isinf(back), True, back - t >= min_missing_s)
    hit = gone & (reporting > 0) & lasting
    events = data.keys.loc[hit]
    rows = [
        {"node": str(node), "gpu": int(gpu), "uuid": str(uuid), "failure_time": float(t)}
        for node, gpu, uuid, t in zip(
            events["node"].astype(str),
            events["gpu"].to_numpy(dtype=np.int64),
            events["uuid"].astype(str),
            events["timestamp"].to_numpy(dtype=np.float64),
            strict=True,
        )
    ]
    return _table([{**r, "mode": "vanished", "fault_class": "reboot-node"} for r in rows], prefix="V")


def _last_of_group(group: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    last = np.ones(len(group), dtype=bool)
    last[:-1] = group[1:] != group[:-1]
    return last


def from_samples(
    frame: pd.DataFrame, xid_classes: Mapping[int, str], *, min_missing_s: float = VANISHED_S
) -> pd.DataFrame:
    """Hardware failures a samples frame shows: XID gauge changes and vanished GPUs, merged (ids "S…")."""
    both = merge(from_xid_series(frame, xid_classes), from_vanished(frame, min_missing_s=min_missing_s))
    if both.empty:
        return both
    return both.assign(id=[f"S{i + 1:05d}" for i in range(len(both))])


def from_records(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Failures from journal rows with node, gpu, time (Unix seconds) and fault_class; others are skipped."""
    rows = [
        {
            "node": str(r["node"]),
            "gpu": int(r["gpu"]),
            "uuid": str(r.get("uuid") or ""),
            "mode": str(r.get("mode") or "journal"),
            "failure_time": float(r["time"]),
            "fault_class": str(r["fault_class"]),
        }
        for r in records
        if r.get("node") and r.get("gpu") is not None and r.get("fault_class") in labels.HARDWARE_CLASSES
    ]
    return _table(rows, prefix="J")


def merge(*tables: pd.DataFrame) -> pd.DataFrame:
    """One row per failure: reports of the same GPU slot within `SAME_FAILURE_S` keep the earliest."""
    parts = [t for t in tables if not t.empty]
    if not parts:
        return empty()
    both = pd.concat(parts, ignore_index=True).sort_values(["node", "gpu", "failure_time"], kind="stable")
    return _merge_nearby(both)[list(FAILURE_COLUMNS)]


def _table(rows: list[dict[str, Any]], *, prefix: str) -> pd.DataFrame:
    if not rows:
        return empty()
    out = pd.DataFrame(rows).sort_values(["node", "gpu", "failure_time"], kind="stable")
    out = _merge_nearby(out)
    out.insert(0, "id", [f"{prefix}{i + 1:05d}" for i in range(len(out))])
    out["precursor_start"] = np.nan
    out["pending"] = False
    return out[list(FAILURE_COLUMNS)].reset_index(drop=True)


def _merge_nearby(table: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted by slot and time, less those within `SAME_FAILURE_S` of the slot's row before."""
    gap = table.groupby(["node", "gpu"], sort=False)["failure_time"].diff()
    return table.loc[(gap.isna() | (gap > SAME_FAILURE_S)).to_numpy()].reset_index(drop=True)


# Context rules whose fallback is what a lone XID means in history (the dbe-remap XID 48 is a hardware
# fault either way); per-link NVLink XIDs and follows-others need repeats or company, which the gauge,
# holding one value at a time, cannot show.
_FALLBACK_RULES = frozenset({"dbe-remap", "recovery-action"})


def xid_classes(catalog: Any, *, per_link: bool = False) -> dict[int, str]:
    """XID → fault class from a `config.rules.XidCatalog`, for `from_xid_series`.

    `per_link`: per-link NVLink XIDs (74, 144-150) count as their fallback class too. The classifier waits
    for repeats on one link, which the gauge cannot show; a backtest that must not miss NVLink failures
    counts every one (and may count a transient link error as a failure).
    """
    fallback_rules = _FALLBACK_RULES | ({"per-link"} if per_link else set())
    out: dict[int, str] = {}
    for xid, entry in catalog.xids.items():
        cls = entry.fault_class.value
        if cls == "depends":
            if entry.rule in fallback_rules and entry.fallback is not None:
                out[int(xid)] = str(entry.fallback)
            continue
        out[int(xid)] = cls
    return out
