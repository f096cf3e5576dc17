"""The pure retention decision: cutoffs at `now`, the floors the features need, and what is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import errors, rules
from app.config.retention import RetentionSettings
from app.config.settings import RULES_DIR, Settings
from app.decide import retention
from app.service.runtime import services

NOW = datetime.now(UTC)
POLICY = rules.load_policy(RULES_DIR / "policy.yaml")  # the shipped policy
NEEDS = retention.needs(POLICY, retrain_window=timedelta(days=28), context_window=timedelta(hours=1))
days = st.integers(min_value=0, max_value=400).map(lambda d: timedelta(days=d))


@given(inbox=days, faults=days, outcomes=days, validation=days)
def test_a_setting_that_passes_keeps_every_feature_s_look_back(
    inbox: timedelta, faults: timedelta, outcomes: timedelta, validation: timedelta
) -> None:
    settings = RetentionSettings(inbox=inbox, faults=faults, outcomes=outcomes, validation=validation)
    found = retention.problems(settings, NEEDS)
    pruning = retention.pruning(settings, now=NOW, held=frozenset({"n1"}))
    short = [n for n in NEEDS if pruning.cutoffs[n.table] > NOW - n.span]
    assert bool(found) == bool(short)
    assert len(found) == len(short)
    assert pruning.held == frozenset({"n1"})
    for table, cutoff in pruning.cutoffs.items():
        assert cutoff == NOW - retention.kept(settings, table)


def test_the_floors_name_the_features() -> None:
    found = retention.problems(RetentionSettings(faults=timedelta(days=7), outcomes=timedelta(days=3)), NEEDS)
    assert any("retrain_window_s" in line and line.startswith("retention.faults") for line in found)
    assert any("attempts_per_week" in line and line.startswith("retention.outcomes") for line in found)
    assert retention.problems(RetentionSettings(), NEEDS) == []


def test_unknown_held_nodes_or_disabled_prune_nothing() -> None:
    assert retention.pruning(RetentionSettings(), now=NOW, held=None).cutoffs == {}
    off = retention.pruning(RetentionSettings(enabled=False), now=NOW, held=frozenset())
    assert off.cutoffs == {}
    assert off.skipped == "retention.enabled is false"


def test_start_up_refuses_a_retention_shorter_than_a_feature_needs() -> None:
    settings = Settings(auth={"mode": "none"}, retention={"outcomes": "2d"})
    with pytest.raises(errors.ConfigError, match="attempts_per_week"):
        services.load_rules(settings)
    assert services.load_rules(Settings(auth={"mode": "none"})).policy.version == 1
