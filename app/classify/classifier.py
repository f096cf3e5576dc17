"""Signal → Fault: the single classification entry point.

Order of evidence: a resolved signal is recorded as such; an XID maps through the catalog (decoding the
`depends` ones with context; an XID the catalog lacks takes the policy's `classification.unknown_xid`,
under rule `xid-unknown` so that later stages can tell); then the rule bundle's `sickbay_class` label; then
the policy's alert-name table; anything else is `transient` — recorded and retried, never dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from app.classify import xids
from app.config.rules import Policy, XidCatalog
from app.domain import Fault, FaultClass, Signal

CLASS_LABEL = "sickbay_class"
# A fault already reported through the other path (agent event vs Alertmanager alert): recorded, not acted on.
DUPLICATE_RULE = "duplicate"
# An XID missing from the catalog: classified by policy, and made visible (metric, log, node condition).
UNKNOWN_XID_RULE = "xid-unknown"


@dataclass(frozen=True, slots=True)
class Rules:
    """What classification reads, loaded once at start."""

    catalog: XidCatalog
    policy: Policy


def classify(signal: Signal, *, rules: Rules, context: Sequence[Signal] = ()) -> Fault:
    """Classify one signal. `context` is the recent firing signals on the same node and GPU."""
    same_gpu = [s for s in context if s.node == signal.node and s.gpu == signal.gpu and s is not signal]
    if signal.xid is not None:
        fault = _by_xid(signal, rules=rules, context=same_gpu)
        twin = _reported_by_another_source(
            signal, same_gpu, window=rules.policy.classification.context_window
        )
        if twin is not None:
            return Fault(
                fault_class=fault.fault_class,
                signal=signal,
                reason=f"the same XID {signal.xid} on GPU {signal.gpu} was already reported by {twin.source.value} "
                f"at {twin.starts_at.isoformat()}: one fault, not two ({fault.reason})",
                rule=DUPLICATE_RULE,
                evidence=(f"{twin.source.value}:{twin.fingerprint}",),
            )
        return fault
    hinted = signal.label(CLASS_LABEL)
    if hinted:
        try:
            cls = FaultClass(hinted)
        except ValueError:
            return _fault(
                signal,
                FaultClass.TRANSIENT,
                f"label {CLASS_LABEL}={hinted!r} names no known class; recorded as transient",
                rule="unknown-class-label",
            )
        if cls is FaultClass.DEPENDS:
            return _fault(
                signal,
                FaultClass.TRANSIENT,
                f"{signal.name} says 'depends' but carries no XID to decode; recorded as transient",
                rule="depends-without-xid",
            )
        summary = _summary(signal)
        return _fault(
            signal, cls, f"the alert rule {signal.name} classifies it as {cls.value}{summary}", rule="label"
        )
    by_name = rules.policy.alerts.get(signal.name)
    if by_name is not None:
        return _fault(
            signal,
            by_name,
            f"policy maps alert {signal.name} to {by_name.value}{_summary(signal)}",
            rule="policy",
        )
    return _fault(
        signal,
        FaultClass.TRANSIENT,
        f"no XID, class label or policy entry for {signal.name!r}: treated as transient (retry, re-check)",
        rule="default",
    )


def _reported_by_another_source(
    signal: Signal, same_gpu: Sequence[Signal], *, window: timedelta
) -> Signal | None:
    """The agent's XID event and the Alertmanager alert for the same XID on the same GPU are one fault."""
    if not signal.firing:
        return None
    return next(
        (
            other
            for other in same_gpu
            if other.source is not signal.source
            and other.xid == signal.xid
            and other.firing
            and abs(other.starts_at - signal.starts_at) <= window
        ),
        None,
    )


def _summary(signal: Signal) -> str:
    text = next((v for k, v in signal.annotations if k == "summary"), "")
    return f": {text}" if text else ""


def _by_xid(signal: Signal, *, rules: Rules, context: Sequence[Signal]) -> Fault:
    xid = signal.xid
    assert xid is not None
    entry = rules.catalog.entry(xid)
    if entry is None:
        unknown = rules.policy.classification.unknown_xid
        return _fault(
            signal,
            FaultClass(unknown),
            f"XID {xid} is not in the catalog: classified {unknown} by the policy's "
            f"classification.unknown_xid; add XID {xid} to the catalog once NVIDIA documents it",
            rule=UNKNOWN_XID_RULE,
        )
    if entry.fault_class is not FaultClass.DEPENDS:
        return _fault(
            signal,
            entry.fault_class,
            f"XID {xid} ({entry.name}) is {entry.fault_class.value} in the XID catalog",
            rule="xid",
        )
    window_start = signal.starts_at - rules.policy.classification.context_window
    nearby = [s for s in context if s.firing and s.starts_at >= window_start]
    decoded = xids.decode(
        signal,
        entry,
        catalog=rules.catalog,
        policy=rules.policy.classification,
        context=nearby if entry.rule != "per-link" else context,
    )
    return _fault(
        signal, decoded.fault_class, decoded.reason, rule=f"xid-{entry.rule}", evidence=decoded.evidence
    )


def _fault(
    signal: Signal,
    fault_class: FaultClass,
    reason: str,
    *,
    rule: str,
    evidence: tuple[str, ...] = (),
) -> Fault:
    if not signal.firing:
        reason = f"resolved: {reason}"
    return Fault(fault_class=fault_class, signal=signal, reason=reason, rule=rule, evidence=evidence)
