"""The scoring service's look-back window: the last `lookback` of samples, refreshed incrementally.

A full grid — every GPU seen has a row at every instant (present=0 where it has no sample) — kept by
array copies as instants leave and arrive, so a scoring cycle reads only the new steps from Prometheus.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import prometheus, range_answers
from app.predict.prometheus import Reader


class RecentWindow:
    """The last `lookback` of samples, refreshed incrementally: each `refresh(now)` reads only new steps.

    The window is a full grid: every GPU seen has a row at every instant (present=0 where it has no sample),
    GPU after GPU, instants in order. A refresh drops the instants that left the look-back and appends the
    new ones by array copies (`_extend_grid`), never re-matching the whole window row by row; a read that
    is not such a grid (a `Reader` subclass's) is merged in by `_fill_grid`, the general way, instead.
    """

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self._frame: pd.DataFrame | None = None
        self._until: float | None = None
        self._times: npt.NDArray[np.float64] | None = None  # the window's instants, while it is a grid

    def refresh(self, now: datetime) -> pd.DataFrame:
        settings = self.reader.settings
        now_s = prometheus.aware(now).timestamp()
        oldest = now_s - settings.lookback_s
        if self._frame is None or self._until is None or self._until < oldest:
            frame = self.reader.read(datetime.fromtimestamp(oldest, UTC), prometheus.aware(now))
            times = _grid_times(frame)
            if times is None:
                frame = _fill_grid(frame)
                times = _grid_times(frame)
        else:
            start = datetime.fromtimestamp(self._until + settings.step_s, UTC)
            new = (
                self.reader.read(start, prometheus.aware(now))
                if start <= prometheus.aware(now)
                else self._frame.iloc[0:0]
            )
            extended = (
                None if self._times is None else _extend_grid(self._frame, self._times, new, oldest=oldest)
            )
            if extended is None:
                frame = pd.concat([self._frame, new], ignore_index=True)
                frame = _fill_grid(frame[frame["timestamp"] >= oldest])
                times = _grid_times(frame)
            else:
                frame, times = extended
        if len(frame):
            self._until = float(frame["timestamp"].max())
        self._frame = frame.reset_index(drop=True)
        self._times = times
        return self._frame


_KEYS = ("node", "gpu", "uuid")


def _fill_grid(frame: pd.DataFrame) -> pd.DataFrame:
    """Every GPU seen gets a row at every instant (present=0 where it has none): a gap is a feature."""
    if frame.empty:
        return frame
    gpus = frame[list(_KEYS)].drop_duplicates()
    times = pd.DataFrame({"timestamp": np.unique(frame["timestamp"].to_numpy())})
    full = gpus.merge(times, how="cross")
    merged = full.merge(frame, on=[*_KEYS, "timestamp"], how="left")
    merged["present"] = merged["present"].fillna(0).astype(np.int64)
    return merged


def _grid_times(frame: pd.DataFrame) -> npt.NDArray[np.float64] | None:
    """The instants of `frame` if it is a full grid as `_fill_grid` makes one — rows GPU after GPU, each GPU
    once, all at the same increasing instants, then the sample columns (float) and `present` (int) — else
    None. `Reader.read` returns such grids."""
    n = len(frame)
    columns = list(frame.columns)
    if n == 0 or columns[:4] != [*_KEYS, "timestamp"] or columns[-1] != "present":
        return None
    if frame["present"].dtype != np.int64 or frame["timestamp"].dtype != np.float64:
        return None
    if any(frame[name].dtype != np.float64 for name in columns[4:-1]):
        return None
    t = frame["timestamp"].to_numpy()
    backwards = np.flatnonzero(t[1:] <= t[:-1])
    k = int(backwards[0]) + 1 if len(backwards) else n
    if n % k or not np.array_equal(t.reshape(-1, k), np.broadcast_to(t[:k], (n // k, k))):
        return None
    for key in _KEYS:
        values = frame[key].to_numpy().reshape(-1, k)
        if not (values == values[:, :1]).all():
            return None
    if frame[list(_KEYS)].iloc[::k].duplicated().any():
        return None
    return t[:k].copy()


def _extend_grid(
    window: pd.DataFrame, times: npt.NDArray[np.float64], new: pd.DataFrame, *, oldest: float
) -> tuple[pd.DataFrame, npt.NDArray[np.float64]] | None:
    """`window` (a grid at `times`) less the instants before `oldest`, with `new` (a read of later instants)
    appended, and its instants: what `_fill_grid` of both makes, by array copies. GPUs first seen in `new`
    come last, missing (present=0) at the older instants; GPUs absent from `new` are missing at the new.
    None when `new` is not a grid of the same columns after the window's last instant."""
    first = int(np.searchsorted(times, oldest))  # the instants before it leave the window
    if not len(new):
        if first == 0:
            return window, times
        new_times = times[:0]
    else:
        grid = _grid_times(new)
        if grid is None or grid[0] <= times[-1] or not new.dtypes.equals(window.dtypes):
            return None
        new_times = grid
    k_old, k_new = len(times), len(new_times)
    n_old, n_new = len(window) // k_old, len(new) // k_new if k_new else 0
    instants = np.concatenate([times[first:], new_times])
    k_kept = k_old - first
    old_gpus = window[list(_KEYS)].iloc[::k_old]
    new_gpus = new[list(_KEYS)].iloc[::k_new] if k_new else old_gpus.iloc[:0]
    row_of = {gpu: i for i, gpu in enumerate(old_gpus.itertuples(index=False, name=None))}
    rows = np.empty(n_new, dtype=np.int64)
    added: list[int] = []
    for j, gpu in enumerate(new_gpus.itertuples(index=False, name=None)):
        row = row_of.get(gpu)
        if row is None:
            row = row_of[gpu] = n_old + len(added)
            added.append(j)
        rows[j] = row
    gpus = pd.concat([old_gpus, new_gpus.iloc[added]], ignore_index=True)
    n_gpus = len(gpus)

    def extended(column: str, out: npt.NDArray[Any], missing: float) -> None:
        block = out.reshape(n_gpus, len(instants))
        block[:n_old, :k_kept] = window[column].to_numpy().reshape(n_old, k_old)[:, first:]
        block[n_old:, :k_kept] = missing
        block[:, k_kept:] = missing
        if k_new:
            block[rows, k_kept:] = new[column].to_numpy().reshape(n_new, k_new)

    names = list(window.columns[4:-1])
    values = np.empty((len(names), n_gpus * len(instants)))
    for name, out in zip(names, values, strict=True):
        extended(name, out, np.nan)
    present = np.empty(n_gpus * len(instants), dtype=np.int64)
    extended("present", present, 0)
    keys = {key: gpus[key].repeat(len(instants)).array for key in _KEYS}
    timestamps = np.tile(instants, n_gpus)
    return range_answers.grid_frame(keys, timestamps, names=names, values=values, present=present), instants
