"""Deleting as kube-apiserver's generic store does it: DeleteOptions preconditions, a pod's grace period
(and shortening it), and the Status a delete answers with.

Pure functions over the stored object and the request; the registry (`registry.Registry`) writes the
result and runs the simulated kubelet's confirmation.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from app.sim.kubeapi import errors
from app.sim.kubeapi.resources import PODS, JsonObj, ResourceType
from app.sim.kubeapi.store import format_time, parse_time


def check_preconditions(rt: ResourceType, current: JsonObj, *, preconditions: JsonObj) -> None:
    """A stale UID or resourceVersion in DeleteOptions is 409 Conflict, worded as rest.BeforeDelete words it.

    kube-apiserver checks them in k8s.io/apiserver/pkg/registry/rest/delete.go (BeforeDelete) before it
    touches storage, and EvictionREST's addConditionAndDeletePod repeats the same text. The storage
    layer's own "Precondition failed: UID in precondition: …" (storage.Preconditions.Check) is reached
    only when the object changes between that check and the delete, which cannot happen here.
    """
    meta = current["metadata"]
    if preconditions.get("uid") and preconditions["uid"] != meta["uid"]:
        why = (
            f"the UID in the precondition ({preconditions['uid']}) does not match the UID in record "
            f"({meta['uid']}). The object might have been deleted and then recreated"
        )
        raise errors.conflict(rt, meta["name"], why=why, by_kind=True)
    if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta["resourceVersion"]:
        why = (
            f"the ResourceVersion in the precondition ({preconditions['resourceVersion']}) does not match "
            f"the ResourceVersion in record ({meta['resourceVersion']}). The object might have been modified"
        )
        raise errors.conflict(rt, meta["name"], why=why, by_kind=True)


def grace_seconds(rt: ResourceType, current: JsonObj, *, options: JsonObj, kubelet: bool) -> int | None:
    """The grace period this delete leaves a pod; 0 deletes now; None: a longer one is already pending.

    podStrategy.CheckGracefulDelete (pkg/registry/core/pod/strategy.go): the request's
    `gracePeriodSeconds`, else the pod's `terminationGracePeriodSeconds`; 0 for a pod not bound to a
    node or already Succeeded/Failed (no kubelet has anything to stop); a negative value becomes 1.
    Without a kubelet (`kubelet` False: no grace scale or no scheduler) every pod goes at once.
    """
    if rt is not PODS or not kubelet:
        return 0
    meta = current["metadata"]
    requested = options.get("gracePeriodSeconds")
    if meta.get("deletionTimestamp"):
        pending = meta.get("deletionGracePeriodSeconds")
        if not pending:  # nothing left to wait for: finish the deletion (store.go's recovery path)
            return 0
        if requested is None or int(requested) >= int(pending):
            return None
        return max(0, int(requested))
    spec = current.get("spec") or {}
    if requested is None:
        requested = spec.get("terminationGracePeriodSeconds", 0)
    if not spec.get("nodeName") or (current.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return 0
    period = int(requested)
    return 1 if period < 0 else period


def mark_terminating(pod: JsonObj, *, grace: int, now: datetime) -> int:
    """Stamp (or shorten) a graceful deletion; returns the grace period it got.

    `deletionTimestamp` is when the kubelet must be done. Shortening moves it back by the difference but
    never into the past: past it, a nonzero grace period becomes 1 s (rest/delete.go, BeforeDelete).
    """
    meta = pod["metadata"]
    deadline = now + timedelta(seconds=grace)
    if meta.get("deletionTimestamp"):
        requested_at = parse_time(meta["deletionTimestamp"]) - timedelta(
            seconds=int(meta["deletionGracePeriodSeconds"])
        )
        deadline = requested_at + timedelta(seconds=grace)
        if deadline < now:
            deadline, grace = now, 1
    meta["deletionTimestamp"] = format_time(deadline)
    meta["deletionGracePeriodSeconds"] = grace
    return grace


def grace_pending(current: JsonObj) -> bool:
    return current.get("kind") == "Pod" and bool(current["metadata"].get("deletionGracePeriodSeconds"))


def deleted_status(rt: ResourceType, obj: JsonObj) -> JsonObj:
    details: JsonObj = {"name": obj["metadata"]["name"]}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    details["uid"] = obj["metadata"]["uid"]
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
