"""What each XID means for the ground truth: its class (as rules/xid-catalog.yaml says) and its name.

The classes are a copy, not a loader: ground truth must not change when a cluster overrides its catalog.
The names are the NVML agent's table (`app.agent.xid`), so both exporters write the same `err_msg`. tests/sim checks this table against the shipped rules/xid-catalog.yaml.
`expected_class` resolves the catalog's `depends` entries the way the catalog's comments describe, for
the XIDs the simulator emits, so labels can be scored against what Sickbay should decide.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.agent import xid as xid_names
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
    """The exporter's `err_msg`: the same names the NVML agent reports, from one table."""
    return xid_names.describe_xid(xid)


def marks_unhealthy(xid: int) -> bool:
    return xid != 0 and xid not in DEVICE_PLUGIN_SKIPPED_XIDS
