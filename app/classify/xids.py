"""Decoding of `depends` XIDs: the ones whose meaning comes from the signals around them.

Each rule receives the XID signal and the recent firing signals on the same GPU and returns a concrete
class with a sentence saying why. Pure: the caller gathers the context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.config import rules
from app.domain import FaultClass, Signal

# The labels by which an alert (or agent event) says a row-remap failed on its GPU.
REMAP_FAILURE_LABELS = ("row_remap_failure", "remap_failure")
REMAP_FAILURE_ALERTS = frozenset({"GpuRowRemapFailure"})
RECOVERY_ACTION_LABELS = ("recovery_action", "gpu_recovery_action")
LINK_LABELS = ("link", "nvlink")
_SEVERITY = (
    FaultClass.REPLACE,
    FaultClass.REBOOT_NODE,
    FaultClass.RESET_GPU,
    FaultClass.RESTART_WORKLOAD,
    FaultClass.TRANSIENT,
    FaultClass.IGNORE,
)


@dataclass(frozen=True, slots=True)
class Decoded:
    fault_class: FaultClass
    reason: str
    evidence: tuple[str, ...] = ()


def decode(
    signal: Signal,
    entry: rules.XidEntry,
    *,
    catalog: rules.XidCatalog,
    policy: rules.ClassificationPolicy,
    context: Sequence[Signal],
) -> Decoded:
    xid = signal.xid
    match entry.rule:
        case "dbe-remap":
            return _dbe_remap(signal, entry, context)
        case "follows-others":
            return _follows_others(signal, entry, catalog=catalog, context=context)
        case "per-link":
            return _per_link(signal, entry, policy=policy, context=context)
        case "recovery-action":
            return _recovery_action(signal, entry, catalog)
        case None:
            raise ValueError(f"XID {xid} is 'depends' without a rule")


def _fallback(entry: rules.XidEntry) -> FaultClass:
    return FaultClass(entry.fallback or "reset-gpu")


def _flag(signal: Signal, names: Sequence[str]) -> bool:
    return any((signal.label(name) or "").strip().lower() in {"1", "true", "yes"} for name in names)


def _dbe_remap(signal: Signal, entry: rules.XidEntry, context: Sequence[Signal]) -> Decoded:
    witnesses = [
        s for s in (signal, *context) if _flag(s, REMAP_FAILURE_LABELS) or s.name in REMAP_FAILURE_ALERTS
    ]
    if witnesses:
        return Decoded(
            FaultClass.REPLACE,
            "XID 48 (double-bit ECC) with a row-remap failure on the same GPU: the GPU cannot spare "
            "the bad row any more, hand it off for replacement",
            tuple(f"{s.name} ({s.source.value})" for s in witnesses),
        )
    return Decoded(
        _fallback(entry),
        "XID 48 (double-bit ECC) without a row-remap failure: a GPU reset applies the pending remap",
    )


def _follows_others(
    signal: Signal, entry: rules.XidEntry, *, catalog: rules.XidCatalog, context: Sequence[Signal]
) -> Decoded:
    """XID 45 (cleanup) and 171/172 (detail added to an XID 48) say nothing of their own: the XIDs beside
    them on the GPU decide. Alone, 45 is an aborted application; 171/172 take their fallback."""
    companions: list[tuple[FaultClass, int]] = []
    for other in context:
        if other.xid is None or other.xid == signal.xid:
            continue
        other_entry = catalog.entry(other.xid)
        if other_entry is None:
            continue
        cls = other_entry.fault_class
        if cls is FaultClass.DEPENDS:
            cls = _fallback(other_entry)
        companions.append((cls, other.xid))
    if not companions:
        if entry.fallback is not None:
            return Decoded(
                FaultClass(entry.fallback),
                f"XID {signal.xid} ({entry.name}) without the XID it accompanies on this GPU: "
                f"assume {entry.fallback}",
            )
        return Decoded(
            FaultClass.IGNORE,
            f"XID {signal.xid} alone is cleanup after another error (or a killed process), never a root cause",
        )
    worst_class, worst_xid = min(companions, key=lambda pair: _SEVERITY.index(pair[0]))
    xids = sorted({x for _, x in companions})
    return Decoded(
        worst_class,
        f"XID {signal.xid} accompanies XID {', '.join(map(str, xids))} on this GPU and takes the class of "
        f"XID {worst_xid}",
        tuple(f"XID {x}" for x in xids),
    )


def _link_of(signal: Signal) -> str | None:
    for name in LINK_LABELS:
        value = signal.label(name)
        if value:
            return value
    return None


def _per_link(
    signal: Signal,
    entry: rules.XidEntry,
    *,
    policy: rules.ClassificationPolicy,
    context: Sequence[Signal],
) -> Decoded:
    link = _link_of(signal)
    cutoff = signal.starts_at - policy.link_window
    repeats = [
        s
        for s in context
        if s.xid == signal.xid
        and s.fingerprint != signal.fingerprint
        and s.starts_at >= cutoff
        and (link is None or _link_of(s) in (None, link))
    ]
    count = len(repeats) + 1
    where = f"link {link}" if link is not None else "this GPU"
    window = _human(policy.link_window.total_seconds())
    if count >= policy.link_repeats:
        return Decoded(
            _fallback(entry),
            f"XID {signal.xid} repeated {count} times on {where} within {window} "
            f"(threshold {policy.link_repeats}): the link does not recover by retry",
            tuple(f"XID {s.xid} at {s.starts_at.isoformat()}" for s in repeats),
        )
    return Decoded(
        FaultClass.TRANSIENT,
        f"XID {signal.xid} on {where}: occurrence {count} of {policy.link_repeats} within {window}; "
        "NVLink errors are often absorbed by link retry, so retry before quarantining",
    )


def _recovery_action(signal: Signal, entry: rules.XidEntry, catalog: rules.XidCatalog) -> Decoded:
    raw = next((signal.label(n) for n in RECOVERY_ACTION_LABELS if signal.label(n)), None)
    if raw is None:
        return Decoded(
            _fallback(entry),
            f"XID 154 without the driver's recovery action on the signal: assume {_fallback(entry).value}",
        )
    try:
        action = int(raw)
    except ValueError:
        return Decoded(_fallback(entry), f"XID 154 with an unreadable recovery action {raw!r}")
    cls = catalog.recovery_actions.get(action)
    if cls is None:
        return Decoded(
            _fallback(entry), f"XID 154 with recovery action {action}, which the catalog does not map"
        )
    return Decoded(FaultClass(cls), f"XID 154: the driver asks for recovery action {action} → {cls}")


def _human(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"
