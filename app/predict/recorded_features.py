"""The features from a short raw window and the recording rules' long windows (`recorded_rules`).

`compute_features` over the last hours of raw samples gets every feature whose windows fit in them (1 h,
6 h, peers, last values) exactly as over a week; the features that reach back 24 h or 7 d are then
recomputed from the recorded series' values at the same instants, combined with the short window's
parts as `features` combines its own. Pure: numpy and pandas, no I/O.

It holds for *regular* GPUs only, which `recorded_reader` picks: a sample at every grid instant of the
last week and no counter reset in it. Then every long window runs its full length (no first row, no
reset to stop at), a span is the window itself, and the recorded sums are the features' sums:

- exact (to float rounding): counter increases and the rates, accelerations and surprise built on them,
  persistence, episodes, XID events, missing share, hours since reset;
- to float rounding of different summation orders: the thermal residuals' 7-day line (Prometheus averages
  2,016 values where `features` differences prefix sums of the whole fleet's), within 1e-3 °C.

For a GPU that is not regular (new, replaced, reset, with gaps) the features' windows stop at its first row
or last reset, which an instant vector cannot show: the reader reads such hosts raw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from app.predict import recorded_rules as rr
from app.predict.features import compute, events, links, memory, thermal
from app.predict.features import fields as f
from app.predict.features.frame import KEY_COLUMNS, Normalised
from app.predict.features.series import (
    HOUR,
    W1H,
    W6H,
    W7D,
    W24H,
    Array,
    Series,
    counter,
    poisson_surprise,
    rate,
    relative,
    sum_optional,
)

# The features this module recomputes; every other comes from the short window as it is.
LONG_FEATURES: tuple[str, ...] = (
    "sbe_surprise_6h_7d",
    "sbe_accel_6h_24h",
    "sbe_persistence_24h",
    "dbe_increase_24h",
    "correctable_remapped_rows_growth_24h",
    "uncorrectable_remapped_rows_growth_24h",
    "gpu_temp_vs_baseline_c",
    "mem_temp_vs_baseline_c",
    "mem_gpu_temp_gap_vs_baseline_c",
    "mem_temp_rise_6h_c",
    "gpu_temp_vs_peers_c",
    "mem_temp_vs_peers_c",
    "pcie_replay_vs_baseline_6h_7d",
    "pcie_replay_persistence_24h",
    "pcie_replay_episodes_24h",
    "nvlink_crc_vs_baseline_6h_7d",
    "nvlink_crc_accel_1h_24h",
    "nvlink_crc_persistence_24h",
    "nvlink_recovery_increase_24h",
    "xid_ignore_events_24h",
    "xid_workload_events_24h",
    "xid_hardware_events_7d",
    "missing_share_24h",
    "hours_since_reset",
)

# The short window must hold the longest short window's rows and the sample before them: 6 h, plus the
# 1 h a 6 h persistence's first row looks back, plus a step.
SHORT_WINDOW_S = W6H + W1H + rr.STEP_S


def combine(
    short: pd.DataFrame,
    recorded: pd.DataFrame,
    *,
    instants: Sequence[float],
    lookback_start: float,
) -> pd.DataFrame:
    """Features (`KEY_COLUMNS` + `FEATURES`) of every GPU of `short` at `instants`.

    `short`: the raw window (a grid, as the reader reads it) of regular GPUs only, at least
    `SHORT_WINDOW_S` before the first instant; `recorded`: `KEY_COLUMNS` and a column per recorded series,
    their values at the instants; `lookback_start`: the first instant the raw path's look-back would read
    (its hours since reset count from there).
    """
    df, s = compute.prepared(short)
    s.keep(np.isin(s.t, np.asarray(instants, dtype=np.float64)))
    table = compute.table(df, s)
    if table.empty:
        return table
    values = _aligned(table, recorded)
    for name, computed in _long(df, s, values).items():
        known = ~np.isnan(table[name].to_numpy(dtype=np.float64))
        table[name] = np.where(known, computed, np.nan).astype(np.float32)
    if "hours_since_reset" in table.columns:
        hours = np.minimum(
            (table["timestamp"].to_numpy() - lookback_start) / HOUR, events.MAX_HOURS_SINCE_RESET
        )
        known = ~np.isnan(table["hours_since_reset"].to_numpy(dtype=np.float64))
        table["hours_since_reset"] = np.where(known, hours, np.nan).astype(np.float32)
    table["missing_share_24h"] = np.where(table["missing_share_24h"].notna(), 0.0, np.nan).astype(np.float32)
    return table


def _aligned(table: pd.DataFrame, recorded: pd.DataFrame) -> Mapping[str, Array]:
    """Each recorded series' value on the table's rows (NaN where it has none)."""
    keys = table[list(KEY_COLUMNS)].astype({"node": str, "uuid": str})
    if recorded.empty:
        return {name: np.full(len(table), np.nan) for name in rr.READ}
    merged = keys.merge(recorded.astype({"node": str, "uuid": str}), on=list(KEY_COLUMNS), how="left")
    return {
        name: merged[name].to_numpy(dtype=np.float64) if name in merged else np.full(len(table), np.nan)
        for name in rr.READ
    }


def _long(df: Normalised, s: Series, r: Mapping[str, Array]) -> dict[str, Array]:
    out: dict[str, Array] = {}
    out |= _memory(df, s, r)
    out |= _thermal(df, s, r)
    out |= _links(df, s, r)
    return out  # the XID features: `recorded_xid`, from the raw gauge of the GPUs with an event


def _either(df: Normalised, first: str, second: str) -> str | None:
    return first if first in df.fields else second if second in df.fields else None


def _memory(df: Normalised, s: Series, r: Mapping[str, Array]) -> dict[str, Array]:
    out: dict[str, Array] = {}
    sbe = _either(df, f.SBE_AGG, f.SBE_VOL)
    if sbe is not None:
        c = counter(s, df.fields[sbe])
        r6 = rate(s, c, W6H, HOUR)
        r24 = r[rr.increase(sbe, rr.DAY_MIN)] / W24H * HOUR
        out["sbe_accel_6h_24h"] = relative(r6, r24, memory.SBE_FLOOR_PER_H)
        z = _surprise(
            s, c.increments, s.span(W6H, c.samples, since_reset=True), r[rr.increase(sbe, rr.WEEK_MIN)]
        )
        out["sbe_surprise_6h_7d"] = np.maximum(z - memory.SBE_NOISE_SD, 0.0)
        out["sbe_persistence_24h"] = r[rr.persistence(sbe)]
    dbe = _either(df, f.DBE_AGG, f.DBE_VOL)
    if dbe is not None:
        out["dbe_increase_24h"] = r[rr.increase(dbe, rr.DAY_MIN)]
    for name, prefix in ((f.ROWS_CORRECTABLE, "correctable"), (f.ROWS_UNCORRECTABLE, "uncorrectable")):
        if name in df.fields:
            out[f"{prefix}_remapped_rows_growth_24h"] = r[rr.increase(name, rr.DAY_MIN)]
    return out


def _surprise(s: Series, increments: Array, span: Array, total: Array) -> Array:
    """`series.surprise` with the baseline's total from the recorded 7-day increase: a regular GPU's 7-day
    window spans the whole week, so the time before the recent window is the week less its span."""
    n = s.wsum(increments, W6H, since_reset=True)
    before = W7D - span
    return poisson_surprise(n, total, span, before, ok=(span > 0) & (before > 0) & ~np.isnan(total))


def _thermal(df: Normalised, s: Series, r: Mapping[str, Array]) -> dict[str, Array]:
    out: dict[str, Array] = {}
    gpu, mem, util = df.fields.get(f.GPU_TEMP), df.fields.get(f.MEMORY_TEMP), df.fields.get(f.GPU_UTIL)
    if gpu is not None:
        gpu_1h = _residual(s, gpu, util, W1H, r=r, which="gpu")
        out["gpu_temp_vs_baseline_c"] = gpu_1h
        out["gpu_temp_vs_peers_c"] = gpu_1h - s.peer_median(gpu_1h)
    if mem is not None:
        mem_1h = _residual(s, mem, util, W1H, r=r, which="mem")
        out["mem_temp_vs_baseline_c"] = mem_1h
        out["mem_temp_rise_6h_c"] = mem_1h - _residual(s, mem, util, W6H, r=r, which="mem")
        out["mem_temp_vs_peers_c"] = mem_1h - s.peer_median(mem_1h)
    if gpu is not None and mem is not None:
        out["mem_gpu_temp_gap_vs_baseline_c"] = _residual(s, mem - gpu, util, W1H, r=r, which="gap")
    return out


def _residual(
    s: Series, temp: Array, util: Array | None, window: float, *, r: Mapping[str, Array], which: str
) -> Array:
    """`thermal._residual` with the 7-day line's means from the recorded series."""
    mean_w = s.wmean(temp, window)
    mean_t7 = r[rr.thermal(which, "mean")]
    if util is None:
        return mean_w - mean_t7
    valid = ~np.isnan(temp) & ~np.isnan(util)
    mu, mt = r[rr.thermal(which, "util")], r[rr.thermal(which, "temp")]
    with np.errstate(invalid="ignore", divide="ignore"):
        u_w = s.wsum(np.where(valid, util, 0.0), window) / s.wcount(valid, window)
    return thermal.line_residual(
        mean_w,
        u_w,
        mean_t7,
        count=r[rr.thermal(which, "count")],
        mu=mu,
        mt=mt,
        var_u=r[rr.thermal(which, "util_sq")] - mu * mu,
        cov=r[rr.thermal(which, "util_temp")] - mu * mt,
    )


