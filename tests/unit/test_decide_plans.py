"""Decide is pure: table-driven tests of plans on both tracks, footprint patches, gates and escalation."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from app.config import rules
from app.config.settings import RULES_DIR
from app.decide import footprint, gates, plans, restart_policy
from app.decide.situation import Situation
from app.domain import (
    ActionKind,
    Fault,
    FaultClass,
    NodeState,
    OwnerRef,
    PastFault,
    PodRef,
    PodState,
    QuarantineParams,
    RemediationParams,
    RestartParams,
    Signal,
    SignalSource,
    SignalStatus,
    Taint,
    Track,
    freeze_mapping,
)

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
POLICY = rules.load_policy(RULES_DIR / "policy.yaml")


def fault(
    cls: FaultClass, *, node: str = "n1", gpu: int | None = 0, pod: PodRef | None = None, fp: str = "f"
) -> Fault:
    signal = Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint=fp,
        status=SignalStatus.FIRING,
        name="A",
        starts_at=T0,
        received_at=T0,
        node=node,
        gpu=gpu,
        pod=pod,
    )
    return Fault(fault_class=cls, signal=signal, reason="because", rule="test")


def gpu_pod(name: str, node: str, *, gang: str | None = None, gpus: int = 8, **kw: object) -> PodState:
    labels = {"jobset.sigs.k8s.io/jobset-name": gang} if gang else {}
    return PodState(
        namespace="train",
        name=name,
        uid=f"uid-{name}",
        node=node,
        labels=freeze_mapping(labels),
        owners=(OwnerRef(kind="Job", name=f"{gang or name}-job", controller=True),),
        gpu_request=gpus,
        **kw,  # type: ignore[arg-type]
    )


NODE = NodeState(name="n1", resource_version="7", gpu_capacity=8, gpu_allocatable=8)


def kinds(plan: plans.Plan) -> list[ActionKind]:  # type: ignore[name-defined]
    return [a.kind for a in plan.actions]


def test_hardware_fault_quarantines_evicts_gpu_pods_and_restarts_the_gang_elsewhere() -> None:
    gang = tuple(gpu_pod(f"rank-{i}", f"n{i + 1}", gang="llm") for i in range(4))
    daemon = PodState(
        namespace="kube-system", name="dcgm", node="n1", owners=(OwnerRef("DaemonSet", "dcgm"),)
    )
    cpu_pod = gpu_pod("web", "n1", gpus=0)
    situation = Situation(node=NODE, pods_on_node=(gang[0], daemon, cpu_pod), group_pods=gang)
    plan = plans.plan_for(fault(FaultClass.REBOOT_NODE), policy=POLICY, now=T0, situation=situation)
    assert kinds(plan)[0] is ActionKind.QUARANTINE
    evicted = [a.pod.name for a in plan.actions if a.kind is ActionKind.EVICT_POD and a.pod]
    assert evicted == ["rank-0"], "only GPU pods, never DaemonSet pods"
    gang_restarts = sorted(a.pod.name for a in plan.actions if a.kind is ActionKind.RESTART_GANG and a.pod)
    assert gang_restarts == ["rank-1", "rank-2", "rank-3"]
    assert all(a.track is Track.WORKLOAD for a in plan.actions if a.kind is ActionKind.RESTART_GANG)
    assert kinds(plan)[-1] is ActionKind.REQUEST_REMEDIATION
    assert "restart 3 gang pod(s)" in plan.summary


def test_requeue_policy_does_not_touch_other_nodes() -> None:
    plain = tuple(gpu_pod(f"p{i}", f"n{i + 1}") for i in range(2))
    plan = plans.plan_for(
        fault(FaultClass.RESET_GPU),
        policy=POLICY,
        now=T0,
        situation=Situation(node=NODE, pods_on_node=plain[:1]),
    )
    assert ActionKind.RESTART_GANG not in kinds(plan)
    assert [a.pod.name for a in plan.actions if a.pod] == ["p0"]


def test_already_quarantined_node_is_only_recorded() -> None:
    node = replace(NODE, taints=(Taint(footprint.UNHEALTHY, "reboot-node", "NoSchedule"),))
    plan = plans.plan_for(fault(FaultClass.RESET_GPU), policy=POLICY, now=T0, situation=Situation(node=node))
    assert plan.is_noop
    worse = plans.plan_for(fault(FaultClass.REPLACE), policy=POLICY, now=T0, situation=Situation(node=node))
    assert kinds(worse)[0] is ActionKind.QUARANTINE, "a graver class upgrades the quarantine"


def test_opted_out_node_is_recorded_only() -> None:
    node = replace(NODE, labels=freeze_mapping({"sickbay.io/managed": "false"}))
    plan = plans.plan_for(fault(FaultClass.REPLACE), policy=POLICY, now=T0, situation=Situation(node=node))
    assert plan.is_noop
    assert "opted out" in plan.summary


@pytest.mark.parametrize("status", [SignalStatus.RESOLVED])
def test_resolved_signals_never_act(status: SignalStatus) -> None:
    f = fault(FaultClass.REBOOT_NODE)
    f = replace(f, signal=replace(f.signal, status=status))
    assert plans.plan_for(f, policy=POLICY, now=T0).is_noop


def test_driver_mismatch_taints_without_cordon_or_drain() -> None:
    plan = plans.plan_for(
        fault(FaultClass.DRIVER_MISMATCH), policy=POLICY, now=T0, situation=Situation(node=NODE)
    )
    assert kinds(plan) == [ActionKind.QUARANTINE]
    assert plan.actions[0].params == QuarantineParams(FaultClass.DRIVER_MISMATCH, cordon=False)


def test_app_xid_restarts_the_pod_and_never_the_node() -> None:
    pod = gpu_pod("trainer-0", "n1")
    plan = plans.plan_for(
        fault(FaultClass.RESTART_WORKLOAD, pod=pod.ref),
        policy=POLICY,
        now=T0,
        situation=Situation(node=NODE, pods_on_node=(pod,)),
    )
    assert kinds(plan) == [ActionKind.RESTART_POD]
    assert plan.actions[0].params == RestartParams("uid-trainer-0")
    assert plan.actions[0].not_before == T0


def past(minutes: int, workload: str, *, gpu: int = 0, fp: str | None = None) -> PastFault:
    return PastFault(
        at=T0 - timedelta(minutes=minutes),
        fault_class=FaultClass.RESTART_WORKLOAD,
        gpu=gpu,
        xid=13,
        workload=workload,
        fingerprint=fp or f"old-{minutes}",
    )


def test_second_restart_waits_for_backoff() -> None:
    pod = gpu_pod("trainer-0", "n1")
    key = "job:train/trainer-0-job"
    situation = Situation(node=NODE, pods_on_node=(pod,), history=(past(0, key),))
    plan = plans.plan_for(
        fault(FaultClass.RESTART_WORKLOAD, pod=pod.ref), policy=POLICY, now=T0, situation=situation
    )
    action = plan.actions[0]
    assert action.kind is ActionKind.RESTART_POD
    assert "attempt 2" in plan.summary
    assert action.not_before == T0 + POLICY.retry.initial


def test_same_gpu_under_two_workloads_escalates_to_quarantine() -> None:
    pod = gpu_pod("other-0", "n1")
    situation = Situation(node=NODE, pods_on_node=(pod,), history=(past(30, "job:train/trainer-0-job"),))
    plan = plans.plan_for(
        fault(FaultClass.RESTART_WORKLOAD, pod=pod.ref), policy=POLICY, now=T0, situation=situation
    )
    assert kinds(plan)[0] is ActionKind.QUARANTINE
    assert plan.fault.fault_class is FaultClass.RESET_GPU
    assert "follows the GPU" in plan.fault.reason


def test_other_gpu_or_outside_the_window_does_not_escalate() -> None:
    pod = gpu_pod("other-0", "n1")
    for history in [(past(30, "job:a", gpu=5),), (past(60 * 25, "job:a"),)]:
        plan = plans.plan_for(
            fault(FaultClass.RESTART_WORKLOAD, pod=pod.ref),
            policy=POLICY,
            now=T0,
            situation=Situation(node=NODE, pods_on_node=(pod,), history=history),
        )
        assert kinds(plan) == [ActionKind.RESTART_POD]


def test_backoff_is_capped_exponential() -> None:
    policy = POLICY.retry
    delays = [restart_policy.backoff(n, policy) for n in range(1, 12)]
    assert delays[0] == timedelta(0)
    assert delays[1] == policy.initial
    assert delays[2] == policy.initial * policy.factor
    assert max(delays) == policy.max
    assert delays == sorted(delays)


def test_quarantine_patch_records_what_it_added_and_release_removes_exactly_that() -> None:
    operator_taint = Taint("team/maintenance", "x", "NoExecute")
    node = replace(NODE, taints=(operator_taint,), labels=freeze_mapping({"pool": "a"}))
    patch = footprint.quarantine_patch(node, fault(FaultClass.RESET_GPU), now=T0, identity="sickbay-0")
    assert patch.unschedulable is True
    assert patch.resource_version == "7"
    assert patch.taints == (operator_taint, Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule"))
    applied = replace(
        node,
        unschedulable=True,
        taints=patch.taints or (),
        labels=freeze_mapping({"pool": "a", **dict(patch.labels)}),
        annotations=freeze_mapping(dict(patch.annotations)),
    )
    assert applied.owned_by_sickbay
    release = footprint.release_patch(applied)
    assert release.unschedulable is False
    assert release.taints == (operator_taint,)
    assert dict(release.labels) == {footprint.STATE: ""}
    assert {k for k, _ in release.annotations} == {k for k, _ in patch.annotations}


def test_release_keeps_an_operators_own_cordon() -> None:
    cordoned = replace(NODE, unschedulable=True)
    patch = footprint.quarantine_patch(cordoned, fault(FaultClass.RESET_GPU), now=T0, identity="x")
    assert patch.unschedulable is None
    applied = replace(
        cordoned, taints=patch.taints or (), annotations=freeze_mapping(dict(patch.annotations))
    )
    assert footprint.release_patch(applied).unschedulable is None


def fleet(n: int, quarantined: int, pool: str = "a") -> gates.Fleet:
    nodes = [NodeState(name=f"n{i}", labels=freeze_mapping({"sickbay.io/pool": pool})) for i in range(n)]
    return gates.Fleet.of(
        nodes, pool_label="sickbay.io/pool", is_quarantined={f"n{i}" for i in range(quarantined)}
    )


def test_budget_opens_the_breaker_at_the_limit() -> None:
    budget = POLICY.budgets.model_copy(
        update={
            "max_fraction": 0.1,
            "max_nodes": 100,
            "per_pool_max_fraction": 1.0,
            "per_pool_max_nodes": 100,
        }
    )
    ok = gates.admit(fleet(100, 9), pool="a", breaker=gates.Breaker(), policy=budget, now=T0)
    assert ok.allowed
    refused = gates.admit(fleet(100, 10), pool="a", breaker=gates.Breaker(), policy=budget, now=T0)
    assert not refused.allowed
    assert refused.breaker.open
    assert "cluster budget" in refused.reason
    still = gates.admit(
        fleet(100, 3), pool="a", breaker=refused.breaker, policy=budget, now=T0 + timedelta(minutes=1)
    )
    assert not still.allowed, "an open breaker refuses even below the limit until it is calm"
    calm = gates.admit(
        fleet(100, 3),
        pool="a",
        breaker=still.breaker,
        policy=budget,
        now=T0 + timedelta(minutes=1) + budget.calm_period,
    )
    assert calm.allowed


def test_pool_budget_and_rate_limit() -> None:
    budget = POLICY.budgets.model_copy(
        update={
            "max_fraction": 1.0,
            "per_pool_max_fraction": 1.0,
            "per_pool_max_nodes": 2,
            "quarantines_per_minute": 2,
        }
    )
    refused = gates.admit(fleet(10, 2), pool="a", breaker=gates.Breaker(), policy=budget, now=T0)
    assert not refused.allowed
    assert "pool a" in refused.reason
    limited = gates.admit(
        fleet(10, 0), pool="a", breaker=gates.Breaker(), policy=budget, now=T0, recent_quarantines=(T0, T0)
    )
    assert not limited.allowed
    assert not limited.breaker.open


def test_weekly_attempt_cap_turns_a_reset_into_replace() -> None:
    situation = Situation(
        node=NODE, quarantines=(T0 - timedelta(days=1), T0 - timedelta(days=2), T0 - timedelta(days=3))
    )
    plan = plans.plan_for(fault(FaultClass.RESET_GPU), policy=POLICY, now=T0, situation=situation)
    assert plan.fault.fault_class is FaultClass.REPLACE
    assert "3 times this week" in plan.fault.reason
    old = Situation(node=NODE, quarantines=(T0 - timedelta(days=8),) * 3)
    assert (
        plans.plan_for(fault(FaultClass.RESET_GPU), policy=POLICY, now=T0, situation=old).fault.fault_class
        is FaultClass.RESET_GPU
    )


HOOK = rules.Remediator(kind="webhook", url="https://dc.example/replace")
CR = rules.Remediator(kind="custom-resource", template="apiVersion: r/v1\nkind: Reset\nmetadata: {name: x}\n")
REMEDIATORS = POLICY.model_copy(update={"remediation": {"reset-gpu": CR, "replace": HOOK}})
WEEK_OF_RESETS = (T0 - timedelta(days=1), T0 - timedelta(days=2), T0 - timedelta(days=3))


@pytest.mark.parametrize(
    ("cls", "policy", "quarantines", "expected"),
    [
        # The plan names the remediator the policy gives the class, with what act needs to ask it.
        (FaultClass.RESET_GPU, POLICY, (), RemediationParams(FaultClass.RESET_GPU, "annotate")),
        (FaultClass.REBOOT_NODE, POLICY, (), RemediationParams(FaultClass.REBOOT_NODE, "annotate")),
        (FaultClass.REPLACE, POLICY, (), RemediationParams(FaultClass.REPLACE, "none")),
        (
            FaultClass.RESET_GPU,
            REMEDIATORS,
            (),
            RemediationParams(FaultClass.RESET_GPU, "custom-resource", template=CR.template),
        ),
        (
            FaultClass.REPLACE,
            REMEDIATORS,
            (),
            RemediationParams(FaultClass.REPLACE, "webhook", url="https://dc.example/replace"),
        ),
        # A class the policy leaves out waits for a human.
        (FaultClass.REBOOT_NODE, REMEDIATORS, (), RemediationParams(FaultClass.REBOOT_NODE, "none")),
        # The weekly attempt cap turns the class into replace, and the remediator with it.
        (
            FaultClass.RESET_GPU,
            REMEDIATORS,
            WEEK_OF_RESETS,
            RemediationParams(FaultClass.REPLACE, "webhook", url="https://dc.example/replace"),
        ),
    ],
)
def test_the_plan_chooses_the_remediator(
    cls: FaultClass, policy: rules.Policy, quarantines: tuple[datetime, ...], expected: RemediationParams
) -> None:
    situation = Situation(node=NODE, quarantines=quarantines)
    plan = plans.plan_for(fault(cls), policy=policy, now=T0, situation=situation)
    [handoff] = [a for a in plan.actions if a.kind is ActionKind.REQUEST_REMEDIATION]
    assert handoff.params == expected
    assert handoff.track is Track.HARDWARE
