"""Kueue's `Workload` (kueue.x-k8s.io/v1beta1) as decide sees it: the object that owns a queued job's
admission and quota. Standard library only (see `app.domain`).

Only the fields Sickbay's requeue reads: `spec.active`, the conditions Kueue keeps (`QuotaReserved`,
`Admitted`, `Evicted` with its reason, `Requeued`), whether an admission is held and whether it carries a
topology assignment (topology-aware scheduling), and `status.unhealthyNodes` (the failed nodes Kueue's
TAS is replacing, since Kueue v0.14). Field reference: https://kueue.sigs.k8s.io/docs/reference/kueue.v1beta1/
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.cluster import Condition, OwnerRef

# The label Kueue reads the queue from, on a job (or a plain pod, or a pod template that inherits it).
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
# The label Kueue puts on each Workload: the UID of the job it was created for (pkg/controller/constants).
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
WORKLOAD_GROUP = "kueue.x-k8s.io"
WORKLOAD_VERSION = "v1beta1"
WORKLOAD_PLURAL = "workloads"
REQUEUED_FROM = "sickbay.io/requeued-from"  # annotation: the node (a label value could not hold every name)
REQUEUED = "sickbay.io/requeued"  # label, "true" while Sickbay holds it deactivated: a new leader lists them


@dataclass(frozen=True, slots=True)
class WorkloadState:
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    active: bool = True  # spec.active (defaults to true)
    queue_name: str = ""
    conditions: tuple[Condition, ...] = ()
    admitted_to: str = ""  # status.admission.clusterQueue; empty without an admission
    topology: bool = False  # a podSetAssignment carries a topologyAssignment (TAS)
    unhealthy_nodes: tuple[str, ...] = ()  # status.unhealthyNodes[].name
    # Sickbay's annotation `sickbay.io/requeued-from`: the node Sickbay deactivated it for (empty: it did
    # not), so an operator's own deactivation is never undone by Sickbay.
    requeued_from: str = ""
    owner: OwnerRef | None = None  # the job it was made for (its controller owner reference)

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)

    def is_true(self, kind: str) -> bool:
        found = self.condition(kind)
        return found is not None and found.status == "True"

    @property
    def holds_quota(self) -> bool:
        return self.is_true("QuotaReserved")

    @property
    def deactivated(self) -> bool:
        """Evicted because `spec.active` went false (reason `Deactivated`, or `InactiveWorkload` before
        Kueue v0.9), and still inactive."""
        evicted = self.condition("Evicted")
        return (
            not self.active
            and evicted is not None
            and evicted.status == "True"
            and evicted.reason in ("Deactivated", "InactiveWorkload")
        )
