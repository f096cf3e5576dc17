"""Shadow mode as pure decisions: the backtest verdict, the standing it leads to, the operator's word, the
runtime guard, and the ladder's plans in shadow. Table-driven, no mocks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.config import rules
from app.decide import plans, shadow
from app.decide.situation import Situation
from app.domain import ActionKind, AtRiskParams, Plan, RiskLevel
from tests.unit.test_proactive import AT_ACT, AT_WARN, POLICY, RANKS, fleet, node, risk

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
SHADOW = POLICY.prediction.shadow
HELD = (shadow.Reason.GUARD_FLAGGED, shadow.Reason.GUARD_BUDGET, shadow.Reason.OPERATOR_SHADOW)
NOTE = "model m1 on fleet f: unvalidated, not yet validated on this fleet's own history"


def standing(reason: shadow.Reason) -> shadow.Standing:
    return shadow.Standing(version="m1", fleet="f", reason=reason, detail="d", at=T0, by="x")


def evidence(false_alarms: int, *, nodes: int = 200, days: float = 14.0) -> shadow.Evidence:
    return shadow.Evidence(false_alarms=false_alarms, node_days=nodes * days, history_days=days)


@pytest.mark.parametrize(
    ("found", "verdict"),
    [
        (evidence(0), shadow.Reason.BACKTEST_PASSED),
        (evidence(2), shadow.Reason.BACKTEST_PASSED),  # 2 / 2,800 node-days = 0.71 per 1,000
        (evidence(3), shadow.Reason.BACKTEST_FAILED),  # 1.07 per 1,000
        (evidence(627), shadow.Reason.BACKTEST_FAILED),  # issue 12's shipped model: 224 per 1,000
        (evidence(0, days=6.9), shadow.Reason.TOO_LITTLE_HISTORY),
        (evidence(0, nodes=0), shadow.Reason.TOO_LITTLE_HISTORY),
    ],
)
def test_the_backtest_passes_only_within_the_false_alarm_limit_over_enough_history(
    found: shadow.Evidence, verdict: shadow.Reason
) -> None:
    assert shadow.judge_backtest(found, SHADOW)[0] is verdict


def test_the_verdict_names_its_figures() -> None:
    _, detail = shadow.judge_backtest(evidence(627), SHADOW)
    assert "627 false alarms in 2800 node-days = 223.93 per 1,000 (limit 1)" in detail


@pytest.mark.parametrize(
    ("before", "requested", "found", "after"),
    [
        # Unvalidated or failed: a scheduled backtest decides.
        (shadow.Reason.UNVALIDATED, False, evidence(0), shadow.Reason.BACKTEST_PASSED),
        (shadow.Reason.UNVALIDATED, False, evidence(627), shadow.Reason.BACKTEST_FAILED),
        (shadow.Reason.BACKTEST_FAILED, False, evidence(0), shadow.Reason.BACKTEST_PASSED),
        (shadow.Reason.TOO_LITTLE_HISTORY, False, evidence(0, days=3), shadow.Reason.TOO_LITTLE_HISTORY),
        # Held: a scheduled backtest never lifts it; one an operator asked for does.
        *((held, False, evidence(0), held) for held in HELD),
        *((held, True, evidence(0), shadow.Reason.BACKTEST_PASSED) for held in HELD),
        (shadow.Reason.GUARD_FLAGGED, True, evidence(627), shadow.Reason.BACKTEST_FAILED),
        # Acting: the guard watches it, not the scheduled backtest; an operator's fresh one may demote it.
        (shadow.Reason.BACKTEST_PASSED, False, evidence(627), shadow.Reason.BACKTEST_PASSED),
        (shadow.Reason.OPERATOR_VALIDATED, True, evidence(627), shadow.Reason.BACKTEST_FAILED),
    ],
)
def test_the_standing_after_a_backtest(
    before: shadow.Reason, requested: bool, found: shadow.Evidence, after: shadow.Reason
) -> None:
    later = T0 + timedelta(days=1)
    result = shadow.after_backtest(standing(before), found, SHADOW, now=later, requested=requested)
    assert result.reason is after
    assert result.acting is after.acting
    kept = not requested and (before.acting or before.held)
    assert (result == standing(before)) is kept


def test_a_version_new_to_the_fleet_starts_in_shadow_and_says_why() -> None:
    first = shadow.first_contact("m1", fleet="f", now=T0)
    assert not first.acting
    assert first.shadow_note() == NOTE


@pytest.mark.parametrize("validate", [True, False])
def test_the_operator_decides_from_any_standing(validate: bool) -> None:
    for before in shadow.Reason:
        after = shadow.by_operator(standing(before), validate=validate, who="ops", now=T0)
        assert after.acting is validate
        assert after.by == "operator:ops"
        assert after.reason.held is not validate


@pytest.mark.parametrize(
    ("flagged", "gpus", "trips"),
    [
        (32, 1600, False),  # 2% exactly is allowed
        (33, 1600, True),
        (3, 80, False),  # a small fleet: the floor of 3, so one failing node's GPUs do not trip it
        (4, 80, True),
        (0, 0, False),
    ],
)
def test_the_guard_trips_on_the_share_of_gpus_flagged(flagged: int, gpus: int, trips: bool) -> None:
    reading = shadow.Reading(flagged_gpus=flagged, gpus=gpus, budget_full=False)
    _, trip = shadow.check_guard(reading, shadow.GuardState(), SHADOW, now=T0)
    assert (trip is not None) is trips
    if trip is not None:
        assert trip[0] is shadow.Reason.GUARD_FLAGGED
        assert f"{flagged} of {gpus} GPUs flagged" in trip[1]


def test_the_guard_times_a_full_budget_and_trips_only_when_it_stayed_full_too_long() -> None:
    full = shadow.Reading(flagged_gpus=1, gpus=80, budget_full=True)
    free = shadow.Reading(flagged_gpus=1, gpus=80, budget_full=False)
    state, trip = shadow.check_guard(full, shadow.GuardState(), SHADOW, now=T0)
    assert state.budget_full_since == T0
    assert trip is None
    state, trip = shadow.check_guard(full, state, SHADOW, now=T0 + timedelta(hours=23))
    assert state.budget_full_since == T0
    assert trip is None
    freed, _ = shadow.check_guard(free, state, SHADOW, now=T0 + timedelta(hours=23, minutes=5))
    assert freed.budget_full_since is None  # a free slot restarts the clock
    _, trip = shadow.check_guard(full, state, SHADOW, now=T0 + timedelta(hours=24))
    assert trip is not None
    assert trip[0] is shadow.Reason.GUARD_BUDGET


def test_a_trip_is_held_and_names_the_guard() -> None:
    after = shadow.tripped(
        standing(shadow.Reason.BACKTEST_PASSED), (shadow.Reason.GUARD_FLAGGED, "why"), now=T0
    )
    assert (after.acting, after.reason.held, after.by, after.detail) == (False, True, "guard", "why")


def test_policy_refuses_a_minimum_history_longer_than_the_history_read() -> None:
    with pytest.raises(ValueError, match="min_history"):
        rules.ShadowPolicy(history=timedelta(days=3), min_history=timedelta(days=7))


# -- the ladder in shadow -------------------------------------------------------------------------------


def plan(level: str, situation: Situation, *, resolved: bool = False) -> Plan:
    return plans.plan_for(risk(level, resolved=resolved), policy=POLICY, now=T0, situation=situation)


def test_in_shadow_act_is_recorded_with_the_taint_and_checkpoints_it_would_have_made() -> None:
    acting = Situation(node=node(), pods_on_node=RANKS, proactive=fleet(40))
    made = plan("act", acting)
    quiet = plan("act", Situation(node=node(), pods_on_node=RANKS, proactive=fleet(40), shadow=NOTE))
    assert quiet.is_noop
    assert quiet.shadowed == tuple(a for a in made.actions)
    assert [a.kind for a in quiet.shadowed].count(ActionKind.REQUEST_CHECKPOINT) == 5  # 3 pods, 2 owners
    assert quiet.summary.startswith("shadow: would taint n1 sickbay.io/at-risk=act:NoSchedule")
    assert NOTE in quiet.summary
    assert quiet.summary.endswith("nothing written")


def test_in_shadow_the_budget_still_says_where_it_would_have_held_the_node() -> None:
    quiet = plan("act", Situation(node=node(), proactive=fleet(20, "n9"), shadow=NOTE))
    assert quiet.is_noop
    assert [a.params_as(AtRiskParams).level for a in quiet.shadowed] == [RiskLevel.WARN]
    assert "held at warn" in quiet.summary


@pytest.mark.parametrize("taint", [AT_WARN, AT_ACT])
def test_in_shadow_a_node_still_carrying_the_at_risk_taint_has_it_removed(taint: object) -> None:
    quiet = plan("act", Situation(node=node("n1", taint), proactive=fleet(40), shadow=NOTE))  # type: ignore[arg-type]
    assert [a.kind for a in quiet.actions] == [ActionKind.CLEAR_AT_RISK]
    assert "in shadow" in quiet.actions[0].reason


def test_in_shadow_a_resolved_risk_removes_the_taint_as_when_acting() -> None:
    tainted = node("n1", AT_WARN)
    acting = plan("warn", Situation(node=tainted), resolved=True)
    quiet = plan("warn", Situation(node=tainted, shadow=NOTE), resolved=True)
    assert quiet == acting
    assert [a.kind for a in quiet.actions] == [ActionKind.CLEAR_AT_RISK]


def test_in_shadow_without_the_node_read_nothing_is_written() -> None:
    quiet = plan("act", Situation(node=None, shadow=NOTE))
    assert quiet.is_noop
    assert [a.kind for a in quiet.shadowed] == [ActionKind.TAINT_AT_RISK]
