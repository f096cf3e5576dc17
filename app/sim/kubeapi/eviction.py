"""The pods/eviction subresource: a delete that asks the pod's PodDisruptionBudget first.

Follows kube-apiserver's EvictionREST: a missing pod is 404; a Pending, Succeeded or Failed pod, or one
already being deleted, is deleted without consulting any budget; more than one matching budget is a 500;
an unready pod may go without spending budget when the budget is otherwise met (or its
unhealthyPodEvictionPolicy is AlwaysAllow); otherwise `status.disruptionsAllowed` must be positive and is
decremented, with the pod recorded in `status.disruptedPods`, or the answer is 429 with a DisruptionBudget
cause. Before deleting, the pod gets the DisruptionTarget condition. The whole decision runs without
awaiting, so two concurrent evictions cannot both spend the last disruption.
"""

from __future__ import annotations

import copy
from typing import Any

from app.sim.kubeapi import deletion, disruption, errors, pods
from app.sim.kubeapi.registry import Registry
from app.sim.kubeapi.resources import PDBS, PODS, JsonObj, Ref

MAX_DISRUPTED_PODS = 2000
_BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
EVICTION_VERSIONS = ("policy/v1", "policy/v1beta1")


def _can_ignore_budget(pod: JsonObj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Pending", "Succeeded", "Failed") or bool(pod["metadata"].get("deletionTimestamp"))


def _budget_cause(message: str) -> JsonObj:
    return {"reason": "DisruptionBudget", "message": message}


def _parse_body(name: str, body: Any, *, dry_run: bool) -> tuple[JsonObj, bool]:
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request must be an Eviction object")
    if body.get("apiVersion") not in (None, *EVICTION_VERSIONS) or body.get("kind") not in (None, "Eviction"):
        raise errors.bad_request(f"not a Eviction object: {body.get('apiVersion')}/{body.get('kind')}")
    if (body.get("metadata") or {}).get("name") != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    options = copy.deepcopy(body.get("deleteOptions") or {})
    in_body = "All" in (options.get("dryRun") or [])
    return options, dry_run or in_body


def evict(registry: Registry, ref: Ref, *, body: Any, dry_run: bool = False) -> JsonObj:
    """Evict one pod or raise the ApiError kube-apiserver would answer with."""
    options, dry_run = _parse_body(ref.name, body, dry_run=dry_run)
    pod = registry.store.require(ref)
    # Preconditions are checked before any budget is spent, so a refused eviction writes nothing.
    deletion.check_preconditions(PODS, pod, preconditions=options.get("preconditions") or {})
    if _can_ignore_budget(pod):
        _mark_and_delete(registry, pod, options=options, dry_run=dry_run)
        return errors.success(201)
    budgets = [b for b in registry.store.items(PDBS, namespace=ref.namespace) if disruption.selects(b, pod)]
    if len(budgets) > 1:
        message = (
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        )
        raise errors.ApiError(500, "InternalError", message=message)
    if budgets and not _unready_pod_may_go(budgets[0], pod):
        _spend_disruption(registry, budgets[0], pod_name=ref.name, dry_run=dry_run)
    _mark_and_delete(registry, pod, options=options, dry_run=dry_run)
    return errors.success(201)


def _unready_pod_may_go(pdb: JsonObj, pod: JsonObj) -> bool:
    if disruption.is_pod_ready(pod):
        return False
    if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    status = pdb.get("status") or {}
    desired = int(status.get("desiredHealthy", 0))
    return desired > 0 and int(status.get("currentHealthy", 0)) >= desired


def _spend_disruption(registry: Registry, pdb: JsonObj, *, pod_name: str, dry_run: bool) -> None:
    status = pdb.get("status") or {}
    name = pdb["metadata"]["name"]
    if int(status.get("observedGeneration", 0)) < int(pdb["metadata"].get("generation", 1)):
        raise errors.too_many_requests(
            _BUDGET_MESSAGE,
            retry_after_s=10,
            causes=[_budget_cause(f"The disruption budget {name} is still being processed by the server.")],
        )
    allowed = int(status.get("disruptionsAllowed", 0))
    if allowed < 0:
        raise errors.forbidden(PDBS, name, why="pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        why = "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
        raise errors.forbidden(PDBS, name, why=why)
    if allowed == 0:
        needs = f"needs {status.get('desiredHealthy', 0)} healthy pods and has {status.get('currentHealthy', 0)} currently"
        raise errors.too_many_requests(
            _BUDGET_MESSAGE, causes=[_budget_cause(f"The disruption budget {name} {needs}")]
        )
    if dry_run:
        return
    updated = copy.deepcopy(pdb)
    new_status = updated.setdefault("status", {})
    new_status["disruptionsAllowed"] = allowed - 1
    new_status.setdefault("disruptedPods", {})[pod_name] = registry.store.now()
    if allowed - 1 == 0:
        for condition in new_status.get("conditions") or []:
            if condition.get("type") == "DisruptionAllowed":
                condition.update(
                    status="False", reason="InsufficientPods", lastTransitionTime=registry.store.now()
                )
    registry.store.put(PDBS, updated)


_DISRUPTION_TARGET = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "EvictionByEvictionAPI",
    "message": "Eviction API: evicting",
}


def _mark_and_delete(registry: Registry, pod: JsonObj, *, options: JsonObj, dry_run: bool) -> None:
    """Stamp DisruptionTarget on the pod's status, then delete it honouring the client's DeleteOptions."""
    meta = pod["metadata"]
    ref = Ref(PODS, namespace=meta["namespace"], name=meta["name"])
    if dry_run:
        registry.delete(ref, options=options, dry_run=True)
        return
    marked = copy.deepcopy(pod)
    pods.set_condition(marked.setdefault("status", {}), dict(_DISRUPTION_TARGET), now=registry.store.now())
    stored = registry.store.put(PODS, marked) if marked != pod else pod
    preconditions = options.get("preconditions") or {}
    if preconditions.get("resourceVersion"):
        # The condition write was ours, so the caller's precondition carries over to the new version.
        new_rv = stored["metadata"]["resourceVersion"]
        options = {**options, "preconditions": {**preconditions, "resourceVersion": new_rv}}
    registry.delete(ref, options=options)
