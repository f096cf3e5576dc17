"""Retention as pure values: each table's cutoff at `now`, and the floors the policy's features set."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from app.config import rules
from app.config.retention import RetentionSettings
from app.decide import gates
from app.decide.retention import Table, needs, problems, pruning

NOW = datetime.now(UTC)


def _needs(policy: rules.Policy) -> tuple:
    return needs(policy, retrain_window=timedelta(days=30), context_window=timedelta(minutes=10))


def test_cutoffs_are_now_minus_each_tables_retention() -> None:
    settings = RetentionSettings(inbox="14d", faults="90d", outcomes="60d", validation="180d")
    plan = pruning(settings, now=NOW, held=frozenset({"node-a"}))
    assert plan.skipped is None
    assert plan.held == frozenset({"node-a"})
    assert plan.cutoffs == {
        Table.INBOX: NOW - timedelta(days=14),
        Table.FAULTS: NOW - timedelta(days=90),
        Table.OUTCOMES: NOW - timedelta(days=60),
        Table.VALIDATION: NOW - timedelta(days=180),
    }


def test_nothing_is_pruned_before_the_held_nodes_are_known_or_when_disabled() -> None:
    assert pruning(RetentionSettings(), now=NOW, held=None).cutoffs == {}
    off = pruning(RetentionSettings(enabled=False), now=NOW, held=frozenset())
    assert off.cutoffs == {} and off.skipped == "retention.enabled is false"


def test_defaults_cover_every_feature_of_the_shipped_policy() -> None:
    policy = rules.load_policy()
    assert problems(RetentionSettings(), _needs(policy)) == []


def test_outcomes_shorter_than_the_weekly_attempt_cap_is_named() -> None:
    policy = rules.load_policy()
    short = RetentionSettings(outcomes=gates.ATTEMPT_WINDOW - timedelta(days=1))
    found = problems(short, _needs(policy))
    assert len(found) == 1
    assert found[0].startswith("retention.outcomes is 6 days") and "attempts_per_week" in found[0]


def test_faults_shorter_than_the_escalation_window_or_retraining_is_named() -> None:
    policy = rules.load_policy()
    found = problems(RetentionSettings(faults=timedelta(minutes=1)), _needs(policy))
    assert any("escalation.window" in line for line in found)
    assert any("retrain_window_s" in line for line in found)
    assert all(line.startswith("retention.faults") for line in found)


def test_a_disabled_retention_has_no_floor() -> None:
    policy = rules.load_policy()
    assert problems(RetentionSettings(enabled=False, faults="1m"), _needs(policy)) == []


def test_durations_are_written_as_the_policy_writes_them() -> None:
    assert RetentionSettings(inbox="36h").inbox == timedelta(hours=36)
    with pytest.raises(ValidationError):
        RetentionSettings(batch_rows=0)
