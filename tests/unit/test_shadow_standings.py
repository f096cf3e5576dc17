"""Shadow standings compared whole: who changed them, to what, with which words, and the guard's edges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.config import rules
from app.decide import shadow

NOW = datetime.now(UTC)
POLICY = rules.ShadowPolicy(
    max_false_alarms_per_1000_node_days=1.0,
    min_history=timedelta(days=7),
    max_flagged_fraction=0.02,
    min_flagged_gpus=3,
    max_budget_full=timedelta(hours=24),
)
START = shadow.first_contact("m1", fleet="prod", now=NOW - timedelta(days=1))


def test_first_contact_is_unvalidated_by_start() -> None:
    assert (
        shadow.Standing(
            "m1",
            "prod",
            shadow.Reason.UNVALIDATED,
            "not yet validated on this fleet's own history",
            NOW - timedelta(days=1),
            "start",
        )
        == START
    )
    assert (
        START.shadow_note()
        == "model m1 on fleet prod: unvalidated, not yet validated on this fleet's own history"
    )


def test_a_backtest_at_the_limit_passes_and_one_above_fails() -> None:
    at_limit = shadow.Evidence(false_alarms=1, node_days=1000.0, history_days=7.0, failures=4, caught=3)
    passed = shadow.after_backtest(START, at_limit, POLICY, now=NOW, requested=False)
    assert passed == shadow.Standing(
        "m1",
        "prod",
        shadow.Reason.BACKTEST_PASSED,
        "1 false alarms in 1000 node-days = 1.00 per 1,000 (limit 1); 3 of 4 failures caught",
        NOW,
        "backtest",
    )
    assert passed.shadow_note() is None
    above = shadow.Evidence(false_alarms=2, node_days=1000.0, history_days=7.0)
    assert shadow.judge_backtest(above, POLICY)[0] is shadow.Reason.BACKTEST_FAILED


def test_exactly_the_minimum_history_is_enough_and_less_is_not() -> None:
    assert shadow.judge_backtest(shadow.Evidence(0, 100.0, 7.0), POLICY)[0] is shadow.Reason.BACKTEST_PASSED
    short = shadow.judge_backtest(shadow.Evidence(0, 100.0, 6.9), POLICY)
    assert short == (shadow.Reason.TOO_LITTLE_HISTORY, "6.9 days of scored history, 7 needed")
    unscored = shadow.judge_backtest(shadow.Evidence(0, 0.0, 30.0), POLICY)
    assert unscored[0] is shadow.Reason.TOO_LITTLE_HISTORY


def test_an_operators_word_says_who_and_why() -> None:
    validated = shadow.by_operator(START, validate=True, who="ana", now=NOW)
    assert validated == shadow.Standing(
        "m1", "prod", shadow.Reason.OPERATOR_VALIDATED, "validated by an operator", NOW, "operator:ana"
    )
    held = shadow.by_operator(validated, validate=False, who="bo", now=NOW)
    assert (held.reason, held.detail, held.by) == (
        shadow.Reason.OPERATOR_SHADOW,
        "sent to shadow by an operator",
        "operator:bo",
    )
    assert (
        shadow.by_operator(START, validate=True, who="ana", now=NOW, note="checked by hand").detail
        == "checked by hand"
    )


def test_too_many_flagged_gpus_trip_the_guard() -> None:
    state, trip = shadow.check_guard(
        shadow.Reading(flagged_gpus=4, gpus=100, budget_full=False), shadow.GuardState(), POLICY, now=NOW
    )
    assert state == shadow.GuardState(None)
    assert trip == (
        shadow.Reason.GUARD_FLAGGED,
        "4 of 100 GPUs flagged (4.0%) in one scoring cycle, more than the policy allows (3: 0.02 of them, at least 3)",
    )
    _, none_scored = shadow.check_guard(shadow.Reading(4, 0, False), shadow.GuardState(), POLICY, now=NOW)
    assert none_scored is not None
    assert "4 of 0 GPUs flagged (100.0%)" in none_scored[1]
    assert shadow.check_guard(shadow.Reading(3, 100, False), shadow.GuardState(), POLICY, now=NOW)[1] is None


def test_a_budget_full_for_the_whole_allowance_trips_the_guard() -> None:
    since = NOW - timedelta(hours=24)
    state, trip = shadow.check_guard(shadow.Reading(0, 100, True), shadow.GuardState(since), POLICY, now=NOW)
    assert state == shadow.GuardState(since)
    assert trip == (
        shadow.Reason.GUARD_BUDGET,
        f"the proactive budget has been full for 24.0 h since {since.isoformat()}, longer than the policy "
        "allows (1 day, 0:00:00)",
    )
    # The timer starts now when the budget fills, and stops when it frees.
    assert shadow.check_guard(shadow.Reading(0, 100, True), shadow.GuardState(), POLICY, now=NOW) == (
        shadow.GuardState(NOW),
        None,
    )
    assert shadow.check_guard(shadow.Reading(0, 100, False), shadow.GuardState(since), POLICY, now=NOW) == (
        shadow.GuardState(None),
        None,
    )


def test_a_trip_is_the_guards() -> None:
    acting = shadow.by_operator(START, validate=True, who="ana", now=NOW)
    assert shadow.tripped(acting, (shadow.Reason.GUARD_BUDGET, "full"), now=NOW) == shadow.Standing(
        "m1", "prod", shadow.Reason.GUARD_BUDGET, "full", NOW, "guard"
    )
