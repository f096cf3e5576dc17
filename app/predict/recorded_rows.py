"""The recorded path's values as features read them: a row per GPU per instant, each value by name.

`recorded_reader` assembles the rows (the instant's own values, and each hourly record's sum over the 6
hours ending there under `six(name)`); `recorded_features` and `recorded_thermal` read them. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict.features.fields import DCGM_BLANK_MIN, SOURCE_METRICS
from app.predict.features.frame import KEY_COLUMNS
from app.predict.features.series import Array

SIX = "@6h"  # the column of an hourly record's sum over the 6 hours ending at the row's instant


def six(name: str) -> str:
    return name + SIX


@dataclass(frozen=True, slots=True)
class Rows:
    """A row per GPU per instant: its keys, the values read there by name, and the fields present."""

    keys: pd.DataFrame
    values: Mapping[str, Array]
    fields: frozenset[str]  # source fields with a value on some row: `Normalised.fields`' keys
    # Each row's group of peers (its node at its instant), numbered once: `peer_median` is called per
    # feature, and factorizing (node, timestamp) pairs cost ~0.2 s a call at 80,000 GPUs.
    peers: npt.NDArray[np.intp] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        nodes, _ = pd.factorize(self.keys["node"].astype(str))
        times, instants = pd.factorize(self.keys["timestamp"])
        pairs, _ = pd.factorize(nodes.astype(np.int64) * max(len(instants), 1) + times)
        object.__setattr__(self, "peers", pairs)

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, name: str) -> Array:
        found = self.values.get(name)
        return np.full(len(self), np.nan) if found is None else found

    def has(self, field: str) -> bool:
        return field in self.fields

    def either(self, first: str, second: str) -> str | None:
        return first if first in self.fields else second if second in self.fields else None

    def peer_median(self, values: Array) -> Array:
        """The median of a value over the GPUs of the same node at the same instant (NaN skipped)."""
        return (
            pd.Series(values).groupby(self.peers, sort=False).transform("median").to_numpy(dtype=np.float64)
        )


def rows(keys: pd.DataFrame, values: Mapping[str, Array]) -> Rows:
    """`Rows` of these keys (`KEY_COLUMNS`) and values, a row each; the exporter's blank values are
    missing, and a source field is present where some row has a value."""
    out: dict[str, Array] = {}
    fields: set[str] = set()
    for name, given in values.items():
        column = np.asarray(given, dtype=np.float64)
        if name in SOURCE_METRICS:
            column = np.where(column >= DCGM_BLANK_MIN, np.nan, column)
            if not np.isnan(column).all():
                fields.add(name)
        out[name] = column
    return Rows(keys=keys[list(KEY_COLUMNS)].reset_index(drop=True), values=out, fields=frozenset(fields))


def frame_rows(frame: pd.DataFrame) -> Rows:
    """`rows` of a frame: `KEY_COLUMNS` and a column per name."""
    names = [c for c in frame.columns if c not in KEY_COLUMNS]
    return rows(frame, {n: frame[n].to_numpy(dtype=np.float64, na_value=np.nan) for n in names})
