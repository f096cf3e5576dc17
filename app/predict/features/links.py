"""PCIe and NVLink features: error rates against the GPU's own 7-day baseline and its node peers,
acceleration, persistence (share of hours with errors) and distinct episodes.

Healthy links are not silent: large fleets see a low, bursty background of PCIe replays and NVLink CRC
errors that link-level retry absorbs (TELEMETRY.md, "Healthy hardware is not silent"), and how much
depends on the fleet. A model that read the mere presence of a replay as a precursor flagged a quarter of
an independent fleet (issue 12). So each counter gives one absolute rate (DCGM's own thresholds — 31
replays/min on Gen5 x16, 100 CRC/s — are absolute) and otherwise features that a fleet's background
level moves little: change against the part's own history and its peers, growth, persistence.
"""

from __future__ import annotations

import numpy as np

from app.predict.features.fields import (
    NVLINK_CRC_DATA,
    NVLINK_CRC_FLIT,
    NVLINK_RECOVERY,
    NVLINK_REPLAY,
    PCIE_REPLAY,
)
from app.predict.features.frame import Normalised
from app.predict.features.series import (
    W1H,
    W6H,
    W7D,
    W24H,
    Array,
    Counter,
    Series,
    counter,
    episodes,
    increase,
    persistence,
    rate,
    relative,
    sum_optional,
)

# Rates below these are background whatever the fleet: half a replay a minute, one CRC error a second.
# Healthy links see bursts of a few to a few hundred errors that link retry absorbs (TELEMETRY.md), i.e.
# well under these over an hour; a failing link passes DCGM's thresholds (31 replays/min on Gen5 x16,
# 100 CRC/s) and a weak precursor still runs several times the floor. ASSUMPTION: the values.
PCIE_FLOOR_PER_MIN = 0.5
NVLINK_FLOOR_PER_S = 1.0

FEATURES: tuple[str, ...] = (
    "pcie_replay_rate_1h",
    "pcie_replay_vs_baseline_6h_7d",
    "pcie_replay_vs_peers_1h",
    "pcie_replay_accel_1h_6h",
    "pcie_replay_persistence_6h",
    "pcie_replay_persistence_24h",
    "pcie_replay_episodes_24h",
    "pcie_replay_burstiness_6h",
    "nvlink_crc_rate_1h",
    "nvlink_crc_vs_baseline_6h_7d",
    "nvlink_crc_vs_peers_1h",
    "nvlink_crc_accel_1h_24h",
    "nvlink_crc_persistence_24h",
    "nvlink_replay_rate_6h",
    "nvlink_recovery_increase_24h",
)


def links(df: Normalised, s: Series) -> dict[str, Array]:
    out: dict[str, Array] = {}
    replay = df.fields.get(PCIE_REPLAY)
    if replay is not None:
        c = counter(s, replay)
        out |= _relative_rates(s, c, "pcie_replay", per_s=60.0, floor=PCIE_FLOOR_PER_MIN)
        out["pcie_replay_accel_1h_6h"] = relative(
            out["pcie_replay_rate_1h"], rate(s, c, W6H, 60.0), PCIE_FLOOR_PER_MIN
        )
        out["pcie_replay_persistence_6h"] = persistence(s, c, bucket=W1H, window=W6H)
        out["pcie_replay_episodes_24h"] = episodes(s, c, W24H)
        out["pcie_replay_burstiness_6h"] = _dispersion(s, c, W6H)
        out["pcie_replay_persistence_24h"] = persistence(s, c, bucket=W1H, window=W24H)
    crc = sum_optional(df.fields.get(NVLINK_CRC_FLIT), df.fields.get(NVLINK_CRC_DATA))
    if crc is not None:
        c = counter(s, crc)
        out |= _relative_rates(s, c, "nvlink_crc", per_s=1.0, floor=NVLINK_FLOOR_PER_S)
        out["nvlink_crc_accel_1h_24h"] = relative(
            out["nvlink_crc_rate_1h"], rate(s, c, W24H, 1.0), NVLINK_FLOOR_PER_S
        )
        out["nvlink_crc_persistence_24h"] = persistence(s, c, bucket=W1H, window=W24H)
    nv_replay = df.fields.get(NVLINK_REPLAY)
    if nv_replay is not None:
        out["nvlink_replay_rate_6h"] = rate(s, counter(s, nv_replay), W6H, 1.0)
    recovery = df.fields.get(NVLINK_RECOVERY)
    if recovery is not None:
        out["nvlink_recovery_increase_24h"] = increase(s, counter(s, recovery), W24H)
    return out


def _relative_rates(s: Series, c: Counter, prefix: str, *, per_s: float, floor: float) -> dict[str, Array]:
    r1 = rate(s, c, W1H, per_s)
    r6 = rate(s, c, W6H, per_s)
    r7d = rate(s, c, W7D, per_s)
    return {
        f"{prefix}_rate_1h": r1,
        f"{prefix}_vs_baseline_6h_7d": relative(r6, r7d, floor),
        f"{prefix}_vs_peers_1h": relative(r1, s.peer_median(r1), floor),
    }


def _dispersion(s: Series, c: Counter, window: float) -> Array:
    """log1p of the index of dispersion (variance / mean) of per-sample increments: 0 for none, ~0.7 for
    a Poisson trickle, large when the same number of errors comes in bursts."""
    x = np.where(c.valid, c.increments, 0.0)
    count = s.wcount(c.valid, window, since_reset=True)
    total = s.wsum(x, window, since_reset=True)
    squares = s.wsum(x * x, window, since_reset=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / count
        variance = np.maximum(squares / count - mean * mean, 0.0)
        index = np.where(mean > 0, variance / mean, 0.0)
    return np.where(count > 1, np.log1p(index), np.nan)
