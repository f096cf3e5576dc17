"""`gates.in_rate_window`: which quarantines still count toward the per-minute limit (the gatekeeper keeps
only these of its own admissions, and `recent_quarantines` reads every source through it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.decide import gates

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)  # a pure function of `now`: no real clock is read


@pytest.mark.parametrize(
    ("age", "inside"),
    [
        (timedelta(0), True),
        (gates.RATE_WINDOW - timedelta(microseconds=1), True),
        (gates.RATE_WINDOW, False),  # the window is open at its far end
        (gates.RATE_WINDOW + timedelta(seconds=1), False),
        (-timedelta(seconds=5), True),  # another replica's clock a little ahead
    ],
)
def test_in_rate_window_by_age(age: timedelta, inside: bool) -> None:
    assert gates.in_rate_window([("n1", NOW - age)], now=NOW) == ([("n1", NOW - age)] if inside else [])


def test_in_rate_window_keeps_order_and_repeats() -> None:
    old = NOW - gates.RATE_WINDOW * 2
    pairs = [("a", NOW - timedelta(seconds=3)), ("b", old), ("a", NOW - timedelta(seconds=1))]
    assert gates.in_rate_window(pairs, now=NOW) == [pairs[0], pairs[2]]
