"""What kube-apiserver fills into a new Pod, and the pod-status helpers the eviction path shares.

A pod created through the API starts Pending with a QoS class and the defaulted fields a real server adds
(restart policy, scheduler, grace period, the not-ready/unreachable tolerations of the
DefaultTolerationSeconds admission plugin). The simulator has no scheduler or kubelet: a test moves a pod
to Running by writing its status through /status, exactly as it would have to against a real API server.
"""

from __future__ import annotations

from app.sim.kubeapi.resources import JsonObj

_DEFAULT_TOLERATIONS = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)


def qos_class(spec: JsonObj) -> str:
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    requests = [(c.get("resources") or {}).get("requests") or {} for c in containers]
    limits = [(c.get("resources") or {}).get("limits") or {} for c in containers]
    if not any(requests) and not any(limits):
        return "BestEffort"
    for request, limit in zip(requests, limits, strict=True):
        for resource in ("cpu", "memory"):
            if resource not in limit or request.get(resource, limit[resource]) != limit[resource]:
                return "Burstable"
    return "Guaranteed"


def default_pod(pod: JsonObj) -> None:
    """Apply create-time defaults in place and reset the status to a fresh Pending one."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("priority", 0)
    tolerations = spec.setdefault("tolerations", [])
    for default in _DEFAULT_TOLERATIONS:
        if not any(t.get("key") == default["key"] and t.get("effect") == "NoExecute" for t in tolerations):
            tolerations.append(dict(default))
    for container in spec.get("containers") or []:
        image = str(container.get("image", ""))
        pinned = ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")
        container.setdefault("imagePullPolicy", "IfNotPresent" if pinned or "@" in image else "Always")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def set_condition(status: JsonObj, condition: JsonObj, *, now: str) -> None:
    """Add or replace a pod condition; the transition time moves only when the status flips."""
    conditions = status.setdefault("conditions", [])
    for index, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            changed = existing.get("status") != condition["status"]
            merged = {**existing, **condition}
            merged["lastTransitionTime"] = now if changed else existing.get("lastTransitionTime", now)
            conditions[index] = merged
            return
    conditions.append({**condition, "lastProbeTime": None, "lastTransitionTime": now})
