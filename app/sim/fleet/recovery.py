"""Precursors that recover: a failure mode's precursor that starts, runs for a while and stops, with no
failure at the end — the hardest trap for a predictor, because up to the stop it looks like the real thing.

Field studies see precursor-like episodes that never lead to a failure (correctable-error bursts that stop,
link errors that clear after a retrain); how often is not published, so the rate is a personality
parameter (an ASSUMPTION). The episode runs the mode's own state machine up to `stop_at` — a share of its
would-be lead time — and the fleet then detaches it; the GPU is recorded as a `recovered-precursor` trap.
"""

from __future__ import annotations

import math
import random

from app.sim.fleet.gpu import NO_EFFECTS, Effects, GpuState
from app.sim.fleet.process import FailureProcess, Outcome, ProcessSpec

TRAP_RECOVERED = "recovered-precursor"


class RecoveredPrecursor(FailureProcess):
    """Runs `inner`'s precursor until `stop_at`, then ends; never fails."""

    def __init__(self, spec: ProcessSpec, inner: FailureProcess, *, stop_at: float) -> None:
        super().__init__(spec)
        self.inner = inner
        self.stop_at = stop_at
        self.fail_at = math.inf
        self.strength = "recovered"

    @property
    def precursor_start(self) -> float | None:
        return None

    def advance(self, gpu: GpuState, t0: float, t1: float, rng: random.Random) -> None:
        if t0 < self.stop_at:
            self.inner.advance(gpu, t0, min(t1, self.stop_at), rng)

    def effects(self, t: float) -> Effects:
        return self.inner.effects(t) if t < self.stop_at else NO_EFFECTS

    def finished(self, t: float) -> bool:
        return t >= self.stop_at

    def fail(self, gpu: GpuState, t: float) -> Outcome:
        raise AssertionError("a recovered precursor never fails")
