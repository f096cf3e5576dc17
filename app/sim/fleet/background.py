"""Healthy hardware is not silent: background link errors, HW slowdowns and precursors that recover.

Real fleets log a low, bursty background of PCIe replays and NVLink CRC errors on links that never fail
(link-level retry absorbs them), now and then a HW slowdown on a healthy board, and precursor-like episodes
that stop on their own. The classic simulator had none of it, so a model trained on it learned "any replay
is a failure". Rates and shapes are in `BackgroundParams` (drawn per fleet by `personality.py`).

Events, not per-step draws: each noisy GPU's next episode time sits on one heap, and `advance` applies
those due, in time order, drawing sizes and the next times from the fleet's own background stream. So the
cost is per event (not per GPU per step), and the noise of a seed does not depend on the step size. The
classic simulator (every rate zero) schedules nothing and draws nothing, so its output is unchanged.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.sim.fleet.gpu import GpuState
from app.sim.fleet.params import BackgroundParams, LinkNoise
from app.sim.fleet.randomness import poisson
from app.sim.fleet.truth import TrapRecord

DAY = 86400.0
PCIE, PCIE_CHRONIC, NVLINK, NVLINK_CHRONIC, SLOWDOWN = range(5)
TRAP_PCIE = "background-pcie-replays"
TRAP_NVLINK = "background-nvlink-crc"
BACKGROUND_TRAPS = frozenset({TRAP_PCIE, TRAP_NVLINK})
# HW slowdown (clocks event 0x8) episodes on healthy boards last this long (ASSUMPTION).
SLOWDOWN_S = (60.0, 600.0)


def geometric(rng: random.Random, mean: float) -> int:
    """A count >= 1 with this mean (geometric): most episodes are small, a few are large."""
    if mean <= 1.0:
        return 1
    p = 1.0 / mean
    return 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p))


@dataclass(frozen=True, slots=True)
class _Rates:
    """One GPU's background event rates per second, by event kind (zero: none)."""

    per_s: tuple[float, ...]


class Background:
    """The background noise of a fleet's GPUs (by fleet-wide serial); mutates the GPUs it is given."""

    def __init__(
        self,
        *,
        params: BackgroundParams,
        gpus: Sequence[GpuState],
        rng: random.Random,
        start: float,
        on_recovered: Callable[[float], None] | None = None,
    ) -> None:
        self.params = params
        self.rng = rng
        self._gpus = {gpu.identity.serial: gpu for gpu in gpus}
        self._heap: list[tuple[float, int, int]] = []
        self._rates: dict[int, _Rates] = {}
        self.traps: list[TrapRecord] = []
        self._on_recovered = on_recovered
        self._recovered_per_s = params.recovered_per_1000_gpu_days / 1000.0 * len(gpus) / DAY
        self._next_recovered = math.inf
        if self.silent:
            return
        for gpu in gpus:
            rates = self._draw_rates(gpu)
            if any(rates.per_s):
                self._rates[gpu.identity.serial] = rates
                for kind, rate in enumerate(rates.per_s):
                    self._schedule(start, gpu.identity.serial, kind, rate)
        if self._recovered_per_s > 0.0:
            self._next_recovered = start + rng.expovariate(self._recovered_per_s)

    @property
    def silent(self) -> bool:
        p = self.params
        return (
            p.pcie.gpu_fraction <= 0.0
            and p.pcie.chronic_fraction <= 0.0
            and p.nvlink.gpu_fraction <= 0.0
            and p.nvlink.chronic_fraction <= 0.0
            and p.hw_slowdown_per_gpu_day <= 0.0
            and p.recovered_per_1000_gpu_days <= 0.0
        )

    def _link_rates(self, noise: LinkNoise) -> tuple[float, float]:
        """(episodes/s, chronic single errors/s) of one GPU's link; draws in a fixed order."""
        rng = self.rng
        noisy, chronic = rng.random(), rng.random()
        z = rng.gauss(0.0, 1.0)
        episodes = (
            noise.episodes_per_day * math.exp(noise.sigma * z) / DAY if noisy < noise.gpu_fraction else 0.0
        )
        steady = noise.chronic_per_day / DAY if chronic < noise.chronic_fraction else 0.0
        return episodes, steady

    def _draw_rates(self, gpu: GpuState) -> _Rates:
        p = self.params
        pcie, pcie_chronic = self._link_rates(p.pcie)
        nvlink, nvlink_chronic = self._link_rates(p.nvlink)
        identity = gpu.identity
        for kind, rate, noise in ((TRAP_PCIE, pcie, p.pcie), (TRAP_NVLINK, nvlink, p.nvlink)):
            if rate * DAY >= noise.loud_per_day and gpu.trap is None:
                gpu.trap = kind
                self.traps.append(
                    TrapRecord(
                        kind=kind,
                        node=identity.node,
                        gpu=identity.index,
                        uuid=identity.uuid,
                        detail=f"{rate * DAY:.2f} episodes/day",
                    )
                )
        slowdown = p.hw_slowdown_per_gpu_day / DAY
        return _Rates((pcie, pcie_chronic, nvlink, nvlink_chronic, slowdown))

    def _schedule(self, now: float, serial: int, kind: int, rate: float) -> None:
        if rate > 0.0:
            heapq.heappush(self._heap, (now + self.rng.expovariate(rate), serial * 8 + kind, kind))

    def advance(self, t1: float) -> None:
        """Apply every background event due by `t1`, in time order."""
        heap = self._heap
        while heap and heap[0][0] <= t1:
            t, key, kind = heapq.heappop(heap)
            serial = key // 8
            gpu = self._gpus[serial]
            if gpu.present and not gpu.failed:
                self._apply(gpu, kind, t)
            self._schedule(t, serial, kind, self._rates[serial].per_s[kind])
        while self._next_recovered <= t1:
            t = self._next_recovered
            self._next_recovered = t + self.rng.expovariate(self._recovered_per_s)
            if self._on_recovered is not None:
                self._on_recovered(t)

    def _apply(self, gpu: GpuState, kind: int, t: float) -> None:
        p, rng = self.params, self.rng
        if kind == PCIE:
            gpu.pcie_replay += geometric(rng, p.pcie.episode_mean)
        elif kind == PCIE_CHRONIC:
            gpu.pcie_replay += 1
        elif kind in (NVLINK, NVLINK_CHRONIC):
            crc = geometric(rng, p.nvlink.episode_mean) if kind == NVLINK else 1
            data = min(crc, poisson(rng, crc * p.nvlink_data_share))
            gpu.nvlink_data += data
            gpu.nvlink_flit += crc - data
            if p.nvlink_replay_per_crc > 0.0:
                gpu.nvlink_replay += poisson(rng, crc * p.nvlink_replay_per_crc)
        elif kind == SLOWDOWN:
            gpu.slowdown_until = max(gpu.slowdown_until, t + rng.uniform(*SLOWDOWN_S))
