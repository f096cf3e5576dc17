"""The quarantine rate limit's minute, decided from observed state: the journal and the nodes, beside
this replica's own admissions; never from a replica's memory alone, so a new leader limits the same minute.

Table-driven over (journaled quarantines, own admissions, listed nodes, now); times relative to T0.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.config import rules
from app.decide import footprint, gates
from app.domain import NodeState, Taint, freeze_mapping

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)  # the function reads no clock: any origin will do
S = timedelta(seconds=1)


def quarantined(name: str, since: datetime | str | None) -> NodeState:
    """A node Sickbay quarantined at `since` (its `sickbay.io/since` mark)."""
    marks = {footprint.OWNED_BY: "sickbay-0"}
    if since is not None:
        marks[footprint.SINCE] = since if isinstance(since, str) else since.isoformat()
    return NodeState(
        name=name,
        annotations=freeze_mapping(marks),
        taints=(Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule"),),
        unschedulable=True,
    )


def at_risk(name: str, since: datetime) -> NodeState:
    """Tainted at risk since `since`, not quarantined: no quarantine to count."""
    return NodeState(
        name=name,
        labels=freeze_mapping({footprint.STATE: "at-risk"}),
        annotations=freeze_mapping({footprint.SINCE: since.isoformat()}),
        taints=(Taint(footprint.AT_RISK, "warn", "PreferNoSchedule"),),
    )


@pytest.mark.parametrize(
    ("journaled", "admitted", "nodes", "now", "expected"),
    [
        # Nothing observed: nothing to limit.
        ((), (), (), T0, ()),
        # The journal alone (a restarted replica on its own volume): what lies within the minute.
        (
            (("a", T0 - 10 * S), ("b", T0 - 59 * S), ("c", T0 - 60 * S)),
            (),
            (),
            T0,
            (T0 - 59 * S, T0 - 10 * S),
        ),
        # The nodes alone (a new leader with an empty journal): each quarantined node's own start.
        ((), (), (quarantined("a", T0 - 5 * S), quarantined("b", T0 - 2 * S)), T0, (T0 - 5 * S, T0 - 2 * S)),
        ((), (), (quarantined("a", T0 - 61 * S),), T0, ()),
        # This replica's own admissions alone (written since the journal was read, or being written).
        ((), (("c", T0 - S), ("d", T0 - 61 * S)), (), T0, (T0 - S,)),
        # All three say the same quarantine: it counts once, as the journal has it.
        ((("a", T0 - 4 * S),), (("a", T0 - 5 * S),), (quarantined("a", T0 - 5 * S),), T0, (T0 - 4 * S,)),
        # Quarantined twice in the minute (released between): the source that knows both counts.
        (
            (("a", T0 - 40 * S), ("a", T0 - 4 * S)),
            (),
            (quarantined("a", T0 - 5 * S),),
            T0,
            (T0 - 40 * S, T0 - 4 * S),
        ),
        ((("a", T0 - 40 * S),), (("a", T0 - 40 * S), ("a", T0 - S)), (), T0, (T0 - 40 * S, T0 - S)),
        # What one source does not know of counts beside the others.
        (
            (("a", T0 - 4 * S),),
            (("c", T0 - S),),
            (quarantined("b", T0 - 3 * S),),
            T0,
            (T0 - 4 * S, T0 - 3 * S, T0 - S),
        ),
        # Not quarantines: an at-risk node's `since`, a quarantined node without a readable mark.
        ((), (), (at_risk("a", T0 - 5 * S), quarantined("b", None), quarantined("c", "garbled")), T0, ()),
        # A little ahead of `now` (another replica's clock ran ahead): recent all the same.
        ((("a", T0 + 2 * S),), (), (quarantined("b", T0 + S),), T0, (T0 + S, T0 + 2 * S)),
    ],
)
def test_recent_quarantines(
    journaled: tuple[tuple[str, datetime], ...],
    admitted: tuple[tuple[str, datetime], ...],
    nodes: tuple[NodeState, ...],
    now: datetime,
    expected: tuple[datetime, ...],
) -> None:
    found = gates.recent_quarantines(journaled=journaled, admitted=admitted, nodes=nodes, now=now)
    assert found == expected


BUDGET = rules.BudgetPolicy(
    max_fraction=1.0,
    per_pool_max_fraction=1.0,
    max_nodes=100,
    per_pool_max_nodes=100,
    quarantines_per_minute=2,
)
FLEET = gates.Fleet(total=10, quarantined=2, by_pool={"": (10, 2)})


@pytest.mark.parametrize(
    ("journaled", "nodes", "now", "allowed"),
    [
        # Two quarantines by the old leader, seen on the nodes: the third waits for the minute to pass.
        ((), (quarantined("a", T0 - 30 * S), quarantined("b", T0 - 20 * S)), T0, False),
        ((), (quarantined("a", T0 - 30 * S), quarantined("b", T0 - 20 * S)), T0 + 31 * S, True),
        # The same two in the journal.
        ((("a", T0 - 30 * S), ("b", T0 - 20 * S)), (), T0, False),
        ((("a", T0 - 30 * S), ("b", T0 - 20 * S)), (), T0 + 40 * S, True),
        # In both: still two, not four.
        ((("a", T0 - 30 * S), ("b", T0 - 20 * S)), (quarantined("a", T0 - 30 * S),), T0 + 31 * S, True),
    ],
)
def test_the_rate_limit_over_what_is_observed(
    journaled: tuple[tuple[str, datetime], ...], nodes: tuple[NodeState, ...], now: datetime, allowed: bool
) -> None:
    recent = gates.recent_quarantines(journaled=journaled, admitted=(), nodes=nodes, now=now)
    verdict = gates.admit(
        FLEET, pool="", breaker=gates.Breaker(), policy=BUDGET, now=now, recent_quarantines=recent
    )
    assert verdict.allowed is allowed
    if not allowed:
        assert verdict.reason == "rate limit: 2 quarantines in the last minute"
        assert not verdict.breaker.open, "a rate limit defers, it does not open the breaker"
