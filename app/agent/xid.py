"""Short names for XID codes, for the `err_msg` label and event messages.

Descriptive text only, the `name` column of rules/xid-catalog.yaml (after NVIDIA's Xid catalog):
classification is the service's job, so nothing here may decide what an XID means for a node.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.agent import xid_table

UNKNOWN = "Unknown Error"

# The catalog's `name` column (rules/xid-catalog.yaml), generated into xid_table: the agent ships without
# rules/, and one table keeps the agent's, the simulator's and the service's names the same.
XID_NAMES: Mapping[int, str] = xid_table.XID_NAMES

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
