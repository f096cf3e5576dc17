"""Memory features: single-bit ECC against the GPU's own history and its node peers, DBEs, row remapping
and page retirement.

An HBM field study (ATC'24, TELEMETRY.md) found the total correctable-error rate does not predict
uncorrectable errors, and healthy GPUs carry a chronic SBE rate for months: so the SBE features are its
change against the GPU's own 7-day baseline, against its node's other GPUs at the same instant, its
acceleration and its persistence, with one absolute rate left for magnitude. The change against the
GPU's own baseline is a count's surprise (`series.surprise`), not a ratio of rates: the Poisson noise of a
chronic 100/h rate moves a 6 h count by 20-45% now and then, which a ratio read as change (the false
alarms on chronic-SBE GPUs, issue 12). Remaps and retirements are
counts of distinct events and stay absolute.
"""

from __future__ import annotations

import numpy as np

from app.predict.features.fields import (
    DBE_AGG,
    DBE_VOL,
    REMAP_FAILURE,
    REMAP_PENDING,
    RETIRED_DBE,
    RETIRED_PENDING,
    RETIRED_SBE,
    ROWS_CORRECTABLE,
    ROWS_UNCORRECTABLE,
    SBE_AGG,
    SBE_VOL,
)
from app.predict.features.frame import Normalised
from app.predict.features.series import (
    HOUR,
    W1H,
    W6H,
    W7D,
    W24H,
    Array,
    Series,
    counter,
    increase,
    persistence,
    rate,
    relative,
    sum_optional,
    surprise,
)

# Rates below a few SBEs an hour are background on healthy HBM (chronic SBE on healthy GPUs, and the
# ATC'24 HBM study: the total correctable rate does not predict uncorrectable errors — TELEMETRY.md), so
# changes and ratios are taken with this floor: one or two stray SBEs on a silent GPU read as no change.
# ASSUMPTION: the value; it sits above the background rates the simulator's priors allow.
SBE_FLOOR_PER_H = 4.0

# Standard deviations of a 6 h count's surprise that a steady Poisson rate reaches by chance: the
# largest of a GPU's ~60 independent 6 h windows in two weeks is ~2.5-3 s.d. ASSUMPTION: the value.
SBE_NOISE_SD = 3.0

FEATURES: tuple[str, ...] = (
    "sbe_rate_1h",
    "sbe_surprise_6h_7d",
    "sbe_vs_peers_6h",
    "sbe_accel_1h_6h",
    "sbe_accel_6h_24h",
    "sbe_persistence_24h",
    "dbe_increase_24h",
    "correctable_remapped_rows",
    "uncorrectable_remapped_rows",
    "correctable_remapped_rows_growth_24h",
    "uncorrectable_remapped_rows_growth_24h",
    "row_remap_pending",
    "row_remap_failure",
    "retired_pages_pending",
    "retired_pages",
)


def memory(df: Normalised, s: Series) -> dict[str, Array]:
    out: dict[str, Array] = {}
    sbe_values = df.fields.get(SBE_AGG)
    if sbe_values is None:
        sbe_values = df.fields.get(SBE_VOL)
    if sbe_values is not None:
        sbe = counter(s, sbe_values)
        r1, r6, r24 = (rate(s, sbe, w, HOUR) for w in (W1H, W6H, W24H))
        out["sbe_rate_1h"] = r1
        # One-sided, past the noise band: the largest 6 h count a chronic rate shows by chance in weeks of
        # windows sits around 3 s.d., and the model read 2.6-2.7 on chronic-SBE and app-XID GPUs as a
        # precursor's start (held-out fleets of the protocol); a failing GPU passes 3 s.d. within hours.
        out["sbe_surprise_6h_7d"] = np.maximum(surprise(s, sbe, W6H, W7D) - SBE_NOISE_SD, 0.0)
        out["sbe_vs_peers_6h"] = relative(r6, s.peer_median(r6), SBE_FLOOR_PER_H)
        out["sbe_accel_1h_6h"] = relative(r1, r6, SBE_FLOOR_PER_H)
        out["sbe_accel_6h_24h"] = relative(r6, r24, SBE_FLOOR_PER_H)
        out["sbe_persistence_24h"] = persistence(s, sbe, bucket=W1H, window=W24H)
    dbe_values = df.fields.get(DBE_AGG)
    if dbe_values is None:
        dbe_values = df.fields.get(DBE_VOL)
    if dbe_values is not None:
        out["dbe_increase_24h"] = increase(s, counter(s, dbe_values), W24H)
    for name, prefix in ((ROWS_CORRECTABLE, "correctable"), (ROWS_UNCORRECTABLE, "uncorrectable")):
        values = df.fields.get(name)
        if values is not None:
            out[f"{prefix}_remapped_rows"] = s.last_value(values)
            out[f"{prefix}_remapped_rows_growth_24h"] = increase(s, counter(s, values), W24H)
    for name, feature in (
        (REMAP_PENDING, "row_remap_pending"),
        (REMAP_FAILURE, "row_remap_failure"),
        (RETIRED_PENDING, "retired_pages_pending"),
    ):
        values = df.fields.get(name)
        if values is not None:
            out[feature] = s.last_value(values)
    retired = sum_optional(df.fields.get(RETIRED_SBE), df.fields.get(RETIRED_DBE))
    if retired is not None:
        out["retired_pages"] = s.last_value(retired)
    return out
