"""Risk levels go up at once and come down only after `clear_after` cycles below the clear line, so a score
hovering at a threshold never flaps a node's taint. Scored cycles are built by hand: no model needed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from app import domain
from app.predict import score, service

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
WARN, ACT = 0.3, 0.6


def job(*, clear_margin: float = 0.1, clear_after: int = 3) -> service.ScoringService:
    return service.ScoringService(
        models_dir=Path("/nonexistent"),
        read_recent=lambda now: pd.DataFrame(),
        clear_margin=clear_margin,
        clear_after=clear_after,
    )


def cycle(step: int, value: float, *, node: str = "n1") -> service.Cycle:
    at = T0 + timedelta(minutes=5 * step)
    level = score.level_of(value, warn=WARN, act=ACT)
    risk = domain.Risk(node=node, score=value, level=level, model_version="m", at=at, gpu=0)
    scores = score.Scores(at=at, model_version="m", gpus=(risk,), nodes=(risk,))
    return service.Cycle(service.CycleStatus.SCORED, at, scores=scores, thresholds=(WARN, ACT))


def run(scoring: service.ScoringService, values: list[float]) -> list[str | None]:
    """Per cycle: the signal's level ("none" for a resolved one), or None when nothing was said."""
    said: list[str | None] = []
    for step, value in enumerate(values):
        signals = scoring.signals(cycle(step, value))
        assert len(signals) <= 1
        if not signals:
            said.append(None)
        elif signals[0].firing:
            said.append(signals[0].label("level"))
        else:
            said.append("none")
    return said


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # Up is immediate, straight to act.
        ([0.1, 0.7], [None, "act"]),
        # Hovering at the act threshold (inside the 10% margin: act line 0.54) never drops it.
        ([0.7, 0.58, 0.61, 0.55, 0.59, 0.56], ["act", None, None, None, None, None]),
        # Clearly below act for three cycles: down to warn on the third.
        ([0.7, 0.4, 0.4, 0.4], ["act", None, None, "warn"]),
        # A cycle back inside the margin restarts the count.
        ([0.7, 0.4, 0.4, 0.56, 0.4, 0.4, 0.4], ["act", None, None, None, None, None, "warn"]),
        # Below warn's clear line (0.27) all three cycles: straight to none (resolved).
        ([0.7, 0.1, 0.1, 0.1], ["act", None, None, "none"]),
        # Mixed: one of the three cycles still held warn, so it lands on warn, then on none.
        ([0.7, 0.1, 0.4, 0.1, 0.1, 0.1, 0.1], ["act", None, None, "warn", None, None, "none"]),
        # Going up while falling: immediate, and the fall is forgotten.
        ([0.4, 0.1, 0.1, 0.7], ["warn", None, None, "act"]),
    ],
)
def test_levels_rise_at_once_and_fall_only_after_clear_after_cycles_below_the_margin(
    values: list[float], expected: list[str | None]
) -> None:
    assert run(job(), values) == expected


def test_without_hysteresis_a_level_drops_on_the_first_cycle_below_its_threshold() -> None:
    assert run(job(clear_margin=0.0, clear_after=1), [0.7, 0.59, 0.29]) == ["act", "warn", "none"]


def test_each_level_change_is_a_new_signal_the_inbox_does_not_deduplicate_away() -> None:
    scoring = job(clear_after=1)
    up = scoring.signals(cycle(0, 0.7))[0]
    down = scoring.signals(cycle(1, 0.4))[0]
    gone = scoring.signals(cycle(2, 0.1))[0]
    keys = {(s.fingerprint, s.starts_at, s.status) for s in (up, down, gone)}
    assert len(keys) == 3
    assert gone.starts_at == down.starts_at, "a resolved signal closes the level it ends"


def test_nodes_fall_independently() -> None:
    scoring = job(clear_after=2)
    assert scoring.signals(cycle(0, 0.7, node="a"))
    assert scoring.signals(cycle(0, 0.7, node="b"))
    assert scoring.signals(cycle(1, 0.1, node="a")) == []
    assert scoring.signals(cycle(1, 0.7, node="b")) == []
    fallen = scoring.signals(cycle(2, 0.1, node="a"))
    assert [(s.node, s.status) for s in fallen] == [("a", domain.SignalStatus.RESOLVED)]


def test_an_unchanged_level_is_signalled_again_after_resend() -> None:
    """A node held at warn by the proactive budget gets another chance once a slot frees: the scorer
    repeats an unchanged level every `resend_s` (the ladder ignores a level the node already carries)."""
    scoring = job()
    scoring.resend_s = 1800.0
    # Five-minute cycles: the level is said at once, then again every 30 minutes while unchanged.
    said = run(scoring, [0.7] * 14)
    assert said == ["act", *[None] * 5, "act", *[None] * 5, "act", None]
    repeats = [scoring.signals(cycle(step, 0.7)) for step in (20, 26)]
    assert [s.starts_at for (s,) in repeats] == [cycle(20, 0.7).at, cycle(26, 0.7).at], (
        "a repeat carries its own time, or the inbox would drop it as a duplicate"
    )
