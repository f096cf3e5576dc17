"""How the recorded path's reads put the instants they need on range queries' grids (`recorded_reads`)."""

from __future__ import annotations

import numpy as np

from app.predict import recorded_reads
from app.predict import recorded_rules as rr

LAST = 1_800_000_000.0  # a grid instant (a multiple of 5 minutes)
HOUR = 3600.0


def _hours(tail_s: float) -> list[float]:
    instants = [LAST - tail_s, LAST]
    return sorted({t - k * HOUR for t in instants for k in range(rr.SHORT_HOURS)})


def _points(lattices: list[tuple[float, float, int]]) -> set[float]:
    return {start + step * i for start, step, n in lattices for i in range(n)}


def test_instants_an_hour_apart_are_one_query_at_an_hourly_step() -> None:
    times = _hours(HOUR)  # 7 hours: last - 6 h .. last
    assert recorded_reads.lattices(times) == [(LAST - 6 * HOUR, HOUR, 7)]


def test_a_half_hour_tail_is_one_query_at_half_an_hour() -> None:
    times = _hours(1800.0)  # 12 times, every point of the 30-minute grid from last - 5.5 h
    found = recorded_reads.lattices(times)
    assert found == [(LAST - 5.5 * HOUR, 1800.0, 12)]
    assert set(times) <= _points(found)


def test_a_tail_off_the_half_hour_is_one_hourly_query_per_group() -> None:
    # 25 minutes: a common 5-minute grid would cost 66 points for 12 times; two hourly queries cost 12.
    times = _hours(1500.0)
    found = recorded_reads.lattices(times)
    assert sorted(found) == [(LAST - 5 * HOUR - 1500.0, HOUR, 6), (LAST - 5 * HOUR, HOUR, 6)]
    assert _points(found) == set(times)


def test_two_instants_are_one_query_of_two_points_and_one_instant_one_point() -> None:
    assert recorded_reads.lattices([LAST, LAST - 1500.0]) == [(LAST - 1500.0, 1500.0, 2)]
    assert recorded_reads.lattices([LAST]) == [(LAST, HOUR, 1)]


def test_pad_adds_missing_rows_for_gpus_seen_later() -> None:
    values = np.array([[1.0, 2.0]])
    padded = recorded_reads.pad(values, 3)
    assert padded.shape == (3, 2)
    assert padded[0].tolist() == [1.0, 2.0]
    assert np.isnan(padded[1:]).all()
