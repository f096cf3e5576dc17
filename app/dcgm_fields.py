"""The dcgm-exporter fields Sickbay knows: one catalog for the agent, the simulator and the predictor.

Each field has its exporter name (the pre-4.6 one, which Sickbay keys on), its DCGM field id where it is
a DCGM field, its Prometheus type, dcgm-exporter's help text, and its DCGM 4.6 name where 4.6 renamed it
(4.6 keeps the old names as aliases, and an exporter names a series after its counters file, so either
may appear: key on the old name, accept the new). The named groups are the counters files real installs
run (NVIDIA/dcgm-exporter etc/default-counters.csv and etc/dcp-metrics-included.csv).

Pure data, standard library only: it sits under every layer and must not grow behaviour of any one user
(the exposition format, the features, the simulator's layout of values stay with them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

Kind = Literal["gauge", "counter"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DcgmField:
    name: str
    field_id: int | None
    kind: Kind
    help: str
    renamed_in_4_6: str | None = None
    # DCGM stores the value as a double and the exporter prints it with six decimals; the rest are int64.
    is_float: bool = False

    def exported(self, *, dcgm_4_6: bool) -> DcgmField:
        """The field under the name an exporter on DCGM 4.6 names (or not) writes."""
        if not dcgm_4_6 or self.renamed_in_4_6 is None:
            return self
        return replace(self, name=self.renamed_in_4_6, renamed_in_4_6=None)


def _dev(
    suffix: str,
    field_id: int | None,
    kind: Kind,
    help_text: str,
    *,
    renamed: str | None = None,
    is_float: bool = False,
) -> DcgmField:
    return DcgmField(
        name="DCGM_FI_DEV_" + suffix,
        field_id=field_id,
        kind=kind,
        help=help_text,
        renamed_in_4_6=None if renamed is None else "DCGM_FI_DEV_" + renamed,
        is_float=is_float,
    )


SM_CLOCK = _dev("SM_CLOCK", 100, "gauge", "SM clock frequency (in MHz).")
MEM_CLOCK = _dev("MEM_CLOCK", 101, "gauge", "Memory clock frequency (in MHz).")
MEMORY_TEMP = _dev("MEMORY_TEMP", 140, "gauge", "Memory temperature (in C).")
GPU_TEMP = _dev("GPU_TEMP", 150, "gauge", "GPU temperature (in C).", renamed="GPU_TEMP_CELSIUS")
POWER_USAGE = _dev("POWER_USAGE", 155, "gauge", "Power draw (in W).", is_float=True)
TOTAL_ENERGY_CONSUMPTION = _dev(
    "TOTAL_ENERGY_CONSUMPTION", 156, "counter", "Total energy consumption since boot (in mJ)."
)
PCIE_REPLAY_COUNTER = _dev(
    "PCIE_REPLAY_COUNTER", 202, "counter", "Total number of PCIe retries.", renamed="PCIE_REPLAY_TOTAL"
)
GPU_UTIL = _dev("GPU_UTIL", 203, "gauge", "GPU utilization (in %).")
MEM_COPY_UTIL = _dev("MEM_COPY_UTIL", 204, "gauge", "Memory utilization (in %).")
POWER_VIOLATION = _dev(
    "POWER_VIOLATION", 240, "counter", "Throttling duration due to power constraints (in us)."
)
THERMAL_VIOLATION = _dev(
    "THERMAL_VIOLATION", 241, "counter", "Throttling duration due to thermal constraints (in us)."
)
FB_FREE = _dev("FB_FREE", 251, "gauge", "Framebuffer memory free (in MiB).")
FB_USED = _dev("FB_USED", 252, "gauge", "Framebuffer memory used (in MiB).")
ECC_SBE_VOL_TOTAL = _dev(
    "ECC_SBE_VOL_TOTAL", 310, "counter", "Total number of single-bit volatile ECC errors."
)
ECC_DBE_VOL_TOTAL = _dev(
    "ECC_DBE_VOL_TOTAL", 311, "counter", "Total number of double-bit volatile ECC errors."
)
ECC_SBE_AGG_TOTAL = _dev(
    "ECC_SBE_AGG_TOTAL", 312, "counter", "Total number of single-bit persistent ECC errors."
)
ECC_DBE_AGG_TOTAL = _dev(
    "ECC_DBE_AGG_TOTAL", 313, "counter", "Total number of double-bit persistent ECC errors."
)
RETIRED_SBE = _dev("RETIRED_SBE", 390, "counter", "Total number of retired pages due to single-bit errors.")
RETIRED_DBE = _dev("RETIRED_DBE", 391, "counter", "Total number of retired pages due to double-bit errors.")
RETIRED_PENDING = _dev(
    "RETIRED_PENDING",
    392,
    "counter",
    "Total number of pages pending retirement.",
    renamed="PAGE_RETIRED_PENDING",
)
NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = _dev(
    "NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    409,
    "counter",
    "Total number of NVLink flow-control CRC errors.",
    renamed="NVLINK_CRC_FLIT_ERROR_TOTAL",
)
NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = _dev(
    "NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    419,
    "counter",
    "Total number of NVLink data CRC errors.",
    renamed="NVLINK_CRC_DATA_ERROR_TOTAL",
)
NVLINK_REPLAY_ERROR_COUNT_TOTAL = _dev(
    "NVLINK_REPLAY_ERROR_COUNT_TOTAL", 429, "counter", "Total number of NVLink retries."
)
NVLINK_RECOVERY_ERROR_COUNT_TOTAL = _dev(
    "NVLINK_RECOVERY_ERROR_COUNT_TOTAL", 439, "counter", "Total number of NVLink recovery errors."
)
# 4.6's name for the uncorrectable count is by symmetry with the correctable one (TELEMETRY.md).
UNCORRECTABLE_REMAPPED_ROWS = _dev(
    "UNCORRECTABLE_REMAPPED_ROWS",
    393,
    "counter",
    "Number of remapped rows for uncorrectable errors",
    renamed="ROW_REMAP_UNCORRECTABLE_TOTAL",
)
CORRECTABLE_REMAPPED_ROWS = _dev(
    "CORRECTABLE_REMAPPED_ROWS",
    394,
    "counter",
    "Number of remapped rows for correctable errors",
    renamed="ROW_REMAP_CORRECTABLE_TOTAL",
)
ROW_REMAP_FAILURE = _dev(
    "ROW_REMAP_FAILURE", 395, "gauge", "Whether remapping of rows has failed", renamed="ROW_REMAP_FAILED"
)
ROW_REMAP_PENDING = _dev(
    "ROW_REMAP_PENDING", 396, "gauge", "Whether remapping of rows is pending (applies at the next GPU reset)."
)
CLOCK_THROTTLE_REASONS = _dev(
    "CLOCK_THROTTLE_REASONS",
    112,
    "gauge",
    "Current clock throttle reasons (bitmask).",
    renamed="CLOCKS_EVENT_REASONS",
)
PCIE_MAX_LINK_GEN = _dev(
    "PCIE_MAX_LINK_GEN", 235, "gauge", "PCIe maximum link generation (selects the replay threshold)."
)
GET_GPU_RECOVERY_ACTION = _dev(
    "GET_GPU_RECOVERY_ACTION", None, "gauge", "Recovery action the driver asks for."
)
# A gauge holding the LAST XID seen, not a count; its series carry `err_code` and `err_msg`.
XID_ERRORS = _dev("XID_ERRORS", 230, "gauge", "Value of the last XID error encountered.", renamed="XID_ERROR")
# The exporter's health collector, not a DCGM field: one series per watch (`health_watch`,
# `health_error_code`), 0 pass, 10 warn, 20 fail.
GPU_HEALTH_STATUS = DcgmField(
    name="DCGM_EXP_GPU_HEALTH_STATUS",
    field_id=None,
    kind="gauge",
    help="Current DCGM-reported GPU health status.",
)

# Every field, in dcgm-exporter's counters-file order with the last XID and the health status at the end.
FIELDS: tuple[DcgmField, ...] = (
    SM_CLOCK,
    MEM_CLOCK,
    MEMORY_TEMP,
    GPU_TEMP,
    POWER_USAGE,
    TOTAL_ENERGY_CONSUMPTION,
    PCIE_REPLAY_COUNTER,
    GPU_UTIL,
    MEM_COPY_UTIL,
    POWER_VIOLATION,
    THERMAL_VIOLATION,
    FB_FREE,
    FB_USED,
    ECC_SBE_VOL_TOTAL,
    ECC_DBE_VOL_TOTAL,
    ECC_SBE_AGG_TOTAL,
    ECC_DBE_AGG_TOTAL,
    RETIRED_SBE,
    RETIRED_DBE,
    RETIRED_PENDING,
    NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
    NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
    NVLINK_REPLAY_ERROR_COUNT_TOTAL,
    NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
    UNCORRECTABLE_REMAPPED_ROWS,
    CORRECTABLE_REMAPPED_ROWS,
    ROW_REMAP_FAILURE,
    ROW_REMAP_PENDING,
    CLOCK_THROTTLE_REASONS,
    PCIE_MAX_LINK_GEN,
    GET_GPU_RECOVERY_ACTION,
    XID_ERRORS,
    GPU_HEALTH_STATUS,
)
BY_NAME: Mapping[str, DcgmField] = {field.name: field for field in FIELDS}

# Pre-4.6 name -> DCGM 4.6 name, and back, for the fields 4.6 renamed.
RENAMED_IN_4_6: Mapping[str, str] = {f.name: f.renamed_in_4_6 for f in FIELDS if f.renamed_in_4_6}
OLD_NAME_OF: Mapping[str, str] = {new: old for old, new in RENAMED_IN_4_6.items()}


def names(fields: Iterable[DcgmField]) -> frozenset[str]:
    return frozenset(field.name for field in fields)


# Groups an exporter's counters file enables or leaves out together. default-counters.csv as shipped has
# clocks, temperatures, power and energy, PCIe replays, utilisation, the last XID, framebuffer, remapped
# rows and remap failure; its ECC, retired-page, NVLink error and violation lines are commented out.
DEFAULT_COUNTERS: tuple[DcgmField, ...] = (
    SM_CLOCK,
    MEM_CLOCK,
    MEMORY_TEMP,
    GPU_TEMP,
    POWER_USAGE,
    TOTAL_ENERGY_CONSUMPTION,
    PCIE_REPLAY_COUNTER,
    GPU_UTIL,
    MEM_COPY_UTIL,
    XID_ERRORS,
    FB_FREE,
    FB_USED,
    UNCORRECTABLE_REMAPPED_ROWS,
    CORRECTABLE_REMAPPED_ROWS,
    ROW_REMAP_FAILURE,
)
ECC: tuple[DcgmField, ...] = (ECC_SBE_VOL_TOTAL, ECC_SBE_AGG_TOTAL, ECC_DBE_VOL_TOTAL, ECC_DBE_AGG_TOTAL)
RETIRED_PAGES: tuple[DcgmField, ...] = (RETIRED_PENDING, RETIRED_SBE, RETIRED_DBE)
NVLINK_ERRORS: tuple[DcgmField, ...] = (
    NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
    NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
    NVLINK_REPLAY_ERROR_COUNT_TOTAL,
    NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
)
VIOLATIONS: tuple[DcgmField, ...] = (THERMAL_VIOLATION, POWER_VIOLATION)
# dcp-metrics-included.csv (what the GPU Operator's Helm chart mounts): the default file plus retired pages.
DCP_COUNTERS: tuple[DcgmField, ...] = (*DEFAULT_COUNTERS, RETIRED_SBE, RETIRED_DBE)
# The default file with every error line it ships commented out enabled: a careful operator's file.
EXTENDED_COUNTERS: tuple[DcgmField, ...] = (
    *DEFAULT_COUNTERS,
    *ECC,
    *RETIRED_PAGES,
    *NVLINK_ERRORS,
    *VIOLATIONS,
)

# Clock throttle (clocks event) reason bits of CLOCK_THROTTLE_REASONS.
THROTTLE_IDLE = 0x1
THROTTLE_SW_POWER_CAP = 0x4
THROTTLE_HW_SLOWDOWN = 0x8
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40
THROTTLE_HW_POWER_BRAKE = 0x80
