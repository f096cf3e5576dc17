"""What the store may forget, and when: each growing table's cutoff at `now`, and the floor under it.

A table's retention may never be shorter than the longest look-back of a feature that reads it (`needs`):
the escalation window and classification's context read the faults, as retraining's labels do over its
whole window; the weekly cap on remediation attempts and the quarantine rate limit read the outcomes.
`problems` names every retention below its floor, with the feature, so start-up can refuse it.

Some rows outlive any cutoff (`Pruning`): an inbox row not yet processed, anything naming a node Sickbay
still holds (quarantined or owned: its release reads that history), the latest notification of an alert
still firing (reconciliation and release read it as "this alert fires", and a resend of the same firing
must stay a duplicate rather than be acted on again), and each model version's latest standing. Which
nodes are held is the caller's observation; until one is made, nothing is pruned.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from app.config import rules
from app.config.retention import RetentionSettings
from app.decide import gates

# The inbox keeps processed rows at least this long, for the dedup of resends: Alertmanager re-sends an
# unchanged group every `repeat_interval`, 4h by default (prometheus.io/docs/alerting/latest/configuration
# /#route), and an agent retries its spool for minutes. A still-firing alert's row is kept in any case.
DEDUP_HORIZON = timedelta(days=1)


class Table(StrEnum):
    INBOX = "inbox"
    FAULTS = "faults"
    OUTCOMES = "outcomes"
    VALIDATION = "model_validation"


@dataclass(frozen=True, slots=True)
class Need:
    """A feature that reads `table` back `span`: the table's retention must be at least that."""

    table: Table
    span: timedelta
    feature: str


def needs(policy: rules.Policy, *, retrain_window: timedelta, context_window: timedelta) -> tuple[Need, ...]:
    """Every look-back into a pruned table, from the policy and the service's settings."""
    classification = policy.classification
    return (
        Need(Table.INBOX, DEDUP_HORIZON, "the intake's dedup of Alertmanager resends"),
        Need(
            Table.FAULTS, policy.escalation.window, "policy escalation.window (restart backoff, escalation)"
        ),
        Need(
            Table.FAULTS,
            max(classification.context_window, classification.link_window),
            "policy classification.context_window / link_window",
        ),
        Need(Table.FAULTS, context_window, "pipeline.context_window_s (classification context)"),
        Need(Table.FAULTS, retrain_window, "prediction.retrain_window_s (retraining's journal labels)"),
        Need(
            Table.OUTCOMES, gates.ATTEMPT_WINDOW, "policy budgets.attempts_per_week (the weekly attempt cap)"
        ),
        Need(Table.OUTCOMES, gates.RATE_WINDOW, "policy budgets.quarantines_per_minute (the rate limit)"),
        Need(
            Table.VALIDATION,
            policy.prediction.shadow.history,
            "policy prediction.shadow.history (the backtests' figures over their own span)",
        ),
    )


def kept(settings: RetentionSettings, table: Table) -> timedelta:
    return {
        Table.INBOX: settings.inbox,
        Table.FAULTS: settings.faults,
        Table.OUTCOMES: settings.outcomes,
        Table.VALIDATION: settings.validation,
    }[table]


def problems(settings: RetentionSettings, wanted: tuple[Need, ...]) -> list[str]:
    """`retention.<table>` settings shorter than a feature needs, one line each (empty: all is well)."""
    if not settings.enabled:
        return []
    return [
        f"retention.{need.table.value.removeprefix('model_')} is {kept(settings, need.table)} but "
        f"{need.feature} reads {need.span} back: keep at least that"
        for need in wanted
        if kept(settings, need.table) < need.span
    ]


@dataclass(frozen=True, slots=True)
class Pruning:
    """One pruning pass: rows older than each table's cutoff go, except the ones the module docstring
    keeps; `held` names the nodes whose rows all stay. No cutoffs and a `skipped` reason: prune nothing."""

    cutoffs: dict[Table, datetime]
    held: frozenset[str] = frozenset()
    skipped: str | None = None


def pruning(settings: RetentionSettings, *, now: datetime, held: frozenset[str] | None) -> Pruning:
    """The cutoffs at `now`. `held`: the nodes Sickbay quarantined or owns, as last observed; None when
    no observation was made yet (a leader that has not reconciled once), which prunes nothing."""
    if not settings.enabled:
        return Pruning(cutoffs={}, skipped="retention.enabled is false")
    if held is None:
        return Pruning(cutoffs={}, skipped="the nodes Sickbay holds are not known yet")
    return Pruning(cutoffs={table: now - kept(settings, table) for table in Table}, held=held)
