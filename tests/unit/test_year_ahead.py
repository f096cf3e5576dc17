"""The year-ahead run's own check: it passes only when this process and its children are that far ahead.

The real epoch is given relative to this process's clock, so these hold in the normal run and in the
year-ahead run alike.
"""

from __future__ import annotations

import time

import pytest

from tests import year_ahead


def _env(*, days: str, real_epoch: float | str) -> dict[str, str]:
    return {year_ahead.DAYS_ENV: days, year_ahead.REAL_EPOCH_ENV: str(real_epoch)}


def test_a_normal_run_checks_nothing() -> None:
    assert year_ahead.check({}) is None


def test_a_clock_as_far_ahead_as_asked_passes() -> None:
    line = year_ahead.check(_env(days="365", real_epoch=time.time() - 365 * 86_400))
    assert line is not None
    assert "365 days ahead" in line


@pytest.mark.parametrize(
    ("days", "behind_s"),
    [
        ("365", 0.0),  # asked for a year ahead, the clock is today's: libfaketime not in effect
        ("365", 200 * 86_400.0),  # part of the way
        ("365", 400 * 86_400.0),  # too far: not the offset that was asked for either
    ],
)
def test_a_clock_not_as_far_ahead_as_asked_stops_the_run(days: str, behind_s: float) -> None:
    with pytest.raises(year_ahead.NotAhead, match="days ahead of the real time"):
        year_ahead.check(_env(days=days, real_epoch=time.time() - behind_s))


@pytest.mark.parametrize("env", [{year_ahead.DAYS_ENV: "365"}, _env(days="a year", real_epoch=0)])
def test_a_run_that_asked_without_saying_from_when_stops(env: dict[str, str]) -> None:
    with pytest.raises(year_ahead.NotAhead, match="needs a number of days"):
        year_ahead.check(env)
