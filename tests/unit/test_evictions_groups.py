"""Which pods a drain moves and which can checkpoint, pod kind by pod kind; and the group a gang label
names, field by field."""

from __future__ import annotations

import pytest

from app.config import rules
from app.config.settings import RULES_DIR
from app.decide import evictions, groups
from app.domain import OwnerRef, PodState, freeze_mapping

POLICY = rules.load_policy(RULES_DIR / "policy.yaml")
DRAIN = rules.DrainPolicy()
DAEMONSET = (OwnerRef(kind="DaemonSet", name="agent", controller=True),)
MIRROR = freeze_mapping({"kubernetes.io/config.mirror": "abc"})


def pod(*, gpus: int = 1, phase: str = "Running", namespace: str = "ml", **kw: object) -> PodState:
    return PodState(namespace=namespace, name="p", node="n1", phase=phase, gpu_request=gpus, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("p", "drain", "runs"),
    [
        (pod(), True, True),  # one GPU is a GPU pod
        (pod(gpus=0), False, False),
        (pod(owners=DAEMONSET), False, False),
        (pod(annotations=MIRROR), False, False),
        (pod(phase="Succeeded"), False, False),
        (pod(phase="Pending"), True, False),  # moved off, but nothing to checkpoint yet
        (pod(namespace="kube-system"), False, True),
    ],
)
def test_drainable_and_running_workload(p: PodState, drain: bool, runs: bool) -> None:
    assert evictions.drainable(p, DRAIN) is drain
    assert evictions.running_workload(p) is runs


def test_without_gpu_pods_only_every_workload_pod_is_drained() -> None:
    every = DRAIN.model_copy(update={"gpu_pods_only": False})
    assert evictions.drainable(pod(gpus=0), every)
    assert not evictions.drainable(pod(gpus=0, owners=DAEMONSET), every)


def test_a_gang_label_names_the_whole_group() -> None:
    member = pod(labels=freeze_mapping({"jobset.sigs.k8s.io/jobset-name": "llm"}))
    assert groups.group_of(member, POLICY.workloads) == groups.Group(
        kind="jobset", namespace="ml", name="llm", label="jobset.sigs.k8s.io/jobset-name"
    )
    owned = pod(owners=(OwnerRef(kind="StatefulSet", name="db", controller=True),))
    assert groups.group_of(owned, POLICY.workloads) == groups.Group(
        kind="statefulset", namespace="ml", name="db"
    )
    assert groups.group_of(pod(), POLICY.workloads) is None
