"""Whether a drain emptied its node (pure), when a drain-failed node is tried again, and its footprint.

Table-driven over outcomes as the drainer records them; `now` is passed in, never read from a clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.config import rules
from app.decide import conditions, drains, footprint
from app.domain import (
    Action,
    ActionKind,
    FaultClass,
    NodeState,
    Outcome,
    OutcomeStatus,
    PodRef,
    RemediationState,
    Track,
    freeze_mapping,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
A = PodRef("training", "a")
B = PodRef("training", "b")


def outcome(pod: PodRef, status: OutcomeStatus, detail: str = "") -> Outcome:
    action = Action(kind=ActionKind.EVICT_POD, track=Track.WORKLOAD, node="n1", pod=pod, reason="drain")
    return Outcome(action=action, status=status, detail=detail or status.value, at=T0)


@pytest.mark.parametrize(
    ("statuses", "lingering", "left"),
    [
        # Accepted and gone, already gone, or a dry run: nothing left.
        ({A: OutcomeStatus.APPLIED, B: OutcomeStatus.SKIPPED}, {}, {}),
        ({A: OutcomeStatus.DRY_RUN}, {}, {}),
        # Accepted but still there when its wait ended.
        ({A: OutcomeStatus.APPLIED, B: OutcomeStatus.APPLIED}, {B: "still Terminating"}, {B: "terminating"}),
        # An eviction that failed for good, and one a budget held past the deadline (policy: leave).
        ({A: OutcomeStatus.FAILED, B: OutcomeStatus.APPLIED}, {}, {A: "eviction-failed"}),
        ({A: OutcomeStatus.BLOCKED, B: OutcomeStatus.FAILED}, {}, {A: "blocked", B: "eviction-failed"}),
    ],
)
def test_settle_names_each_pod_left_and_why(
    statuses: dict[PodRef, OutcomeStatus], lingering: dict[PodRef, str], left: dict[PodRef, str]
) -> None:
    result = drains.settle("n1", [outcome(p, s) for p, s in statuses.items()], lingering=lingering)
    assert {p.pod: p.because.value for p in result.left} == left
    assert result.drained is (not left)
    assert result.reasons == frozenset(left.values())
    assert len(result.outcomes) == len(statuses)


def test_summary_counts_and_names_the_pods_left() -> None:
    failed = outcome(A, OutcomeStatus.FAILED, "EVICT pod training/a failed with 403: forbidden")
    result = drains.settle("n1", [failed, outcome(B, OutcomeStatus.APPLIED)], lingering={})
    assert result.summary() == (
        "1 of 2 pod(s) still on the node: training/a (eviction-failed: "
        "EVICT pod training/a failed with 403: forbidden)"
    )
    many = [outcome(PodRef("t", f"p{i}"), OutcomeStatus.FAILED, "x") for i in range(5)]
    assert drains.settle("n1", many, lingering={}).summary().endswith("; and 2 more")
    assert drains.settle("n1", [outcome(A, OutcomeStatus.APPLIED)], lingering={}).summary() == (
        "all 1 pod(s) gone"
    )


def test_a_drain_that_could_not_list_the_pods_is_not_drained() -> None:
    result = drains.DrainResult(node="n1", problem="cannot list the pods on the node: 503")
    assert not result.drained
    assert result.reasons == frozenset({"unlisted"})
    assert result.summary() == "cannot list the pods on the node: 503"


def node(state: RemediationState | None, **annotations: str) -> NodeState:
    labels = {footprint.STATE: state.value} if state else {}
    return NodeState(name="n1", labels=freeze_mapping(labels), annotations=freeze_mapping(annotations))


POLICY = rules.DrainPolicy(retry_after=timedelta(minutes=10))


@pytest.mark.parametrize(
    ("subject", "policy", "due"),
    [
        (node(RemediationState.DRAIN_FAILED, **{footprint.DRAIN_FAILED_AT: T0.isoformat()}), POLICY, False),
        (
            node(
                RemediationState.DRAIN_FAILED,
                **{footprint.DRAIN_FAILED_AT: (T0 - timedelta(minutes=10)).isoformat()},
            ),
            POLICY,
            True,
        ),
        # Written by hand without an offset: read as UTC.
        (
            node(RemediationState.DRAIN_FAILED, **{footprint.DRAIN_FAILED_AT: "2026-03-01T11:49:00"}),
            POLICY,
            True,
        ),
        # The time of the last try is lost or garbled: try now rather than never.
        (node(RemediationState.DRAIN_FAILED), POLICY, True),
        (node(RemediationState.DRAIN_FAILED, **{footprint.DRAIN_FAILED_AT: "yesterday"}), POLICY, True),
        # retry_after null: only a human (or the pods leaving) moves it on.
        (node(RemediationState.DRAIN_FAILED), rules.DrainPolicy(retry_after=None), False),
        # Only drain-failed nodes are retried here.
        (node(RemediationState.DRAINING), POLICY, False),
    ],
)
def test_retry_due(subject: NodeState, policy: rules.DrainPolicy, due: bool) -> None:
    assert drains.retry_due(subject, policy, now=T0) is due


def test_leaving_drain_failed_removes_its_marks_and_entering_keeps_them() -> None:
    failed = node(
        RemediationState.DRAIN_FAILED,
        **{
            footprint.DRAIN_FAILED: "1 of 1 pod(s) still on the node",
            footprint.DRAIN_FAILED_AT: T0.isoformat(),
        },
    )
    onward = footprint.state_patch(failed, RemediationState.DRAINING)
    assert onward.labels == ((footprint.STATE, "draining"),)
    assert dict(onward.annotations) == {footprint.DRAIN_FAILED: "", footprint.DRAIN_FAILED_AT: ""}
    again = footprint.state_patch(
        failed, RemediationState.DRAIN_FAILED, drain_failed="why", drain_failed_at="t"
    )
    assert dict(again.annotations) == {footprint.DRAIN_FAILED: "why", footprint.DRAIN_FAILED_AT: "t"}
    assert footprint.DRAIN_FAILED in footprint.OUR_ANNOTATIONS, "release removes it"
    assert footprint.DRAIN_FAILED_AT in footprint.OUR_ANNOTATIONS


def test_the_drain_failed_condition_keeps_the_class_in_its_message() -> None:
    condition = conditions.drain_failed_condition(
        FaultClass.REBOOT_NODE, why="1 of 2 pod(s)\n still there", now=T0
    )
    assert (condition.type, condition.status, condition.reason) == ("GpuHealthy", "False", "DrainFailed")
    assert condition.message == "reboot-node: not handed off, the drain failed: 1 of 2 pod(s) still there"
    assert condition.last_transition == T0
