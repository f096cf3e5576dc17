"""Every feature of a regular GPU from the recording rules' series and instant vectors: no raw window.

`recorded_reader` reads, at the instants scoring asks for (the last recorded grid instant and `sustain_s`
before it), the rules' 24 h and 7 d sums, the hourly sums of the hour ending there, the hourly sums of the
five hours before it (summed into 6 h windows: `six`), and the exporter's fields themselves (the last
values: remapped rows, pending flags, retired pages). This module turns a row per GPU per instant of those
values into `features.FEATURES`, with the raw path's statistics (`series.poisson_surprise`,
`thermal.line_residual`, the floors and clips) and its peers (the median over the node's GPUs at the same
instant). Pure: numpy and pandas, no I/O.

It holds for *regular* GPUs only, which `recorded_reader` picks: a sample at every grid instant of the
last week and no counter reset in it. Then every window `(t - w, t]` runs its full length (no first row,
no reset to stop at: `since_reset` changes nothing), a counter's span is the window itself, and the
recorded sums are the features' sums over the same 5-minute rows:

- exact (to float rounding): counter increases and the rates, accelerations, surprise and dispersion built
  on them, shares (throttle classes over valid rows, violations), persistence, episodes,
  means over valid rows, last values, missing shares (0: a sample at every row), hours since reset;
- to float rounding of different summation orders: the thermal residuals' 7-day line (Prometheus averages
  2,016 values where `features` differences prefix sums of the whole fleet's), within 1e-3 °C.

Fields: a regular GPU exports each of its fields at every row or not at all (the exporter's field list is
per host). A field the regular hosts do not export gives NaN features, as in `features`.
XID events come from `recorded_xid` (the raw gauge of the few GPUs with an event in the week, classified
by the raw path's function); this module gives every GPU 0 for them first.
For a GPU that is not regular (new, replaced, reset, with gaps) the features' windows stop at its first row
or last reset, which an instant vector cannot show: the reader reads such hosts raw.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from app.predict import recorded_rules as rr
from app.predict import recorded_thermal
from app.predict.features import FEATURES, events, links, memory
from app.predict.features import fields as f
from app.predict.features.series import (
    HOUR,
    W1H,
    W6H,
    W7D,
    W24H,
    Array,
    poisson_surprise,
    relative,
    sum_optional,
)
from app.predict.recorded_rows import Rows, six


def combine(r: Rows, *, lookback_start: float) -> pd.DataFrame:
    """Features (`KEY_COLUMNS` + `FEATURES`) of each row: regular GPUs at the instants read.

    The rows' values: the source fields at the instant, each record of `rr.READ` there, each of
    `rr.READ_HOURLY` there and summed over 6 h (`six`); `lookback_start`: the first instant the raw
    path's look-back would read (its hours since reset count from there)."""
    out: dict[str, Array] = {}
    out |= _memory(r)
    out |= recorded_thermal.thermal(r)
    out |= recorded_thermal.throttle(r)
    out |= _links(r)
    out |= _events(r, lookback_start=lookback_start)
    table = r.keys.copy()
    for name in FEATURES:
        table[name] = out.get(name, np.full(len(r), np.nan)).astype(np.float32)
    return table


def _rates(r: Rows, metrics: list[str], per_s: float) -> tuple[Array, Array]:
    """The 1 h and 6 h rates of the sum of these counters (their hourly increases)."""
    hour = [rr.hourly(m, "increase{w}") for m in metrics]
    one = _summed(*(r[name] for name in hour))
    sixh = _summed(*(r[six(name)] for name in hour))
    return one / W1H * per_s, sixh / W6H * per_s


def _summed(*parts: Array) -> Array:
    """`series.sum_optional` of at least one part."""
    total = sum_optional(*parts)
    if total is None:
        raise ValueError("no counter to sum")  # unreachable: the callers pass a present field's
    return total


def _memory(r: Rows) -> dict[str, Array]:
    out: dict[str, Array] = {}
    sbe = r.either(f.SBE_AGG, f.SBE_VOL)
    if sbe is not None:
        r1, r6 = _rates(r, [sbe], HOUR)
        r24 = r[rr.increase(sbe, rr.DAY_MIN)] / W24H * HOUR
        floor = memory.SBE_FLOOR_PER_H
        out["sbe_rate_1h"] = r1
        n, total = r[six(rr.hourly(sbe, "increase{w}"))], r[rr.increase(sbe, rr.WEEK_MIN)]
        span, before = np.full(len(r), W6H), np.full(len(r), W7D - W6H)
        z = poisson_surprise(n, total, span, before, ok=~np.isnan(n) & ~np.isnan(total))
        out["sbe_surprise_6h_7d"] = np.maximum(z - memory.SBE_NOISE_SD, 0.0)
        out["sbe_vs_peers_6h"] = relative(r6, r.peer_median(r6), floor)
        out["sbe_accel_1h_6h"] = relative(r1, r6, floor)
        out["sbe_accel_6h_24h"] = relative(r6, r24, floor)
        out["sbe_persistence_24h"] = r[rr.persistence(sbe)]
    dbe = r.either(f.DBE_AGG, f.DBE_VOL)
    if dbe is not None:
        out["dbe_increase_24h"] = r[rr.increase(dbe, rr.DAY_MIN)]
    for name, prefix in ((f.ROWS_CORRECTABLE, "correctable"), (f.ROWS_UNCORRECTABLE, "uncorrectable")):
        if r.has(name):
            out[f"{prefix}_remapped_rows"] = r[name]
            out[f"{prefix}_remapped_rows_growth_24h"] = r[rr.increase(name, rr.DAY_MIN)]
    for name, feature in (
        (f.REMAP_PENDING, "row_remap_pending"),
        (f.REMAP_FAILURE, "row_remap_failure"),
        (f.RETIRED_PENDING, "retired_pages_pending"),
    ):
        if r.has(name):
            out[feature] = r[name]
    retired = sum_optional(*(r[name] for name in (f.RETIRED_SBE, f.RETIRED_DBE) if r.has(name)))
    if retired is not None:
        out["retired_pages"] = retired
    return out


