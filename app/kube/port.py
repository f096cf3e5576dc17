"""The Kubernetes port: the few calls Sickbay makes, typed in domain values.

`act` depends on this Protocol, never on the `kubernetes` package; the real implementation is
`app.kube.client.KubeClient`, and tests may pass any object with these methods. Every call listed here
must be granted by the ClusterRole in `deploy/`, and a test compares the two (see `CALLS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from app.domain import Condition, JobRun, JobState, NodePatch, NodeState, PodState, WorkloadState
from app.domain.identity import AccessRequest, AccessReview, TokenReview, UserInfo


@dataclass(frozen=True, slots=True)
class EventSpec:
    """A Kubernetes Event about a node or a pod, with a stable reason (e.g. `SickbayQuarantined`)."""

    kind: str  # "Node" or "Pod" or the owner's kind
    name: str
    namespace: str  # where the Event is written; "default" for cluster-scoped objects
    reason: str
    message: str
    type: str = "Normal"  # or "Warning"
    uid: str = ""
    api_version: str = "v1"


class KubePort(Protocol):
    async def get_node(self, name: str) -> NodeState: ...

    async def list_nodes(self, *, label_selector: str | None = None) -> list[NodeState]: ...

    async def list_pods(
        self,
        *,
        node: str | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        facts: bool = False,  # also priority, tolerations, images (`PodFacts`): the audit's, not decide's
    ) -> list[PodState]: ...

    async def patch_node(self, patch: NodePatch) -> NodeState:
        """Apply labels/annotations/taints/cordon in one write, 409 (ConflictError) if the node changed."""
        ...

    async def set_node_condition(self, node: str, condition: Condition) -> None: ...

    async def evict_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        """Eviction API; raises TooManyRequestsError(budget=True) when a PDB forbids it, NotFoundError if gone,
        and (with `uid`) ConflictError when the name now belongs to another pod."""
        ...

    async def delete_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None: ...

    async def create_event(self, event: EventSpec) -> None: ...

    async def patch_pod_labels(self, namespace: str, name: str, labels: Mapping[str, str | None]) -> None: ...

    async def create_custom_object(self, manifest: Mapping[str, object]) -> None: ...

    async def create_job(self, manifest: Mapping[str, object]) -> None:
        """batch/v1 Job in its manifest's namespace; ConflictError when one of that name exists."""
        ...

    async def get_job(self, namespace: str, name: str) -> JobRun | None:
        """The Job and how it ended (its Complete/Failed condition); None when it does not exist."""
        ...


@runtime_checkable
class QueuePort(Protocol):
    """Kueue's `Workload` objects (kueue.x-k8s.io/v1beta1): the requeue of a queued job (`app.kube.workloads`)."""

    async def list_workloads(self, namespace: str, *, job_uid: str) -> list[WorkloadState]:
        """The Workloads Kueue made for the job of this UID (label `kueue.x-k8s.io/job-uid`)."""
        ...

    async def list_requeued_workloads(self) -> list[WorkloadState]:
        """Every Workload Sickbay holds deactivated (label `sickbay.io/requeued`), in all namespaces."""
        ...

    async def get_workload(self, namespace: str, name: str) -> WorkloadState: ...

    async def set_workload_active(
        self, workload: WorkloadState, *, active: bool, requeued_from: str | None
    ) -> WorkloadState:
        """Patch `spec.active` and Sickbay's `sickbay.io/requeued-from` annotation (None removes it), guarded
        by the read resourceVersion (ConflictError when Kueue wrote it meanwhile)."""
        ...


class ReviewPort(Protocol):
    """Who a caller of Sickbay is, asked of the API server (`app.kube.reviews`); the intake's callers use it."""

    async def review_token(self, token: str, *, audiences: tuple[str, ...]) -> TokenReview:
        """TokenReview (authentication.k8s.io/v1) with `spec.audiences`."""
        ...

    async def review_access(self, user: UserInfo, request: AccessRequest) -> AccessReview:
        """SubjectAccessReview (authorization.k8s.io/v1) for the user's resource attributes."""
        ...

    async def pod_node(self, namespace: str, name: str) -> str | None:
        """A pod's `spec.nodeName`; None when the pod is gone or unscheduled."""
        ...


class AuditPort(Protocol):
    """What `sickbay audit` reads (read-only): every node, every pod (with `facts`: priority, tolerations,
    images), every Job."""

    async def list_nodes(self, *, label_selector: str | None = None) -> list[NodeState]: ...

    async def list_pods(
        self,
        *,
        node: str | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        facts: bool = False,
    ) -> list[PodState]: ...

    async def list_jobs(self, *, namespace: str | None = None) -> list[JobState]: ...


# (API group, resource, verb) for every call above: the ClusterRole/Role must grant exactly these.
CALLS: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        # the cluster view (app.kube.views): list once, then watch nodes and pods.
        ("", "nodes", "watch"),
        ("", "pods", "watch"),
        ("", "nodes", "patch"),
        ("", "nodes/status", "patch"),
        ("", "pods", "list"),
        ("", "pods", "delete"),
        ("", "pods", "patch"),
        ("", "pods/eviction", "create"),
        ("", "events", "create"),
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
        # pod_node: only the agents' pods, in Sickbay's namespace (a Role).
        ("", "pods", "get"),
        # create_job, get_job: verification Jobs, only in the policy's verification namespace (a Role).
        ("batch", "jobs", "create"),
        ("batch", "jobs", "get"),
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
        # list_jobs: the audit reads every Job's podFailurePolicy (AuditPort).
        ("batch", "jobs", "list"),
        # QueuePort: requeue a Kueue-managed job through its queue.
        ("kueue.x-k8s.io", "workloads", "list"),
        ("kueue.x-k8s.io", "workloads", "get"),
        ("kueue.x-k8s.io", "workloads", "patch"),
    }
)