def _links(df: Normalised, s: Series, r: Mapping[str, Array]) -> dict[str, Array]:
    out: dict[str, Array] = {}
    if f.PCIE_REPLAY in df.fields:
        r6 = rate(s, counter(s, df.fields[f.PCIE_REPLAY]), W6H, 60.0)
        r7d = r[rr.increase(f.PCIE_REPLAY, rr.WEEK_MIN)] / W7D * 60.0
        out["pcie_replay_vs_baseline_6h_7d"] = relative(r6, r7d, links.PCIE_FLOOR_PER_MIN)
        out["pcie_replay_persistence_24h"] = r[rr.persistence(f.PCIE_REPLAY)]
        out["pcie_replay_episodes_24h"] = r[rr.EPISODES]
    crc_fields = [name for name in (f.NVLINK_CRC_FLIT, f.NVLINK_CRC_DATA) if name in df.fields]
    crc = sum_optional(*(df.fields[name] for name in crc_fields))
    if crc is not None:
        c = counter(s, crc)
        r1, r6 = rate(s, c, W1H, 1.0), rate(s, c, W6H, 1.0)
        by_window = {
            w: sum_optional(*(r[rr.increase(name, w)] for name in crc_fields))
            for w in (rr.DAY_MIN, rr.WEEK_MIN)
        }
        r24 = _per_s(by_window[rr.DAY_MIN], W24H)
        r7d = _per_s(by_window[rr.WEEK_MIN], W7D)
        out["nvlink_crc_vs_baseline_6h_7d"] = relative(r6, r7d, links.NVLINK_FLOOR_PER_S)
        out["nvlink_crc_accel_1h_24h"] = relative(r1, r24, links.NVLINK_FLOOR_PER_S)
        out["nvlink_crc_persistence_24h"] = r[rr.persistence(f.NVLINK_CRC_FLIT)]
    if f.NVLINK_RECOVERY in df.fields:
        out["nvlink_recovery_increase_24h"] = r[rr.increase(f.NVLINK_RECOVERY, rr.DAY_MIN)]
    return out


def _per_s(total: Array | None, window: float) -> Array:
    if total is None:
        raise ValueError("no counter to take a rate of")  # unreachable: a CRC field is present
    return total / window