def _links(r: Rows) -> dict[str, Array]:
    out: dict[str, Array] = {}
    if r.has(f.PCIE_REPLAY):
        floor = links.PCIE_FLOOR_PER_MIN
        r1, r6 = _rates(r, [f.PCIE_REPLAY], 60.0)
        r7d = r[rr.increase(f.PCIE_REPLAY, rr.WEEK_MIN)] / W7D * 60.0
        out["pcie_replay_rate_1h"] = r1
        out["pcie_replay_vs_baseline_6h_7d"] = relative(r6, r7d, floor)
        out["pcie_replay_vs_peers_1h"] = relative(r1, r.peer_median(r1), floor)
        out["pcie_replay_accel_1h_6h"] = relative(r1, r6, floor)
        valid = r[six(rr.PCIE_COUNT.name("1h"))]
        active = r[six(rr.hourly(f.PCIE_REPLAY, "active1h_sum_over_time{w}"))]
        out["pcie_replay_persistence_6h"] = _share(active, valid)
        out["pcie_replay_persistence_24h"] = r[rr.persistence(f.PCIE_REPLAY)]
        out["pcie_replay_episodes_24h"] = r[rr.EPISODES]
        total = r[six(rr.hourly(f.PCIE_REPLAY, "increase{w}"))]
        out["pcie_replay_burstiness_6h"] = _dispersion(valid, total, r[six(rr.PCIE_SQUARES.name("1h"))])
    crc_fields = [name for name in (f.NVLINK_CRC_FLIT, f.NVLINK_CRC_DATA) if r.has(name)]
    if crc_fields:
        floor = links.NVLINK_FLOOR_PER_S
        r1, r6 = _rates(r, crc_fields, 1.0)
        r24 = _summed(*(r[rr.increase(name, rr.DAY_MIN)] for name in crc_fields)) / W24H
        r7d = _summed(*(r[rr.increase(name, rr.WEEK_MIN)] for name in crc_fields)) / W7D
        out["nvlink_crc_rate_1h"] = r1
        out["nvlink_crc_vs_baseline_6h_7d"] = relative(r6, r7d, floor)
        out["nvlink_crc_vs_peers_1h"] = relative(r1, r.peer_median(r1), floor)
        out["nvlink_crc_accel_1h_24h"] = relative(r1, r24, floor)
        out["nvlink_crc_persistence_24h"] = r[rr.persistence(f.NVLINK_CRC_FLIT)]
    if r.has(f.NVLINK_REPLAY):
        out["nvlink_replay_rate_6h"] = _rates(r, [f.NVLINK_REPLAY], 1.0)[1]
    if r.has(f.NVLINK_RECOVERY):
        out["nvlink_recovery_increase_24h"] = r[rr.increase(f.NVLINK_RECOVERY, rr.DAY_MIN)]
    return out


def _share(flagged: Array, valid: Array) -> Array:
    """`series.share` from its two counts."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(valid > 0, flagged / valid, np.nan)


def _dispersion(count: Array, total: Array, squares: Array) -> Array:
    """`links._dispersion` from the window's valid rows, increments' sum and their squares' sum."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / count
        variance = np.maximum(squares / count - mean * mean, 0.0)
        index = np.where(mean > 0, variance / mean, 0.0)
    return np.where(count > 1, np.log1p(index), np.nan)


def _events(r: Rows, *, lookback_start: float) -> dict[str, Array]:
    out: dict[str, Array] = {}
    if r.has(f.XID):
        # Known, and 0 until `recorded_xid.merged` (the reader) puts in the few GPUs' values read from the raw gauge.
        out |= {name: np.zeros(len(r)) for name in events.FEATURES if name.startswith("xid_")}
    # A regular GPU has a sample at every row: nothing is missing.
    out["missing_share_1h"] = np.zeros(len(r))
    out["missing_share_24h"] = np.zeros(len(r))
    if any(r.has(name) for name in f.VOLATILE_COUNTERS):
        # No reset within the week: the raw path's windows start at its look-back's first row.
        t = r.keys["timestamp"].to_numpy(dtype=np.float64)
        out["hours_since_reset"] = np.minimum((t - lookback_start) / HOUR, events.MAX_HOURS_SINCE_RESET)
    return out
