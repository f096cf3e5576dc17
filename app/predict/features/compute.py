"""`compute_features`: a frame of dcgm-exporter samples → one row of `FEATURES` per GPU per instant asked for."""

from __future__ import annotations

import numpy as np
import pandas as pd

from app.predict.features import events, links, memory, thermal
from app.predict.features.catalog import FEATURES
from app.predict.features.frame import Normalised, normalise
from app.predict.features.series import Array, Mask, Series, nan, series


def compute_features(
    frame: pd.DataFrame,
    *,
    every_s: float | None = None,
    last_only: bool = False,
    tail_s: float | None = None,
) -> pd.DataFrame:
    """Features for the rows of `frame`: `KEY_COLUMNS` then `FEATURES`, sorted by GPU then time.

    Which rows come back (windows always use every sample): all; with `every_s`, one row per GPU per
    bucket of that many seconds (the first in each), for training on a coarser grid than the samples;
    with `last_only`, each GPU's last row; with `tail_s`, each GPU's rows of its last `tail_s` seconds
    (scoring, when an alarm must be sustained). Peer features compare the GPUs of one node, so a caller
    that splits a fleet must keep each node's rows together.
    """
    df, s = prepared(frame, every_s=every_s, last_only=last_only, tail_s=tail_s)
    return table(df, s)


def prepared(
    frame: pd.DataFrame,
    *,
    every_s: float | None = None,
    last_only: bool = False,
    tail_s: float | None = None,
) -> tuple[Normalised, Series]:
    """The normalised frame and its sorted view, resets found and output rows chosen (`compute_features`)."""
    df = normalise(frame)
    s = series(df.group, df.keys["timestamp"].to_numpy(dtype=np.float64), df.node_codes)
    s.with_resets(events.resets(df, s))
    keep = _keep(s, every_s=every_s, last_only=last_only, tail_s=tail_s)
    if keep is not None:
        s.keep(keep)
    return df, s


def table(df: Normalised, s: Series) -> pd.DataFrame:
    """`KEY_COLUMNS` then `FEATURES` at the view's output rows."""
    n = len(s.out)
    out: dict[str, Array] = {}
    for family in (
        memory.memory,
        thermal.thermal,
        thermal.throttle,
        links.links,
        events.xids,
        events.quality,
    ):
        out.update(family(df, s))
    result = df.keys.iloc[s.out].reset_index(drop=True)
    for name in FEATURES:
        values = out.get(name)
        result[name] = (nan(n) if values is None else values).astype(np.float32)
    return result


def _keep(s: Series, *, every_s: float | None, last_only: bool, tail_s: float | None) -> Mask | None:
    if last_only or tail_s is not None:
        last = np.ones(s.size, dtype=bool)
        if s.size:
            last[:-1] = s.group[1:] != s.group[:-1]
        if last_only:
            return last
        last_index = np.flip(np.minimum.accumulate(np.flip(np.where(last, np.arange(s.size), s.size))))
        return np.asarray(s.t >= s.t[last_index] - float(tail_s or 0.0), dtype=bool)
    if every_s is None:
        return None
    bucket = np.floor(s.t / every_s)
    before = s.previous(bucket)
    return np.asarray(np.isnan(before) | (bucket != before), dtype=bool)
