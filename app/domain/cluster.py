"""The cluster as decide sees it: nodes (taints, conditions, Sickbay's remediation state), pods and their
owners, and the one desired-state patch a node write applies. Standard library only (see `app.domain`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from app.domain.faults import Pairs, PodRef, lookup
from app.domain.workloads import PodFacts


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


class RemediationState(StrEnum):
    QUARANTINED = "quarantined"
    DRAINING = "draining"
    # The drain could not empty the node (an eviction failed for good, a budget or a stuck pod held it
    # past the deadline): quarantined, never handed off, until a later drain empties it or a human acts.
    DRAIN_FAILED = "drain-failed"
    REMEDIATING = "remediating"
    VERIFYING = "verifying"
    AT_RISK = "at-risk"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: datetime | None = None


@dataclass(frozen=True, slots=True)
class NodeState:
    """What decide needs to know about a node, read from its Node object."""

    name: str
    resource_version: str = ""
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    labels: Pairs = ()
    annotations: Pairs = ()
    conditions: tuple[Condition, ...] = ()
    gpu_capacity: int = 0
    gpu_allocatable: int = 0

    def label(self, key: str) -> str | None:
        return lookup(self.labels, key)

    def annotation(self, key: str) -> str | None:
        return lookup(self.annotations, key)

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)

    @property
    def state(self) -> RemediationState | None:
        raw = lookup(self.labels, "sickbay.io/state")
        try:
            return RemediationState(raw) if raw else None
        except ValueError:
            return None

    @property
    def managed(self) -> bool:
        return lookup(self.labels, "sickbay.io/managed") != "false"

    @property
    def owned_by_sickbay(self) -> bool:
        return lookup(self.annotations, "sickbay.io/owned-by") is not None


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    uid: str = ""
    controller: bool = False
    api_version: str = ""


@dataclass(frozen=True, slots=True)
class PodState:
    """What decide needs to know about a pod: where it runs, who owns it, what group it belongs to."""

    namespace: str
    name: str
    uid: str = ""
    node: str | None = None
    phase: str = "Running"
    labels: Pairs = ()
    annotations: Pairs = ()
    owners: tuple[OwnerRef, ...] = ()
    gpu_request: int = 0
    resource_version: str = ""
    # metadata.deletionTimestamp is set: the pod is Terminating (its grace period runs), not yet gone.
    deleting: bool = False
    # spec.terminationGracePeriodSeconds: how long the kubelet lets it stop once deleted (the API default).
    grace_period_s: int = 30
    # priority, tolerations, images: what the audit reads (`app.audit`); decide needs none of it.
    facts: PodFacts = PodFacts()  # noqa: RUF009 - frozen, so one shared default is safe

    @property
    def ref(self) -> PodRef:
        return PodRef(namespace=self.namespace, name=self.name)

    def label(self, key: str) -> str | None:
        return lookup(self.labels, key)

    @property
    def controller(self) -> OwnerRef | None:
        return next((o for o in self.owners if o.controller), self.owners[0] if self.owners else None)

    @property
    def is_daemonset(self) -> bool:
        return any(o.kind == "DaemonSet" for o in self.owners)

    @property
    def is_mirror(self) -> bool:
        return lookup(self.annotations, "kubernetes.io/config.mirror") is not None

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class NodePatch:
    """The desired change to one Node, applied in one write guarded by the read `resourceVersion`.

    `None` leaves a field alone; an empty string value in `labels`/`annotations` removes the key;
    `taints`, when given, is the whole new list (taints have no merge key, so Kubernetes replaces it).
    """

    node: str
    resource_version: str
    labels: Pairs = ()
    annotations: Pairs = ()
    taints: tuple[Taint, ...] | None = None
    unschedulable: bool | None = None

    @property
    def empty(self) -> bool:
        return not self.labels and not self.annotations and self.taints is None and self.unschedulable is None
