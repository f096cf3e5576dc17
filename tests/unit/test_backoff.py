"""The one backoff, and every schedule built on it: each caller's waits are the numbers it promised."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app import backoff
from app.act import departures
from app.agent import pusher
from app.config import rules
from app.decide import drain_deadline, restart_policy, soft
from app.kube import conflicts, errors
from app.kube.retries import RetryPolicy

Backoff = backoff.Backoff


@pytest.mark.parametrize(
    ("waits", "n", "rand", "expected"),
    [
        (Backoff(base=1.0), 1, 0.0, 1.0),
        (Backoff(base=1.0), 4, 0.0, 8.0),
        (Backoff(base=1.0, cap=30.0), 5, 0.0, 16.0),
        (Backoff(base=1.0, cap=30.0), 6, 0.0, 30.0),
        (Backoff(base=1.0, cap=30.0), 10_000, 0.0, 30.0),  # far past any float: still the cap
        (Backoff(base=0.5, factor=3.0), 3, 0.0, 4.5),
        (Backoff(base=2.0, factor=1.0), 9, 0.0, 2.0),
        (Backoff(base=1.0, jitter=0.5), 1, 0.5, 1.25),
        (Backoff(base=1.0, cap=4.0, jitter=1.0), 7, 0.75, 7.0),  # jitter stretches past the cap
        (Backoff(base=0.0), 10_000, 0.9, 0.0),
    ],
)
def test_the_nth_wait(waits: Backoff, n: int, rand: float, expected: float) -> None:
    assert waits.delay(n, rand=rand) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"base": -1.0}, "negative"),
        ({"base": 1.0, "cap": -1.0}, "negative"),
        ({"base": 1.0, "jitter": -0.1}, "negative"),
        ({"base": math.nan}, "negative"),
        ({"base": 1.0, "factor": 0.5}, "factor"),
    ],
)
def test_a_backoff_that_cannot_be_is_refused(kwargs: dict[str, float], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Backoff(**kwargs)


@pytest.mark.parametrize(("n", "rand"), [(0, 0.0), (-1, 0.0), (1, 1.0), (1, -0.1)])
def test_retries_count_from_one_and_rand_is_a_fraction(n: int, rand: float) -> None:
    with pytest.raises(ValueError, match=r"count from 1|must be in"):
        Backoff(base=1.0).delay(n, rand=rand)


waits_st = st.builds(
    Backoff,
    base=st.floats(0.0, 100.0),
    factor=st.floats(1.0, 10.0),
    cap=st.floats(0.0, 1000.0),
    jitter=st.floats(0.0, 2.0),
)


@given(waits=waits_st, n=st.integers(1, 5000), rand=st.floats(0.0, 0.999999))
def test_waits_never_shrink_and_never_pass_the_longest(waits: Backoff, n: int, rand: float) -> None:
    assert waits.delay(n, rand=rand) <= waits.delay(n + 1, rand=rand)
    assert 0.0 <= waits.delay(n, rand=rand) <= waits.longest
    assert waits.delay(n) <= waits.delay(n, rand=rand) <= waits.delay(n) * (1 + waits.jitter)


def test_each_user_waits_as_it_promised() -> None:
    """The schedules built on the one backoff, first waits and caps, as each module's docstring says."""
    api = RetryPolicy(base=0.2, cap=5.0, jitter=0.5).waits
    assert [api.delay(n) for n in (1, 2, 6, 7)] == pytest.approx([0.2, 0.4, 5.0, 5.0])
    assert [drain_deadline.EVICTION_RETRY.delay(n) for n in (1, 2, 5, 6, 7)] == [1.0, 2.0, 16.0, 30.0, 30.0]
    assert [departures.POLLS.delay(n) for n in (1, 2, 5, 6)] == [0.25, 0.5, 4.0, 5.0]
    assert conflicts.WAITS.delay(1) == conflicts.WAITS.delay(5) == 0.01
    agent = pusher.delivery_backoff(initial_s=0.5, max_s=30.0)
    assert agent.longest == 30.0
    rng = random.Random(3)
    for attempt in range(12):
        ceiling = min(30.0, 0.5 * 2**attempt)
        assert ceiling / 2 <= agent.delay(attempt + 1, rand=rng.random()) <= ceiling


def test_the_retry_policy_is_the_same_backoff_for_restarts_and_rechecks() -> None:
    policy = rules.RetryPolicy(initial=timedelta(seconds=30), factor=2.0, max=timedelta(minutes=5))
    assert [restart_policy.backoff(n, policy) for n in (1, 2, 3, 4)] == [
        timedelta(0),
        timedelta(seconds=30),
        timedelta(seconds=60),
        timedelta(seconds=120),
    ]
    assert restart_policy.backoff(500, policy) == policy.max
    assert [soft.recheck_delay(n, policy) for n in (0, 1, 2, 3)] == [
        timedelta(seconds=30),
        timedelta(seconds=30),
        timedelta(seconds=60),
        timedelta(seconds=120),
    ]
    assert soft.recheck_delay(500, policy) == policy.max


class _Race:
    """An object that changes under us `conflicts` times before a write gets through."""

    def __init__(self, conflicts: int) -> None:
        self.left = conflicts
        self.tries: list[int] = []

    async def attempt(self, number: int) -> str:
        self.tries.append(number)
        if self.left:
            self.left -= 1
            raise errors.ConflictError("409", status=409)
        return f"written on try {number}"


async def _no_sleep(seconds: float, slept: list[float]) -> None:
    slept.append(seconds)


@pytest.mark.parametrize(
    ("races", "tries", "expected", "waits"),
    [
        (0, 5, "written on try 1", 0),
        (2, 5, "written on try 3", 2),
        (4, 5, "written on try 5", 4),
        (5, 5, "gave up", 4),
        (9, 1, "gave up", 0),
    ],
)
async def test_a_lost_race_is_read_and_written_again_a_bounded_number_of_times(
    races: int, tries: int, expected: str, waits: int
) -> None:
    race, slept = _Race(races), list[float]()
    answer = await conflicts.retry_on_conflict(
        race.attempt,
        what="node n",
        tries=tries,
        sleep=lambda s: _no_sleep(s, slept),
        rand=lambda: 0.5,
        gave_up=lambda: "gave up",
    )
    assert answer == expected
    assert race.tries == list(range(1, min(races + 1, tries) + 1))
    assert slept == [pytest.approx(0.0105)] * waits


async def test_without_a_fallback_the_last_conflict_is_raised_and_other_errors_at_once() -> None:
    slept: list[float] = []
    with pytest.raises(errors.ConflictError):
        await conflicts.retry_on_conflict(
            _Race(3).attempt, what="n", tries=3, sleep=lambda s: _no_sleep(s, slept)
        )
    assert len(slept) == 2

    async def forbidden(number: int) -> None:
        raise errors.ForbiddenError("403", status=403)

    with pytest.raises(errors.ForbiddenError):
        await conflicts.retry_on_conflict(forbidden, what="n", sleep=lambda s: _no_sleep(s, slept))
    assert len(slept) == 2
