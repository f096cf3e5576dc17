"""Input normalisation: any frame of dcgm-exporter fields → rows sorted by GPU then time, fields as arrays.

The input is one row per GPU per instant (the simulator's `timeseries` table, or what `predict.prometheus`
reads), with a host column (`node`, `Hostname`, `hostname`, `kubernetes_node` or `instance`), `gpu`,
optionally `uuid`/`UUID` and `present`, a time (`timestamp` in Unix seconds, or `time`), and DCGM fields
under their pre-4.6 names (4.6 aliases are renamed on the way in). A field that is absent, or blank in
every row, is left out of `Normalised.fields`: its features are NaN, never zeros. A GPU identity is
(node, gpu index, uuid): a replaced board starts a new series.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from app.predict.features.fields import ALIASES, DCGM_BLANK_MIN, SOURCE_METRICS
from app.predict.features.series import Array, Index, Mask

KEY_COLUMNS: tuple[str, ...] = ("node", "gpu", "uuid", "timestamp")
HOST_COLUMNS: tuple[str, ...] = ("node", "Hostname", "hostname", "kubernetes_node", "instance")


def host_column(frame: pd.DataFrame) -> str | None:
    """The column naming the host: the first of `HOST_COLUMNS` the frame has."""
    return next((name for name in HOST_COLUMNS if name in frame.columns), None)


@dataclass(frozen=True, slots=True)
class Normalised:
    """A frame's rows sorted by GPU then time: identity columns, fields as float arrays, presence."""

    keys: pd.DataFrame
    node_codes: Index
    group: Index
    fields: dict[str, Array]
    present: Mask | None

    def __len__(self) -> int:
        return len(self.keys)


def normalise(frame: pd.DataFrame) -> Normalised:
    """Rename aliases, derive `node`/`uuid`/`timestamp`, blank DCGM sentinels, sort by GPU then time."""
    renamed = frame.rename(columns={old: new for old, new in ALIASES.items() if new not in frame.columns})
    host = host_column(renamed)
    if host is None:
        raise ValueError(f"the frame has no host column (one of {', '.join(HOST_COLUMNS)})")
    if "gpu" not in renamed.columns:
        raise ValueError("the frame has no `gpu` column")
    node = renamed[host].astype(str)
    if host == "instance":
        node = node.str.replace(r":\d+$", "", regex=True)
    node_codes, node_names = pd.factorize(node, sort=True)
    gpu = pd.to_numeric(renamed["gpu"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
    uuid_col = "uuid" if "uuid" in renamed.columns else "UUID" if "UUID" in renamed.columns else None
    uuids = renamed[uuid_col].fillna("").astype(str) if uuid_col else pd.Series("", index=renamed.index)
    uuid_codes, uuid_names = pd.factorize(uuids, sort=True)
    t = timestamps(renamed)
    order = np.lexsort((t, uuid_codes, gpu, node_codes))
    node_codes, gpu, uuid_codes, t = node_codes[order], gpu[order], uuid_codes[order], t[order]
    change = np.ones(len(order), dtype=bool)
    if len(order):
        change[1:] = (
            (node_codes[1:] != node_codes[:-1]) | (gpu[1:] != gpu[:-1]) | (uuid_codes[1:] != uuid_codes[:-1])
        )
    group = np.cumsum(change, dtype=np.int64) - 1
    keys = pd.DataFrame(
        {
            "node": pd.Categorical.from_codes(node_codes, categories=pd.Index(node_names, dtype=object)),
            "gpu": gpu,
            "uuid": pd.Categorical.from_codes(uuid_codes, categories=pd.Index(uuid_names, dtype=object)),
            "timestamp": t,
        }
    )
    fields: dict[str, Array] = {}
    for name in SOURCE_METRICS:
        if name in renamed.columns:
            values = pd.to_numeric(renamed[name], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            values = values[order]
            values[values >= DCGM_BLANK_MIN] = np.nan
            if not np.isnan(values).all():
                fields[name] = values
    present: Mask | None = None
    if "present" in renamed.columns:
        present = pd.to_numeric(renamed["present"], errors="coerce").fillna(0).to_numpy()[order] > 0
    return Normalised(
        keys=keys, node_codes=node_codes.astype(np.int64), group=group, fields=fields, present=present
    )


def timestamps(frame: pd.DataFrame) -> Array:
    """Unix seconds of each row, from `timestamp` or an ISO/datetime `time` column."""
    if "timestamp" in frame.columns:
        return pd.to_numeric(frame["timestamp"], errors="coerce").to_numpy(dtype=np.float64)
    if "time" in frame.columns:
        stamps = pd.to_datetime(frame["time"], utc=True, format="ISO8601")
        return stamps.astype("int64").to_numpy(dtype=np.float64) / _unit_per_second(stamps)
    raise ValueError("the frame has no `timestamp` (Unix seconds) or `time` column")


def _unit_per_second(stamps: pd.Series) -> float:
    unit = np.datetime_data(stamps.dt.tz_localize(None).to_numpy().dtype)[0]
    return {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[unit]
