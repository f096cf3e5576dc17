"""The dcgm-exporter series the simulator serves, in the exporter's order, and where each value sits.

Names, types and help strings are the catalog's (`app.dcgm_fields`): dcgm-exporter's
etc/default-counters.csv with the ECC, retired-page and NVLink error lines it ships commented out
enabled, plus the fields Sickbay's rule bundle reads that the default file lacks (row-remap pending,
clock throttle reasons, PCIe max link generation, recovery action, health status). `Field` order is the
order of the values in every observation; each member is named after its field.
"""

from __future__ import annotations

from enum import IntEnum

from app import dcgm_fields


class Field(IntEnum):
    """Index of each per-GPU value in `GpuObservation.values`."""

    SM_CLOCK = 0
    MEM_CLOCK = 1
    MEMORY_TEMP = 2
    GPU_TEMP = 3
    POWER_USAGE = 4
    TOTAL_ENERGY_CONSUMPTION = 5
    PCIE_REPLAY_COUNTER = 6
    GPU_UTIL = 7
    MEM_COPY_UTIL = 8
    POWER_VIOLATION = 9
    THERMAL_VIOLATION = 10
    FB_FREE = 11
    FB_USED = 12
    ECC_SBE_VOL_TOTAL = 13
    ECC_DBE_VOL_TOTAL = 14
    ECC_SBE_AGG_TOTAL = 15
    ECC_DBE_AGG_TOTAL = 16
    RETIRED_SBE = 17
    RETIRED_DBE = 18
    RETIRED_PENDING = 19
    NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = 20
    NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = 21
    NVLINK_REPLAY_ERROR_COUNT_TOTAL = 22
    NVLINK_RECOVERY_ERROR_COUNT_TOTAL = 23
    UNCORRECTABLE_REMAPPED_ROWS = 24
    CORRECTABLE_REMAPPED_ROWS = 25
    ROW_REMAP_FAILURE = 26
    ROW_REMAP_PENDING = 27
    CLOCK_THROTTLE_REASONS = 28
    PCIE_MAX_LINK_GEN = 29
    GET_GPU_RECOVERY_ACTION = 30


# The catalog's entry of each value, in `Field` order: the exposition order.
SPECS: tuple[dcgm_fields.DcgmField, ...] = tuple(dcgm_fields.BY_NAME["DCGM_FI_DEV_" + f.name] for f in Field)
XID_SPEC = dcgm_fields.XID_ERRORS
HEALTH_SPEC = dcgm_fields.GPU_HEALTH_STATUS

# The watches dcgm-exporter's health collector reports for every GPU, in its order; 0 pass, 10 warn,
# 20 fail, with the DCGM error code as `health_error_code` (DCGM_FR_OK when passing).
HEALTH_WATCHES: tuple[str, ...] = (
    "PCIE",
    "NVLINK",
    "PMU",
    "MCU",
    "MEM",
    "SM",
    "INFOROM",
    "THERMAL",
    "POWER",
    "DRIVER",
)
HEALTH_PASS, HEALTH_WARN, HEALTH_FAIL = 0, 10, 20
HEALTH_OK_CODE = "DCGM_FR_OK"


# The families Sickbay's rule bundle reads (rules/prometheus/sickbay-rules.yaml), for smaller backfills.
RULE_FAMILIES = dcgm_fields.names(
    (
        dcgm_fields.XID_ERRORS,
        dcgm_fields.GPU_TEMP,
        dcgm_fields.ECC_DBE_VOL_TOTAL,
        dcgm_fields.ROW_REMAP_FAILURE,
        dcgm_fields.ROW_REMAP_PENDING,
        dcgm_fields.RETIRED_PENDING,
        dcgm_fields.PCIE_REPLAY_COUNTER,
        dcgm_fields.PCIE_MAX_LINK_GEN,
        dcgm_fields.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
        dcgm_fields.NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
        dcgm_fields.CLOCK_THROTTLE_REASONS,
        dcgm_fields.GET_GPU_RECOVERY_ACTION,
        dcgm_fields.GPU_HEALTH_STATUS,
    )
) | {"up", "kube_node_status_capacity", "kube_node_status_allocatable"}


def all_family_names() -> tuple[str, ...]:
    """Every family the exporter simulation can emit, in exposition order."""
    return (*(spec.name for spec in SPECS), XID_SPEC.name, HEALTH_SPEC.name)
