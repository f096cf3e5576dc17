"""XID history and data quality: changes of the last-XID gauge by class, missing samples, uptime.

`DCGM_FI_DEV_XID_ERRORS` holds the LAST XID, not a count: an event is a change of the value to a non-zero
XID. The same XID twice in a row is invisible (a limit of the gauge, not of this code).
"""

from __future__ import annotations

import numpy as np

from app.predict.features.fields import VOLATILE_COUNTERS, XID, XID_HARDWARE, XID_IGNORE
from app.predict.features.frame import Normalised
from app.predict.features.series import HOUR, W1H, W7D, W24H, Array, Mask, Series, counter, share

# Hours since the last counter reset are capped at the longest window, so a series that starts at the
# beginning of a training set and one that starts at the beginning of a scoring look-back look alike.
MAX_HOURS_SINCE_RESET = W7D / HOUR

FEATURES: tuple[str, ...] = (
    "xid_ignore_events_24h",
    "xid_workload_events_24h",
    "xid_hardware_events_7d",
    "missing_share_1h",
    "missing_share_24h",
    "hours_since_reset",
)


def xids(df: Normalised, s: Series) -> dict[str, Array]:
    values = df.fields.get(XID)
    if values is None:
        return {}
    before = s.previous(s.ffill(values))
    valid = ~np.isnan(values)
    with np.errstate(invalid="ignore"):
        changed = valid & ~np.isnan(before) & (values != before) & (values != 0)
    codes = np.where(changed, values, 0).astype(np.int64)
    ignore = changed & np.isin(codes, list(XID_IGNORE))
    hardware = changed & np.isin(codes, list(XID_HARDWARE))
    workload = changed & ~ignore & ~hardware
    seen24 = s.wcount(valid, W24H) > 0
    seen7d = s.wcount(valid, W7D) > 0
    return {
        "xid_ignore_events_24h": np.where(seen24, s.wcount(ignore, W24H), np.nan),
        "xid_workload_events_24h": np.where(seen24, s.wcount(workload, W24H), np.nan),
        "xid_hardware_events_7d": np.where(seen7d, s.wcount(hardware, W7D), np.nan),
    }


def quality(df: Normalised, s: Series) -> dict[str, Array]:
    out: dict[str, Array] = {}
    if df.present is not None:
        present = df.present
    else:
        present = np.zeros(s.size, dtype=bool)
        for values in df.fields.values():
            present |= ~np.isnan(values)
    rows = np.ones(s.size, dtype=bool)
    out["missing_share_1h"] = share(s, ~present, rows, W1H)
    out["missing_share_24h"] = share(s, ~present, rows, W24H)
    if any(name in df.fields for name in VOLATILE_COUNTERS):
        hours = (s.t_out - s.t[s.reset_row[s.out]]) / HOUR
        out["hours_since_reset"] = np.minimum(hours, MAX_HOURS_SINCE_RESET)
    return out


def resets(df: Normalised, s: Series) -> Mask:
    """Rows where any volatile counter went down: a reboot or GPU reset happened since the row before."""
    found = np.zeros(s.size, dtype=bool)
    for name in VOLATILE_COUNTERS:
        values = df.fields.get(name)
        if values is not None:
            found |= counter(s, values).resets
    return found
