"""The disruption controller, run the way kube-controller-manager runs it: a little after the writes it watches.

Eviction trusts a PodDisruptionBudget's stored status, so that status must follow pod changes — but not
synchronously. The real controller (pkg/controller/disruption/disruption.go) sees pods and budgets through
informers and recomputes a budget from a work queue, so after an eviction the budget first shows only what
the eviction handler wrote itself (`disruptionsAllowed` minus one, the pod added to `disruptedPods`), and
`currentHealthy` drops when the controller has seen the pod go and synced. On a real cluster that lag is
the watch and queue latency, usually well under a second, with no bound anyone may rely on.

The simulator models it as `sync_delay_s`: a write queues its namespace, and a queued namespace is synced
once the delay has passed; writes made meanwhile join the queued sync, as the work queue coalesces a key.
A delay of 0, or no scheduler (a bare Registry), syncs inline. A status is written only when it changed,
which bumps the budget's resourceVersion exactly as a real status update does. Seed objects are synced at
once (`sync_now`): a seeded cluster stands for one whose controller has long caught up. Tests that need
the lagging state for certain set a long delay and `flush()` when the controller should catch up.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from app.sim.kubeapi import disruption
from app.sim.kubeapi.resources import (
    DEPLOYMENTS,
    PDBS,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    JsonObj,
    Ref,
    ResourceType,
)
from app.sim.kubeapi.store import Store

# Runs a callback after a delay; the server backs it with the event loop and cancels pending ones on stop.
Scheduler = Callable[[float, Callable[[], None]], None]

DISRUPTION_INPUTS = frozenset(
    {PODS.key(), PDBS.key(), REPLICASETS.key(), DEPLOYMENTS.key(), STATEFULSETS.key()}
)


class DisruptionController:
    """Keeps every budget's status in step with its pods, `sync_delay_s` after the writes that change them."""

    def __init__(self, store: Store, *, sync_delay_s: float = 0.0, schedule: Scheduler | None = None) -> None:
        if sync_delay_s < 0:
            raise ValueError(f"sync_delay_s must not be negative, got {sync_delay_s}")
        self.store = store
        self.sync_delay_s = sync_delay_s
        self._schedule = schedule
        self._queued: set[str] = set()

    def observe(self, rt: ResourceType, namespace: str) -> None:
        """A write to `rt` in `namespace` happened: queue the namespace's budgets for a sync."""
        if rt.key() not in DISRUPTION_INPUTS or not namespace:
            return
        if self.sync_delay_s <= 0 or self._schedule is None:
            sync_disruption_budgets(self.store, namespace)
            return
        if namespace in self._queued:
            return
        self._queued.add(namespace)

        def sync() -> None:
            self._queued.discard(namespace)
            sync_disruption_budgets(self.store, namespace)

        self._schedule(self.sync_delay_s, sync)

    def sync_now(self, rt: ResourceType, namespace: str) -> None:
        """Sync at once, whatever the delay (for objects loaded from a seed)."""
        if rt.key() in DISRUPTION_INPUTS and namespace:
            sync_disruption_budgets(self.store, namespace)

    def flush(self) -> None:
        """Run every queued sync now; their timers, when they fire, find nothing left to change."""
        for namespace in sorted(self._queued):
            self._queued.discard(namespace)
            sync_disruption_budgets(self.store, namespace)


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
