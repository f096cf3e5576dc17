"""Shadow mode as pure values: may the proactive ladder act on this fleet with this model version?

A model is a claim about the fleets it learned from; on another fleet its false-alarm rate is unknown
until measured there (issue 12 measured a shipped model at 224 false alarms per 1,000 node-days on a fleet
it had never seen). So each (model version, fleet) has a `Standing`, journaled at every change:

- a version new to the fleet starts in shadow (`Reason.UNVALIDATED`): it scores, exports its gauges and
  journals what it would have done, and writes nothing;
- a backtest over the fleet's own recent history (`judge_backtest`) lets it act when its false-alarm rate
  is within `prediction.shadow.max_false_alarms_per_1000_node_days` over at least `min_history`;
- an operator may validate it without a backtest, or send it back to shadow;
- the runtime guard (`check_guard`) sends an acting ladder back when too many GPUs are flagged at once, or
  the proactive budget stays full too long.

A shadow the guard or an operator chose is *held*: the daily backtest does not lift it (it passed once
and then misbehaved, or a human said so); only an operator does, with or without a fresh backtest.
`act` persists these values, exports the metric and writes the Event; nothing here does I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from app.config import rules


class Reason(StrEnum):
    UNVALIDATED = "unvalidated"
    BACKTEST_FAILED = "backtest-failed"
    TOO_LITTLE_HISTORY = "too-little-history"
    GUARD_FLAGGED = "guard-flagged"
    GUARD_BUDGET = "guard-budget-full"
    OPERATOR_SHADOW = "operator"
    BACKTEST_PASSED = "backtest-passed"
    OPERATOR_VALIDATED = "operator-validated"

    @property
    def acting(self) -> bool:
        return self in (Reason.BACKTEST_PASSED, Reason.OPERATOR_VALIDATED)

    @property
    def held(self) -> bool:
        """A shadow that only an operator lifts."""
        return self in (Reason.GUARD_FLAGGED, Reason.GUARD_BUDGET, Reason.OPERATOR_SHADOW)


SHADOW_REASONS = tuple(r for r in Reason if not r.acting)


@dataclass(frozen=True, slots=True)
class Standing:
    """The ladder's standing for one model version on one fleet, and why (one journal row per change)."""

    version: str
    fleet: str
    reason: Reason
    detail: str
    at: datetime
    by: str  # backtest | guard | operator[:who] | start

    @property
    def acting(self) -> bool:
        return self.reason.acting

    def shadow_note(self) -> str | None:
        """What the ladder's plans say while in shadow (`Situation.shadow`); None while acting."""
        if self.acting:
            return None
        return f"model {self.version} on fleet {self.fleet}: {self.reason.value}, {self.detail}"


def first_contact(version: str, *, fleet: str, now: datetime) -> Standing:
    return Standing(
        version=version,
        fleet=fleet,
        reason=Reason.UNVALIDATED,
        detail="not yet validated on this fleet's own history",
        at=now,
        by="start",
    )


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a backtest over the fleet's own recent history found (labels: fatal XIDs, vanished GPUs and
    the journal's hardware faults)."""

    false_alarms: int
    node_days: float
    history_days: float
    alarms: int = 0
    failures: int = 0
    caught: int = 0

    @property
    def false_alarm_rate(self) -> float | None:
        """False alarms per 1,000 node-days; None without scored node-days."""
        return self.false_alarms * 1000.0 / self.node_days if self.node_days > 0 else None


