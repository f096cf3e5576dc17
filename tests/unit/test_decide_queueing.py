"""Requeue through Kueue, pure and table-driven: which path a pod's job takes, what a fault's plan holds
for a queued job, and what to write next as Kueue moves its Workload."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.config import rules
from app.config.settings import RULES_DIR
from app.decide import plans, queueing
from app.decide.situation import Situation
from app.domain import (
    ActionKind,
    Condition,
    Fault,
    FaultClass,
    NodeState,
    OwnerRef,
    PodState,
    RequeueParams,
    Signal,
    SignalSource,
    SignalStatus,
    WorkloadState,
    freeze_mapping,
)

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)  # pure code: `now` is passed in, never read
POLICY = rules.load_policy(RULES_DIR / "policy.yaml")
NODE = NodeState(name="n1", resource_version="7", gpu_capacity=8, gpu_allocatable=8)
JOB = OwnerRef(kind="Job", name="llm", uid="uid-llm", controller=True, api_version="batch/v1")


def pod(name: str, *, labels: dict[str, str], owner: OwnerRef | None = JOB, node: str = "n1") -> PodState:
    return PodState(
        namespace="train",
        name=name,
        uid=f"uid-{name}",
        node=node,
        labels=freeze_mapping(labels),
        owners=(owner,) if owner else (),
        gpu_request=8,
    )


QUEUED = {"kueue.x-k8s.io/queue-name": "team-a", "batch.kubernetes.io/job-name": "llm"}
JOBSET = {"jobset.sigs.k8s.io/jobset-name": "big", "jobset.sigs.k8s.io/jobset-uid": "uid-big"}


@pytest.mark.parametrize(
    ("labels", "owner", "path"),
    [
        (QUEUED, JOB, "kueue"),
        (QUEUED, None, "plain"),  # no job to find a Workload for
        (QUEUED, OwnerRef(kind="Job", name="llm"), "plain"),  # an owner without a UID finds nothing
        ({**JOBSET, "kueue.x-k8s.io/queue-name": "team-a"}, JOB, "kueue"),
        (JOBSET, JOB, "jobset"),
        ({"batch.kubernetes.io/job-name": "llm"}, JOB, "plain"),
    ],
)
def test_the_requeue_path_follows_the_queue_label(
    labels: dict[str, str], owner: OwnerRef | None, path: str
) -> None:
    assert queueing.requeue_path(pod("p", labels=labels, owner=owner)) == path


def test_a_jobsets_pods_are_requeued_as_the_jobset() -> None:
    job = queueing.queued_job(pod("p", labels={**JOBSET, "kueue.x-k8s.io/queue-name": "q"}))
    assert job == OwnerRef(kind="JobSet", name="big", uid="uid-big", api_version="jobset.x-k8s.io/v1alpha2")


def fault(cls: FaultClass = FaultClass.RESET_GPU) -> Fault:
    signal = Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint="f",
        status=SignalStatus.FIRING,
        name="A",
        starts_at=T0,
        received_at=T0,
        node="n1",
        gpu=0,
    )
    return Fault(fault_class=cls, signal=signal, reason="because", rule="test")


def test_a_queued_job_on_a_faulty_node_is_requeued_once_through_kueue_and_its_pods_evicted() -> None:
    gang = (
        pod("llm-0", labels={**JOBSET, "kueue.x-k8s.io/queue-name": "team-a"}),
        pod("llm-1", labels={**JOBSET, "kueue.x-k8s.io/queue-name": "team-a"}),
        pod("llm-2", labels={**JOBSET, "kueue.x-k8s.io/queue-name": "team-a"}, node="n2"),
    )
    plan = plans.plan_for(
        fault(), policy=POLICY, now=T0, situation=Situation(node=NODE, pods_on_node=gang[:2], group_pods=gang)
    )
    kinds = [a.kind for a in plan.actions]
    assert kinds == [
        ActionKind.QUARANTINE,
        ActionKind.EVICT_POD,
        ActionKind.REQUEUE_WORKLOAD,
        ActionKind.EVICT_POD,
        ActionKind.REQUEST_REMEDIATION,
    ]
    # No gang restart by hand: deactivating the Workload stops every pod of the JobSet, llm-2 included.
    (requeue,) = [a for a in plan.actions if a.kind is ActionKind.REQUEUE_WORKLOAD]
    assert requeue.params == RequeueParams(
        OwnerRef(kind="JobSet", name="big", uid="uid-big", api_version="jobset.x-k8s.io/v1alpha2"),
        namespace="train",
        queue="team-a",
    )
    assert requeue.node == "n1"
    assert "requeue 1 job(s) through Kueue" in plan.summary


def test_an_unqueued_gang_is_still_restarted_by_hand() -> None:
    gang = (pod("g-0", labels=JOBSET), pod("g-1", labels=JOBSET, node="n2"))
    plan = plans.plan_for(
        fault(), policy=POLICY, now=T0, situation=Situation(node=NODE, pods_on_node=gang[:1], group_pods=gang)
    )
    kinds = [a.kind for a in plan.actions]
    assert ActionKind.REQUEUE_WORKLOAD not in kinds
    assert ActionKind.RESTART_GANG in kinds


def cond(kind: str, status: str, reason: str = "") -> Condition:
    return Condition(type=kind, status=status, reason=reason)


ADMITTED = (cond("QuotaReserved", "True"), cond("Admitted", "True"))
EVICTED_HOLDING = (cond("QuotaReserved", "True"), cond("Evicted", "True", "Deactivated"))
RELEASED = (cond("QuotaReserved", "False", "Pending"), cond("Evicted", "True", "Deactivated"))


@pytest.mark.parametrize(
    ("workload", "step"),
    [
        (WorkloadState("train", "wl", conditions=ADMITTED), "deactivate"),
        # Kueue's TAS has listed the node: it replaces it within the topology domain; leave it be.
        (
            WorkloadState("train", "wl", conditions=ADMITTED, topology=True, unhealthy_nodes=("n1",)),
            "leave-to-kueue",
        ),
        # TAS, but Kueue has not reacted to the taint (its gate off): requeue as any other.
        (
            WorkloadState("train", "wl", conditions=ADMITTED, topology=True, unhealthy_nodes=("n9",)),
            "deactivate",
        ),
        (WorkloadState("train", "wl", active=False, conditions=ADMITTED, requeued_from="n1"), "wait"),
        (WorkloadState("train", "wl", active=False, conditions=EVICTED_HOLDING, requeued_from="n1"), "wait"),
        (WorkloadState("train", "wl", active=False, conditions=RELEASED, requeued_from="n1"), "reactivate"),
        # Someone else switched it off: Sickbay never switches it back on.
        (WorkloadState("train", "wl", active=False, conditions=RELEASED), "not-ours"),
        (WorkloadState("train", "wl", conditions=(*ADMITTED, cond("Finished", "True"))), "finished"),
    ],
)
def test_the_next_step_follows_kueues_conditions(workload: WorkloadState, step: str) -> None:
    assert queueing.next_step(workload, node="n1") == step
    assert workload.name in queueing.explain(queueing.next_step(workload, node="n1"), workload, node="n1")


def test_an_old_kueue_reason_for_deactivation_counts() -> None:
    old = WorkloadState(
        "train",
        "wl",
        active=False,
        conditions=(cond("QuotaReserved", "False"), cond("Evicted", "True", "InactiveWorkload")),
        requeued_from="n1",
    )
    assert queueing.next_step(old, node="n1") == "reactivate"
