"""The act/warn threshold chooser: a false-alarm budget is a rate, and a small validation set still allows
the one alarm its node-days are worth (rounding down to zero made `act` the score of one negative GPU)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.predict import evaluate, labels, thresholds

DAY = 86400.0


@pytest.mark.parametrize(
    ("budget", "node_days", "allowed"),
    [
        (1.0, 923.0, 1),  # the protocol's validation fleets: floor gave 0
        (1.0, 400.0, 1),  # at least one while the budget is positive
        (1.0, 1499.0, 1),
        (1.0, 1500.0, 2),  # the nearest whole count
        (1.0, 2600.0, 3),
        (10.0, 923.0, 9),
        (0.0, 5000.0, 0),  # no budget, no false alarm
    ],
)
def test_the_allowance_is_the_nearest_count_and_at_least_one(
    budget: float, node_days: float, allowed: int
) -> None:
    assert thresholds.allowed_false_alarms(budget, node_days) == allowed


def _evalset(
    scores_by_gpu: dict[tuple[str, int], tuple[list[float], int]], *, days: float
) -> tuple[evaluate.EvalSet, np.ndarray]:
    """One row per hour per GPU over `days`; label 1 on a GPU marked failing, 0 elsewhere."""
    rows, scores, y = [], [], []
    hours = int(days * 24)
    for (node, gpu), (pattern, failing) in scores_by_gpu.items():
        for h in range(hours):
            rows.append({"node": node, "gpu": gpu, "uuid": f"GPU-{node}-{gpu}", "timestamp": h * 3600.0})
            scores.append(pattern[h % len(pattern)])
            y.append(failing)
    keys = pd.DataFrame(rows)
    label = np.asarray(y, dtype=np.int8)
    status = np.where(label == 1, labels.Status.POSITIVE, labels.Status.NEGATIVE).astype(np.int8)
    data = evaluate.EvalSet(
        keys=keys,
        x=np.zeros((len(keys), 1), dtype=np.float32),
        labels=labels.Labels(
            label=label,
            status=status,
            time_to_failure_s=np.where(label == 1, 3600.0, np.inf),
            failure_id=np.asarray(
                [f"f-{n}" if f else None for n, f in zip(keys["node"], y, strict=True)], dtype=object
            ),
        ),
        failures=pd.DataFrame(
            columns=["id", "node", "gpu", "failure_time", "fault_class", "precursor_start"]
        ),
        trap_kind=np.full(len(keys), "", dtype=object),
        horizon_s=DAY,
    )
    return data, np.asarray(scores, dtype=np.float64)


def test_one_negative_gpu_scoring_high_no_longer_sets_act_on_a_small_validation_set() -> None:
    # 20 nodes x 1 GPU x 46 days = 900 node-days: a budget of 1 per 1,000 allows one false alarm.
    gpus: dict[tuple[str, int], tuple[list[float], int]] = {(f"n{i:02d}", 0): ([0.01], 0) for i in range(20)}
    # Ten failing GPUs scored 0.4-0.49 in bursts: ten true alarms each.
    for i in range(10):
        gpus[(f"n{i:02d}", 1)] = ([0.4 + i / 100] * 3 + [0.0] * 21, 1)
    # One negative GPU with one hour at 0.8: a single false alarm, above every true one.
    gpus[("n19", 0)] = ([0.01] * 100 + [0.8] + [0.01] * 1003, 0)
    data, scores = _evalset(gpus, days=46)
    assert 850 < evaluate.node_days(data.keys) < 950

    choice = thresholds.choose_threshold(data, scores, precision=0.9, fa_budget=1.0, min_rows=5)
    assert choice.met
    assert choice.allowed_false_alarms == 1
    assert choice.false_alarms <= 1
    assert choice.threshold == pytest.approx(0.4), "the lowest threshold that catches every failing GPU"
    assert choice.alarm_precision >= 0.9

    # A second such negative GPU spends more than the budget: no threshold that catches anything
    # qualifies, and the chooser says so rather than pretending.
    gpus[("n18", 0)] = ([0.01] * 300 + [0.7] + [0.01] * 803, 0)
    data, scores = _evalset(gpus, days=46)
    choice = thresholds.choose_threshold(data, scores, precision=0.9, fa_budget=1.0, min_rows=5)
    assert not choice.met
    assert choice.false_alarms == 2 > choice.allowed_false_alarms
