"""The backtest's cost model: GPU-hours lost with and without the ladder, capacity held, the budget."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from app.predict import costs

H = 3600.0


def holds(*rows: tuple[str, float, float]) -> pd.DataFrame:
    """(node, start hour, end hour) rows as a holds table in seconds."""
    return pd.DataFrame(
        {"node": [r[0] for r in rows], "start": [r[1] * H for r in rows], "end": [r[2] * H for r in rows]}
    )


@pytest.mark.parametrize(
    ("model", "reactive", "planned"),
    [
        (costs.CostModel(), 8.0, 2.0),  # 8 x (1/2 + 1/4 + 1/4), 8 x 1/4
        (costs.CostModel(job_gpus=64, checkpoint_interval_h=2.0), 96.0, 16.0),
        (costs.CostModel(job_gpus=1, detect_h=0.0, restart_h=0.0), 0.5, 0.0),
    ],
)
def test_per_failure_costs(model: costs.CostModel, reactive: float, planned: float) -> None:
    assert model.reactive_loss_gpu_h == reactive
    assert model.planned_loss_gpu_h == planned


@pytest.mark.parametrize(
    ("lead_h", "cost"), [(None, 8.0), (float("nan"), 8.0), (0.5, 8.0), (1.0, 2.0), (30.0, 2.0)]
)
def test_a_failure_costs_a_planned_restart_only_with_enough_lead(lead_h: float | None, cost: float) -> None:
    assert costs.CostModel().failure_loss_gpu_h(lead_h) == cost


@pytest.mark.parametrize(
    ("fraction", "cap", "nodes", "limit"),
    [
        (0.05, 10, 200, 10),
        (0.05, 10, 60, 3),
        (0.05, 10, 10, 1),
        (0.05, 10, 0, 0),
        (0.0, 10, 200, 0),
        (1.0, None, 7, 7),
    ],
)
def test_the_budget_is_the_policys_rule(fraction: float, cap: int | None, nodes: int, limit: int) -> None:
    model = costs.CostModel(proactive_max_fraction=fraction, proactive_max_nodes=cap)
    assert model.node_limit(nodes) == limit


@pytest.mark.parametrize(
    "bad",
    [
        {"job_gpus": 0},
        {"restart_h": -1.0},
        {"proactive_max_fraction": 1.5},
        {"proactive_max_nodes": 0},
        {"resend_h": 0.0},
    ],
)
def test_nonsense_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must"):
        costs.CostModel(**bad)  # type: ignore[arg-type]


def test_overlapping_holds_of_a_node_count_once() -> None:
    table = holds(("a", 0, 4), ("a", 2, 6), ("a", 6, 7), ("a", 10, 11), ("b", 1, 2))
    merged = costs.merged_holds(table)
    assert merged.to_dict("records") == [
        {"node": "a", "start": 0.0, "end": 7 * H},
        {"node": "a", "start": 10 * H, "end": 11 * H},
        {"node": "b", "start": 1 * H, "end": 2 * H},
    ]
    assert costs.held_gpu_hours(table, {"a": 8, "b": 4}) == 8 * 8 + 4 * 1
    assert costs.peak_nodes_held(table) == 2


def hours(admitted_at: object) -> list[float | None]:
    return [None if math.isnan(t) else t / H for t in admitted_at]  # type: ignore[attr-defined]


def test_the_budget_admits_holds_in_order_while_a_slot_is_free() -> None:
    table = holds(("a", 0, 5), ("b", 1, 3), ("c", 5, 6), ("d", 5.5, 8))
    # One slot, no re-sends: a runs 0-5; b asks while a holds it (never admitted); c asks as a ends
    # (admitted); d asks while c holds the slot (never admitted).
    assert hours(costs.admit(table, 1)) == [0, None, 5, None]
    assert hours(costs.admit(table, 2)) == [0, 1, 5, 5.5]
    assert hours(costs.admit(table, 0)) == [None] * 4


def test_a_refused_node_gets_the_next_free_slot_when_it_asks_again() -> None:
    table = holds(("a", 0, 5), ("b", 1, 9), ("c", 2, 4), ("d", 5.2, 5.4))
    # Re-sends every half hour: b asks again at 1.5, 2, ... and gets a's slot at 5 (b asked first, so
    # it is ahead of c, whose hold ended meanwhile; d finds the slot taken and ends before it frees).
    assert hours(costs.admit(table, 1, resend_s=0.5 * H)) == [0, 5, None, None]
    # Asking every 2 h, b asks at 1, 3, 5: the end at 5 frees the slot first.
    assert hours(costs.admit(table, 1, resend_s=2 * H)) == [0, 5, None, None]
    # Asking every 1.5 h: b at 1, 2.5, 4, 5.5 — d asked at 5.2 and got it; b waits until 5.5 > 5.4.
    assert hours(costs.admit(table, 1, resend_s=1.5 * H)) == [0, 5.5, None, 5.2]


def test_the_report_adds_up() -> None:
    report = costs.compare(
        leads_h=[5.0, 0.5, None],
        needless_restarts=2,
        holds=holds(("a", 0, 5), ("b", 10, 12)),
        gpus_per_node={"a": 8, "b": 8},
        fleet_gpu_h=16 * 24.0,
        costs=costs.CostModel(),
        max_nodes_at_act=1,
        holds_refused=3,
        holds_delayed=2,
    )
    assert report.failures == 3
    assert report.caught_in_time == 1
    assert report.reactive_gpu_h == 24.0
    assert report.ladder_gpu_h == 2.0 + 8.0 + 8.0
    assert report.saved_gpu_h == 6.0
    assert report.reduction == pytest.approx(0.25)
    assert report.needless_restart_gpu_h == 4.0
    assert report.net_reduction == pytest.approx(2.0 / 24.0)
    assert report.capacity_gpu_h == 8 * 5 + 8 * 2
    assert report.capacity_fraction == pytest.approx(56.0 / 384.0)
    assert report.peak_nodes_held == 1
    body = report.as_dict()
    assert body["holds_refused"] == 3
    assert body["holds_delayed"] == 2
    assert body["max_nodes_at_act"] == 1


def test_no_failures_means_no_reduction_rather_than_a_division_by_zero() -> None:
    report = costs.compare(
        leads_h=[],
        needless_restarts=0,
        holds=holds(),
        gpus_per_node={},
        fleet_gpu_h=0.0,
        costs=costs.CostModel(),
        max_nodes_at_act=1,
    )
    assert math.isnan(report.reduction)
    assert report.as_dict()["reduction"] is None
    assert report.capacity_gpu_h == 0.0


def test_the_assumptions_say_what_the_numbers_rest_on() -> None:
    stated = costs.CostModel(job_gpus=16).assumptions()
    assert stated["job_gpus"] == 16
    assert stated["reactive_loss_gpu_h_per_failure"] == 16.0
    assert any("checkpoint" in line for line in stated["statements"])
