"""The fleet's own backtest (shadow mode): alarms judged against the fleet's own failures only — the XID
gauge and vanished GPUs (read off the samples) merged with the journal's hardware faults — and the
false-alarm rate over the node-days the fleet has samples for."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.decide import shadow
from app.predict import backtest, costs, fleetcheck, history
from tests.unit.test_shadow import SHADOW

DAY = 86400.0
STEP = 1800.0
T0 = 1_740_960_000.0
STEPS = int(8 * DAY / STEP)  # 8 days


def replay(*, samples_from: float = T0 - DAY) -> backtest.Replay:
    """Four nodes, one GPU each: a and b flagged before a failure, c flagged for nothing, d quiet."""
    times = T0 + STEP * np.arange(STEPS)
    nodes = ["a", "b", "c", "d"]
    scores = np.zeros((len(nodes), STEPS))
    flagged = {"a": (50, 60), "b": (100, 110), "c": (200, 210)}
    for i, name in enumerate(nodes):
        if name in flagged:
            lo, hi = flagged[name]
            scores[i, lo:hi] = 0.9
    rows = pd.DataFrame(
        {
            "node": np.repeat(nodes, STEPS),
            "gpu": 0,
            "uuid": np.repeat([f"u{n}" for n in nodes], STEPS),
            "timestamp": np.tile(times, len(nodes)),
            "p": scores.ravel(),
            "score": scores.ravel(),
        }
    )
    rows["level"] = backtest.levels_of(rows["score"].to_numpy(), warn=0.5, act=0.5)
    alarms = pd.DataFrame(
        {
            "node": list(flagged),
            "gpu": 0,
            "uuid": [f"u{n}" for n in flagged],
            "first": [times[lo] for lo, _ in flagged.values()],
            "last": [times[hi - 1] for _, hi in flagged.values()],
            "steps": 10,
            "peak": 0.9,
            "drivers": [(), (), ()],
        }
    )
    return backtest.Replay(
        start=T0,
        end=float(times[-1]),
        step_s=STEP,
        model_version="m1",
        warn=0.5,
        act=0.5,
        hold=backtest.Hysteresis(),
        sustain_s=0.0,
        horizon_s=DAY,
        scores=rows,
        alarms=alarms,
        resets=pd.DataFrame({"node": pd.Series(dtype=object), "time": pd.Series(dtype=float)}),
        samples_from=samples_from,
    )


def failure(node: str, step: int, *, mode: str) -> dict[str, object]:
    return {"node": node, "gpu": 0, "time": T0 + STEP * step, "fault_class": "reset-gpu", "mode": mode}


def test_alarms_followed_by_a_failure_from_either_source_are_true_the_rest_false() -> None:
    from_samples = history.from_records([failure("a", 58, mode="xid-79")])
    from_journal = history.from_records([failure("b", 108, mode="journal:xid"), failure("a", 58, mode="dup")])
    found = fleetcheck.judge(replay(), from_samples, from_journal, cost_model=costs.CostModel())
    assert (found.alarms, found.false_alarms, found.failures, found.caught) == (3, 1, 2, 2)
    days = (STEPS - 1) * STEP / DAY
    assert found.history_days == pytest.approx(days)
    assert found.node_days == pytest.approx(4 * days)
    assert found.false_alarm_rate == pytest.approx(1000 / (4 * days))
    assert found.as_dict()["false_alarms_per_1000_node_days"] == round(1000 / (4 * days), 3)


def test_without_labels_every_alarm_is_false() -> None:
    found = fleetcheck.judge(replay(), None, None, cost_model=costs.CostModel())
    assert (found.alarms, found.false_alarms, found.failures) == (3, 3, 0)


def test_history_counts_only_the_days_the_fleet_has_samples_for() -> None:
    """A Prometheus younger than the range: the rate is per node-day sampled, and too little history is
    what the shadow decision reads from it."""
    young = replay(samples_from=T0 + 5 * DAY)
    found = fleetcheck.judge(young, None, None, cost_model=costs.CostModel())
    assert found.history_days == pytest.approx((STEPS - 1) * STEP / DAY - 5)
    evidence = shadow.Evidence(
        false_alarms=found.false_alarms, node_days=found.node_days, history_days=found.history_days
    )
    assert shadow.judge_backtest(evidence, SHADOW)[0] is shadow.Reason.TOO_LITTLE_HISTORY
