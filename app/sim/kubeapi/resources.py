"""The resource types the simulated API server serves, as data.

Discovery, routing, field selectors, status-subresource rules and Table printing all read this one catalog,
so adding a kind is one entry here rather than edits across the server. It must stay a description only: no
state, no behaviour beyond lookups.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

JsonObj = dict[str, Any]

# Verbs a resource answers, named as Kubernetes discovery names them.
READ_WRITE = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """One served resource: where it lives in the URL space and which generic rules apply to it."""

    group: str  # "" for the core group
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    has_status: bool = False  # a /status subresource exists, so the main endpoint ignores status writes
    has_generation: bool = False  # metadata.generation counts spec changes
    # Field labels accepted by fieldSelector besides metadata.name and metadata.namespace.
    field_labels: frozenset[str] = field(default_factory=frozenset)
    # Custom resources take no strategic merge patch, as in Kubernetes.
    builtin: bool = True
    verbs: tuple[str, ...] = READ_WRITE

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        return self.group_version

    @property
    def qualified(self) -> str:
        """The name Kubernetes puts in error messages: `pods`, `leases.coordination.k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def key(self) -> str:
        return f"{self.group}/{self.plural}"


_POD_FIELDS = frozenset(
    {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)
_EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)

NODES = ResourceType(
    group="",
    version="v1",
    plural="nodes",
    singular="node",
    kind="Node",
    namespaced=False,
    short_names=("no",),
    has_status=True,
    field_labels=frozenset({"spec.unschedulable"}),
)
PODS = ResourceType(
    group="",
    version="v1",
    plural="pods",
    singular="pod",
    kind="Pod",
    namespaced=True,
    short_names=("po",),
    categories=("all",),
    has_status=True,
    field_labels=_POD_FIELDS,
)
EVENTS = ResourceType(
    group="",
    version="v1",
    plural="events",
    singular="event",
    kind="Event",
    namespaced=True,
    short_names=("ev",),
    field_labels=_EVENT_FIELDS,
)
NAMESPACES = ResourceType(
    group="",
    version="v1",
    plural="namespaces",
    singular="namespace",
    kind="Namespace",
    namespaced=False,
    short_names=("ns",),
    has_status=True,
    field_labels=frozenset({"status.phase"}),
    verbs=("create", "delete", "get", "list", "patch", "update"),
)
PDBS = ResourceType(
    group="policy",
    version="v1",
    plural="poddisruptionbudgets",
    singular="poddisruptionbudget",
    kind="PodDisruptionBudget",
    namespaced=True,
    short_names=("pdb",),
    has_status=True,
    has_generation=True,
)
LEASES = ResourceType(
    group="coordination.k8s.io",
    version="v1",
    plural="leases",
    singular="lease",
    kind="Lease",
    namespaced=True,
)
DAEMONSETS = ResourceType(
    group="apps",
    version="v1",
    plural="daemonsets",
    singular="daemonset",
    kind="DaemonSet",
    namespaced=True,
    short_names=("ds",),
    categories=("all",),
    has_status=True,
    has_generation=True,
)
REPLICASETS = ResourceType(
    group="apps",
    version="v1",
    plural="replicasets",
    singular="replicaset",
    kind="ReplicaSet",
    namespaced=True,
    short_names=("rs",),
    categories=("all",),
    has_status=True,
    has_generation=True,
)
DEPLOYMENTS = ResourceType(
    group="apps",
    version="v1",
    plural="deployments",
    singular="deployment",
    kind="Deployment",
    namespaced=True,
    short_names=("deploy",),
    categories=("all",),
    has_status=True,
    has_generation=True,
)
STATEFULSETS = ResourceType(
    group="apps",
    version="v1",
    plural="statefulsets",
    singular="statefulset",
    kind="StatefulSet",
    namespaced=True,
    short_names=("sts",),
    categories=("all",),
    has_status=True,
    has_generation=True,
)
JOBS = ResourceType(
    group="batch",
    version="v1",
    plural="jobs",
    singular="job",
    kind="Job",
    namespaced=True,
    categories=("all",),
    has_status=True,
    has_generation=True,
)
JOBSETS = ResourceType(
    group="jobset.x-k8s.io",
    version="v1alpha2",
    plural="jobsets",
    singular="jobset",
    kind="JobSet",
    namespaced=True,
    has_status=True,
    has_generation=True,
    builtin=False,
)
# Kueue's admission unit (https://kueue.sigs.k8s.io/docs/reference/kueue.v1beta1/#kueue-x-k8s-io-v1beta1-Workload):
# spec.active switches it off and on; Kueue's own controller writes status (see `kueue.py`).
WORKLOADS = ResourceType(
    group="kueue.x-k8s.io",
    version="v1beta1",
    plural="workloads",
    singular="workload",
    kind="Workload",
    namespaced=True,
    short_names=("wl",),
    categories=("kueue",),
    has_status=True,
    has_generation=True,
    builtin=False,
)
# Create-only and never stored: the answer is the request with its status filled in (see reviews.py).
TOKENREVIEWS = ResourceType(
    group="authentication.k8s.io",
    version="v1",
    plural="tokenreviews",
    singular="tokenreview",
    kind="TokenReview",
    namespaced=False,
    verbs=("create",),
)
SUBJECTACCESSREVIEWS = ResourceType(
    group="authorization.k8s.io",
    version="v1",
    plural="subjectaccessreviews",
    singular="subjectaccessreview",
    kind="SubjectAccessReview",
    namespaced=False,
    verbs=("create",),
)
REVIEW_TYPES = frozenset({TOKENREVIEWS, SUBJECTACCESSREVIEWS})

ALL_TYPES: tuple[ResourceType, ...] = (
    NODES,
    PODS,
    EVENTS,
    NAMESPACES,
    PDBS,
    LEASES,
    DAEMONSETS,
    REPLICASETS,
    DEPLOYMENTS,
    STATEFULSETS,
    JOBS,
    JOBSETS,
    WORKLOADS,
    TOKENREVIEWS,
    SUBJECTACCESSREVIEWS,
)


@dataclass(frozen=True)
class Ref:
    """One object's address. `namespace` is ignored for cluster-scoped types."""

    rt: ResourceType
    _: KW_ONLY
    namespace: str = ""
    name: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace if self.rt.namespaced else "", self.name)


# Subresources beyond /status, listed in discovery as `pods/eviction` (kind Eviction from policy/v1).
EVICTION_SUBRESOURCE: JsonObj = {
    "name": "pods/eviction",
    "singularName": "",
    "namespaced": True,
    "group": "policy",
    "version": "v1",
    "kind": "Eviction",
    "verbs": ["create"],
}


class Catalog:
    """Lookups over a fixed set of resource types."""

    def __init__(self, types: Iterable[ResourceType] = ALL_TYPES) -> None:
        self._types = tuple(types)
        self._by_path = {(t.group, t.version, t.plural): t for t in self._types}
        self._by_kind = {(t.group, t.kind): t for t in self._types}

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(self._types)

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def for_api_version(self, api_version: str, kind: str) -> ResourceType | None:
        group = api_version.rpartition("/")[0] if "/" in api_version else ""
        return self._by_kind.get((group, kind))

    def group_versions(self) -> dict[str, list[str]]:
        """Non-core groups and their versions, in catalog order."""
        found: dict[str, list[str]] = {}
        for t in self._types:
            if t.group and t.version not in found.setdefault(t.group, []):
                found[t.group].append(t.version)
        return found

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [t for t in self._types if t.group == group and t.version == version]
