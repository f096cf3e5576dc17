"""The thermal and throttling features of regular GPUs from recorded sums (`recorded_features`' rows).

A window's mean temperature and mean utilisation are ratios of the rules' hourly sums over valid rows
(`recorded_rules.thermal_hourly`: 1 h the instant's hour, 6 h its sum with the five before); the 7-day
line is the rules' (`recorded_rules.LINE`: fitted to their weekly moments as `thermal.line_residual` fits
the raw path's).
Throttle shares are hourly counts of rows in each class (`recorded_rules.THROTTLED`) over the rows with a
valid bitmask; the violation counters' shares their hourly increase per second of the hour. Pure.
"""

from __future__ import annotations

import numpy as np

from app.predict import recorded_rules as rr
from app.predict.features import fields as f
from app.predict.features import thermal as raw_thermal
from app.predict.features.series import W1H, Array
from app.predict.recorded_rows import Rows, six


def thermal(r: Rows) -> dict[str, Array]:
    out: dict[str, Array] = {}
    gpu, mem, util = r.has(f.GPU_TEMP), r.has(f.MEMORY_TEMP), r.has(f.GPU_UTIL)
    if gpu:
        gpu_1h = _residual(r, "gpu", util=util, hours=1)
        out["gpu_temp_vs_baseline_c"] = gpu_1h
        out["gpu_temp_vs_peers_c"] = gpu_1h - r.peer_median(gpu_1h)
    if mem:
        mem_1h = _residual(r, "mem", util=util, hours=1)
        out["mem_temp_vs_baseline_c"] = mem_1h
        out["mem_temp_rise_6h_c"] = mem_1h - _residual(r, "mem", util=util, hours=6)
        out["mem_temp_vs_peers_c"] = mem_1h - r.peer_median(mem_1h)
    if gpu and mem:
        out["mem_gpu_temp_gap_vs_baseline_c"] = _residual(r, "gap", util=util, hours=1)
    if util:
        out["util_mean_1h"] = _ratio(r[rr.UTIL_SUM.name("1h")], r[rr.UTIL_COUNT.name("1h")])
    return out


def _residual(r: Rows, which: str, *, util: bool, hours: int) -> Array:
    """`thermal._residual` over the last `hours` (1 or 6) from the window's sums and the recorded 7-day
    line."""

    def window(stat: str) -> Array:
        name = rr.thermal_hourly(which, stat)
        return r[name if hours == 1 else six(name)]

    mean_w = _ratio(window("sum"), window("count"))
    mean_t7 = r[rr.thermal(which, "mean")]
    if not util:
        return mean_w - mean_t7
    return raw_thermal.fitted_line_residual(
        mean_w,
        _ratio(window("util"), window("pairs")),
        mean_t7,
        slope=r[rr.thermal(which, "slope")],
        intercept=r[rr.thermal(which, "intercept")],
    )


def _ratio(total: Array, count: Array) -> Array:
    """A mean over valid rows from its sum and count (NaN without one)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan)


def throttle(r: Rows) -> dict[str, Array]:
    out: dict[str, Array] = {}
    if r.has(f.THROTTLE):
        valid = rr.THROTTLE_COUNT.name("1h")
        rows = {cls: one.name("1h") for cls, one in rr.THROTTLED.items()}
        out["thermal_throttle_share_1h"] = _ratio(r[rows["thermal"]], r[valid])
        out["thermal_throttle_share_6h"] = _ratio(r[six(rows["thermal"])], r[six(valid)])
        out["hw_slowdown_share_1h"] = _ratio(r[rows["hardware"]], r[valid])
        out["power_throttle_share_6h"] = _ratio(r[six(rows["power"])], r[six(valid)])
    for name, feature in (
        (f.THERMAL_VIOLATION, "thermal_violation_share_1h"),
        (f.POWER_VIOLATION, "power_violation_share_1h"),
    ):
        if r.has(name):
            # Microseconds throttled per second of the hour: a share (`features.thermal.throttle`).
            out[feature] = np.clip(r[rr.hourly(name, "increase{w}")] / W1H * 1e-6, 0.0, 1.0)
    return out
