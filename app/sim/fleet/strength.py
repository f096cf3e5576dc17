"""How much warning a failure gives: strong, weak or no precursor.

Field data says precursors are unreliable: about a quarter of GPU failures give no warning at all, and the
total correctable-error rate does not predict uncorrectable errors in HBM (ATC'24), so a fleet's precursors
are drawn per failure from its personality's shares. A weak precursor runs the same state machine with its
end rates (and temperature rise) scaled down and its throttling late; no precursor moves the onset to the
failure itself. The classic simulator keeps each mode's own rule, and its strength is read off the outcome.
"""

from __future__ import annotations

from dataclasses import replace

from app.sim.fleet.params import FailureMode, PrecursorShapes

# The modes whose precursor a personality may weaken or remove (GSP and sudden failures have their own).
PRECURSOR_MODES = frozenset({FailureMode.HBM, FailureMode.THERMAL, FailureMode.PCIE, FailureMode.NVLINK})


def classic_strength(precursor_start: float | None, detail: str) -> str:
    """The strength of a classic failure: no precursor, the mode's own weak variant, or strong."""
    if precursor_start is None:
        return "none"
    return "weak" if "weak precursor" in detail else "strong"


def weakened(shapes: PrecursorShapes, factor: float) -> PrecursorShapes:
    """The shapes of a weak precursor: end rates times `factor` (never below the start rates)."""
    return replace(
        shapes,
        hbm_sbe_end_per_h=max(shapes.hbm_sbe_start_per_h, shapes.hbm_sbe_end_per_h * factor),
        hbm_weak_end_per_h=max(shapes.hbm_sbe_start_per_h, shapes.hbm_weak_end_per_h * factor),
        hbm_remap_per_sbe=shapes.hbm_remap_per_sbe * factor,
        thermal_mem_rise_c=shapes.thermal_mem_rise_c * factor,
        thermal_gpu_rise_c=shapes.thermal_gpu_rise_c * factor,
        thermal_sw_throttle_at=1.0 - (1.0 - shapes.thermal_sw_throttle_at) * factor,
        thermal_hw_throttle_at=1.0 - (1.0 - shapes.thermal_hw_throttle_at) * factor,
        pcie_bursts_end_per_h=max(shapes.pcie_bursts_start_per_h, shapes.pcie_bursts_end_per_h * factor),
        pcie_burst_size_end=max(shapes.pcie_burst_size_start, shapes.pcie_burst_size_end * factor),
        pcie_sustained_end_per_min=shapes.pcie_sustained_end_per_min * factor,
        nvlink_crc_end_per_s=max(shapes.nvlink_crc_start_per_s, shapes.nvlink_crc_end_per_s * factor),
    )
