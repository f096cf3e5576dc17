"""Safety gates as pure values: the blast-radius budget, the breaker, the quarantine rate limit, and the
proactive budget.

A storm (a bad driver rollout, a power event) must not take a whole pool out of service. Past the budget
the breaker opens: no new quarantines, signals still recorded. The breaker's state is a value here;
`act` persists it and emits the Event and metric. The proactive budget is separate and smaller: a
prediction is a guess, so past it a node only stays at the gentler step; it never opens the breaker.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from app.config import rules
from app.decide import footprint
from app.domain import NodeState, RiskLevel

# `budgets.attempts_per_week` counts the remediation attempts (quarantines) of this long before now.
ATTEMPT_WINDOW = timedelta(days=7)
# `budgets.quarantines_per_minute` counts the fresh quarantines of this long before now.
RATE_WINDOW = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class Fleet:
    """Counts the budget is measured against, from a fresh node list."""

    total: int
    quarantined: int
    by_pool: dict[str, tuple[int, int]] = field(default_factory=dict)  # pool → (nodes, quarantined)

    @classmethod
    def of(cls, nodes: Iterable[NodeState], *, pool_label: str, is_quarantined: set[str]) -> Fleet:
        by_pool: dict[str, list[int]] = {}
        total = quarantined = 0
        for node in nodes:
            pool = node.label(pool_label) or ""
            counts = by_pool.setdefault(pool, [0, 0])
            counts[0] += 1
            total += 1
            if node.name in is_quarantined:
                counts[1] += 1
                quarantined += 1
        return cls(
            total=total, quarantined=quarantined, by_pool={k: (v[0], v[1]) for k, v in by_pool.items()}
        )


@dataclass(frozen=True, slots=True)
class Breaker:
    open: bool = False
    opened_at: datetime | None = None
    reason: str = ""
    last_refusal: datetime | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    reason: str
    breaker: Breaker


def limit(total: int, *, fraction: float, cap: int) -> int:
    """At most `fraction` of `total` and at most `cap`, but never zero for a non-empty fleet."""
    return max(1, min(cap, math.floor(total * fraction))) if total else 0


def admit(
    fleet: Fleet,
    *,
    pool: str,
    breaker: Breaker,
    policy: rules.BudgetPolicy,
    now: datetime,
    recent_quarantines: Sequence[datetime] = (),
) -> Verdict:
    """May one more node of `pool` be quarantined now? Opens the breaker when a budget would be exceeded."""
    breaker = maybe_close(breaker, fleet, policy=policy, now=now)
    if breaker.open:
        refused = replace(breaker, last_refusal=now)
        return Verdict(False, f"breaker open since {_iso(breaker.opened_at)}: {breaker.reason}", refused)
    cluster_limit = limit(fleet.total, fraction=policy.max_fraction, cap=policy.max_nodes)
    if fleet.quarantined + 1 > cluster_limit:
        why = (
            f"quarantining one more node would exceed the cluster budget "
            f"({fleet.quarantined}/{fleet.total} quarantined, limit {cluster_limit})"
        )
        return Verdict(False, why, Breaker(open=True, opened_at=now, reason=why, last_refusal=now))
    nodes, quarantined = fleet.by_pool.get(pool, (0, 0))
    pool_limit = limit(nodes, fraction=policy.per_pool_max_fraction, cap=policy.per_pool_max_nodes)
    if quarantined + 1 > pool_limit:
        why = (
            f"quarantining one more node would exceed pool {pool or '(none)'}'s budget "
            f"({quarantined}/{nodes} quarantined, limit {pool_limit})"
        )
        return Verdict(False, why, Breaker(open=True, opened_at=now, reason=why, last_refusal=now))
    window = [t for t in recent_quarantines if now - t < RATE_WINDOW]
    if len(window) >= policy.quarantines_per_minute:
        # A rate limit defers, it does not trip the breaker: the next minute may proceed.
        return Verdict(False, f"rate limit: {len(window)} quarantines in the last minute", breaker)
    return Verdict(True, "within budget", breaker)


def in_rate_window(pairs: Iterable[tuple[str, datetime]], *, now: datetime) -> list[tuple[str, datetime]]:
    """The (node, time) pairs still inside the rate limit's window before `now` (one a little ahead of
    `now`, another replica's clock, is inside too)."""
    return [(name, at) for name, at in pairs if now - at < RATE_WINDOW]


def quarantine_marks(nodes: Iterable[NodeState]) -> list[tuple[str, datetime]]:
    """(node, start) of each node that carries Sickbay's quarantine and its `sickbay.io/since` mark."""
    return [
        (node.name, mark)
        for node in nodes
        if footprint.quarantined_class(node) is not None
        and (mark := footprint.time_of(node, footprint.SINCE)) is not None
    ]


