"""What each XID means for the ground truth: its class (as rules/xid-catalog.yaml says) and its name.

A copy, not a loader: the simulator imports `app.domain` only, and ground truth must not change when a
cluster overrides its catalog. tests/sim checks this table against the shipped rules/xid-catalog.yaml.
`expected_class` resolves the catalog's `depends` entries the way the catalog's comments describe, for
the XIDs the simulator emits, so labels can be scored against what Sickbay should decide.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.domain import FaultClass

XID_CLASSES: Mapping[int, FaultClass] = {
    8: FaultClass.RESTART_WORKLOAD,
    13: FaultClass.RESTART_WORKLOAD,
    31: FaultClass.RESTART_WORKLOAD,
    32: FaultClass.RESTART_WORKLOAD,
    38: FaultClass.IGNORE,
    43: FaultClass.IGNORE,
    45: FaultClass.DEPENDS,
    46: FaultClass.RESET_GPU,
    48: FaultClass.DEPENDS,
    54: FaultClass.REPLACE,
    62: FaultClass.RESET_GPU,
    63: FaultClass.IGNORE,
    64: FaultClass.RESET_GPU,
    68: FaultClass.RESTART_WORKLOAD,
    69: FaultClass.RESTART_WORKLOAD,
    74: FaultClass.DEPENDS,
    79: FaultClass.REBOOT_NODE,
    92: FaultClass.IGNORE,
    94: FaultClass.RESTART_WORKLOAD,
    95: FaultClass.RESET_GPU,
    109: FaultClass.RESET_GPU,
    110: FaultClass.RESET_GPU,
    119: FaultClass.RESET_GPU,
    120: FaultClass.RESET_GPU,
    121: FaultClass.IGNORE,
    136: FaultClass.RESET_GPU,
    140: FaultClass.RESET_GPU,
    143: FaultClass.RESET_GPU,
    144: FaultClass.DEPENDS,
    145: FaultClass.DEPENDS,
    146: FaultClass.DEPENDS,
    147: FaultClass.DEPENDS,
    148: FaultClass.DEPENDS,
    149: FaultClass.DEPENDS,
    150: FaultClass.DEPENDS,
    151: FaultClass.REBOOT_NODE,
    154: FaultClass.DEPENDS,
    155: FaultClass.RESET_GPU,
    156: FaultClass.RESET_GPU,
    157: FaultClass.IGNORE,
    158: FaultClass.RESET_GPU,
    160: FaultClass.IGNORE,
}

# The `err_msg` label dcgm-exporter writes next to `err_code`, after NVIDIA's XID catalog.
XID_NAMES: Mapping[int, str] = {
    0: "No Error",
    8: "GPU stopped processing",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    46: "GPU stopped processing",
    48: "Double Bit ECC Error",
    54: "Auxiliary power is not connected to the GPU board",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    110: "Security Fault Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    121: "C2C Link Error",
    136: "ALI Training Fail",
    140: "Unrecovered ECC Error",
    143: "GPU Initialization Failure",
    151: "Key rotation Error",
    154: "GPU Recovery Action Changed",
    155: "NVLINK: SW Defined Error",
    156: "Resource Retirement Event",
    157: "Resource Retirement Failure",
    158: "GPU Fatal Timeout",
    160: "Channel Retirement Event",
}

# The device plugin marks a GPU unhealthy (lowering allocatable) on every XID except these.
DEVICE_PLUGIN_SKIPPED_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def xid_class(xid: int) -> FaultClass:
    """The catalog's class; XIDs it does not list are transient (its `default_class`)."""
    return XID_CLASSES.get(xid, FaultClass.TRANSIENT)


def expected_class(xid: int, *, row_remap_failure: bool = False) -> FaultClass:
    """The class a `depends` XID resolves to in the situations the simulator creates."""
    cls = xid_class(xid)
    if cls is not FaultClass.DEPENDS:
        return cls
    if xid == 48:
        return FaultClass.REPLACE if row_remap_failure else FaultClass.RESET_GPU
    if xid == 45:
        return FaultClass.IGNORE
    return FaultClass.RESET_GPU  # 74, 144-150, 154: the catalog's fallback


def describe(xid: int) -> str:
    return XID_NAMES.get(xid, "Unknown Error")


def marks_unhealthy(xid: int) -> bool:
    return xid != 0 and xid not in DEVICE_PLUGIN_SKIPPED_XIDS
