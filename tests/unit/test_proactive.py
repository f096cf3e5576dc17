"""The proactive ladder is pure: risk level + node + fleet + policy → the at-risk taint and, at act, the
checkpoint requests. Table-driven, no mocks."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from app.config import rules
from app.config.settings import RULES_DIR
from app.decide import footprint, gates, plans, proactive
from app.decide.situation import Situation
from app.domain import (
    Action,
    ActionKind,
    AtRiskParams,
    CheckpointParams,
    Fault,
    FaultClass,
    NodeState,
    OwnerRef,
    Plan,
    PodState,
    RemediationState,
    RiskLevel,
    Signal,
    SignalSource,
    SignalStatus,
    Taint,
    Track,
    freeze_mapping,
)

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
POLICY = rules.load_policy(RULES_DIR / "policy.yaml")
AT_WARN = Taint(footprint.AT_RISK, "warn", "PreferNoSchedule")
AT_ACT = Taint(footprint.AT_RISK, "act", "NoSchedule")


def risk(level: str, *, node: str = "n1", resolved: bool = False) -> Fault:
    signal = Signal(
        source=SignalSource.PREDICTION,
        fingerprint=f"risk:{node}",
        status=SignalStatus.RESOLVED if resolved else SignalStatus.FIRING,
        name="GpuAtRisk",
        starts_at=T0,
        received_at=T0,
        node=node,
        gpu=3,
        labels=freeze_mapping({"sickbay_class": "at-risk", "level": level}),
        annotations=freeze_mapping({"score": "0.8123", "drivers": "gpu3:sbe_rate_1h +1.20"}),
    )
    return Fault(fault_class=FaultClass.AT_RISK, signal=signal, reason="predicted", rule="label")


def node(name: str = "n1", *taints: Taint, **kw: object) -> NodeState:
    return NodeState(
        name=name,
        resource_version="7",
        taints=taints,
        gpu_capacity=8,
        gpu_allocatable=8,
        **kw,  # type: ignore[arg-type]
    )


def pod(name: str, *, owner: str, gpus: int = 8, phase: str = "Running", kind: str = "Job") -> PodState:
    return PodState(
        namespace="train",
        name=name,
        uid=f"uid-{name}",
        node="n1",
        phase=phase,
        owners=(OwnerRef(kind=kind, name=owner, uid=f"uid-{owner}", controller=True),),
        gpu_request=gpus,
    )


RANKS = (
    pod("rank-0", owner="llm-workers-0"),
    pod("rank-1", owner="llm-workers-0"),
    pod("solo", owner="solo"),
)
DAEMON = PodState(namespace="gpu-operator", name="dcgm", node="n1", owners=(OwnerRef("DaemonSet", "dcgm"),))
CPU_POD = pod("web", owner="web", gpus=0, kind="ReplicaSet")
PENDING = pod("queued", owner="queued", phase="Pending")


def fleet(total: int, *acting: str) -> gates.ProactiveFleet:
    return gates.ProactiveFleet(gpu_nodes=total, acting=frozenset(acting))


def situation(
    current: NodeState | None = None, *, pods: tuple[PodState, ...] = (), acting: int = 0
) -> Situation:
    return Situation(
        node=current or node(),
        pods_on_node=pods,
        proactive=fleet(40, *(f"other-{i}" for i in range(acting))),
    )


def plan(fault: Fault, where: Situation | None, policy: rules.Policy = POLICY) -> Plan:
    return plans.plan_for(fault, policy=policy, now=T0, situation=where)


def taint_action(p: Plan) -> Action:
    return next(a for a in p.actions if a.kind is ActionKind.TAINT_AT_RISK)


def with_prediction(**changes: object) -> rules.Policy:
    return POLICY.model_copy(update={"prediction": POLICY.prediction.model_copy(update=changes)})


def test_warn_steers_new_work_away_with_prefer_no_schedule_and_asks_nobody() -> None:
    p = plan(risk("warn"), situation(pods=RANKS))
    assert [a.kind for a in p.actions] == [ActionKind.TAINT_AT_RISK]
    action = taint_action(p)
    assert (action.params, action.track) == (AtRiskParams(RiskLevel.WARN), Track.HARDWARE)
    assert "sickbay.io/at-risk=warn:PreferNoSchedule" in p.summary
    assert "score 0.8123" in action.reason
    assert "gpu3:sbe_rate_1h" in action.reason


def test_act_stops_new_work_and_asks_each_running_gpu_pod_and_each_owner_once_to_checkpoint() -> None:
    p = plan(risk("act"), situation(pods=(*RANKS, DAEMON, CPU_POD, PENDING)))
    action = taint_action(p)
    assert action.params == AtRiskParams(RiskLevel.ACT)
    asks = [a for a in p.actions if a.kind is ActionKind.REQUEST_CHECKPOINT]
    assert [str(a.pod) for a in asks if a.pod] == ["train/rank-0", "train/rank-1", "train/solo"]
    owners = [
        (p.owner.kind, p.namespace, p.owner.name, p.owner.uid)
        for p in (a.params_as(CheckpointParams) for a in asks if not a.pod)
        if p.owner is not None
    ]
    assert owners == [
        ("Job", "train", "llm-workers-0", "uid-llm-workers-0"),
        ("Job", "train", "solo", "uid-solo"),
    ]
    assert all(a.track is Track.WORKLOAD for a in asks)
    assert all("checkpoint now" in a.reason and "0.8123" in a.reason for a in asks)
    assert not [a for a in p.actions if a.kind in (ActionKind.EVICT_POD, ActionKind.DRAIN)], (
        "no drain by default"
    )
    assert "ask 5 pod(s) and owner(s) to checkpoint" in p.summary


@pytest.mark.parametrize(
    ("drain", "events", "expected"),
    [
        (False, True, {ActionKind.TAINT_AT_RISK, ActionKind.REQUEST_CHECKPOINT}),
        (True, True, {ActionKind.TAINT_AT_RISK, ActionKind.REQUEST_CHECKPOINT, ActionKind.EVICT_POD}),
        (True, False, {ActionKind.TAINT_AT_RISK, ActionKind.EVICT_POD}),
        (False, False, {ActionKind.TAINT_AT_RISK}),
    ],
)
def test_act_drains_only_when_policy_says_so(drain: bool, events: bool, expected: set[ActionKind]) -> None:
    policy = with_prediction(drain=drain, checkpoint_events=events)
    p = plan(risk("act"), situation(pods=(*RANKS, DAEMON, CPU_POD)), policy)
    assert {a.kind for a in p.actions} == expected
    evicted = sorted(str(a.pod) for a in p.actions if a.kind is ActionKind.EVICT_POD)
    assert evicted == (["train/rank-0", "train/rank-1", "train/solo"] if drain else [])


def test_act_without_a_cluster_read_plans_a_whole_node_drain_and_defers_the_budget_to_act() -> None:
    p = plan(risk("act"), None, with_prediction(drain=True))
    assert [a.kind for a in p.actions] == [ActionKind.TAINT_AT_RISK, ActionKind.DRAIN]
    assert "checked when acting" in p.summary


def test_act_to_warn_goes_back_to_prefer_no_schedule_without_asking() -> None:
    p = plan(risk("warn"), situation(node("n1", AT_ACT), pods=RANKS))
    assert [a.kind for a in p.actions] == [ActionKind.TAINT_AT_RISK]
    assert taint_action(p).params == AtRiskParams(RiskLevel.WARN)


@pytest.mark.parametrize(("level", "taint"), [("warn", AT_WARN), ("act", AT_ACT)])
def test_the_same_level_again_changes_nothing_and_asks_nobody_twice(level: str, taint: Taint) -> None:
    p = plan(risk(level), situation(node("n1", taint), pods=RANKS))
    assert p.is_noop
    assert "already carries" in p.summary


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        (node("n1", AT_ACT), [ActionKind.CLEAR_AT_RISK]),
        (node("n1", AT_WARN), [ActionKind.CLEAR_AT_RISK]),
        (None, [ActionKind.CLEAR_AT_RISK]),  # not read (the pipeline reads nothing for a resolved signal)
        (node("n1"), [ActionKind.RECORD]),
        # Removing its own mark is fine on a node opted out since; adding one is not (below).
        (node("n1", AT_ACT, labels=freeze_mapping({footprint.MANAGED: "false"})), [ActionKind.CLEAR_AT_RISK]),
    ],
)
def test_a_resolved_risk_removes_the_taint(current: NodeState | None, expected: list[ActionKind]) -> None:
    where = Situation(node=current) if current is not None else None
    p = plan(risk("none", resolved=True), where)
    assert [a.kind for a in p.actions] == expected


@pytest.mark.parametrize("cls", ["reset-gpu", "reboot-node", "replace", "driver-mismatch"])
@pytest.mark.parametrize(("level", "resolved"), [("warn", False), ("act", False), ("none", True)])
def test_a_quarantined_node_is_left_alone_and_the_plan_says_why(cls: str, level: str, resolved: bool) -> None:
    quarantined = node("n1", Taint(footprint.UNHEALTHY, cls, "NoSchedule"), AT_WARN)
    p = plan(risk(level, resolved=resolved), situation(quarantined, pods=RANKS))
    assert p.is_noop
    assert f"quarantined for {cls}" in p.summary
    assert "leaves it alone" in p.summary


def test_an_opted_out_node_is_only_recorded() -> None:
    opted_out = node("n1", labels=freeze_mapping({footprint.MANAGED: "false"}))
    assert plan(risk("act"), situation(opted_out)).is_noop


def test_the_budget_allows_two_act_taints_of_forty_gpu_nodes_and_holds_the_third_at_warn() -> None:
    assert gates.proactive_limit(40, POLICY.budgets) == 2  # 5% of 40
    second = plan(risk("act", node="n1"), situation(node("n1"), pods=RANKS, acting=1))
    assert taint_action(second).params == AtRiskParams(RiskLevel.ACT)
    third = plan(risk("act", node="n1"), situation(node("n1"), pods=RANKS, acting=2))
    action = taint_action(third)
    assert action.params_as(AtRiskParams).level is RiskLevel.WARN
    assert [a.kind for a in third.actions] == [ActionKind.TAINT_AT_RISK], "no checkpoint request, no drain"
    assert "proactive budget is full: 2 of 40 GPU nodes at act (limit 2" in third.summary
    assert action.params_as(AtRiskParams).held.startswith("the proactive budget is full")
    assert "held at warn" in action.reason


def test_a_node_held_at_warn_that_is_already_at_warn_stays_and_says_why() -> None:
    p = plan(risk("act"), situation(node("n1", AT_WARN), acting=2))
    assert p.is_noop
    assert "proactive budget is full" in p.summary


def test_a_node_already_at_act_keeps_its_slot() -> None:
    verdict = gates.admit_proactive(fleet(40, "a", "n1"), node="n1", policy=POLICY.budgets)
    assert verdict.allowed


@pytest.mark.parametrize(
    ("gpu_nodes", "fraction", "cap", "expected"),
    [(40, 0.05, 10, 2), (10, 0.05, 10, 1), (1000, 0.05, 10, 10), (40, 0.0, 10, 0), (0, 0.05, 10, 0)],
)
def test_the_proactive_limit(gpu_nodes: int, fraction: float, cap: int, expected: int) -> None:
    budgets = POLICY.budgets.model_copy(
        update={"proactive_max_fraction": fraction, "proactive_max_nodes": cap}
    )
    assert gates.proactive_limit(gpu_nodes, budgets) == expected


def test_the_fleet_counts_gpu_nodes_at_act_that_are_not_quarantined() -> None:
    nodes = [
        node("a", AT_ACT),
        node("b", AT_WARN),
        node("c", AT_ACT, Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule")),  # the hardware budget's now
        node("d"),
        NodeState(name="cpu", taints=(AT_ACT,)),  # no GPUs: not in the fleet
    ]
    assert gates.ProactiveFleet.of(nodes) == fleet(4, "a")


def test_the_at_risk_patch_keeps_other_taints_and_marks_the_state_and_why() -> None:
    operator = Taint("team/maintenance", "x", "NoExecute")
    patch = footprint.at_risk_patch(
        node("n1", operator, AT_WARN), level=RiskLevel.ACT, reason="why\n it", now=T0
    )
    assert patch.taints == (operator, AT_ACT)
    assert patch.labels == ((footprint.STATE, "at-risk"),)
    assert dict(patch.annotations) == {footprint.REASON: "why it", footprint.SINCE: T0.isoformat()}
    assert patch.unschedulable is None, "the ladder never cordons"
    assert not any(k == footprint.OWNED_BY for k, _ in patch.annotations), "reconciliation never releases it"


def test_clearing_removes_only_the_at_risk_marks() -> None:
    operator = Taint("team/maintenance", "x", "NoExecute")
    marked = node(
        "n1",
        operator,
        AT_ACT,
        labels=freeze_mapping({footprint.STATE: RemediationState.AT_RISK.value}),
        annotations=freeze_mapping({footprint.REASON: "r", footprint.SINCE: T0.isoformat(), "other": "x"}),
    )
    patch = footprint.clear_at_risk_patch(marked)
    assert patch.taints == (operator,)
    assert patch.labels == ((footprint.STATE, ""),)
    assert dict(patch.annotations) == {footprint.REASON: "", footprint.SINCE: ""}
    assert footprint.clear_at_risk_patch(node("n1", operator)).empty


def test_a_later_hardware_quarantine_of_an_at_risk_node_proceeds_and_release_removes_both_taints() -> None:
    at_risk = node("n1", AT_ACT, labels=freeze_mapping({footprint.STATE: "at-risk"}))
    hardware = replace(risk("act"), fault_class=FaultClass.RESET_GPU)
    p = plan(hardware, Situation(node=at_risk))
    assert ActionKind.QUARANTINE in [a.kind for a in p.actions]
    patch = footprint.quarantine_patch(at_risk, hardware, now=T0, identity="me")
    both = (AT_ACT, Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule"))
    assert patch.taints == both
    assert patch.labels == ((footprint.STATE, "quarantined"),)
    quarantined = replace(
        at_risk,
        taints=both,
        annotations=freeze_mapping(dict(patch.annotations)),
        unschedulable=True,
    )
    assert footprint.release_patch(quarantined).taints == ()


def test_policy_rejects_a_warn_threshold_above_act() -> None:
    with pytest.raises(ValueError, match="must not exceed"):
        rules.PredictionPolicy(warn=0.6, act=0.4)


OPTED_OUT = node("n1", labels=freeze_mapping({footprint.MANAGED: "false"}))
QUARANTINED = node("n1", Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule"), AT_WARN)
FULL = "the proactive budget is full: 2 of 40 GPU nodes at act (limit 2: 0.05 of them, at most 10)"


@pytest.mark.parametrize(
    ("current", "wanted", "acting", "expected"),
    [
        # Within the budget (2 of 40 GPU nodes at act): the asked level, written unless it is there.
        (node(), RiskLevel.ACT, fleet(40), proactive.TaintLevel(RiskLevel.ACT)),
        (node(), RiskLevel.ACT, fleet(40, "a"), proactive.TaintLevel(RiskLevel.ACT)),
        (node("n1", AT_WARN), RiskLevel.ACT, fleet(40, "a"), proactive.TaintLevel(RiskLevel.ACT)),
        (
            node("n1", AT_ACT),
            RiskLevel.ACT,
            fleet(40, "a"),
            proactive.TaintLevel(RiskLevel.ACT, unchanged=True),
        ),
        # Full: held at warn, and it says why; a node at act already keeps its slot.
        (node(), RiskLevel.ACT, fleet(40, "a", "b"), proactive.TaintLevel(RiskLevel.WARN, FULL)),
        (
            node("n1", AT_WARN),
            RiskLevel.ACT,
            fleet(40, "a", "b"),
            proactive.TaintLevel(RiskLevel.WARN, FULL, unchanged=True),
        ),
        (
            node("n1", AT_ACT),
            RiskLevel.ACT,
            fleet(40, "a", "n1"),
            proactive.TaintLevel(RiskLevel.ACT, unchanged=True),
        ),
        # Warn is never budgeted, nor is act when no fleet could be measured.
        (node(), RiskLevel.WARN, fleet(40, "a", "b"), proactive.TaintLevel(RiskLevel.WARN)),
        (node("n1", AT_ACT), RiskLevel.WARN, fleet(40, "a", "b"), proactive.TaintLevel(RiskLevel.WARN)),
        (node("n1", AT_WARN), RiskLevel.WARN, None, proactive.TaintLevel(RiskLevel.WARN, unchanged=True)),
        (node(), RiskLevel.ACT, None, proactive.TaintLevel(RiskLevel.ACT)),
        # Opted out or quarantined: left alone, budget or not.
        (OPTED_OUT, RiskLevel.WARN, None, proactive.LeaveAlone("node opted out (sickbay.io/managed=false)")),
        (
            QUARANTINED,
            RiskLevel.ACT,
            fleet(40),
            proactive.LeaveAlone("quarantined for reset-gpu: the at-risk ladder leaves it alone"),
        ),
    ],
)
def test_taint_step(
    current: NodeState,
    wanted: RiskLevel,
    acting: gates.ProactiveFleet | None,
    expected: proactive.LeaveAlone | proactive.TaintLevel,
) -> None:
    assert proactive.taint_step(current, wanted=wanted, fleet=acting, policy=POLICY.budgets) == expected


@pytest.mark.parametrize(
    ("wanted", "acting", "budgets", "expected"),
    [
        (RiskLevel.ACT, fleet(40, "a"), POLICY.budgets, (RiskLevel.ACT, "")),
        (RiskLevel.ACT, fleet(40, "a", "b"), POLICY.budgets, (RiskLevel.WARN, FULL)),
        (RiskLevel.ACT, fleet(40, "a", "b", "n1"), POLICY.budgets, (RiskLevel.ACT, "")),
        (RiskLevel.WARN, fleet(40, "a", "b"), POLICY.budgets, (RiskLevel.WARN, "")),
        (RiskLevel.ACT, None, POLICY.budgets, (RiskLevel.ACT, "")),
        # A fraction of 0 turns the act step off: every act is held at warn.
        (
            RiskLevel.ACT,
            fleet(40),
            POLICY.budgets.model_copy(update={"proactive_max_fraction": 0.0}),
            (
                RiskLevel.WARN,
                "the proactive budget is full: 0 of 40 GPU nodes at act (limit 0: 0 of them, at most 10)",
            ),
        ),
    ],
)
def test_within_budget(
    wanted: RiskLevel,
    acting: gates.ProactiveFleet | None,
    budgets: rules.BudgetPolicy,
    expected: tuple[RiskLevel, str],
) -> None:
    assert proactive.within_budget(wanted, node="n1", fleet=acting, policy=budgets) == expected
