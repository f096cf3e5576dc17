"""The safety gates at their edges: fleet counts by pool, a pool the snapshot lacks, the breaker's memory of
when it refused, its hysteresis, the rate limit's minute and the proactive budget's slots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.config import rules
from app.decide import footprint, gates
from app.domain import NodeState, RiskLevel, Taint, freeze_mapping

NOW = datetime.now(UTC)
POOL = "sickbay.io/pool"
# Generous cluster budget so that each test reaches the gate it is about.
BUDGET = rules.BudgetPolicy(
    max_fraction=1.0,
    max_nodes=100,
    per_pool_max_fraction=1.0,
    per_pool_max_nodes=100,
    quarantines_per_minute=30,
    calm_period=timedelta(minutes=15),
    hysteresis_nodes=2,
)


def node(name: str, pool: str | None = "a", **kw: object) -> NodeState:
    labels = {POOL: pool} if pool is not None else {}
    return NodeState(name=name, labels=freeze_mapping(labels), **kw)  # type: ignore[arg-type]


def test_fleet_counts_nodes_and_quarantines_per_pool() -> None:
    nodes = [node("a1"), node("a2"), node("b1", "b"), node("x1", None), node("x2", None)]
    fleet = gates.Fleet.of(nodes, pool_label=POOL, is_quarantined={"a2", "b1", "x1", "elsewhere"})
    assert fleet.total == 5
    assert fleet.quarantined == 3
    assert fleet.by_pool == {"a": (2, 1), "b": (1, 1), "": (2, 1)}


def test_a_pool_missing_from_the_fleet_snapshot_is_refused_not_assumed_empty_of_quarantines() -> None:
    fleet = gates.Fleet.of([node("a1"), node("a2")], pool_label=POOL, is_quarantined=set())
    verdict = gates.admit(fleet, pool="gone", breaker=gates.Breaker(), policy=BUDGET, now=NOW)
    assert verdict.allowed is False
    assert verdict.reason == (
        "quarantining one more node would exceed pool gone's budget (0/0 quarantined, limit 0)"
    )
    assert verdict.breaker == gates.Breaker(open=True, opened_at=NOW, reason=verdict.reason, last_refusal=NOW)


def test_nodes_without_a_pool_share_the_unnamed_pool() -> None:
    fleet = gates.Fleet.of([node("x1", None), node("x2", None)], pool_label=POOL, is_quarantined={"x1"})
    budget = BUDGET.model_copy(update={"per_pool_max_nodes": 1})
    verdict = gates.admit(fleet, pool="", breaker=gates.Breaker(), policy=budget, now=NOW)
    assert verdict.reason == (
        "quarantining one more node would exceed pool (none)'s budget (1/2 quarantined, limit 1)"
    )


def test_the_pool_budget_admits_up_to_its_limit_exactly() -> None:
    budget = BUDGET.model_copy(update={"per_pool_max_nodes": 2})
    nodes = [node(f"a{i}") for i in range(4)]
    one = gates.Fleet.of(nodes, pool_label=POOL, is_quarantined={"a0"})
    ok = gates.admit(one, pool="a", breaker=gates.Breaker(), policy=budget, now=NOW)
    assert ok == gates.Verdict(True, "within budget", gates.Breaker())
    two = gates.Fleet.of(nodes, pool_label=POOL, is_quarantined={"a0", "a1"})
    assert not gates.admit(two, pool="a", breaker=gates.Breaker(), policy=budget, now=NOW).allowed


def test_the_cluster_budget_refusal_opens_the_breaker_and_says_why() -> None:
    budget = BUDGET.model_copy(update={"max_nodes": 1})
    fleet = gates.Fleet.of([node("a1"), node("a2")], pool_label=POOL, is_quarantined={"a1"})
    verdict = gates.admit(fleet, pool="a", breaker=gates.Breaker(), policy=budget, now=NOW)
    why = "quarantining one more node would exceed the cluster budget (1/2 quarantined, limit 1)"
    assert verdict == gates.Verdict(False, why, gates.Breaker(True, NOW, why, NOW))


def test_an_open_breaker_refuses_and_remembers_the_refusal() -> None:
    fleet = gates.Fleet.of([node("a1")], pool_label=POOL, is_quarantined=set())
    opened = NOW - timedelta(minutes=20)
    breaker = gates.Breaker(
        open=True, opened_at=opened, reason="storm", last_refusal=NOW - timedelta(minutes=1)
    )
    verdict = gates.admit(fleet, pool="a", breaker=breaker, policy=BUDGET, now=NOW)
    assert verdict == gates.Verdict(
        False,
        f"breaker open since {opened.isoformat()}: storm",
        gates.Breaker(open=True, opened_at=opened, reason="storm", last_refusal=NOW),
    )
    unknown = gates.admit(
        fleet,
        pool="a",
        breaker=gates.Breaker(open=True, reason="x", last_refusal=NOW),
        policy=BUDGET,
        now=NOW,
    )
    assert unknown.reason == "breaker open since ?: x"


def test_the_breaker_stays_open_until_calm_since_its_last_refusal() -> None:
    fleet = gates.Fleet.of([node(f"a{i}") for i in range(10)], pool_label=POOL, is_quarantined=set())
    calm = BUDGET.calm_period
    refused_lately = gates.Breaker(
        open=True, opened_at=NOW - 2 * calm, last_refusal=NOW - calm + timedelta(seconds=1)
    )
    assert gates.maybe_close(refused_lately, fleet, policy=BUDGET, now=NOW) == refused_lately
    refused_long_ago = gates.Breaker(open=True, opened_at=NOW - 2 * calm, last_refusal=NOW - calm)
    assert gates.maybe_close(refused_long_ago, fleet, policy=BUDGET, now=NOW) == gates.Breaker()
    # Never refused: calm counts from when it opened.
    assert gates.maybe_close(
        gates.Breaker(open=True, opened_at=NOW - calm), fleet, policy=BUDGET, now=NOW
    ) == (gates.Breaker())
    young = gates.Breaker(open=True, opened_at=NOW - timedelta(minutes=1))
    assert gates.maybe_close(young, fleet, policy=BUDGET, now=NOW) == young
    # Neither time known: it has just opened.
    bare = gates.Breaker(open=True)
    assert gates.maybe_close(bare, fleet, policy=BUDGET, now=NOW) == bare


def test_the_breaker_closes_only_below_the_limit_by_the_hysteresis_margin() -> None:
    budget = BUDGET.model_copy(update={"max_nodes": 5, "hysteresis_nodes": 2})
    nodes = [node(f"a{i}") for i in range(10)]
    opened = gates.Breaker(open=True, opened_at=NOW - budget.calm_period)
    at_margin = gates.Fleet.of(nodes, pool_label=POOL, is_quarantined={"a0", "a1", "a2"})
    assert not gates.maybe_close(opened, at_margin, policy=budget, now=NOW).open
    above = gates.Fleet.of(nodes, pool_label=POOL, is_quarantined={"a0", "a1", "a2", "a3"})
    assert gates.maybe_close(opened, above, policy=budget, now=NOW).open
    # A margin larger than the limit: closes only with nothing quarantined.
    wide = budget.model_copy(update={"hysteresis_nodes": 9})
    one = gates.Fleet.of(nodes, pool_label=POOL, is_quarantined={"a0"})
    assert gates.maybe_close(opened, one, policy=wide, now=NOW).open


def test_the_rate_limit_counts_the_last_minute_only_and_keeps_the_breaker_shut() -> None:
    budget = BUDGET.model_copy(update={"quarantines_per_minute": 2})
    fleet = gates.Fleet.of([node(f"a{i}") for i in range(10)], pool_label=POOL, is_quarantined=set())
    recent = (NOW - timedelta(seconds=10), NOW - timedelta(seconds=59))
    limited = gates.admit(
        fleet, pool="a", breaker=gates.Breaker(), policy=budget, now=NOW, recent_quarantines=recent
    )
    assert limited == gates.Verdict(False, "rate limit: 2 quarantines in the last minute", gates.Breaker())
    a_minute_ago = (NOW - timedelta(seconds=10), NOW - timedelta(minutes=1))
    assert gates.admit(
        fleet, pool="a", breaker=gates.Breaker(), policy=budget, now=NOW, recent_quarantines=a_minute_ago
    ).allowed


def test_weekly_attempts_count_the_last_seven_days_only() -> None:
    budget = BUDGET.model_copy(update={"attempts_per_week": 2})
    week = timedelta(days=7)
    assert gates.attempts_exceeded(
        [NOW - timedelta(days=1), NOW - timedelta(days=6, hours=23)], policy=budget, now=NOW
    )
    assert not gates.attempts_exceeded([NOW - timedelta(days=1), NOW - week], policy=budget, now=NOW)
    assert not gates.attempts_exceeded(
        [NOW - timedelta(days=1), NOW - timedelta(days=7, hours=12)], policy=budget, now=NOW
    )


def gpu_node(
    name: str, *, gpus: int = 8, level: RiskLevel | None = None, quarantined: bool = False
) -> NodeState:
    taints: list[Taint] = []
    if level is not None:
        taints.append(Taint(footprint.AT_RISK, level.value, footprint.at_risk_effect(level)))
    if quarantined:
        taints.append(Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule"))
    return NodeState(name=name, gpu_capacity=gpus, taints=tuple(taints))


def test_the_proactive_fleet_is_the_gpu_nodes_and_those_at_act_not_quarantined() -> None:
    fleet = gates.ProactiveFleet.of(
        [
            gpu_node("act"),
            gpu_node("one-gpu-act", gpus=1, level=RiskLevel.ACT),
            gpu_node("warn", level=RiskLevel.WARN),
            gpu_node("quarantined-act", level=RiskLevel.ACT, quarantined=True),
            gpu_node("cpu-act", gpus=0, level=RiskLevel.ACT),
        ]
    )
    assert fleet == gates.ProactiveFleet(gpu_nodes=4, acting=frozenset({"one-gpu-act"}))


PROACTIVE = BUDGET.model_copy(update={"proactive_max_fraction": 0.5, "proactive_max_nodes": 10})


def test_the_proactive_budget_admits_up_to_its_slots_and_says_how_many() -> None:
    fleet = gates.ProactiveFleet(gpu_nodes=4, acting=frozenset({"n1"}))
    assert gates.admit_proactive(fleet, node="n2", policy=PROACTIVE) == gates.ProactiveVerdict(
        True, "within the proactive budget (2/2)"
    )
    assert not gates.proactive_full(fleet, PROACTIVE)
    full = gates.ProactiveFleet(gpu_nodes=4, acting=frozenset({"n1", "n2"}))
    assert gates.proactive_full(full, PROACTIVE)
    assert gates.admit_proactive(full, node="n3", policy=PROACTIVE) == gates.ProactiveVerdict(
        False, "the proactive budget is full: 2 of 4 GPU nodes at act (limit 2: 0.5 of them, at most 10)"
    )
    assert gates.admit_proactive(full, node="n1", policy=PROACTIVE) == gates.ProactiveVerdict(
        True, "already at act"
    )


def test_a_proactive_fraction_of_zero_turns_the_step_off_and_is_never_full() -> None:
    off = PROACTIVE.model_copy(update={"proactive_max_fraction": 0.0})
    fleet = gates.ProactiveFleet(gpu_nodes=4, acting=frozenset({"n1"}))
    assert gates.proactive_limit(4, off) == 0
    assert not gates.proactive_full(fleet, off)
    assert not gates.admit_proactive(fleet, node="n2", policy=off).allowed
    # A small fleet still gets one slot.
    assert gates.proactive_limit(1, PROACTIVE.model_copy(update={"proactive_max_fraction": 0.01})) == 1
    one_slot = gates.ProactiveFleet(gpu_nodes=1, acting=frozenset({"n1"}))
    assert gates.proactive_full(one_slot, PROACTIVE.model_copy(update={"proactive_max_fraction": 0.01}))
