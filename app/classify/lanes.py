"""Which lane an inbox row waits in: `fatal` for what may be a hardware fault, `soft` for the rest.

The pipeline takes every pending fatal row before the next soft one, so a flood of soft alerts cannot hold
back a GPU that fell off the bus. The lane is decided once, when the row is appended, from a few marks of
the signal (no context, no history, no cluster): it only orders work, classification still decides what the
row means. So it errs towards fatal — a row put in the fatal lane that classifies soft costs only its place
in the queue — and it follows the same data as `classifier.classify` (the XID catalog, the rule bundle's
`sickbay_class` label, the policy's alert-name table), so a cluster that reclassifies an XID moves its lane
too.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.classify.classifier import Rules
from app.domain import FaultClass, Lane

# What the agent reports from NVML event types that mean the hardware itself failed (app.agent.model's
# EventKind): a double-bit ECC error, a row remap that failed, a GPU that became unavailable or is lost.
HARDWARE_AGENT_KINDS = frozenset({"double-bit-ecc", "dram-retirement-failure", "gpu-unavailable", "gpu-lost"})


@dataclass(frozen=True, slots=True)
class Marks:
    """The few facts of a signal its lane is decided from, read without building the Signal.

    name:        the alert name (an agent event's is `agent:<kind>`)
    xid:         the XID it carries, if any
    class_label: the rule bundle's `sickbay_class` label, if set
    agent_kind:  the agent event's kind, for agent events
    """

    firing: bool
    name: str = ""
    xid: int | None = None
    class_label: str | None = None
    agent_kind: str | None = None


def lane_of(marks: Marks, *, rules: Rules) -> Lane:
    """Fatal when the signal is firing and could be a hardware fault; soft otherwise.

    A resolved signal is never urgent: it stays behind its firing one, which, if fatal, is ahead anyway.
    """
    if not marks.firing:
        return Lane.SOFT
    if marks.agent_kind in HARDWARE_AGENT_KINDS:
        return Lane.FATAL
    if marks.xid is not None:
        return _lane(_xid_class(marks.xid, rules=rules))
    if marks.class_label:
        try:
            return _lane(FaultClass(marks.class_label))
        except ValueError:  # a class the label names wrongly classifies transient
            return Lane.SOFT
    return _lane(rules.policy.alerts.get(marks.name))


def _xid_class(xid: int, *, rules: Rules) -> FaultClass | None:
    """The XID's class as the catalog gives it, a `depends` XID's fallback (its class without context)."""
    entry = rules.catalog.entry(xid)
    if entry is None:
        return FaultClass(rules.policy.classification.unknown_xid)
    if entry.fault_class is FaultClass.DEPENDS:
        return FaultClass(entry.fallback) if entry.fallback else None
    return entry.fault_class


def _lane(fault_class: FaultClass | None) -> Lane:
    return Lane.FATAL if fault_class is not None and fault_class.is_hardware else Lane.SOFT
