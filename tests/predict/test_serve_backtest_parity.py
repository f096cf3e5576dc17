"""One implementation: the same scores through the service path and the backtest path give the same levels
and the same proactive-budget refusals.

Service path: `ScoringService.signals` (its hysteresis) per cycle, each signal planned by the at-risk ladder
(`decide.proactive.plan_at_risk`, whose budget check is `decide.gates.admit_proactive`) against the nodes
at act so far. Backtest path: `hysteresis.hold_levels` over the score series, the alarms' node holds run
through `proactive_replay.run_ladder` (`costs.admit`). Within a cycle, a node leaving act frees its slot
before another asks (the backtest's order: ends before asks at one instant).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from app import domain
from app.config import rules
from app.decide import gates, proactive
from app.decide.situation import Situation
from app.predict import costs, hysteresis, proactive_replay, replay, score, service

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
STEP_S = 300.0
WARN, ACT = 0.3, 0.6
HOLD = hysteresis.Hysteresis(clear_margin=0.1, clear_after=2)
# Four single-GPU nodes, a budget of one node at act: a holds it, b waits for it, d gives up before
# it frees (refused), c never asks.
SCORES = {
    "a": [0.1, 0.7, 0.7, 0.58, 0.7, 0.4, 0.4, 0.1, 0.1, 0.1, 0.1, 0.1],
    "b": [0.1, 0.1, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.2, 0.1, 0.1],
    "c": [0.1, 0.4, 0.5, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
    "d": [0.1, 0.1, 0.7, 0.7, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
}
BUDGET = rules.BudgetPolicy(proactive_max_fraction=0.34, proactive_max_nodes=10)


def at(step: int) -> datetime:
    return T0 + timedelta(seconds=STEP_S * step)


def service_path() -> tuple[dict[str, list[int]], dict[str, list[float]], int]:
    """Per node: the scorer's level each cycle, the times the ladder admitted it to act, refusals."""
    scoring = service.ScoringService(
        models_dir=Path("/nonexistent"),
        read_recent=lambda now: pd.DataFrame(),
        clear_margin=HOLD.clear_margin,
        clear_after=HOLD.clear_after,
        resend_s=STEP_S,  # a node held at warn asks again every cycle
    )
    policy = rules.Policy.model_validate({"version": 1, "budgets": BUDGET.model_dump()})
    levels: dict[str, list[int]] = {node: [] for node in SCORES}
    admitted: dict[str, list[float]] = {node: [] for node in SCORES}
    acting: set[str] = set()
    refusals = 0
    refused_runs: set[tuple[str, int]] = set()
    run_start: dict[str, int] = {}
    for step in range(len(SCORES["a"])):
        now = at(step)
        risks = tuple(
            domain.Risk(
                node=node,
                score=values[step],
                level=score.level_of(values[step], warn=WARN, act=ACT),
                model_version="m",
                at=now,
                gpu=0,
            )
            for node, values in SCORES.items()
        )
        cycle = service.Cycle(
            service.CycleStatus.SCORED,
            now,
            scores=score.Scores(at=now, model_version="m", gpus=risks, nodes=risks),
            thresholds=(WARN, ACT),
        )
        signals = scoring.signals(cycle)
        for node in SCORES:
            held = scoring._levels.get(node)
            levels[node].append(service._RANK[held[0]] if held else hysteresis.LEVEL_NONE)
        # Leaving act first (a slot frees before anyone asks at the same instant), then asks.
        signals.sort(key=lambda s: proactive.level_of(s) is domain.RiskLevel.ACT and s.firing)
        for signal in signals:
            node = signal.node
            assert node is not None
            wants_act = signal.firing and proactive.level_of(signal) is domain.RiskLevel.ACT
            if not wants_act:
                acting.discard(node)
                run_start.pop(node, None)
                continue
            run_start.setdefault(node, step)
            if node in acting:
                continue
            fault = domain.Fault(
                fault_class=domain.FaultClass.AT_RISK, signal=signal, reason="predicted", rule="label"
            )
            fleet = gates.ProactiveFleet(gpu_nodes=len(SCORES), acting=frozenset(acting))
            plan = proactive.plan_at_risk(
                fault, policy=policy, now=now, situation=Situation(node=None, proactive=fleet)
            )
            taint = next(a for a in plan.actions if a.kind is domain.ActionKind.TAINT_AT_RISK)
            if taint.params_as(domain.AtRiskParams).level is domain.RiskLevel.ACT:
                acting.add(node)
                admitted[node].append(now.timestamp())
                refused_runs.discard((node, run_start[node]))
            else:
                refusals += 1
                refused_runs.add((node, run_start[node]))
    return levels, admitted, len(refused_runs)


def backtest_path() -> tuple[dict[str, list[int]], dict[str, list[float]], int]:
    steps = len(SCORES["a"])
    rows = pd.concat(
        [
            pd.DataFrame(
                {
                    "node": node,
                    "gpu": 0,
                    "uuid": f"GPU-{node}",
                    "timestamp": [at(i).timestamp() for i in range(steps)],
                    "p": values,
                    "score": values,
                }
            )
            for node, values in SCORES.items()
        ],
        ignore_index=True,
    )
    rows["level"] = hysteresis.hold_levels(rows, warn=WARN, act=ACT, hold=HOLD)
    alarms = replay._alarms(rows, lambda first: [() for _ in first], STEP_S)
    start, end = at(0).timestamp(), at(steps).timestamp()
    replayed = replay.Replay(
        start=start,
        end=end,
        step_s=STEP_S,
        model_version="m",
        warn=WARN,
        act=ACT,
        hold=HOLD,
        sustain_s=0.0,
        horizon_s=86400.0,
        scores=rows,
        alarms=alarms,
        resets=pd.DataFrame({"node": [], "time": []}),
    )
    no_failures = pd.DataFrame({"node": [], "failure_time": [], "hardware": pd.Series([], dtype=bool)})
    budget = costs.Budget(gpu_nodes=len(SCORES), policy=BUDGET)
    ladder = proactive_replay.run_ladder(
        replayed, alarms.assign(outcome="false"), no_failures, budget=budget, resend_s=STEP_S
    )
    levels = {n: rows.loc[rows["node"] == n, "level"].astype(int).tolist() for n in SCORES}
    admitted = {
        n: sorted(ladder.admitted.loc[ladder.admitted["node"] == n, "start"].tolist()) for n in SCORES
    }
    return levels, admitted, ladder.refused


def test_the_service_and_the_backtest_hold_levels_and_spend_the_budget_alike() -> None:
    served_levels, served_admitted, served_refused = service_path()
    replayed_levels, replayed_admitted, replayed_refused = backtest_path()
    assert served_levels == replayed_levels
    # The case is worth testing: a holds a level inside the margin, b is refused, then admitted late.
    assert served_levels["a"][:5] == [0, 2, 2, 2, 2]
    assert served_admitted == replayed_admitted
    assert served_admitted["b"]
    assert served_admitted["b"][0] > at(2).timestamp(), "b waited for a's slot"
    assert served_refused == replayed_refused == 1
    assert served_admitted["d"] == []
    assert np.isclose(
        costs.CostModel(proactive_max_fraction=0.34).node_limit(4), gates.proactive_limit(4, BUDGET)
    )
