"""What each XID means for the ground truth: its class and its name.

The classes come from the shipped rules/xid-catalog.yaml (and an unknown XID's from the shipped
rules/policy.yaml), read here directly, never through the service's settings: ground truth must not change
when a cluster overrides its catalog, and a copy of a 172-row table would only be a second place to edit.
The names are the NVML agent's table (`app.agent.xid`, generated from the same catalog), so both exporters
write the same `err_msg`.
`expected_class` resolves the catalog's `depends` entries the way its rules do for the situations the
simulator creates, so labels can be scored against what Sickbay should decide.
"""

from __future__ import annotations

import functools

from app.agent import xid as xid_names
from app.config import rules
from app.config.settings import RULES_DIR
from app.domain import FaultClass

# The device plugin marks a GPU unhealthy (lowering allocatable) on every XID except these.
DEVICE_PLUGIN_SKIPPED_XIDS = frozenset({13, 31, 43, 45, 68, 109})


@functools.cache
def shipped_catalog() -> rules.XidCatalog:
    return rules.load_catalog(RULES_DIR / "xid-catalog.yaml")


@functools.cache
def unknown_class() -> FaultClass:
    """The class the shipped policy gives an XID the catalog does not list."""
    return FaultClass(rules.load_policy(RULES_DIR / "policy.yaml").classification.unknown_xid)


def xid_class(xid: int) -> FaultClass:
    """The catalog's class; an XID it does not list takes the policy's `classification.unknown_xid`."""
    entry = shipped_catalog().entry(xid)
    return entry.fault_class if entry is not None else unknown_class()


def expected_class(xid: int, *, row_remap_failure: bool = False) -> FaultClass:
    """The class a `depends` XID resolves to in the situations the simulator creates: each XID alone on its
    GPU, with no link or recovery-action label, a row-remap failure only where `row_remap_failure` says."""
    entry = shipped_catalog().entry(xid)
    if entry is None or entry.fault_class is not FaultClass.DEPENDS:
        return xid_class(xid)
    if entry.rule == "dbe-remap" and row_remap_failure:
        return FaultClass.REPLACE
    if entry.rule == "follows-others" and entry.fallback is None:
        return FaultClass.IGNORE  # 45 alone: cleanup after an error, never a root cause
    return FaultClass(entry.fallback or "reset-gpu")


def describe(xid: int) -> str:
    """The exporter's `err_msg`: the same names the NVML agent reports, from one table."""
    return xid_names.describe_xid(xid)


def marks_unhealthy(xid: int) -> bool:
    return xid != 0 and xid not in DEVICE_PLUGIN_SKIPPED_XIDS
