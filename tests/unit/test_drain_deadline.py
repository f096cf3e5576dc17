"""The drain deadline as pure arithmetic: after a refused eviction, retry (how soon) or follow policy; and
how long a moved pod is waited for.

Table-driven over (attempt, time left, policy); times are seconds on one monotonic clock, relative to a
drain that started at START, never read from a clock.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.config import rules
from app.decide import drain_deadline
from app.decide.drain_deadline import DeleteAtDeadline, LeaveAtDeadline, RetryIn

START = 5_000.0  # the event loop's clock is not the wall clock: any origin will do
LEAVE = rules.DrainPolicy(deadline=timedelta(minutes=10), on_deadline="leave")
DELETE = rules.DrainPolicy(deadline=timedelta(minutes=10), on_deadline="delete")
DEADLINE = START + 600.0


def test_the_deadline_counts_from_the_start_of_the_drain() -> None:
    assert drain_deadline.deadline(START, LEAVE) == DEADLINE
    short = rules.DrainPolicy(deadline=timedelta(seconds=90))
    assert drain_deadline.deadline(START, short) == START + 90.0


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
    deadline = drain_deadline.deadline(START, policy)
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
    deadline = drain_deadline.deadline(START, policy)
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
