"""The eviction set of a hardware fault's drain (`decide.partial`), table-driven: the mapping present,
absent and partial; NVLink peers on and off; each drain mode; and how the plan carries the choice."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pydantic
import pytest

from app.config import rules
from app.config.settings import RULES_DIR
from app.decide import footprint, partial, plans
from app.decide.situation import Situation
from app.domain import (
    ActionKind,
    Fault,
    FaultClass,
    NodeState,
    OwnerRef,
    Plan,
    PodRef,
    PodState,
    QuarantineParams,
    Signal,
    SignalSource,
    SignalStatus,
    Taint,
)

NOW = datetime.now(UTC)
NODE = "gpu-1"


def _pod(name: str, *, gpus: int = 1) -> PodState:
    return PodState(namespace="train", name=name, uid=f"uid-{name}", node=NODE, gpu_request=gpus)


FAULTY = _pod("faulty")  # on GPU 3
HEALTHY = _pod("healthy")  # on GPU 5
PEER = _pod("peer")  # on GPU 2
CPU_ONLY = _pod("sidecar", gpus=0)
AGENT = PodState(
    namespace="gpu-operator",
    name="dcgm-exporter-x",
    node=NODE,
    owners=(OwnerRef("DaemonSet", "dcgm-exporter"),),
)


def _fault(
    cls: FaultClass = FaultClass.RESET_GPU,
    *,
    gpu: int | None = 3,
    pod: PodRef | None = FAULTY.ref,
    label: str | None = "exported_pod",
) -> Fault:
    signal = Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint="fp",
        status=SignalStatus.FIRING,
        name="GpuDoubleBitEccError",
        starts_at=NOW - timedelta(seconds=30),
        received_at=NOW,
        node=NODE,
        gpu=gpu,
        pod=pod,
        pod_label=label if pod is not None else None,
    )
    return Fault(fault_class=cls, signal=signal, reason="DBE on GPU 3", rule="test")


def _situation(
    *pods: PodState,
    labels: tuple[tuple[str, str], ...] = (),
    holders: tuple[tuple[int, PodRef], ...] = (),
    gpus: int = 8,
) -> Situation:
    node = NodeState(name=NODE, labels=labels, gpu_capacity=gpus, gpu_allocatable=gpus)
    return Situation(node=node, pods_on_node=pods, gpu_holders=holders)


def _policy(**kw: object) -> rules.DrainPolicy:
    return rules.DrainPolicy.model_validate(kw)


ALL_PODS = (FAULTY, HEALTHY, PEER, CPU_ONLY, AGENT)
GPU_PODS = {"faulty", "healthy", "peer"}


@dataclass(frozen=True)
class Case:
    name: str
    fault: Fault
    situation: Situation
    policy: rules.DrainPolicy = field(default_factory=rules.DrainPolicy)
    mode: str = "partial"
    evicted: frozenset[str] = frozenset()
    kept: frozenset[str] = frozenset()
    fallback: str = ""  # a phrase the fallback reason must contain ("" : no fallback)


CASES = [
    Case(
        "mapping present (exported_pod): only the faulty GPU's pod goes",
        _fault(),
        _situation(*ALL_PODS),
        evicted=frozenset({"faulty"}),
        kept=frozenset({"healthy", "peer"}),
    ),
    Case(
        "mapping present (the agent's PodResources)",
        _fault(label="agent"),
        _situation(*ALL_PODS),
        evicted=frozenset({"faulty"}),
        kept=frozenset({"healthy", "peer"}),
    ),
    Case(
        "mapping absent: the signal names no pod and several GPU pods run",
        _fault(pod=None),
        _situation(*ALL_PODS),
        mode="gpu-pods",
        evicted=frozenset(GPU_PODS),
        fallback="which one uses GPU 3 is unknown",
    ),
    Case(
        "mapping absent: the named pod is not on the node",
        _fault(pod=PodRef("train", "gone")),
        _situation(*ALL_PODS),
        mode="gpu-pods",
        evicted=frozenset(GPU_PODS),
        fallback="is not running on",
    ),
    Case(
        "mapping absent: the signal names no GPU",
        _fault(gpu=None),
        _situation(*ALL_PODS),
        mode="gpu-pods",
        evicted=frozenset(GPU_PODS),
        fallback="names no GPU index",
    ),
    Case(
        "mapping absent: a DaemonSet pod named (the exporter itself)",
        _fault(pod=AGENT.ref, label="pod"),
        _situation(*ALL_PODS),
        mode="gpu-pods",
        evicted=frozenset(GPU_PODS),
        fallback="DaemonSet",
    ),
    Case(
        "mapping unreliable: time-sliced GPUs",
        _fault(),
        _situation(*ALL_PODS, labels=((partial.SHARING, "time-slicing"), (partial.REPLICAS, "32"))),
        mode="gpu-pods",
        evicted=frozenset(GPU_PODS),
        fallback="shared",
    ),
    Case(
        "mapping unreliable: replicas above the GPU count, no strategy label",
        _fault(),
        _situation(*ALL_PODS, labels=((partial.REPLICAS, "16"),)),
        mode="gpu-pods",
        evicted=frozenset(GPU_PODS),
        fallback="shared",
    ),
    Case(
        "one replica per GPU is not sharing",
        _fault(),
        _situation(*ALL_PODS, labels=((partial.SHARING, "none"), (partial.REPLICAS, "8"))),
        evicted=frozenset({"faulty"}),
        kept=frozenset({"healthy", "peer"}),
    ),
    Case(
        "the only GPU pod on the node, unnamed, is the GPU's",
        _fault(pod=None),
        _situation(FAULTY, CPU_ONLY, AGENT),
        evicted=frozenset({"faulty"}),
    ),
    Case(
        "peers on, every peer's holder unknown: falls back",
        _fault(),
        _situation(*ALL_PODS),
        policy=_policy(peers=True),
        mode="gpu-pods",
        evicted=frozenset(GPU_PODS),
        fallback="NVLink peers",
    ),
    Case(
        "peers on, NVLink group known, its holders known: the group's pods go",
        _fault(),
        _situation(*ALL_PODS, holders=((2, PEER.ref),)),
        policy=_policy(peers=True, nvlink_groups=[[2, 3], [4, 5]]),
        evicted=frozenset({"faulty", "peer"}),
        kept=frozenset({"healthy"}),
    ),
    Case(
        "peers on, mapping partial: a peer's holder unknown",
        _fault(),
        _situation(*ALL_PODS, holders=((2, PEER.ref),)),
        policy=_policy(peers=True, nvlink_groups=[[1, 2, 3]]),
        mode="gpu-pods",
        evicted=frozenset(GPU_PODS),
        fallback="GPU(s) 1 is unknown",
    ),
    Case(
        "peers on, a GPU in no named group resets alone",
        _fault(),
        _situation(*ALL_PODS),
        policy=_policy(peers=True, nvlink_groups=[[0, 1]]),
        evicted=frozenset({"faulty"}),
        kept=frozenset({"healthy", "peer"}),
    ),
    Case(
        "peers on, unknown holders but nothing else to keep: still partial",
        _fault(),
        _situation(FAULTY, CPU_ONLY),
        policy=_policy(peers=True),
        evicted=frozenset({"faulty"}),
    ),
    Case(
        "mode gpu-pods for reset-gpu: every GPU pod, whatever the mapping",
        _fault(),
        _situation(*ALL_PODS),
        policy=_policy(modes={"reset-gpu": "gpu-pods"}),
        mode="gpu-pods",
        evicted=frozenset(GPU_PODS),
    ),
    Case(
        "mode all: the CPU pod too, never the DaemonSet",
        _fault(),
        _situation(*ALL_PODS),
        policy=_policy(modes={"reset-gpu": "all"}),
        mode="all",
        evicted=frozenset(GPU_PODS | {"sidecar"}),
    ),
    Case(
        "reboot-node: as today, every GPU pod",
        _fault(FaultClass.REBOOT_NODE),
        _situation(*ALL_PODS),
        mode="gpu-pods",
        evicted=frozenset(GPU_PODS),
    ),
    Case(
        "replace with gpu_pods_only false: as today, every pod",
        _fault(FaultClass.REPLACE),
        _situation(*ALL_PODS),
        policy=_policy(gpu_pods_only=False),
        mode="all",
        evicted=frozenset(GPU_PODS | {"sidecar"}),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_eviction_set(case: Case) -> None:
    chosen = partial.choose(case.fault, case.situation, case.policy)
    assert chosen.mode == case.mode
    assert {p.name for p in chosen.evict} == case.evicted
    assert {p.name for p in chosen.kept} == case.kept
    if case.fallback:
        assert case.fallback in chosen.fallback
        assert chosen.fallback in chosen.why
    else:
        assert not chosen.fallback
    for pod in chosen.kept:  # the plan says which pods stay
        assert str(pod.ref) in chosen.why


def test_without_the_cluster_a_partial_drain_falls_back() -> None:
    chosen = partial.choose(_fault(), Situation.unknown(), rules.DrainPolicy())
    assert chosen.mode == "gpu-pods"
    assert "not read" in chosen.fallback


def test_partial_is_refused_for_a_class_a_gpu_reset_does_not_fix() -> None:
    with pytest.raises(pydantic.ValidationError, match="partial drain"):
        rules.DrainPolicy.model_validate({"modes": {"reboot-node": "partial"}})


def test_the_shipped_policy_drains_reset_gpu_partially_and_the_rest_as_before() -> None:
    policy = rules.load_policy(RULES_DIR / "policy.yaml").drain
    assert policy.mode_for(FaultClass.RESET_GPU) == "partial"
    assert policy.mode_for(FaultClass.REBOOT_NODE) == "gpu-pods"
    assert policy.mode_for(FaultClass.REPLACE) == "gpu-pods"
    assert policy.peers is False


def _plan(fault: Fault, situation: Situation, drain: rules.DrainPolicy | None = None) -> Plan:
    policy = rules.Policy(version=1, drain=drain or rules.DrainPolicy())
    return plans.plan_for(fault, policy=policy, now=NOW, situation=situation)


def test_a_partial_plan_evicts_one_pod_taints_without_cordon_and_names_the_kept() -> None:
    plan = _plan(_fault(), _situation(*ALL_PODS))
    quarantine = next(a for a in plan.actions if a.kind is ActionKind.QUARANTINE)
    assert quarantine.params_as(QuarantineParams).cordon is False
    evicted = [a.pod for a in plan.actions if a.kind is ActionKind.EVICT_POD]
    assert evicted == [FAULTY.ref]
    assert "keep train/healthy, train/peer running" in plan.summary
    assert any(a.kind is ActionKind.REQUEST_REMEDIATION for a in plan.actions)


def test_a_fallback_plan_cordons_drains_every_gpu_pod_and_says_why() -> None:
    plan = _plan(_fault(pod=None), _situation(*ALL_PODS))
    quarantine = next(a for a in plan.actions if a.kind is ActionKind.QUARANTINE)
    assert quarantine.params_as(QuarantineParams).cordon is True
    evicted = {a.pod.name for a in plan.actions if a.kind is ActionKind.EVICT_POD and a.pod}
    assert evicted == GPU_PODS
    assert "partial drain not possible" in plan.summary
    assert "unknown" in plan.summary


def _held_for_gpu_3() -> Situation:
    """A node already held for GPU 3's reset under a partial drain: tainted, not cordoned."""
    node = NodeState(
        name=NODE,
        taints=(Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule"),),
        labels=((footprint.STATE, "remediating"),),
        annotations=(
            (footprint.ADDED, "taint"),
            (footprint.OWNED_BY, "sickbay-0"),
            (footprint.FAULT, '{"class":"reset-gpu","gpu":3}'),
            (footprint.DRAIN_PODS, "train/faulty"),
        ),
        gpu_capacity=8,
        gpu_allocatable=8,
    )
    return Situation(node=node, pods_on_node=(HEALTHY, PEER, CPU_ONLY, AGENT))


def test_a_second_gpu_faulting_widens_the_partial_drain_to_every_gpu_pod_and_cordons() -> None:
    plan = _plan(_fault(gpu=5, pod=HEALTHY.ref), _held_for_gpu_3())
    quarantine = next(a for a in plan.actions if a.kind is ActionKind.QUARANTINE)
    assert quarantine.params_as(QuarantineParams).cordon is True
    evicted = {a.pod.name for a in plan.actions if a.kind is ActionKind.EVICT_POD and a.pod}
    assert evicted == {"healthy", "peer"}
    assert "GPU 3 of the node is already held for a reset" in plan.summary


def test_the_same_gpu_again_is_the_same_reset() -> None:
    plan = _plan(_fault(gpu=3), _held_for_gpu_3())
    assert not [a for a in plan.actions if a.kind in (ActionKind.QUARANTINE, ActionKind.EVICT_POD)]
    assert "already quarantined" in plan.summary


def test_the_widening_patch_adds_the_cordon_and_keeps_the_quarantines_start() -> None:
    node = _held_for_gpu_3().node
    assert node is not None
    assert footprint.needs_quarantine(node, FaultClass.RESET_GPU, cordon=True)
    assert not footprint.needs_quarantine(node, FaultClass.RESET_GPU)
    patch = footprint.quarantine_patch(node, _fault(gpu=5), now=NOW, identity="sickbay-0", cordon=True)
    assert patch.unschedulable is True
    assert dict(patch.annotations)[footprint.ADDED] == "cordon,taint"


def test_a_drain_start_keeps_a_partial_drains_pods_and_a_whole_node_drain_clears_them() -> None:
    node = _held_for_gpu_3().node
    assert node is not None
    assert footprint.drain_pods(node) == [PodRef("train", "faulty")]
    kept = footprint.drain_start_patch(node, now=NOW, only=[FAULTY.ref, PEER.ref])
    assert dict(kept.annotations)[footprint.DRAIN_PODS] == "train/faulty,train/peer"
    whole = footprint.drain_start_patch(node, now=NOW)
    assert dict(whole.annotations)[footprint.DRAIN_PODS] == ""  # removed
    garbled = NodeState(name=NODE, annotations=((footprint.DRAIN_PODS, "no-slash"),))
    assert footprint.drain_pods(garbled) is None  # drain the whole node rather than guess
