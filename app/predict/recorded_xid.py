"""The XID features on the recorded path: the rules count XID events, Sickbay classifies them.

The rules record, per GPU, how many grid rows of the week saw the last-XID gauge change to a non-zero
value (`recorded_rules.XID_EVENTS`), one count for every code: classifying in PromQL took one `== bool
code` per code (38 for the "workload" class), the costliest rules of the group at fleet size. For the
hosts with an event in a scored week only (`with_events`: one query for the fleet), Prometheus is asked
for the rows where the gauge changed to a non-zero value (`_changes`: the gauge at a grid row against
itself a row before, on the 5-minute grid from the first row of the first instant's week to the last
instant; their hosts in batches, one query per batch), and Sickbay classifies each code and counts them
in the windows (`_counts`), as `features.events.xids` does over the raw rows: an event is a valid row
whose value differs from the row before and is not 0. Only the changes travel, not a week of the sticky
gauge (which holds its last code for days: NVIDIA's `DCGM_FI_DEV_XID_ERRORS` is "the value of the last
XID error encountered", https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-ids.html).
A scored GPU is regular (a sample at every row of the week: `recorded_reader`), so the row before is the
raw path's previous valid row and every window holds samples. Every GPU without a change in those
windows has no event: 0 (`merged`), or NaN where the short window's table has none (no XID sample), as
`recorded_features.combine` leaves it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import range_answers
from app.predict import recorded_rules as rr
from app.predict.features import fields as f
from app.predict.features.frame import KEY_COLUMNS
from app.predict.features.series import W7D, W24H
from app.predict.prometheus import Reader
from app.predict.promql import HostRef, host_matchers, host_ref, selector
from app.predict.recorded_reads import BY

FEATURES: tuple[str, ...] = ("xid_ignore_events_24h", "xid_workload_events_24h", "xid_hardware_events_7d")
HOST_BATCH = 200  # hosts per raw read: one query per batch


def with_events(reader: Reader, instants: Sequence[float]) -> list[HostRef]:
    """The hosts with a GPU whose recorded week, at any of the instants, holds an XID event.

    The value for grid instant `g` is written by the evaluation in `[g, g + step)`, so the range read
    ends a step less 1 ms after the last instant and starts at the first."""
    step = reader.settings.step_s
    at = instants[-1] + step - 0.001
    span_ms = round((instants[-1] - instants[0] + step) * 1000)
    query = f"max_over_time({rr.XID_EVENTS}[{span_ms}ms]) > 0"
    when = datetime.fromtimestamp(at, UTC)
    found: set[HostRef] = set()
    for one in reader.query_range(query, when, when):
        labels = one.get("metric", {}) if isinstance(one, Mapping) else {}
        ref = host_ref(labels) if isinstance(labels, Mapping) else None
        if ref is not None:
            found.add(ref)
    return sorted(found)


def read(reader: Reader, instants: Sequence[float], *, nodes: Collection[str]) -> pd.DataFrame:
    """`KEY_COLUMNS` and `FEATURES` at the instants for every GPU of the hosts in `nodes` with a change."""
    hosts = [h for h in with_events(reader, instants) if h.node in nodes]
    step = reader.settings.step_s
    first = instants[0] - W7D + step  # the first row of the first instant's week
    n_rows = round((instants[-1] - first) / step) + 1
    gpus: dict[tuple[str, int, str], int] = {}
    found: list[range_answers.Cells] = []
    with range_answers.collector_paused():
        for lo in range(0, len(hosts), HOST_BATCH):
            query = _changes(host_matchers(hosts[lo : lo + HOST_BATCH]), step)
            answer = reader.range_samples(query, _utc(first), _utc(instants[-1]))
            found.append(range_answers.parse(answer, gpus, grid_start=first, step=step, n_times=n_rows))
    if not gpus:
        return pd.DataFrame(columns=[*KEY_COLUMNS, *FEATURES])
    index = np.concatenate([c.index for c in found])
    slot = np.concatenate([c.slot for c in found])
    code = np.concatenate([c.value for c in found])
    return _counts(gpus, index, slot, code, instants, first=first, step=step)


def _changes(matchers: Sequence[str], step: float) -> str:
    """The rows where a GPU's XID gauge differs from the row before and is not 0 (a NaN is no sample)."""
    now = f"(max by ({BY}) ({selector(f.XID, matchers)}) > -Inf)"
    before = f"(max by ({BY}) ({selector(f.XID, matchers, offset_s=step)}) > -Inf)"
    return f"({now} != {before}) != 0"


def _counts(
    gpus: Mapping[tuple[str, int, str], int],
    index: npt.NDArray[np.int64],
    slot: npt.NDArray[np.int64],
    code: npt.NDArray[np.float64],
    instants: Sequence[float],
    *,
    first: float,
    step: float,
) -> pd.DataFrame:
    """Each GPU's events by class in the windows ending at each instant (`events.xids`' classes)."""
    codes = code.astype(np.int64)
    ignore = np.isin(codes, list(f.XID_IGNORE))
    hardware = np.isin(codes, list(f.XID_HARDWARE))
    classes = {
        "xid_ignore_events_24h": (ignore, W24H),
        "xid_workload_events_24h": (~ignore & ~hardware, W24H),
        "xid_hardware_events_7d": (hardware, W7D),
    }
    n = len(gpus)
    identities = sorted(gpus, key=gpus.__getitem__)
    parts = []
    for t in instants:
        last = round((t - first) / step)
        part = pd.DataFrame(
            {
                "node": [g[0] for g in identities],
                "gpu": np.array([g[1] for g in identities], dtype=np.int64),
                "uuid": [g[2] for g in identities],
                "timestamp": np.full(n, t, dtype=np.float64),
            }
        )
        for name, (kind, window) in classes.items():
            inside = kind & (slot <= last) & (slot > last - round(window / step))
            part[name] = np.bincount(index[inside], minlength=n).astype(np.float64)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def merged(table: pd.DataFrame, xid: pd.DataFrame) -> pd.DataFrame:
    """`table` with its XID features from `xid` where it has the GPU's row, 0 elsewhere, NaN kept."""
    if table.empty or not any(name in table.columns for name in FEATURES):
        return table
    keys = list(KEY_COLUMNS)
    found = None
    if not xid.empty:
        found = (
            table[keys]
            .astype({"node": str, "uuid": str})
            .merge(xid.astype({"node": str, "uuid": str}), on=keys, how="left")
        )
    for name in FEATURES:
        if name in table.columns:
            known = table[name].notna().to_numpy()
            value = np.zeros(len(table)) if found is None else found[name].to_numpy(dtype=np.float64)
            value = np.nan_to_num(value, nan=0.0)
            table[name] = np.where(known, value, np.nan).astype(np.float32)
    return table
