"""What an update stores, endpoint by endpoint: the PrepareForUpdate half of kube-apiserver's REST strategies.

The main endpoint writes everything but status and the server-owned metadata; a /status endpoint writes
status and, depending on the kind's status strategy, the request's metadata too. That last part is where
fakes go wrong: nodeStatusStrategy.PrepareForUpdate resets only the spec (pkg/registry/core/node/
strategy.go), so labels written through nodes/{name}/status stay. Pure functions over JSON objects; no
validation and no storage here (`registry.py` does both).
"""

from __future__ import annotations

import copy

from app.sim.kubeapi.resources import JsonObj, ResourceType

# Metadata only the server writes: a client's value is dropped on create and replaced on update.
SERVER_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")

# What a /status write takes from the stored object besides `spec` (which it always keeps) and the
# server-owned metadata, per kind: everything else in the request, labels and annotations included, is
# written. nodeStatusStrategy resets only Spec, as does podDisruptionBudgetStatusStrategy
# (pkg/registry/policy/poddisruptionbudget/strategy.go); podStatusStrategy also keeps the old
# ownerReferences and deletionTimestamp (pkg/registry/core/pod/strategy.go). Kinds not listed write status
# alone: metav1.ResetObjectMetaForStatus does exactly that for custom resources, and for the other
# built-in kinds it is the stricter assumption until someone checks their strategies.
STATUS_RESETS: dict[str, tuple[str, ...]] = {
    "Node": (),
    "Pod": ("ownerReferences",),
    "PodDisruptionBudget": (),
}


def keep_server_meta(new: JsonObj, cur_meta: JsonObj, *, extra: tuple[str, ...] = ()) -> JsonObj:
    """Put the stored object's server-owned metadata (and `extra` keys) back into `new`; returns its metadata."""
    meta: JsonObj = new.setdefault("metadata", {})
    for key in (*SERVER_META, "name", "namespace", *extra):
        if key in cur_meta:
            meta[key] = copy.deepcopy(cur_meta[key])
        else:
            meta.pop(key, None)
    meta["resourceVersion"] = cur_meta["resourceVersion"]
    return meta


def merge_for_status(rt: ResourceType, current: JsonObj, proposed: JsonObj) -> JsonObj:
    """What a /status write stores: the stored spec, and the request's status and (per kind) metadata."""
    resets = STATUS_RESETS.get(rt.kind) if rt.builtin else None
    if resets is None:
        new = copy.deepcopy(current)
    else:
        new = copy.deepcopy(proposed)
        keep_server_meta(new, current["metadata"], extra=resets)
        if "spec" in current:
            new["spec"] = copy.deepcopy(current["spec"])
        else:
            new.pop("spec", None)
    if proposed.get("status") is None:
        new.pop("status", None)
    else:
        new["status"] = copy.deepcopy(proposed["status"])
    return new


def merge_for_update(rt: ResourceType, current: JsonObj, proposed: JsonObj, *, status_only: bool) -> JsonObj:
    """The object an update stores: server-owned fields from `current`, the rest as the endpoint allows."""
    if status_only:
        return merge_for_status(rt, current, proposed)
    cur_meta = current["metadata"]
    new = copy.deepcopy(proposed)
    meta = keep_server_meta(new, cur_meta)
    if rt.has_status:
        if "status" in current:
            new["status"] = copy.deepcopy(current["status"])
        else:
            new.pop("status", None)
    if rt.has_generation and new.get("spec") != current.get("spec"):
        meta["generation"] = int(cur_meta.get("generation", 1)) + 1
    return new
