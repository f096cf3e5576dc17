"""The Job controller, for the Jobs created through the API (a seeded Job carries its status already).

What Sickbay's verification relies on, as Kubernetes' Job controller does it (pkg/controller/job/
job_controller.go; kubernetes.io/docs/concepts/workloads/controllers/job/): a created Job gets
`status.startTime` and one pod from its template (labelled `batch.kubernetes.io/job-name` and
`controller-uid`, owned by the Job, on the template's `nodeName`), counted in `status.active`. The pod
ends Succeeded or Failed; the Job then gets `SuccessCriteriaMet` and `Complete` (`status.succeeded`,
`completionTime`), or, with backoffLimit 0, `FailureTarget` and `Failed` with reason
`BackoffLimitExceeded` (`status.failed`). A Job still running at `activeDeadlineSeconds` after its start
fails with reason `DeadlineExceeded` and its pod is deleted. Conditions are written once, status True.

How each pod ends is the test's to say (`/_sim/job-outcomes`, see control.py): a queue of outcomes per
node (`succeed`, `fail`, or `hang`: runs until the deadline), consumed one per Job pinned to that node;
a node with none queued succeeds. A pod runs `run_s` seconds before it ends.
"""

from __future__ import annotations

import copy
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Literal

from app.sim.kubeapi.controllers import Scheduler
from app.sim.kubeapi.resources import JOBS, PODS, JsonObj, Ref
from app.sim.kubeapi.store import Store

Outcome = Literal["succeed", "fail", "hang"]
OUTCOMES: tuple[Outcome, ...] = ("succeed", "fail", "hang")
CreatePod = Callable[[JsonObj, str], JsonObj]


class JobController:
    def __init__(
        self, store: Store, *, create_pod: CreatePod, schedule: Scheduler | None, run_s: float = 0.2
    ) -> None:
        self.store = store
        self.run_s = run_s
        self._create_pod = create_pod
        self._schedule = schedule
        self.outcomes: dict[str, deque[Outcome]] = defaultdict(deque)

    def queue(self, node: str, outcome: Outcome) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
        self.outcomes[node].append(outcome)

    def clear(self) -> None:
        self.outcomes.clear()

    def created(self, job: JsonObj) -> None:
        """A Job was created through the API: start it, and end it as the queued outcome says."""
        meta = job["metadata"]
        ref = Ref(JOBS, namespace=meta["namespace"], name=meta["name"])
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        node = str((template.get("spec") or {}).get("nodeName") or "")
        queued = self.outcomes.get(node)
        outcome: Outcome = queued.popleft() if queued else "succeed"
        pod_meta = template.setdefault("metadata", {})
        pod_meta["labels"] = {
            **(pod_meta.get("labels") or {}),
            "batch.kubernetes.io/job-name": meta["name"],
            "job-name": meta["name"],
            "batch.kubernetes.io/controller-uid": meta["uid"],
            "controller-uid": meta["uid"],
        }
        pod_meta["generateName"] = f"{meta['name']}-"
        pod_meta["ownerReferences"] = [
            {
                "apiVersion": JOBS.api_version,
                "kind": JOBS.kind,
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        pod = self._create_pod({"apiVersion": "v1", "kind": "Pod", **template}, meta["namespace"])
        pod_ref = Ref(PODS, namespace=meta["namespace"], name=pod["metadata"]["name"])
        self._set_pod_phase(pod_ref, "Running")
        self._update(ref, lambda status: status.update(startTime=self.store.now(), active=1))
        deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")

        def finish() -> None:
            if outcome == "hang":
                return
            self._end(ref, pod_ref, succeeded=outcome == "succeed")

        def expire() -> None:
            self._end(ref, pod_ref, succeeded=False, deadline=True)

        if self._schedule is None:
            finish() if outcome != "hang" else expire()
            return
        self._schedule(self.run_s, finish)
        if isinstance(deadline, int) and deadline > 0:
            self._schedule(float(deadline), expire)

    def _end(self, ref: Ref, pod_ref: Ref, *, succeeded: bool, deadline: bool = False) -> None:
        job = self.store.get(ref)
        if job is None or _finished(job):
            return
        now = self.store.now()
        if deadline:
            # The controller deletes the active pods of a Job past its deadline.
            if self.store.get(pod_ref) is not None:
                self.store.remove(pod_ref)
            reason, message = "DeadlineExceeded", "Job was active longer than specified deadline"
        else:
            self._set_pod_phase(pod_ref, "Succeeded" if succeeded else "Failed")
            reason, message = (
                ("CompletionsReached", "Reached expected number of succeeded pods")
                if succeeded
                else ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
            )
        interim, final = ("SuccessCriteriaMet", "Complete") if succeeded else ("FailureTarget", "Failed")

        def ended(status: JsonObj) -> None:
            status["active"] = 0
            status["succeeded" if succeeded else "failed"] = 1
            if succeeded:
                status["completionTime"] = now
            status["conditions"] = [
                *(status.get("conditions") or []),
                *(_condition(kind, reason, message, now) for kind in (interim, final)),
            ]

        self._update(ref, ended)

    def _update(self, ref: Ref, change: Callable[[JsonObj], object]) -> None:
        current = self.store.get(ref)
        if current is None:
            return
        updated = copy.deepcopy(current)
        change(updated.setdefault("status", {}))
        self.store.put(JOBS, updated)

    def _set_pod_phase(self, ref: Ref, phase: str) -> None:
        current = self.store.get(ref)
        if current is None:
            return
        updated = copy.deepcopy(current)
        updated.setdefault("status", {})["phase"] = phase
        self.store.put(PODS, updated)


def _finished(job: JsonObj) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _condition(kind: str, reason: str, message: str, now: str) -> JsonObj:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }
