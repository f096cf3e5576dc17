"""The XID features on the recorded path: the rules count XID events, Sickbay classifies them.

The rules record, per GPU, how many grid rows of the week saw the last-XID gauge change to a non-zero
value (`recorded_rules.XID_EVENTS`), one count for every code: classifying in PromQL took one `== bool
code` per code (38 for the "workload" class), the costliest rules of the group at fleet size. A GPU with
an XID event in its week is rare. For those GPUs only (`with_events`: one query for the fleet), the raw
gauge is read on the 5-minute grid from a week before the first instant scored to the last (`read`: their
hosts, in batches, one query per batch), and the three XID features are `features.events.xids` over it:
the raw path's function on the raw path's rows, so the values are the raw path's. Every other GPU has no
event in any of those windows: 0 (`merged`), or NaN where the short window's table has none (no XID
sample), as `recorded_features.combine` leaves it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from app.predict import recorded_rules as rr
from app.predict.features import compute, events
from app.predict.features import fields as f
from app.predict.features.frame import KEY_COLUMNS
from app.predict.features.series import W7D
from app.predict.prometheus import Reader
from app.predict.promql import HostRef, host_ref

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
    """`KEY_COLUMNS` and `FEATURES` at the instants for every GPU of the hosts in `nodes` with an event."""
    hosts = [h for h in with_events(reader, instants) if h.node in nodes]
    xid = Reader(replace(reader.settings, metrics=(f.XID,)), client=reader.client)
    start = datetime.fromtimestamp(instants[0] - W7D, UTC)  # the row before the week's first
    end = datetime.fromtimestamp(instants[-1], UTC)
    parts = [
        _features(xid.read(start, end, hosts=hosts[lo : lo + HOST_BATCH]), instants)
        for lo in range(0, len(hosts), HOST_BATCH)
    ]
    reader.queries += xid.queries
    columns = [*KEY_COLUMNS, *FEATURES]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def _features(frame: pd.DataFrame, instants: Sequence[float]) -> pd.DataFrame:
    df, s = compute.prepared(frame)
    s.keep(np.isin(s.t, np.asarray(instants, dtype=np.float64)))
    out = df.keys.iloc[s.out].reset_index(drop=True)[list(KEY_COLUMNS)]
    values = events.xids(df, s)
    for name in FEATURES:
        out[name] = values.get(name, np.full(len(out), np.nan))
    return out


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
