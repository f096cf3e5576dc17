"""Thermal runaway: memory temperature creeps up, the GPU throttles, then it falls off the bus (XID 79).

The precursor (an ASSUMPTION in shape and length): memory and GPU temperature rise with the square of
precursor progress; from `thermal_sw_throttle_at` SW thermal slowdown (0x20) comes and goes, minute by
minute, more often as it gets worse; from `thermal_hw_throttle_at` SW and HW thermal slowdown (0x40) are
steady, and HW slowdown (0x8) joins near the end. Throttled time accumulates in THERMAL_VIOLATION.
The failure is XID 79; the fleet then removes the GPU's series from the exporter.
"""

from __future__ import annotations

import random

from app import dcgm_fields
from app.sim.fleet import metrics
from app.sim.fleet.gpu import NO_EFFECTS, Effects, GpuState
from app.sim.fleet.params import FailureMode
from app.sim.fleet.process import FailureProcess, Outcome, apply_xid
from app.sim.fleet.randomness import unit

_THROTTLE_SALT = 71
_HW_SLOWDOWN_AT = 0.92


class ThermalRunaway(FailureProcess):
    mode = FailureMode.THERMAL

    def duty(self, progress: float) -> float:
        """Share of minutes with thermal throttling at this progress."""
        shapes = self.shapes
        if progress < shapes.thermal_sw_throttle_at:
            return 0.0
        if progress >= shapes.thermal_hw_throttle_at:
            return 1.0
        span = shapes.thermal_hw_throttle_at - shapes.thermal_sw_throttle_at
        return 0.3 + 0.6 * (progress - shapes.thermal_sw_throttle_at) / span

    def throttle_bits(self, t: float, progress: float) -> int:
        shapes = self.shapes
        if progress >= shapes.thermal_hw_throttle_at:
            bits = dcgm_fields.THROTTLE_SW_THERMAL | dcgm_fields.THROTTLE_HW_THERMAL
            if progress >= _HW_SLOWDOWN_AT:
                bits |= dcgm_fields.THROTTLE_HW_SLOWDOWN
            return bits
        minute = int(t // 60.0)
        if unit(self.seed, self.serial, minute, _THROTTLE_SALT) < self.duty(progress):
            return dcgm_fields.THROTTLE_SW_THERMAL
        return 0

    def advance(self, gpu: GpuState, t0: float, t1: float, rng: random.Random) -> None:
        del rng
        window = self.window(t0, t1)
        if window is None:
            return
        start, end, progress = window
        gpu.thermal_violation_us += (end - start) * self.duty(progress) * 1e6

    def effects(self, t: float) -> Effects:
        if not self.has_precursor or t < self.onset:
            return NO_EFFECTS
        progress = self.progress(t)
        shapes = self.shapes
        throttle = self.throttle_bits(t, progress)
        health: tuple[tuple[str, int, str], ...] = ()
        factor = 1.0
        if throttle:
            health = (("THERMAL", metrics.HEALTH_WARN, "DCGM_FR_CLOCK_THROTTLE_THERMAL"),)
            factor = 0.6 if throttle & dcgm_fields.THROTTLE_HW_THERMAL else 0.85
        return Effects(
            gpu_temp_c=shapes.thermal_gpu_rise_c * progress**2,
            mem_temp_c=shapes.thermal_mem_rise_c * progress**2,
            throttle=throttle,
            clock_factor=factor,
            power_factor=factor,
            health=health,
        )

    def fail(self, gpu: GpuState, t: float) -> Outcome:
        del t
        apply_xid(gpu, self.xid)
        return Outcome(xid=self.xid, vanish=self.xid == 79)
