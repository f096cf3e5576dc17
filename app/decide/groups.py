"""Which group a pod belongs to (a JobSet, a Kubeflow job, a LeaderWorkerSet, a Job, or its controller).

A distributed job is a group: restarting one rank while the others wait on a collective wastes the whole
job's GPUs until an NCCL timeout fires. Gang labels win over owner references because they name the
whole job, while the owner is often one replicated Job of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.config import rules
from app.domain import PodRef, PodState


@dataclass(frozen=True, slots=True)
class Group:
    kind: str  # jobset, kubeflow, leaderworkerset, job, or the owner's kind in lower case
    namespace: str
    name: str
    label: str | None = None  # the gang label that names it, for a label selector

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.namespace}/{self.name}"


def group_of(pod: PodState, policy: rules.WorkloadPolicy) -> Group | None:
    for label, kind in policy.gang_labels.items():
        value = pod.label(label)
        if value:
            return Group(kind=kind, namespace=pod.namespace, name=value, label=label)
    owner = pod.controller
    if owner is None:
        return None
    return Group(kind=owner.kind.lower(), namespace=pod.namespace, name=owner.name)


def gangs_among(pods: Iterable[PodState], policy: rules.WorkloadPolicy) -> tuple[Group, ...]:
    """The gangs with a member among `pods` that a fault restarts as a whole (policy `restart-gang`) and
    whose label can find their other members wherever they run; each once (as its last member names it),
    in the order first met."""
    found: dict[str, Group] = {}
    for pod in pods:
        group = group_of(pod, policy)
        if group is not None and group.label and policy.policy_for(group.kind) == "restart-gang":
            found[group.key] = group
    return tuple(found.values())


def members(group: Group, pods: tuple[PodState, ...], policy: rules.WorkloadPolicy) -> tuple[PodState, ...]:
    return tuple(p for p in pods if group_of(p, policy) == group)


def workload_key(pod: PodState | None, ref: PodRef | None, policy: rules.WorkloadPolicy) -> str | None:
    """A stable name for "the job" behind a pod, so repeats across pod restarts count as one workload."""
    if pod is not None:
        group = group_of(pod, policy)
        if group is not None:
            return group.key
        return f"pod:{pod.namespace}/{pod.name}"
    if ref is not None:
        return f"pod:{ref.namespace}/{ref.name}"
    return None
