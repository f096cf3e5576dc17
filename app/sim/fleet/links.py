"""Degrading links: PCIe replay bursts ending in XID 79 or 62, NVLink CRC errors ending in XID 74.

Both precursors are ASSUMPTIONS in shape and length (see `PrecursorShapes`):
- PCIe: replay bursts come more often and get bigger; late in the precursor a sustained replay rate
  crosses DCGM's Gen5 x16 threshold (31/min), which is when DCGM's PCIe health watch warns.
- NVLink: flow-control and data CRC errors grow exponentially from almost none past DCGM's 100/s
  threshold; replays follow the CRC errors, recovery errors appear near the end. The failing link is
  recorded in the ground truth; the exporter's counters are per GPU (summed over links).
"""

from __future__ import annotations

import random

from app.sim.fleet import metrics
from app.sim.fleet.gpu import NO_EFFECTS, Effects, GpuState
from app.sim.fleet.params import FailureMode
from app.sim.fleet.process import FailureProcess, Outcome, ProcessSpec, apply_xid
from app.sim.fleet.randomness import poisson

PCIE_GEN5_THRESHOLD_PER_MIN = 31.0
NVLINK_THRESHOLD_PER_S = 100.0


def _grow(start: float, end: float, progress: float) -> float:
    return float(start * (end / start) ** progress)


class PcieDegradation(FailureProcess):
    mode = FailureMode.PCIE

    def sustained_per_min(self, progress: float) -> float:
        at = self.shapes.pcie_sustained_at
        if progress < at:
            return 0.0
        return self.shapes.pcie_sustained_end_per_min * (progress - at) / (1.0 - at)

    def advance(self, gpu: GpuState, t0: float, t1: float, rng: random.Random) -> None:
        window = self.window(t0, t1)
        if window is None:
            return
        start, end, progress = window
        shapes = self.shapes
        seconds = end - start
        bursts = poisson(
            rng,
            _grow(shapes.pcie_bursts_start_per_h, shapes.pcie_bursts_end_per_h, progress) * seconds / 3600.0,
        )
        size = _grow(shapes.pcie_burst_size_start, shapes.pcie_burst_size_end, progress)
        replays = poisson(rng, bursts * size) if bursts else 0
        replays += poisson(rng, self.sustained_per_min(progress) * seconds / 60.0)
        gpu.pcie_replay += replays

    def effects(self, t: float) -> Effects:
        if t < self.onset or self.sustained_per_min(self.progress(t)) <= PCIE_GEN5_THRESHOLD_PER_MIN:
            return NO_EFFECTS
        return Effects(health=(("PCIE", metrics.HEALTH_WARN, "DCGM_FR_PCI_REPLAY_RATE"),))

    def fail(self, gpu: GpuState, t: float) -> Outcome:
        del t
        apply_xid(gpu, self.xid)
        return Outcome(xid=self.xid, vanish=self.xid == 79)


class NvlinkDegradation(FailureProcess):
    mode = FailureMode.NVLINK

    def __init__(self, spec: ProcessSpec, *, links: int) -> None:
        super().__init__(spec)
        self.link = self.rng.randrange(links)

    def crc_per_s(self, progress: float) -> float:
        return _grow(self.shapes.nvlink_crc_start_per_s, self.shapes.nvlink_crc_end_per_s, progress)

    def advance(self, gpu: GpuState, t0: float, t1: float, rng: random.Random) -> None:
        window = self.window(t0, t1)
        if window is None:
            return
        start, end, progress = window
        seconds = end - start
        crc = poisson(rng, self.crc_per_s(progress) * seconds)
        flit = poisson(rng, crc * 0.6) if crc else 0
        gpu.nvlink_flit += flit
        gpu.nvlink_data += max(0, crc - flit)
        gpu.nvlink_replay += poisson(rng, crc * self.shapes.nvlink_replay_per_crc)
        if progress >= self.shapes.nvlink_recovery_at:
            gpu.nvlink_recovery += poisson(rng, seconds / 900.0)

    def effects(self, t: float) -> Effects:
        if t < self.onset or self.crc_per_s(self.progress(t)) < NVLINK_THRESHOLD_PER_S:
            return NO_EFFECTS
        return Effects(health=(("NVLINK", metrics.HEALTH_WARN, "DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD"),))

    def fail(self, gpu: GpuState, t: float) -> Outcome:
        del t
        gpu.nvlink_recovery += 1 + self.rng.randrange(3)
        apply_xid(gpu, self.xid)
        return Outcome(xid=self.xid, detail=f"nvlink={self.link}")
