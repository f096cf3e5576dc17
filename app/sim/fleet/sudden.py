"""Failures with little or no warning: GSP errors (XID 119/120) and sudden XIDs.

GSP: some instances (`gsp_weak_precursor_p`, an ASSUMPTION) show a weak precursor — one or two
driver-firmware XIDs (38) in the lead window — and most show nothing. Sudden failures have no precursor at
all: about a quarter of real GPU failures give no warning, and no predictor may count on one. ECC XIDs
(48, 94, 95, 140) from SRAM or HBM also raise the double-bit ECC counters; XID 79 makes the GPU vanish.
"""

from __future__ import annotations

import random

from app.sim.fleet.gpu import GpuState
from app.sim.fleet.params import FailureMode
from app.sim.fleet.process import FailureProcess, Outcome, ProcessSpec, apply_uncorrectable, apply_xid

ECC_XIDS = frozenset({48, 94, 95, 140})


class GspFailure(FailureProcess):
    mode = FailureMode.GSP

    def __init__(self, spec: ProcessSpec) -> None:
        super().__init__(spec)
        rng = self.rng
        weak = spec.has_precursor and rng.random() < spec.shapes.gsp_weak_precursor_p
        span = spec.fail_at - spec.onset
        count = 1 + rng.randrange(2)
        self.hints = sorted(spec.onset + span * rng.random() for _ in range(count)) if weak else []
        # Without a hint there is no precursor at all; with one, it starts at the first hint.
        self.onset = self.hints[0] if self.hints else spec.fail_at
        self.has_precursor = weak

    def advance(self, gpu: GpuState, t0: float, t1: float, rng: random.Random) -> None:
        del rng
        for hint in self.hints:
            if t0 < hint <= t1 and hint < self.fail_at:
                gpu.last_xid = 38  # driver firmware error: informational, a weak hint at most

    def window(self, t0: float, t1: float) -> tuple[float, float, float] | None:
        del t0, t1
        return None

    def fail(self, gpu: GpuState, t: float) -> Outcome:
        del t
        apply_xid(gpu, self.xid)
        return Outcome(xid=self.xid, detail="weak precursor" if self.hints else "")


class SuddenFailure(FailureProcess):
    mode = FailureMode.SUDDEN_XID

    def __init__(self, spec: ProcessSpec, *, recovery_action: int = 0) -> None:
        super().__init__(spec)
        self.onset = spec.fail_at
        self.has_precursor = False
        self.recovery_action = recovery_action

    def fail(self, gpu: GpuState, t: float) -> Outcome:
        del t
        remap_failed = False
        if self.xid in ECC_XIDS:
            hbm = self.category != "sram"
            remap_failed = apply_uncorrectable(
                gpu, self.rng, hbm=hbm, remap_failure_p=self.shapes.hbm_row_remap_failure_p if hbm else 0.0
            )
        apply_xid(gpu, self.xid)
        if self.recovery_action:
            gpu.recovery_action = self.recovery_action
        return Outcome(xid=self.xid, row_remap_failure=remap_failed, vanish=self.xid == 79)
