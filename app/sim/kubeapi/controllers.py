"""Controllers the simulator runs inline, right after the write that concerns them.

Only the disruption controller for now: eviction trusts a PodDisruptionBudget's stored status, so that
status must follow pod changes. It is recomputed synchronously (no lag, unlike kube-controller-manager) and
written only when it changed, which bumps the budget's resourceVersion exactly as a real status update does.
"""

from __future__ import annotations

import copy

from app.sim.kubeapi import disruption
from app.sim.kubeapi.resources import DEPLOYMENTS, PDBS, PODS, REPLICASETS, STATEFULSETS, JsonObj, Ref
from app.sim.kubeapi.store import Store

DISRUPTION_INPUTS = frozenset(
    {PODS.key(), PDBS.key(), REPLICASETS.key(), DEPLOYMENTS.key(), STATEFULSETS.key()}
)


def sync_disruption_budgets(store: Store, namespace: str) -> None:
    """Write what the disruption controller would, for every budget in the namespace."""
    budgets = store.items(PDBS, namespace=namespace)
    if not budgets:
        return
    members = store.items(PODS, namespace=namespace)
    now = store.clock()

    def scale_of(ref: JsonObj, ns: str) -> int | None:
        return controller_scale(store, ref, namespace=ns)

    for pdb in budgets:
        status = disruption.compute_status(pdb, members, scale_of=scale_of, now=now)
        if status != pdb.get("status"):
            updated = copy.deepcopy(pdb)
            updated["status"] = status
            store.put(PDBS, updated)


def controller_scale(store: Store, ref: JsonObj, *, namespace: str) -> int | None:
    """The disruption controller's scale finders: a ReplicaSet (or the Deployment owning it), a StatefulSet.

    Anything else — a Job, a JobSet, a DaemonSet — has no scale, and None makes the budget fail safe.
    """
    kinds = {"ReplicaSet": REPLICASETS, "StatefulSet": STATEFULSETS}
    rt = kinds.get(str(ref.get("kind")))
    owner = store.get(Ref(rt, namespace=namespace, name=str(ref.get("name")))) if rt else None
    if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
        return None
    parent = disruption.controller_of(owner)
    if rt is REPLICASETS and parent is not None and parent.get("kind") == "Deployment":
        deployment = store.get(Ref(DEPLOYMENTS, namespace=namespace, name=str(parent.get("name"))))
        if deployment is not None and deployment["metadata"].get("uid") == parent.get("uid"):
            return int((deployment.get("spec") or {}).get("replicas", 1))
    return int((owner.get("spec") or {}).get("replicas", 1))
