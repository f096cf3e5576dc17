"""The dcgm-exporter fields the features read, their DCGM 4.6 aliases, and the constants they decode with.

Names, renames and the exporter's field groups are the field catalog's (`app.dcgm_fields`); this module
says which of them the features read and how training drops them. Names are the pre-4.6 ones (the
exporter names a metric after its counters file, so either may appear; `ALIASES` maps the new to the
old). XID groups are constants: the model was trained on them, so an operator's catalog override must
not move them.
"""

from __future__ import annotations

from collections.abc import Mapping

from app import dcgm_fields

# DCGM's "blank" values (e.g. MEMORY_TEMP 9223372036854775794 when unsupported) are missing values.
DCGM_BLANK_MIN = 9.0e18

# The catalog's names under the features' short names (many call sites read these).
SBE_VOL = dcgm_fields.ECC_SBE_VOL_TOTAL.name
SBE_AGG = dcgm_fields.ECC_SBE_AGG_TOTAL.name
DBE_VOL = dcgm_fields.ECC_DBE_VOL_TOTAL.name
DBE_AGG = dcgm_fields.ECC_DBE_AGG_TOTAL.name
ROWS_CORRECTABLE = dcgm_fields.CORRECTABLE_REMAPPED_ROWS.name
ROWS_UNCORRECTABLE = dcgm_fields.UNCORRECTABLE_REMAPPED_ROWS.name
REMAP_PENDING = dcgm_fields.ROW_REMAP_PENDING.name
REMAP_FAILURE = dcgm_fields.ROW_REMAP_FAILURE.name
RETIRED_PENDING = dcgm_fields.RETIRED_PENDING.name
RETIRED_SBE = dcgm_fields.RETIRED_SBE.name
RETIRED_DBE = dcgm_fields.RETIRED_DBE.name
GPU_TEMP = dcgm_fields.GPU_TEMP.name
MEMORY_TEMP = dcgm_fields.MEMORY_TEMP.name
GPU_UTIL = dcgm_fields.GPU_UTIL.name
THROTTLE = dcgm_fields.CLOCK_THROTTLE_REASONS.name
THERMAL_VIOLATION = dcgm_fields.THERMAL_VIOLATION.name
POWER_VIOLATION = dcgm_fields.POWER_VIOLATION.name
PCIE_REPLAY = dcgm_fields.PCIE_REPLAY_COUNTER.name
NVLINK_CRC_FLIT = dcgm_fields.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL.name
NVLINK_CRC_DATA = dcgm_fields.NVLINK_CRC_DATA_ERROR_COUNT_TOTAL.name
NVLINK_REPLAY = dcgm_fields.NVLINK_REPLAY_ERROR_COUNT_TOTAL.name
NVLINK_RECOVERY = dcgm_fields.NVLINK_RECOVERY_ERROR_COUNT_TOTAL.name
XID = dcgm_fields.XID_ERRORS.name
ENERGY = dcgm_fields.TOTAL_ENERGY_CONSUMPTION.name

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

# DCGM 4.6 names (left) of the fields above (right), from the catalog; the exporter names a metric after
# its counters file, so either may appear.
ALIASES: Mapping[str, str] = {
    new: old for new, old in dcgm_fields.OLD_NAME_OF.items() if old in SOURCE_METRICS
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
    "ecc": tuple(field.name for field in dcgm_fields.ECC),
    "row_remap": (ROWS_CORRECTABLE, ROWS_UNCORRECTABLE, REMAP_PENDING, REMAP_FAILURE),
    "page_retirement": tuple(field.name for field in dcgm_fields.RETIRED_PAGES),
    "memory_temp": (MEMORY_TEMP,),
    "throttle_reasons": (THROTTLE,),
    "violations": tuple(field.name for field in dcgm_fields.VIOLATIONS),
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