def recent_quarantines(
    *,
    journaled: Iterable[tuple[str, datetime]],
    admitted: Iterable[tuple[str, datetime]],
    nodes: Iterable[NodeState] = (),
    marks: Iterable[tuple[str, datetime]] | None = None,
    now: datetime,
) -> tuple[datetime, ...]:
    """The fresh quarantines of the rate limit's window before `now`, oldest first, from what is observed,
    so a new leader limits the minute the old one started.

    Three sources, each by node and time: the quarantines the journal holds as applied (`journaled`), the
    ones this replica admitted (`admitted`: written since the journal was read, or being written), and
    the start of the quarantine each listed node carries (`sickbay.io/since`: what a new leader with an
    empty journal still sees; `marks`, when given, are those already taken from the nodes by
    `quarantine_marks`). They say the same quarantines more than once, so a node counts as often as the
    source that knows most of its quarantines in the window.
    """

    def by_node(pairs: Iterable[tuple[str, datetime]]) -> dict[str, list[datetime]]:
        found: dict[str, list[datetime]] = {}
        for name, at in in_rate_window(pairs, now=now):
            found.setdefault(name, []).append(at)
        return found

    marked = by_node(quarantine_marks(nodes) if marks is None else marks)
    sources = (by_node(journaled), by_node(admitted), marked)
    names = {name for source in sources for name in source}
    counted = (max((source.get(name, []) for source in sources), key=len) for name in names)
    return tuple(sorted(at for times in counted for at in times))


def maybe_close(breaker: Breaker, fleet: Fleet, *, policy: rules.BudgetPolicy, now: datetime) -> Breaker:
    """Close after a calm period once usage fell below the limit by the hysteresis margin."""
    if not breaker.open:
        return breaker
    quiet_since = breaker.last_refusal or breaker.opened_at or now
    cluster_limit = limit(fleet.total, fraction=policy.max_fraction, cap=policy.max_nodes)
    calm = now - quiet_since >= policy.calm_period
    below = fleet.quarantined <= max(0, cluster_limit - policy.hysteresis_nodes)
    return Breaker() if calm and below else breaker


def attempts_exceeded(
    past_attempts: Sequence[datetime], *, policy: rules.BudgetPolicy, now: datetime
) -> bool:
    week = [t for t in past_attempts if now - t < ATTEMPT_WINDOW]
    return len(week) >= policy.attempts_per_week


@dataclass(frozen=True, slots=True)
class ProactiveFleet:
    """What the proactive budget is measured against: the GPU nodes, and those at `act` right now.

    A node quarantined for a fault counts against the hardware budget instead, so its at-risk taint no
    longer takes a proactive slot.
    """

    gpu_nodes: int
    acting: frozenset[str] = frozenset()

    @classmethod
    def of(cls, nodes: Iterable[NodeState]) -> ProactiveFleet:
        gpu = [n for n in nodes if n.gpu_capacity > 0]
        acting = frozenset(
            n.name
            for n in gpu
            if footprint.at_risk_level(n) is RiskLevel.ACT and footprint.quarantined_class(n) is None
        )
        return cls(gpu_nodes=len(gpu), acting=acting)


@dataclass(frozen=True, slots=True)
class ProactiveVerdict:
    allowed: bool
    reason: str


def proactive_limit(gpu_nodes: int, policy: rules.BudgetPolicy) -> int:
    """Like the hardware budget, never zero for a fleet with GPU nodes, unless the fraction is 0 (step off)."""
    if policy.proactive_max_fraction == 0:
        return 0
    return limit(gpu_nodes, fraction=policy.proactive_max_fraction, cap=policy.proactive_max_nodes)


def proactive_full(fleet: ProactiveFleet, policy: rules.BudgetPolicy) -> bool:
    """No free slot at `act`: what the runtime guard times (`decide.shadow.check_guard`)."""
    cap = proactive_limit(fleet.gpu_nodes, policy)
    return cap > 0 and len(fleet.acting) >= cap


def admit_proactive(fleet: ProactiveFleet, *, node: str, policy: rules.BudgetPolicy) -> ProactiveVerdict:
    """May `node` carry the at-risk NoSchedule taint? A node already at `act` keeps its slot."""
    cap = proactive_limit(fleet.gpu_nodes, policy)
    if node in fleet.acting:
        return ProactiveVerdict(True, "already at act")
    if len(fleet.acting) + 1 > cap:
        return ProactiveVerdict(
            False,
            f"the proactive budget is full: {len(fleet.acting)} of {fleet.gpu_nodes} GPU nodes at act "
            f"(limit {cap}: {policy.proactive_max_fraction:g} of them, at most {policy.proactive_max_nodes})",
        )
    return ProactiveVerdict(True, f"within the proactive budget ({len(fleet.acting) + 1}/{cap})")


def _iso(moment: datetime | None) -> str:
    return moment.isoformat() if moment else "?"
