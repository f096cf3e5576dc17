"""The drain deadline as pure arithmetic: after a refused eviction, retry (how soon) or follow policy; and
how long a moved pod is waited for.

Table-driven over (attempt, time left, policy); times are seconds on one monotonic clock, relative to a
drain that started at START, never read from a clock. Where the deadline starts is the node's
`sickbay.io/draining-since` (wall clock, relative to T0), so a resumed drain keeps its deadline.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.config import rules
from app.decide import drain_deadline, footprint
from app.decide.drain_deadline import DeleteAtDeadline, LeaveAtDeadline, RetryIn
from app.domain import NodeState, RemediationState, freeze_mapping

START = 5_000.0  # the event loop's clock is not the wall clock: any origin will do
LEAVE = rules.DrainPolicy(deadline=timedelta(minutes=10), on_deadline="leave")
DELETE = rules.DrainPolicy(deadline=timedelta(minutes=10), on_deadline="delete")
DEADLINE = START + 600.0


T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)  # only relative times matter: the function reads no clock


def draining(since: str | None) -> NodeState:
    annotations = {footprint.DRAINING_SINCE: since} if since is not None else {}
    return NodeState(
        name="n1",
        labels=freeze_mapping({footprint.STATE: RemediationState.DRAINING.value}),
        annotations=freeze_mapping(annotations),
    )


@pytest.mark.parametrize(
    ("node", "policy", "now", "left"),
    [
        # A drain starting now (the mark just written, or none could be): the whole deadline.
        (draining(T0.isoformat()), LEAVE, T0, 600.0),
        (None, LEAVE, T0, 600.0),
        (draining(None), LEAVE, T0 + timedelta(hours=1), 600.0),
        (draining("not a time"), LEAVE, T0, 600.0),
        # A drain resumed by a new leader: counted from the start the old one wrote.
        (draining(T0.isoformat()), LEAVE, T0 + timedelta(minutes=4), 360.0),
        (draining(T0.isoformat()), DELETE, T0 + timedelta(minutes=10), 0.0),
        (draining(T0.isoformat()), LEAVE, T0 + timedelta(minutes=12), -120.0),
        (draining(T0.isoformat()), rules.DrainPolicy(deadline=timedelta(seconds=90)), T0, 90.0),
        # A mark written by hand without an offset reads as UTC, as Sickbay writes it.
        (draining("2026-03-01T12:00:00"), LEAVE, T0 + timedelta(seconds=30), 570.0),
    ],
)
def test_the_deadline_counts_from_the_start_the_node_carries(
    node: NodeState | None, policy: rules.DrainPolicy, now: datetime, left: float
) -> None:
    assert drain_deadline.time_left(node, policy, now=now) == left


@pytest.mark.parametrize(
    ("subject", "kept"),
    [
        (draining(T0.isoformat()), T0.isoformat()),  # resumed: the first start stays
        (draining(None), (T0 + timedelta(minutes=5)).isoformat()),
        (draining("garbled"), (T0 + timedelta(minutes=5)).isoformat()),  # unreadable: written again
    ],
)
def test_a_drain_start_is_written_once_and_kept_when_resumed(subject: NodeState, kept: str) -> None:
    patch = footprint.drain_start_patch(subject, now=T0 + timedelta(minutes=5))
    assert patch.labels == ((footprint.STATE, "draining"),)
    assert dict(patch.annotations)[footprint.DRAINING_SINCE] == kept


@pytest.mark.parametrize("state", [s for s in RemediationState if s is not RemediationState.DRAINING])
def test_leaving_draining_removes_its_start(state: RemediationState) -> None:
    marked = draining(T0.isoformat())
    assert dict(footprint.state_patch(marked, state).annotations)[footprint.DRAINING_SINCE] == ""
    assert footprint.DRAINING_SINCE not in dict(footprint.state_patch(draining(None), state).annotations)
    assert dict(footprint.release_patch(marked).annotations)[footprint.DRAINING_SINCE] == "", "release"


@pytest.mark.parametrize(
    ("attempt", "now", "policy", "expected"),
    [
        # Well before the deadline: the backoff, 1 s doubling up to 30 s.
        (1, START, LEAVE, RetryIn(seconds=1.0, left=600.0)),
        (2, START + 1.0, LEAVE, RetryIn(seconds=2.0, left=599.0)),
        (5, START + 15.0, DELETE, RetryIn(seconds=16.0, left=585.0)),
        (6, START + 31.0, LEAVE, RetryIn(seconds=30.0, left=569.0)),
        (40, START + 100.0, LEAVE, RetryIn(seconds=30.0, left=500.0)),
        # Close to it: never wait past it, so the last try lands on the deadline.
        (6, DEADLINE - 10.0, LEAVE, RetryIn(seconds=10.0, left=10.0)),
        (1, DEADLINE - 0.25, DELETE, RetryIn(seconds=0.25, left=0.25)),
        # At or past it: policy says what then, whatever the attempt.
        (9, DEADLINE, LEAVE, LeaveAtDeadline()),
        (9, DEADLINE, DELETE, DeleteAtDeadline()),
        (1, DEADLINE + 120.0, LEAVE, LeaveAtDeadline()),
        (3, DEADLINE + 0.001, DELETE, DeleteAtDeadline()),
    ],
)
def test_after_a_refusal(
    attempt: int, now: float, policy: rules.DrainPolicy, expected: drain_deadline.AfterRefusal
) -> None:
    assert (
        drain_deadline.after_refusal(attempt=attempt, deadline=DEADLINE, policy=policy, now=now) == expected
    )


@pytest.mark.parametrize(
    ("deadline_s", "waits"),
    [
        (10, [1.0, 2.0, 4.0, 3.0]),  # the fourth wait is cut to the deadline
        (7, [1.0, 2.0, 4.0]),  # the waits add up to it exactly: no wait is cut
        (0.5, [0.5]),
        (100, [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 9.0]),
    ],
)
@pytest.mark.parametrize("policy", [LEAVE, DELETE])
def test_a_budget_that_never_yields_is_tried_until_the_deadline_then_policy_decides(
    deadline_s: float, waits: list[float], policy: rules.DrainPolicy
) -> None:
    """The whole schedule of one pod whose every eviction is refused, played on the decision alone."""
    policy = policy.model_copy(update={"deadline": timedelta(seconds=deadline_s)})
    deadline = START + policy.deadline.total_seconds()
    now, attempt, slept = START, 0, []
    while True:
        attempt += 1
        step = drain_deadline.after_refusal(attempt=attempt, deadline=deadline, policy=policy, now=now)
        if not isinstance(step, RetryIn):
            break
        slept.append(step.seconds)
        now += step.seconds
    assert slept == waits
    assert now == pytest.approx(START + deadline_s)
    assert attempt == len(waits) + 1, "one try at the start, one after each wait, the last at the deadline"
    assert step == (DeleteAtDeadline() if policy.on_deadline == "delete" else LeaveAtDeadline())


def test_a_zero_deadline_gives_up_at_the_first_refusal() -> None:
    policy = rules.DrainPolicy(deadline=timedelta(0), on_deadline="delete")
    deadline = START + policy.deadline.total_seconds()
    assert drain_deadline.after_refusal(attempt=1, deadline=deadline, policy=policy, now=START) == (
        DeleteAtDeadline()
    )


SLACK = drain_deadline.KUBELET_SLACK_S


@pytest.mark.parametrize(
    ("accepted_at", "grace_period_s", "until"),
    [
        # A short grace period early in the drain: waited for until the drain deadline anyway.
        (START, 30, DEADLINE),
        (START + 100.0, 0, DEADLINE),
        # A grace period that runs past the deadline: its kubelet has all of it, and the slack.
        (START, 3_600, START + 3_600 + SLACK),
        (DEADLINE - 10.0, 30, DEADLINE + 20.0 + SLACK),
        # A deletion after the deadline (`on_deadline: delete`) waits for the deletion it asked for.
        (DEADLINE + 1.0, 30, DEADLINE + 31.0 + SLACK),
        (DEADLINE + 1.0, 0, DEADLINE + 1.0 + SLACK),
    ],
)
def test_how_long_a_moved_pod_is_waited_for(accepted_at: float, grace_period_s: int, until: float) -> None:
    assert (
        drain_deadline.departure_wait_until(deadline=DEADLINE, grace_period_s=grace_period_s, now=accepted_at)
        == until
    )
