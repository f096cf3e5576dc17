"""A small stand-in for Kueue's workload controller and job integration: what Sickbay's requeue relies on.

Transitions, as Kueue documents and implements them (https://kueue.sigs.k8s.io/docs/concepts/workload/,
API reference https://kueue.sigs.k8s.io/docs/reference/kueue.v1beta1/, pkg/controller/core/
workload_controller.go and pkg/controller/jobframework/reconciler.go):

- A Workload created without status is admitted at once (the simulator has unlimited quota): conditions
  `QuotaReserved` and `Admitted` True, `status.admission.clusterQueue` set.
- `spec.active: false` on an admitted Workload: `Evicted` True with reason `Deactivated`, `Admitted`
  False; the job integration stops the job, which deletes its pods (found by owner UID or by the
  job-UID labels the Job and JobSet controllers put on them). Only once none is left does the quota go:
  `QuotaReserved` False and the admission cleared ("Kueue keeps the quota of an evicted Workload until its
  integration releases it").
- `spec.active: true` again: `Requeued` True with reason `Reactivated` (kueue PR #2063), `Evicted` False,
  then admitted again and the job's pods recreated, each under a new name and UID, on a Ready node that
  is schedulable and carries no NoSchedule or NoExecute taint the pod does not tolerate (the
  kube-scheduler's NodeUnschedulable and TaintToleration filters).

It runs after the write it reacts to (the scheduler of the server, at delay 0), as a controller does,
or inline on a bare Registry. It writes the store directly, as a controller's status update would.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from app.sim.kubeapi.resources import NODES, PODS, WORKLOADS, JsonObj, Ref, ResourceType
from app.sim.kubeapi.store import Store

Scheduler = Callable[[float, Callable[[], None]], None]
DeletePod = Callable[[Ref], object]
JOB_UID = "kueue.x-k8s.io/job-uid"
# Labels the Job and JobSet controllers put on their pods, naming the owning job's UID.
POD_JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid", "jobset.sigs.k8s.io/jobset-uid")
CLUSTER_QUEUE = "cluster-queue"
QUEUE_NAME = "kueue.x-k8s.io/queue-name"


def workload_for(job: JsonObj, *, queue: str, uid: str, now: str) -> JsonObj:
    """The Workload Kueue's job integration creates for a queued job: named after it, labelled with its UID,
    owned by it (pkg/controller/jobframework: GetWorkloadNameForOwnerWithGVK, JobUIDLabel)."""
    meta = job["metadata"]
    return {
        "apiVersion": WORKLOADS.api_version,
        "kind": WORKLOADS.kind,
        "metadata": {
            "name": f"{job['kind'].lower()}-{meta['name']}-{uid[:5]}",
            "namespace": meta["namespace"],
            "uid": uid,
            "creationTimestamp": now,
            "labels": {JOB_UID: meta["uid"]},
            "ownerReferences": [
                {
                    "apiVersion": job["apiVersion"],
                    "kind": job["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"active": True, "queueName": queue, "podSets": [{"name": "main", "count": 1}]},
    }


class KueueController:
    def __init__(self, store: Store, *, delete_pod: DeletePod, schedule: Scheduler | None = None) -> None:
        self.store = store
        self._delete_pod = delete_pod
        self._schedule = schedule
        self._queued: set[str] = set()
        self._running = False
        # The pods an admitted job last ran, by Workload UID: what the job wants running. A deactivation
        # stops them, and a re-admission recreates them elsewhere, even those evicted meanwhile (a real Job
        # controller would have replaced those; the simulator has none).
        self._known: dict[str, list[JsonObj]] = {}

    def sync_now(self, rt: ResourceType, namespace: str) -> None:
        """A seed object was loaded: sync at once, as for a cluster whose controller has long caught up."""
        if self._watches(rt, namespace):
            self.sync(namespace)

    def _watches(self, rt: ResourceType, namespace: str) -> bool:
        if rt not in (WORKLOADS, PODS) or not namespace:
            return False
        return rt is WORKLOADS or bool(self.store.items(WORKLOADS, namespace=namespace))

    def observe(self, rt: ResourceType, namespace: str) -> None:
        if not self._watches(rt, namespace):
            return
        if self._schedule is None:
            self._queued.add(namespace)
            if not self._running:
                self._drain()
            return
        if namespace in self._queued:
            return
        self._queued.add(namespace)
        self._schedule(0.0, self._drain)

    def _drain(self) -> None:
        self._running = True
        try:
            while self._queued:
                self.sync(self._queued.pop())
        finally:
            self._running = False

    def sync(self, namespace: str) -> None:
        for workload in self.store.items(WORKLOADS, namespace=namespace):
            self._sync_one(copy.deepcopy(workload))

    def _sync_one(self, wl: JsonObj) -> None:
        status = wl.setdefault("status", {})
        conditions: list[JsonObj] = status.setdefault("conditions", [])
        active = (wl.get("spec") or {}).get("active") is not False
        uid = str(wl["metadata"].get("uid") or "")
        evicted = _find(conditions, "Evicted")
        deactivated = (
            evicted is not None and evicted["status"] == "True" and evicted["reason"] == "Deactivated"
        )
        before = copy.deepcopy(status)
        running = [p for p in self._job_pods(wl) if not p["metadata"].get("deletionTimestamp")]
        if active and _is_true(conditions, "Admitted") and running:
            self._known[uid] = [copy.deepcopy(p) for p in running]
        if not active:
            if not deactivated and _is_true(conditions, "QuotaReserved"):
                self._set(conditions, "Evicted", "True", "Deactivated", "The workload is deactivated")
                self._set(conditions, "Admitted", "False", "NoReservation", "The workload has no reservation")
                self._set(conditions, "Requeued", "False", "Deactivated", "The workload is deactivated")
                self._stop_pods(wl, uid)
            if _is_true(conditions, "QuotaReserved") and not self._job_pods(wl):
                self._set(conditions, "QuotaReserved", "False", "Pending", "The workload is deactivated")
                status.pop("admission", None)
        elif deactivated or not conditions:
            if deactivated:
                self._set(conditions, "Requeued", "True", "Reactivated", "The workload was reactivated")
                self._set(conditions, "Evicted", "False", "Reactivated", "The workload was reactivated")
            queue = CLUSTER_QUEUE
            status["admission"] = {"clusterQueue": queue, "podSetAssignments": [{"name": "main", "count": 1}]}
            self._set(conditions, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in {queue}")
            self._set(conditions, "Admitted", "True", "Admitted", "The workload is admitted")
            self._restart_pods(uid)
        if status != before:
            self.store.put(WORKLOADS, wl)

    def _job_pods(self, wl: JsonObj) -> list[JsonObj]:
        job_uid = str((wl["metadata"].get("labels") or {}).get(JOB_UID) or "")
        if not job_uid:
            return []
        return [
            p
            for p in self.store.items(PODS, namespace=wl["metadata"]["namespace"])
            if any(o.get("uid") == job_uid for o in p["metadata"].get("ownerReferences") or [])
            or any((p["metadata"].get("labels") or {}).get(k) == job_uid for k in POD_JOB_UID_LABELS)
        ]

    def _stop_pods(self, wl: JsonObj, uid: str) -> None:
        for pod in self._job_pods(wl):
            meta = pod["metadata"]
            if not meta.get("deletionTimestamp"):
                self._delete_pod(Ref(PODS, namespace=meta["namespace"], name=meta["name"]))

    def _restart_pods(self, uid: str) -> None:
        for old in self._known.pop(uid, []):
            pod = copy.deepcopy(old)
            meta = pod["metadata"]
            base = meta["name"].rsplit("-", 1)[0] if "-" in meta["name"] else meta["name"]
            meta["name"] = f"{base}-{self.store.random_suffix()}"
            meta["uid"] = self.store.new_uid()
            meta["creationTimestamp"] = self.store.now()
            for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
                meta.pop(key, None)
            spec = pod.setdefault("spec", {})
            node = self._schedulable_node(spec.get("tolerations") or [])
            if node is None:
                spec.pop("nodeName", None)
                pod["status"] = {"phase": "Pending"}
            else:
                spec["nodeName"] = node
                pod["status"] = {
                    **(old.get("status") or {}),
                    "phase": "Running",
                    "startTime": self.store.now(),
                }
            self.store.put(PODS, pod)

    def _schedulable_node(self, tolerations: list[JsonObj]) -> str | None:
        for node in self.store.items(NODES):
            spec = node.get("spec") or {}
            conditions = (node.get("status") or {}).get("conditions") or []
            ready = all(c.get("status") == "True" for c in conditions if c.get("type") == "Ready")
            blocked = any(
                t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(t, tolerations)
                for t in spec.get("taints") or []
            )
            if ready and not spec.get("unschedulable") and not blocked:
                return str(node["metadata"]["name"])
        return None

    def _set(self, conditions: list[JsonObj], kind: str, status: str, reason: str, message: str) -> None:
        found = _find(conditions, kind)
        if found is not None and found["status"] == status and found["reason"] == reason:
            return
        entry = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": self.store.now(),
        }
        if found is None:
            conditions.append(entry)
        else:
            found.clear()
            found.update(entry)


def _tolerated(taint: JsonObj, tolerations: list[JsonObj]) -> bool:
    """The scheduler's TaintToleration match (k8s.io/api/core/v1 Toleration.ToleratesTaint)."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _find(conditions: list[JsonObj], kind: str) -> JsonObj | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def _is_true(conditions: list[JsonObj], kind: str) -> bool:
    found = _find(conditions, kind)
    return found is not None and found.get("status") == "True"
