"""Thermal and throttling features: temperatures as residuals against the GPU's own load line and its
node peers (never absolute: how hot a GPU runs depends on its rack and its job, and a model fed absolute
readings learns that), and the share of time spent throttled."""

from __future__ import annotations

import numpy as np

from app.dcgm_fields import (
    THROTTLE_HW_POWER_BRAKE,
    THROTTLE_HW_SLOWDOWN,
    THROTTLE_HW_THERMAL,
    THROTTLE_SW_POWER_CAP,
    THROTTLE_SW_THERMAL,
)
from app.predict.features.fields import (
    GPU_TEMP,
    GPU_UTIL,
    MEMORY_TEMP,
    POWER_VIOLATION,
    THERMAL_VIOLATION,
    THROTTLE,
)
from app.predict.features.frame import Normalised
from app.predict.features.series import W1H, W6H, W7D, Array, Series, counter, rate, share

FEATURES: tuple[str, ...] = (
    "gpu_temp_vs_baseline_c",
    "mem_temp_vs_baseline_c",
    "mem_gpu_temp_gap_vs_baseline_c",
    "mem_temp_rise_6h_c",
    "gpu_temp_vs_peers_c",
    "mem_temp_vs_peers_c",
    "util_mean_1h",
    "thermal_throttle_share_1h",
    "thermal_throttle_share_6h",
    "hw_slowdown_share_1h",
    "power_throttle_share_6h",
    "thermal_violation_share_1h",
    "power_violation_share_1h",
)


def thermal(df: Normalised, s: Series) -> dict[str, Array]:
    """Temperatures as residuals: a reading minus what the GPU's own 7-day temperature-vs-utilisation line
    predicts at the same utilisation. A busy GPU is hot and an idle one cool for no fault of theirs; a
    GPU running hotter than itself at the same load is the signal. Peers compare residuals too."""
    out: dict[str, Array] = {}
    gpu = df.fields.get(GPU_TEMP)
    mem = df.fields.get(MEMORY_TEMP)
    util = df.fields.get(GPU_UTIL)
    if gpu is not None:
        gpu_1h = _residual(s, gpu, util, W1H)
        out["gpu_temp_vs_baseline_c"] = gpu_1h
        out["gpu_temp_vs_peers_c"] = gpu_1h - s.peer_median(gpu_1h)
    if mem is not None:
        mem_1h = _residual(s, mem, util, W1H)
        out["mem_temp_vs_baseline_c"] = mem_1h
        out["mem_temp_rise_6h_c"] = mem_1h - _residual(s, mem, util, W6H)
        out["mem_temp_vs_peers_c"] = mem_1h - s.peer_median(mem_1h)
    if gpu is not None and mem is not None:
        out["mem_gpu_temp_gap_vs_baseline_c"] = _residual(s, mem - gpu, util, W1H)
    if util is not None:
        out["util_mean_1h"] = s.wmean(util, W1H)
    return out


def _residual(s: Series, temp: Array, util: Array | None, window: float) -> Array:
    """Mean temperature over `window` minus the 7-day least-squares line (temperature on utilisation)
    evaluated at the window's mean utilisation; without utilisation (or with too little spread in it),
    minus the 7-day mean."""
    mean_t7 = s.wmean(temp, W7D)
    mean_w = s.wmean(temp, window)
    if util is None:
        return mean_w - mean_t7
    valid = ~np.isnan(temp) & ~np.isnan(util)
    u = np.where(valid, util, 0.0)
    t = np.where(valid, temp, 0.0)
    count = s.wcount(valid, W7D)
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = s.wsum(u, W7D) / count
        mt = s.wsum(t, W7D) / count
        var_u = s.wsum(u * u, W7D) / count - mu * mu
        cov = s.wsum(u * t, W7D) / count - mu * mt
        u_w = s.wsum(u, window) / s.wcount(valid, window)
    return line_residual(mean_w, u_w, mean_t7, count=count, mu=mu, mt=mt, var_u=var_u, cov=cov)


def line_residual(
    mean_w: Array, u_w: Array, mean_t7: Array, *, count: Array, mu: Array, mt: Array, var_u: Array, cov: Array
) -> Array:
    """`_residual` from the 7-day moments (`count` samples, means `mu` of utilisation and `mt` of
    temperature, `var_u`, `cov`) and the window's means: apart so the recorded path, whose moments come
    from recording rules, fits the same line."""
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = np.where(var_u > 1.0, cov / var_u, 0.0)
        expected = np.where(count > 0, mt + slope * (u_w - mu), mean_t7)
    return np.where(np.isnan(u_w), mean_w - mean_t7, mean_w - expected)


def fitted_line_residual(
    mean_w: Array, u_w: Array, mean_t7: Array, *, slope: Array, intercept: Array
) -> Array:
    """`line_residual` from the line already fitted (`slope`, and `intercept` its value at zero
    utilisation: NaN where no 7-day row had both), as the recording rules record it."""
    with np.errstate(invalid="ignore"):
        expected = np.where(np.isnan(intercept), mean_t7, intercept + slope * u_w)
    return np.where(np.isnan(u_w), mean_w - mean_t7, mean_w - expected)


def throttle(df: Normalised, s: Series) -> dict[str, Array]:
    out: dict[str, Array] = {}
    reasons = df.fields.get(THROTTLE)
    if reasons is not None:
        valid = ~np.isnan(reasons)
        bits = np.where(valid, reasons, 0).astype(np.int64)
        hot = (bits & (THROTTLE_SW_THERMAL | THROTTLE_HW_THERMAL)) != 0
        hardware = (bits & (THROTTLE_HW_SLOWDOWN | THROTTLE_HW_THERMAL | THROTTLE_HW_POWER_BRAKE)) != 0
        power = (bits & THROTTLE_SW_POWER_CAP) != 0
        out["thermal_throttle_share_1h"] = share(s, hot, valid, W1H)
        out["thermal_throttle_share_6h"] = share(s, hot, valid, W6H)
        out["hw_slowdown_share_1h"] = share(s, hardware, valid, W1H)
        out["power_throttle_share_6h"] = share(s, power, valid, W6H)
    for name, feature in (
        (THERMAL_VIOLATION, "thermal_violation_share_1h"),
        (POWER_VIOLATION, "power_violation_share_1h"),
    ):
        values = df.fields.get(name)
        if values is not None:
            # The counters are microseconds throttled; per second of wall time that is a share.
            out[feature] = np.clip(rate(s, counter(s, values), W1H, 1e-6), 0.0, 1.0)
    return out
