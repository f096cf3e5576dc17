"""Two decisions that must never kill healthy work, table-driven and pure.

A restart is for a workload that itself failed, and only for the pod the cluster confirms on the signal's
node (a GPU pod, not a DaemonSet, mirror or excluded one); a transient signal restarts nothing at all: it is
re-checked with backoff, made visible on the node when it lasts or repeats, and goes to the hardware track
only when the policy says so.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from app.classify import classifier
from app.config import rules
from app.config.settings import RULES_DIR
from app.decide import attribution, plans, soft
from app.decide.situation import Situation
from app.domain import (
    ActionKind,
    ConditionParams,
    Fault,
    FaultClass,
    NodeState,
    OwnerRef,
    PastFault,
    PodRef,
    PodState,
    RecheckParams,
    RestartParams,
    Signal,
    SignalSource,
    SignalStatus,
    freeze_mapping,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)  # pure code: `now` is passed in, never read
POLICY = rules.load_policy(RULES_DIR / "policy.yaml")
NODE = NodeState(name="n1", resource_version="7", gpu_capacity=8, gpu_allocatable=8)


def signal(
    *,
    name: str = "GpuXidApplicationError",
    pod: PodRef | None = None,
    pod_label: str | None = None,
    gpu: int | None = 2,
    fp: str = "fp-1",
    started: timedelta = timedelta(0),
    status: SignalStatus = SignalStatus.FIRING,
    xid: int | None = None,
) -> Signal:
    return Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint=fp,
        status=status,
        name=name,
        starts_at=NOW - started,
        received_at=NOW,
        node="n1",
        gpu=gpu,
        xid=xid,
        pod=pod,
        pod_label=pod_label or ("pod" if pod else None),
    )


def fault(cls: FaultClass, sig: Signal, *, rule: str = "test") -> Fault:
    return Fault(fault_class=cls, signal=sig, reason="because", rule=rule)


def gpu_pod(name: str, *, namespace: str = "ml", node: str = "n1", gpus: int = 1, **kw: object) -> PodState:
    return PodState(
        namespace=namespace,
        name=name,
        uid=f"uid-{name}",
        node=node,
        owners=(OwnerRef(kind="Job", name=f"{name}-job", controller=True),),
        gpu_request=gpus,
        **kw,  # type: ignore[arg-type]
    )


def kinds(plan: plans.Plan) -> list[ActionKind]:  # type: ignore[name-defined]
    return [a.kind for a in plan.actions]


# -- restart-workload: only the confirmed pod ---------------------------------------------------------


def test_the_named_pod_confirmed_on_the_node_is_restarted_with_its_uid() -> None:
    pod = gpu_pod("train-0")
    plan = plans.plan_for(
        fault(FaultClass.RESTART_WORKLOAD, signal(pod=pod.ref, pod_label="exported_pod")),
        policy=POLICY,
        now=NOW,
        situation=Situation(node=NODE, pods_on_node=(pod, gpu_pod("other"))),
    )
    assert kinds(plan) == [ActionKind.RESTART_POD]
    action = plan.actions[0]
    assert action.pod == pod.ref
    assert action.params == RestartParams("uid-train-0")
    assert "exported_pod" in plan.summary
    assert "confirmed on n1" in plan.summary
    assert plan.workload == "job:ml/train-0-job"


DAEMON = PodState(
    namespace="gpu-operator",
    name="nvidia-dcgm-exporter-x7k2p",
    uid="u-d",
    node="n1",
    owners=(OwnerRef("DaemonSet", "nvidia-dcgm-exporter"),),
    gpu_request=0,
)
MIRROR = replace(
    gpu_pod("static"), annotations=freeze_mapping({"kubernetes.io/config.mirror": "x"}), owners=()
)


@pytest.mark.parametrize(
    ("named", "pods", "why"),
    [
        (PodRef("ml", "gone"), (gpu_pod("train-0"),), "is not running on n1"),
        (PodRef("ml", "elsewhere"), (), "is not running on n1"),  # a pod on another node is never listed
        (DAEMON.ref, (DAEMON,), "DaemonSet"),
        (MIRROR.ref, (MIRROR,), "mirror"),
        (PodRef("kube-system", "k"), (gpu_pod("k", namespace="kube-system"),), "excluded namespace"),
        (PodRef("ml", "cpu"), (gpu_pod("cpu", gpus=0),), "requests no GPU"),
        (PodRef("ml", "done"), (gpu_pod("done", phase="Succeeded"),), "already finished"),
        (PodRef("ml", "going"), (gpu_pod("going", deleting=True),), "already being deleted"),
    ],
)
def test_a_named_pod_that_is_not_a_gpu_workload_on_the_node_is_never_restarted(
    named: PodRef, pods: tuple[PodState, ...], why: str
) -> None:
    plan = plans.plan_for(
        fault(FaultClass.RESTART_WORKLOAD, signal(pod=named)),
        policy=POLICY,
        now=NOW,
        situation=Situation(node=NODE, pods_on_node=pods),
    )
    assert plan.is_noop
    assert why in plan.summary


def test_without_a_cluster_view_nothing_is_restarted() -> None:
    pod = PodRef("ml", "train-0")
    plan = plans.plan_for(fault(FaultClass.RESTART_WORKLOAD, signal(pod=pod)), policy=POLICY, now=NOW)
    assert plan.is_noop
    assert "no pod on the GPU can be confirmed" in plan.summary


def test_no_pod_named_the_only_gpu_pod_on_the_node_is_the_one() -> None:
    whole_node = gpu_pod("llm-rank-3", gpus=8)
    plan = plans.plan_for(
        fault(FaultClass.RESTART_WORKLOAD, signal()),
        policy=POLICY,
        now=NOW,
        situation=Situation(node=NODE, pods_on_node=(whole_node, DAEMON)),
    )
    assert kinds(plan) == [ActionKind.RESTART_POD]
    assert plan.actions[0].pod == whole_node.ref
    assert "the only GPU pod on n1" in plan.summary


def test_no_pod_named_and_several_gpu_pods_nothing_is_guessed() -> None:
    plan = plans.plan_for(
        fault(FaultClass.RESTART_WORKLOAD, signal()),
        policy=POLICY,
        now=NOW,
        situation=Situation(node=NODE, pods_on_node=(gpu_pod("a"), gpu_pod("b"))),
    )
    assert plan.is_noop
    assert "2 GPU pods" in plan.summary
    assert "none is picked" in plan.summary


def test_a_hardware_fault_without_pod_labels_is_attributed_to_the_only_gpu_pod() -> None:
    pod = gpu_pod("llm-rank-0", gpus=8)
    plan = plans.plan_for(
        fault(FaultClass.REBOOT_NODE, signal(name="GpuFellOffBus")),
        policy=POLICY,
        now=NOW,
        situation=Situation(node=NODE, pods_on_node=(pod, DAEMON)),
    )
    assert kinds(plan)[0] is ActionKind.QUARANTINE
    assert [a.pod for a in plan.actions if a.kind is ActionKind.EVICT_POD] == [pod.ref]
    assert plan.workload == "job:ml/llm-rank-0-job"


def test_attribution_says_how_it_found_the_pod() -> None:
    pod = gpu_pod("train-0")
    found = attribution.attribute(
        signal(pod=pod.ref, pod_label="agent"),
        Situation(node=NODE, pods_on_node=(pod,)),
        POLICY.drain,
    )
    assert found.confirmed
    assert found.pod == pod
    assert "PodResources" in found.how


# -- transient: never a restart ------------------------------------------------------------------------


def soft_fault(**kw: object) -> Fault:
    return fault(FaultClass.TRANSIENT, signal(name="TeamGpuPowerBrake", **kw), rule="default")  # type: ignore[arg-type]


def previous_checks(n: int, sig: Signal) -> tuple[PastFault, ...]:
    return tuple(
        PastFault(
            at=sig.starts_at,
            fault_class=FaultClass.TRANSIENT,
            gpu=sig.gpu,
            xid=None,
            workload=None,
            fingerprint=sig.fingerprint,
            name=sig.name,
        )
        for _ in range(n)
    )


def test_a_new_transient_signal_restarts_nothing_and_is_rechecked_after_the_initial_backoff() -> None:
    pod = gpu_pod("train-0")
    f = soft_fault(pod=pod.ref)
    plan = plans.plan_for(f, policy=POLICY, now=NOW, situation=Situation(node=NODE, pods_on_node=(pod,)))
    assert kinds(plan) == [ActionKind.RECHECK]
    assert plan.actions[0].not_before == NOW + POLICY.retry.initial
    assert plan.actions[0].params == RecheckParams(1)
    assert "nothing restarted" in plan.summary


def test_rechecks_back_off_and_the_last_one_lands_on_the_persistence_point() -> None:
    persist = POLICY.transient.persist_after
    dues = []
    for n in range(6):
        f = soft_fault(started=timedelta(seconds=10 * n))
        history = previous_checks(n, f.signal)
        plan = plans.plan_for(f, policy=POLICY, now=NOW, situation=Situation.unknown(history=history))
        assert kinds(plan) == [ActionKind.RECHECK]
        assert plan.actions[0].params == RecheckParams(n + 1)
        dues.append(plan.actions[0].not_before - NOW)  # type: ignore[operator]
    assert dues[0] == POLICY.retry.initial
    assert dues[1] == POLICY.retry.initial * POLICY.retry.factor
    assert all(d <= persist for d in dues)
    late = soft_fault(started=persist - timedelta(seconds=5))
    plan = plans.plan_for(late, policy=POLICY, now=NOW, situation=Situation.unknown())
    assert plan.actions[0].not_before == late.signal.starts_at + persist, "no re-check overshoots it"


def test_a_lasting_transient_signal_raises_the_node_condition_and_still_restarts_nothing() -> None:
    f = soft_fault(started=POLICY.transient.persist_after)
    plan = plans.plan_for(f, policy=POLICY, now=NOW, situation=Situation.unknown())
    assert kinds(plan) == [ActionKind.RAISE_CONDITION]
    action = plan.actions[0]
    assert POLICY.transient.condition == "GpuSoftFault"
    assert action.params == ConditionParams("GpuSoftFault", reason="TeamGpuPowerBrake")
    assert "has been firing for 15m" in action.reason


def test_repeated_firings_on_the_same_gpu_raise_the_condition() -> None:
    f = soft_fault(fp="fp-3")
    earlier = tuple(
        PastFault(
            at=NOW - timedelta(hours=h),
            fault_class=FaultClass.TRANSIENT,
            gpu=2,
            xid=None,
            workload=None,
            fingerprint=f"fp-{h}",
            name="TeamGpuPowerBrake",
        )
        for h in (1, 2)
    )
    plan = plans.plan_for(f, policy=POLICY, now=NOW, situation=Situation.unknown(history=earlier))
    assert kinds(plan) == [ActionKind.RAISE_CONDITION]
    assert "3 separate times on GPU 2" in plan.actions[0].reason
    other_gpu = tuple(replace(p, gpu=5) for p in earlier)
    plan = plans.plan_for(f, policy=POLICY, now=NOW, situation=Situation.unknown(history=other_gpu))
    assert kinds(plan) == [ActionKind.RECHECK]


def test_an_unknown_xid_is_visible_at_once() -> None:
    f = fault(FaultClass.TRANSIENT, signal(name="GpuXidUnclassified", xid=171), rule=soft.UNKNOWN_XID_RULE)
    plan = plans.plan_for(f, policy=POLICY, now=NOW, situation=Situation.unknown())
    assert kinds(plan) == [ActionKind.RAISE_CONDITION]
    assert plan.actions[0].params_as(ConditionParams).reason == "UnknownXid"
    assert "XID 171 is not in the XID catalog" in plan.actions[0].reason


def test_escalation_to_the_hardware_track_only_when_the_policy_says_so() -> None:
    policy = POLICY.model_copy(
        update={"transient": POLICY.transient.model_copy(update={"escalate_to": "reset-gpu"})}
    )
    f = soft_fault(started=POLICY.transient.persist_after)
    plan = plans.plan_for(f, policy=policy, now=NOW, situation=Situation(node=NODE))
    assert kinds(plan)[0] is ActionKind.QUARANTINE
    assert kinds(plan)[-1] is ActionKind.RAISE_CONDITION
    assert plan.fault.fault_class is FaultClass.RESET_GPU
    assert "transient.escalate_to" in plan.fault.reason


def test_a_resolved_soft_signal_clears_the_condition_unless_another_still_fires() -> None:
    f = soft_fault(status=SignalStatus.RESOLVED)
    alone = plans.plan_for(f, policy=POLICY, now=NOW, situation=Situation(node=None, soft_firing=("fp-1",)))
    assert kinds(alone) == [ActionKind.CLEAR_CONDITION]
    others = plans.plan_for(
        f, policy=POLICY, now=NOW, situation=Situation(node=None, soft_firing=("fp-1", "fp-9"))
    )
    assert others.is_noop
    assert "1 other soft signal(s) still fire" in others.summary


def test_recheck_delay_is_capped_exponential() -> None:
    delays = [soft.recheck_delay(n, POLICY.retry) for n in range(1, 12)]
    assert delays[0] == POLICY.retry.initial
    assert delays == sorted(delays)
    assert max(delays) == POLICY.retry.max


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("GpuThermalThrottling", "GpuThermalThrottling"),
        ("agent:xid", "AgentXid"),
        ("team gpu hot", "TeamGpuHot"),
    ],
)
def test_condition_reason_is_camel_case(name: str, reason: str) -> None:
    assert soft.condition_reason(fault(FaultClass.TRANSIENT, signal(name=name))) == reason


def test_decide_knows_classifications_rule_name_for_an_unknown_xid() -> None:
    # decide must not import classify (the layers), so the name is written twice; this keeps them one.
    assert soft.UNKNOWN_XID_RULE == classifier.UNKNOWN_XID_RULE
