"""HBM degradation: single-bit ECC errors accelerate, rows get remapped, then a double-bit error.

The precursor (an ASSUMPTION in shape and length; see `PrecursorShapes`): the single-bit rate grows
from `hbm_sbe_start_per_h` to a per-instance end rate; each correctable error may remap its row
(XID 63, remap pending until the next reset). A share of instances only shows a weak rise, because
the total correctable rate is a poor predictor in real fleets (ATC'24). The failure is an
uncorrectable error with XID 48, 95 or 94 (contained), and sometimes a row-remap failure.
"""

from __future__ import annotations

import math
import random

from app.sim.fleet import metrics
from app.sim.fleet.gpu import GpuState
from app.sim.fleet.params import FailureMode
from app.sim.fleet.process import FailureProcess, Outcome, ProcessSpec, apply_uncorrectable, apply_xid
from app.sim.fleet.randomness import poisson

MAX_REMAPPED_ROWS = 512  # the row remapper's capacity per GPU


class HbmDegradation(FailureProcess):
    mode = FailureMode.HBM

    def __init__(self, spec: ProcessSpec) -> None:
        super().__init__(spec)
        rng = self.rng
        shapes = spec.shapes
        weak = rng.random() < shapes.hbm_weak_fraction
        end = shapes.hbm_weak_end_per_h if weak else shapes.hbm_sbe_end_per_h
        self.weak = weak
        self.start_per_h = shapes.hbm_sbe_start_per_h
        self.end_per_h = max(self.start_per_h, end * math.exp(0.5 * rng.gauss(0.0, 1.0)))

    def rate_per_s(self, progress: float) -> float:
        ratio = self.end_per_h / self.start_per_h
        return float(self.start_per_h * ratio ** (progress**1.5) / 3600.0)

    def advance(self, gpu: GpuState, t0: float, t1: float, rng: random.Random) -> None:
        window = self.window(t0, t1)
        if window is None:
            return
        start, end, progress = window
        errors = poisson(rng, self.rate_per_s(progress) * (end - start))
        if not errors:
            return
        gpu.add_sbe(errors)
        room = MAX_REMAPPED_ROWS - gpu.correctable_rows - gpu.uncorrectable_rows
        remaps = min(room, poisson(rng, errors * self.shapes.hbm_remap_per_sbe))
        if remaps > 0:
            gpu.correctable_rows += remaps
            gpu.remap_pending = 1
            gpu.last_xid = 63  # row-remap recording event: informational, pending until reset

    def fail(self, gpu: GpuState, t: float) -> Outcome:
        del t
        remap_failed = apply_uncorrectable(
            gpu, self.rng, hbm=True, remap_failure_p=self.shapes.hbm_row_remap_failure_p
        )
        apply_xid(gpu, self.xid)
        if remap_failed:
            gpu.incidents["MEM"] = (metrics.HEALTH_FAIL, "DCGM_FR_ROW_REMAP_FAILURE")
        detail = "weak precursor" if self.weak else ""
        return Outcome(xid=self.xid, row_remap_failure=remap_failed, detail=detail)
