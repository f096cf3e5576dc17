"""Which state machine runs each failure mode, and how long its precursor lasts by default."""

from __future__ import annotations

from app import dcgm_fields as dcgm
from app.sim.fleet.links import NvlinkDegradation, PcieDegradation
from app.sim.fleet.memory import HbmDegradation
from app.sim.fleet.params import FailureMode, HardwareSpec, LeadTime, LeadTimes
from app.sim.fleet.process import FailureProcess, ProcessSpec
from app.sim.fleet.sudden import GspFailure, SuddenFailure
from app.sim.fleet.thermal import ThermalRunaway

# The XID each mode ends with when an injection does not name one.
DEFAULT_XIDS: dict[FailureMode, int] = {
    FailureMode.HBM: 48,
    FailureMode.THERMAL: 79,
    FailureMode.PCIE: 79,
    FailureMode.NVLINK: 74,
    FailureMode.GSP: 119,
    FailureMode.SUDDEN_XID: 79,
}


# The fields each mode's precursor moves, read off its state machine (memory.py, thermal.py, links.py,
# sudden.py): a fleet that exports none of them cannot show that precursor to any predictor, so the
# acceptance counts those failures apart (`tests.perf.backtest_acceptance`).
PRECURSOR_FIELDS: dict[FailureMode, frozenset[str]] = {
    FailureMode.HBM: frozenset(
        f.name
        for f in (
            dcgm.ECC_SBE_VOL_TOTAL,
            dcgm.ECC_SBE_AGG_TOTAL,
            dcgm.CORRECTABLE_REMAPPED_ROWS,
            dcgm.UNCORRECTABLE_REMAPPED_ROWS,
            dcgm.ROW_REMAP_PENDING,
        )
    ),
    FailureMode.THERMAL: frozenset(
        f.name for f in (dcgm.GPU_TEMP, dcgm.MEMORY_TEMP, dcgm.THERMAL_VIOLATION, dcgm.CLOCK_THROTTLE_REASONS)
    ),
    FailureMode.PCIE: frozenset({dcgm.PCIE_REPLAY_COUNTER.name}),
    FailureMode.NVLINK: frozenset(
        f.name
        for f in (
            dcgm.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
            dcgm.NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
            dcgm.NVLINK_REPLAY_ERROR_COUNT_TOTAL,
            dcgm.NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
        )
    ),
    # The weak hint is an informational XID 38 on the last-XID gauge.
    FailureMode.GSP: frozenset({dcgm.XID_ERRORS.name}),
}


def lead_time(mode: FailureMode, lead_times: LeadTimes) -> LeadTime | None:
    """The mode's precursor length distribution (an ASSUMPTION); None when it has no precursor."""
    table: dict[FailureMode, LeadTime] = {
        FailureMode.HBM: lead_times.hbm,
        FailureMode.THERMAL: lead_times.thermal,
        FailureMode.PCIE: lead_times.pcie,
        FailureMode.NVLINK: lead_times.nvlink,
        FailureMode.GSP: lead_times.gsp,
    }
    return table.get(mode)


def start_process(
    mode: FailureMode, spec: ProcessSpec, *, hardware: HardwareSpec, recovery_action: int = 0
) -> FailureProcess:
    """A new failure process of this mode (its per-instance parameters come from its own stream)."""
    if mode is FailureMode.HBM:
        return HbmDegradation(spec)
    if mode is FailureMode.THERMAL:
        return ThermalRunaway(spec)
    if mode is FailureMode.PCIE:
        return PcieDegradation(spec)
    if mode is FailureMode.NVLINK:
        return NvlinkDegradation(spec, links=hardware.nvlinks)
    if mode is FailureMode.GSP:
        return GspFailure(spec)
    if mode is FailureMode.SUDDEN_XID:
        return SuddenFailure(spec, recovery_action=recovery_action)
    raise ValueError(f"{mode} is not a GPU failure mode")
