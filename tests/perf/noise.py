"""Stand-in fleet personalities: background noise and exporter field sets laid over a classic simulated fleet.

Until the simulator draws personalities itself (issue 12 part 1), the evaluation protocol needs fleets
whose healthy hardware is not silent. These transforms add, after the fact, what TELEMETRY.md says real
fleets show ("Healthy hardware is not silent"): a low, bursty background of PCIe replays and NVLink CRC
errors on links that never fail, and exporters that leave whole field groups out. Every rate below is an
ASSUMPTION (no public source gives fleet-wide background rates); the stress personality multiplies them
by ten, as the issue asks. Counters stay counters: noise restarts with the counter at each reset.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from app.predict import features


@dataclass(frozen=True, slots=True, kw_only=True)
class Noise:
    """ASSUMPTIONS, all: the background on healthy hardware, per GPU."""

    name: str
    # Share of GPUs with a PCIe replay background; episodes per day (log-normal around the median, per
    # GPU); replays per episode (geometric around the mean).
    pcie_share: float = 0.0
    pcie_episodes_per_day: float = 1.0
    pcie_replays_per_episode: float = 3.0
    # The same for NVLink CRC errors (flit and data summed); an episode lasts one sample.
    nvlink_share: float = 0.0
    nvlink_episodes_per_day: float = 2.0
    nvlink_errors_per_episode: float = 200.0
    # Single-bit ECC background on more GPUs than the classic fleet has.
    sbe_share: float = 0.0
    sbe_per_day: float = 2.0
    # Exporter field groups (`features.FIELD_GROUPS`) this fleet does not export.
    missing_groups: tuple[str, ...] = ()
    scale: float = 1.0


CLASSIC = Noise(name="classic")
NOISY = Noise(name="noisy", pcie_share=0.4, nvlink_share=0.15, sbe_share=0.1)
DEFAULT_COUNTERS = Noise(
    name="default-counters",
    pcie_share=0.3,
    pcie_episodes_per_day=2.0,
    nvlink_share=0.2,
    sbe_share=0.05,
    missing_groups=("nvlink_extended", "row_remap", "page_retirement", "violations"),
)
BURSTY = Noise(
    name="bursty",
    pcie_share=0.6,
    pcie_episodes_per_day=0.5,
    pcie_replays_per_episode=30.0,
    nvlink_share=0.3,
    nvlink_errors_per_episode=2000.0,
    missing_groups=("memory_temp",),
)
STRESS_10X = Noise(name="stress-10x", pcie_share=0.4, nvlink_share=0.15, sbe_share=0.1, scale=10.0)

PERSONALITIES: dict[str, Noise] = {n.name: n for n in (CLASSIC, NOISY, DEFAULT_COUNTERS, BURSTY, STRESS_10X)}


def _rng(*parts: object) -> np.random.Generator:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def apply(frame: pd.DataFrame, noise: Noise, *, seed: int) -> pd.DataFrame:
    """The frame with this personality's background added and its missing field groups blanked."""
    if noise == CLASSIC:
        return frame
    rng = _rng(noise.name, seed)
    order = np.lexsort((frame["timestamp"].to_numpy(), frame["gpu"].to_numpy(), frame["node"].astype(str)))
    out = frame.iloc[order].reset_index(drop=True)
    gpu_key = out["node"].astype(str) + "/" + out["gpu"].astype(str) + "/" + out["uuid"].astype(str)
    codes, uniques = pd.factorize(gpu_key)
    step_days = float(np.median(np.diff(np.unique(out["timestamp"].to_numpy())))) / 86400.0
    for column, share, per_day, size in (
        (features.PCIE_REPLAY, noise.pcie_share, noise.pcie_episodes_per_day, noise.pcie_replays_per_episode),
        (
            features.NVLINK_CRC_FLIT,
            noise.nvlink_share,
            noise.nvlink_episodes_per_day,
            noise.nvlink_errors_per_episode,
        ),
        (features.SBE_VOL, noise.sbe_share, noise.sbe_per_day, 1.0),
        (features.SBE_AGG, noise.sbe_share, noise.sbe_per_day, 1.0),
    ):
        if column not in out.columns or share <= 0:
            continue
        chosen = rng.random(len(uniques)) < share
        rate = np.where(chosen, per_day * noise.scale * rng.lognormal(0.0, 1.0, len(uniques)), 0.0)
        episodes = rng.random(len(out)) < rate[codes] * step_days
        sizes = rng.geometric(1.0 / max(size, 1.0), len(out)) if size > 1 else np.ones(len(out))
        out[column] = _add_to_counter(out[column].to_numpy(dtype=np.float64), codes, episodes * sizes)
    for group in noise.missing_groups:
        columns = [c for c in out.columns if features.ALIASES.get(c, c) in features.FIELD_GROUPS[group]]
        out[columns] = np.nan
    return out


def _add_to_counter(values: np.ndarray, codes: np.ndarray, increments: np.ndarray) -> np.ndarray:
    """Add increments to a counter (rows sorted by GPU then time); the added part restarts at each reset
    (a decrease of the original value) and at each new GPU, as the real counter would."""
    before = np.r_[np.nan, values[:-1]]
    new_gpu = np.r_[True, codes[1:] != codes[:-1]]
    with np.errstate(invalid="ignore"):
        reset = new_gpu | (values < before)
    segment = np.cumsum(reset)
    added = pd.Series(np.where(np.isnan(values), 0.0, increments)).groupby(segment).cumsum().to_numpy()
    return np.where(np.isnan(values), np.nan, values + added)
