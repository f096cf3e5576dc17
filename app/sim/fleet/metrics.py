"""The dcgm-exporter series the simulator serves: names, types and help text, in the exporter's order.

Names, types and help strings follow dcgm-exporter's etc/default-counters.csv (the ECC, retired-page
and NVLink error lines it ships commented out are enabled here), plus the fields Sickbay's rule bundle
reads that the default file lacks (row-remap pending, clock throttle reasons, PCIe max link generation,
recovery action, health status). `Field` order is the order of the values in every observation.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

PromType = Literal["gauge", "counter"]


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


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    prom_type: PromType
    help: str
    is_float: bool = False


SPECS: tuple[MetricSpec, ...] = (
    MetricSpec("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    MetricSpec("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    MetricSpec("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    MetricSpec("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    MetricSpec("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", is_float=True),
    MetricSpec(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."
    ),
    MetricSpec("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    MetricSpec("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    MetricSpec("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    MetricSpec(
        "DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in us)."
    ),
    MetricSpec(
        "DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in us)."
    ),
    MetricSpec("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    MetricSpec("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    MetricSpec("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    MetricSpec("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    MetricSpec(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Total number of single-bit persistent ECC errors."
    ),
    MetricSpec(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Total number of double-bit persistent ECC errors."
    ),
    MetricSpec(
        "DCGM_FI_DEV_RETIRED_SBE", "counter", "Total number of retired pages due to single-bit errors."
    ),
    MetricSpec(
        "DCGM_FI_DEV_RETIRED_DBE", "counter", "Total number of retired pages due to double-bit errors."
    ),
    MetricSpec("DCGM_FI_DEV_RETIRED_PENDING", "counter", "Total number of pages pending retirement."),
    MetricSpec(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
    ),
    MetricSpec(
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink data CRC errors."
    ),
    MetricSpec("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries."),
    MetricSpec(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink recovery errors."
    ),
    MetricSpec(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    MetricSpec(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"
    ),
    MetricSpec("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    MetricSpec(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "Whether remapping of rows is pending (applies at the next GPU reset).",
    ),
    MetricSpec("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Current clock throttle reasons (bitmask)."),
    MetricSpec(
        "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
        "gauge",
        "PCIe maximum link generation (selects the replay threshold).",
    ),
    MetricSpec("DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", "gauge", "Recovery action the driver asks for."),
)

XID_SPEC = MetricSpec("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.")
HEALTH_SPEC = MetricSpec("DCGM_EXP_GPU_HEALTH_STATUS", "gauge", "Current DCGM-reported GPU health status.")

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

# Clock throttle (clocks event) reason bits.
THROTTLE_IDLE = 0x1
THROTTLE_SW_POWER_CAP = 0x4
THROTTLE_HW_SLOWDOWN = 0x8
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40
THROTTLE_HW_POWER_BRAKE = 0x80

assert len(SPECS) == len(Field), "every Field needs a MetricSpec"


# The families Sickbay's rule bundle reads (rules/prometheus/sickbay-rules.yaml), for smaller backfills.
RULE_FAMILIES = frozenset(
    {
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_RETIRED_PENDING",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
        "DCGM_EXP_GPU_HEALTH_STATUS",
        "up",
        "kube_node_status_capacity",
        "kube_node_status_allocatable",
    }
)


def all_family_names() -> tuple[str, ...]:
    """Every family the exporter simulation can emit, in exposition order."""
    return (*(spec.name for spec in SPECS), XID_SPEC.name, HEALTH_SPEC.name)
