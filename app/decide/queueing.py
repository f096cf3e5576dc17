"""Requeue through the job's own queue: which path a pod's job takes, and the next step of a Kueue requeue.

Why Kueue's deactivation, not an eviction of the pods: a Kueue-admitted Job whose pod is deleted is still
admitted, so the Job controller recreates the pod under the same admission (and, with topology-aware
scheduling, the same assignment), while the quota stays counted. Setting the Workload's `spec.active` to
false is Kueue's documented way to stop a job: the workload controller evicts it with reason `Deactivated`
(pkg/controller/core/workload_controller.go: `WorkloadDeactivated`), the job integration suspends the job,
which deletes its pods, and the quota is released once they are gone ("the integration releases it").
Setting `spec.active` back to true requeues it (the workload controller turns `Requeued` from False with
reason `Deactivated` to True with reason `Reactivated`: `kueue.WorkloadReactivated`, same file; PR #2063)
so it goes through admission again, and the scheduler keeps it off the quarantined node by Sickbay's
NoSchedule taint. Docs: https://kueue.sigs.k8s.io/docs/concepts/workload/#active and
https://kueue.sigs.k8s.io/docs/reference/kueue.v1beta1/#kueue-x-k8s-io-v1beta1-WorkloadSpec.

Topology-aware scheduling replaces a failed node itself: since Kueue v0.14 it lists it in the Workload's
`status.unhealthyNodes` (before: the `alpha.kueue.x-k8s.io/node-to-replace` annotation; KEP-2724 "node
failure handling", feature gates TASFailedNodeReplacement and TASReplaceNodeOnNodeTaints, the latter
reacting to an untolerated NoSchedule taint such as Sickbay's) and finds a replacement in the same domain,
evicting the workload only when it finds none. Deactivating would throw that placement away, so once Kueue
has listed the node Sickbay leaves the workload to it.

Pure: act reads the Workload and asks `next_step` what to write.
"""

from __future__ import annotations

from typing import Literal

from app.domain import QUEUE_NAME_LABEL, OwnerRef, PodState, WorkloadState

# Where a pod's job goes back through admission: its Kueue queue, its JobSet's own restart policy (not yet
# used: handled as plain), or plain eviction/gang restart by Sickbay.
Path = Literal["kueue", "jobset", "plain"]
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"  # JobSet labels its Jobs' pods with its own UID
KUEUE_ANNOTATION = QUEUE_NAME_LABEL  # older jobs name their queue in an annotation of the same key

Step = Literal["deactivate", "wait", "reactivate", "leave-to-kueue", "not-ours", "finished"]


def queued_job(pod: PodState) -> OwnerRef | None:
    """The job Kueue made the pod's Workload for: a JobSet's pods belong to the JobSet's Workload (Kueue
    admits the JobSet, not its child Jobs), anything else to the pod's controller. None when unknown."""
    jobset, jobset_uid = pod.label(JOBSET_LABEL), pod.label(JOBSET_UID_LABEL)
    if jobset and jobset_uid:
        return OwnerRef(kind="JobSet", name=jobset, uid=jobset_uid, api_version="jobset.x-k8s.io/v1alpha2")
    owner = pod.controller
    return owner if owner is not None and owner.uid else None


def requeue_path(pod: PodState) -> Path:
    """Kueue when the pod names a queue and its job (whose UID finds the Workload) is known."""
    if queue_of(pod) and queued_job(pod) is not None:
        return "kueue"
    if pod.label(JOBSET_LABEL):
        return "jobset"
    return "plain"


def queue_of(pod: PodState) -> str:
    return pod.label(QUEUE_NAME_LABEL) or dict(pod.annotations).get(KUEUE_ANNOTATION) or ""


def next_step(workload: WorkloadState, *, node: str) -> Step:
    """What to write next to requeue `workload` off `node`, given how Kueue has moved it so far."""
    if workload.is_true("Finished"):
        return "finished"
    if workload.active:
        if workload.topology and node in workload.unhealthy_nodes:
            return "leave-to-kueue"
        return "deactivate"
    if not workload.requeued_from:
        return "not-ours"  # an operator (or a retention policy) deactivated it: never undone here
    if workload.deactivated and not workload.holds_quota:
        return "reactivate"
    return "wait"  # Kueue has not evicted it yet, or the integration still holds its quota


def explain(step: Step, workload: WorkloadState, *, node: str) -> str:
    """One line for the outcome and the Event."""
    name = f"{workload.namespace}/{workload.name}"
    match step:
        case "finished":
            return f"workload {name} has finished: nothing to requeue"
        case "leave-to-kueue":
            return f"Kueue's topology-aware scheduling is replacing {node} for {name}: left to Kueue"
        case "deactivate":
            return f"deactivate workload {name} so Kueue evicts it and releases its quota"
        case "not-ours":
            return f"workload {name} was deactivated by someone else: left inactive"
        case "reactivate":
            return f"reactivate workload {name}: it goes back through its queue's admission, off {node}"
        case "wait":
            return f"workload {name} still holds its quota: waiting for Kueue to release it"
