"""Short names for XID codes, for the `err_msg` label and event messages.

Descriptive text only, after NVIDIA's XID catalog: classification is the service's job (rules/), so nothing
here may decide what an XID means for a node.
"""

from __future__ import annotations

from collections.abc import Mapping

UNKNOWN = "Unknown Error"

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
    61: "Internal micro-controller breakpoint/warning",
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
    144: "NVLINK: SAW Error",
    145: "NVLINK: RLW Error",
    146: "NVLINK: TLW Error",
    147: "NVLINK: TREX Error",
    148: "NVLINK: NVLPW_CTRL Error",
    149: "NVLINK: NETIR Error",
    150: "NVLINK: MSE Error",
    151: "Key rotation Error",
    154: "GPU Recovery Action Changed",
    155: "NVLINK: SW Defined Error",
    156: "Resource Retirement Event",
    157: "Resource Retirement Failure",
    158: "GPU Fatal Timeout",
    160: "Channel Retirement Event",
}

RECOVERY_ACTIONS: Mapping[int, str] = {
    0: "none",
    1: "GPU reset",
    2: "node reboot",
    3: "drain P2P",
    4: "drain and reset",
    5: "recover IMEX domain",
    6: "bus reset",
    7: "system reboot",
}


def describe_xid(xid: int) -> str:
    return XID_NAMES.get(xid, UNKNOWN)


def describe_recovery_action(action: int | None) -> str:
    if action is None:
        return "unknown"
    return RECOVERY_ACTIONS.get(action, f"action {action}")