def judge_backtest(evidence: Evidence, policy: rules.ShadowPolicy) -> tuple[Reason, str]:
    """The backtest's verdict alone: passed, failed, or too little history to say."""
    need = policy.min_history.total_seconds() / 86400.0
    rate = evidence.false_alarm_rate
    if evidence.history_days < need or rate is None:
        return Reason.TOO_LITTLE_HISTORY, (
            f"{evidence.history_days:.1f} days of scored history, {need:g} needed"
        )
    limit = policy.max_false_alarms_per_1000_node_days
    figures = (
        f"{evidence.false_alarms} false alarms in {evidence.node_days:.0f} node-days = {rate:.2f} per 1,000 "
        f"(limit {limit:g}); {evidence.caught} of {evidence.failures} failures caught"
    )
    if rate > limit:
        return Reason.BACKTEST_FAILED, figures
    return Reason.BACKTEST_PASSED, figures


def after_backtest(
    current: Standing, evidence: Evidence, policy: rules.ShadowPolicy, *, now: datetime, requested: bool
) -> Standing:
    """The standing after a backtest. A scheduled run never lifts a held shadow nor demotes an acting
    ladder (the guard watches that); one an operator `requested` may lift a held shadow when it passes."""
    if not requested and (current.acting or current.reason.held):
        return current
    # Requested on an acting model and failed: back to shadow, and the daily backtest may lift it again.
    reason, detail = judge_backtest(evidence, policy)
    return Standing(
        version=current.version, fleet=current.fleet, reason=reason, detail=detail, at=now, by="backtest"
    )


def by_operator(current: Standing, *, validate: bool, who: str, now: datetime, note: str = "") -> Standing:
    """An operator's word: act without a backtest (`validate`), or back to shadow until told otherwise."""
    reason = Reason.OPERATOR_VALIDATED if validate else Reason.OPERATOR_SHADOW
    detail = note or ("validated by an operator" if validate else "sent to shadow by an operator")
    return Standing(
        version=current.version,
        fleet=current.fleet,
        reason=reason,
        detail=detail,
        at=now,
        by=f"operator:{who}",
    )


@dataclass(frozen=True, slots=True)
class Reading:
    """One scoring cycle as the guard sees it."""

    flagged_gpus: int  # GPUs at warn or act
    gpus: int  # GPUs scored
    budget_full: bool  # the proactive budget has no free slot right now


@dataclass(frozen=True, slots=True)
class GuardState:
    """Observed state the guard carries between cycles (persisted, so a restart keeps the timer)."""

    budget_full_since: datetime | None = None


def flagged_limit(gpus: int, policy: rules.ShadowPolicy) -> int:
    """Flagged GPUs allowed in one cycle: the policy's share of the scored GPUs, never below its floor."""
    return max(policy.min_flagged_gpus, math.floor(gpus * policy.max_flagged_fraction))


def check_guard(
    reading: Reading, state: GuardState, policy: rules.ShadowPolicy, *, now: datetime
) -> tuple[GuardState, tuple[Reason, str] | None]:
    """The guard's timer after this cycle, and the trip (reason, detail) when it must send the ladder back."""
    since = (state.budget_full_since or now) if reading.budget_full else None
    after = GuardState(budget_full_since=since)
    limit = flagged_limit(reading.gpus, policy)
    if reading.flagged_gpus > limit:
        share = reading.flagged_gpus / reading.gpus if reading.gpus else 1.0
        return after, (
            Reason.GUARD_FLAGGED,
            f"{reading.flagged_gpus} of {reading.gpus} GPUs flagged ({share:.1%}) in one scoring cycle, more "
            f"than the policy allows ({limit}: {policy.max_flagged_fraction:g} of them, at least "
            f"{policy.min_flagged_gpus})",
        )
    if since is not None and now - since >= policy.max_budget_full:
        held = now - since
        return after, (
            Reason.GUARD_BUDGET,
            f"the proactive budget has been full for {held.total_seconds() / 3600:.1f} h since "
            f"{since.isoformat()}, longer than the policy allows ({policy.max_budget_full})",
        )
    return after, None


def tripped(current: Standing, trip: tuple[Reason, str], *, now: datetime) -> Standing:
    reason, detail = trip
    return Standing(
        version=current.version, fleet=current.fleet, reason=reason, detail=detail, at=now, by="guard"
    )
