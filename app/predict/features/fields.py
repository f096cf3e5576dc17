"""The dcgm-exporter fields the features read, their DCGM 4.6 aliases, and the constants they decode with.

Names are the pre-4.6 ones (the exporter names a metric after its counters file, so either may appear;
`ALIASES` maps the new to the old). XID groups and throttle bits are constants: the model was trained on
them, so an operator's catalog override must not move them.
"""

from __future__ import annotations

from collections.abc import Mapping

# DCGM's "blank" values (e.g. MEMORY_TEMP 9223372036854775794 when unsupported) are missing values.
DCGM_BLANK_MIN = 9.0e18

F = "DCGM_FI_DEV_"
SBE_VOL = F + "ECC_SBE_VOL_TOTAL"
SBE_AGG = F + "ECC_SBE_AGG_TOTAL"
DBE_VOL = F + "ECC_DBE_VOL_TOTAL"
DBE_AGG = F + "ECC_DBE_AGG_TOTAL"
ROWS_CORRECTABLE = F + "CORRECTABLE_REMAPPED_ROWS"
ROWS_UNCORRECTABLE = F + "UNCORRECTABLE_REMAPPED_ROWS"
REMAP_PENDING = F + "ROW_REMAP_PENDING"
REMAP_FAILURE = F + "ROW_REMAP_FAILURE"
RETIRED_PENDING = F + "RETIRED_PENDING"
RETIRED_SBE = F + "RETIRED_SBE"
RETIRED_DBE = F + "RETIRED_DBE"
GPU_TEMP = F + "GPU_TEMP"
MEMORY_TEMP = F + "MEMORY_TEMP"
GPU_UTIL = F + "GPU_UTIL"
THROTTLE = F + "CLOCK_THROTTLE_REASONS"
THERMAL_VIOLATION = F + "THERMAL_VIOLATION"
POWER_VIOLATION = F + "POWER_VIOLATION"
PCIE_REPLAY = F + "PCIE_REPLAY_COUNTER"
NVLINK_CRC_FLIT = F + "NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
NVLINK_CRC_DATA = F + "NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
NVLINK_REPLAY = F + "NVLINK_REPLAY_ERROR_COUNT_TOTAL"
NVLINK_RECOVERY = F + "NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
XID = F + "XID_ERRORS"
ENERGY = F + "TOTAL_ENERGY_CONSUMPTION"

# Every dcgm-exporter field the features read: one PromQL query each per scoring cycle.
SOURCE_METRICS: tuple[str, ...] = (
    SBE_VOL,
    SBE_AGG,
    DBE_VOL,
    DBE_AGG,
    ROWS_CORRECTABLE,
    ROWS_UNCORRECTABLE,
    REMAP_PENDING,
    REMAP_FAILURE,
    RETIRED_PENDING,
    RETIRED_SBE,
    RETIRED_DBE,
    GPU_TEMP,
    MEMORY_TEMP,
    GPU_UTIL,
    THROTTLE,
    THERMAL_VIOLATION,
    POWER_VIOLATION,
    PCIE_REPLAY,
    NVLINK_CRC_FLIT,
    NVLINK_CRC_DATA,
    NVLINK_REPLAY,
    NVLINK_RECOVERY,
    XID,
    ENERGY,
)

# DCGM 4.6 names (left) of the fields above (right); the exporter names a metric after its counters file,
# so either may appear. The same list as the rule bundle's; UNCORRECTABLE's new name is by symmetry.
ALIASES: Mapping[str, str] = {
    F + "XID_ERROR": XID,
    F + "PCIE_REPLAY_TOTAL": PCIE_REPLAY,
    F + "ROW_REMAP_FAILED": REMAP_FAILURE,
    F + "PAGE_RETIRED_PENDING": RETIRED_PENDING,
    F + "NVLINK_CRC_FLIT_ERROR_TOTAL": NVLINK_CRC_FLIT,
    F + "NVLINK_CRC_DATA_ERROR_TOTAL": NVLINK_CRC_DATA,
    F + "CLOCKS_EVENT_REASONS": THROTTLE,
    F + "GPU_TEMP_CELSIUS": GPU_TEMP,
    F + "ROW_REMAP_CORRECTABLE_TOTAL": ROWS_CORRECTABLE,
    F + "ROW_REMAP_UNCORRECTABLE_TOTAL": ROWS_UNCORRECTABLE,
}

# Counters that restart at zero on a reboot: a decrease in any of them marks a reset.
VOLATILE_COUNTERS: tuple[str, ...] = (
    ENERGY,
    SBE_VOL,
    DBE_VOL,
    PCIE_REPLAY,
    NVLINK_CRC_FLIT,
    NVLINK_CRC_DATA,
    THERMAL_VIOLATION,
    POWER_VIOLATION,
)

THROTTLE_SW_POWER_CAP = 0x4
THROTTLE_HW_SLOWDOWN = 0x8
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40
THROTTLE_HW_POWER_BRAKE = 0x80

# XID classes as ARCHITECTURE.md's defaults have them, grouped for features. The features must not move
# when an operator overrides the catalog (the model was trained on these groups), so they are constants.
XID_IGNORE = frozenset({38, 43, 63, 92, 121, 157, 160})
XID_WORKLOAD = frozenset({8, 13, 31, 32, 68, 69, 94})
XID_HARDWARE = frozenset(
    {46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158, 79, 151, 54, 48, 45, 74, 154}
    | set(range(144, 151))
)

# Fields an exporter's counter list enables or leaves out together (dcgm-exporter reads a CSV of fields;
# its default list has no NVLink replay/recovery/CRC-data fields, and many installs enable ECC, remap or
# violation fields and not others — TELEMETRY.md, "Healthy hardware is not silent"). Training drops
# whole groups at random so the model learns to score without them; `missing_fields` reports them.
FIELD_GROUPS: Mapping[str, tuple[str, ...]] = {
    "ecc": (SBE_VOL, SBE_AGG, DBE_VOL, DBE_AGG),
    "row_remap": (ROWS_CORRECTABLE, ROWS_UNCORRECTABLE, REMAP_PENDING, REMAP_FAILURE),
    "page_retirement": (RETIRED_PENDING, RETIRED_SBE, RETIRED_DBE),
    "memory_temp": (MEMORY_TEMP,),
    "throttle_reasons": (THROTTLE,),
    "violations": (THERMAL_VIOLATION, POWER_VIOLATION),
    "pcie": (PCIE_REPLAY,),
    "nvlink_crc_flit": (NVLINK_CRC_FLIT,),
    "nvlink_extended": (NVLINK_CRC_DATA, NVLINK_REPLAY, NVLINK_RECOVERY),
}

# Fields that stand in for each other: the volatile counter when the aggregate one is not exported.
EQUIVALENT: Mapping[str, tuple[str, ...]] = {
    SBE_AGG: (SBE_AGG, SBE_VOL),
    SBE_VOL: (SBE_AGG, SBE_VOL),
    DBE_AGG: (DBE_AGG, DBE_VOL),
    DBE_VOL: (DBE_AGG, DBE_VOL),
}
