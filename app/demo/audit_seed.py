"""The demo cluster for `sickbay audit`: its Jobs follow the advice, and `plant` adds one of each problem.

`FAILURE_POLICY` is the pod failure policy of every demo Job, as the Kubernetes Job docs advise ("Handling
retriable and non-retriable pod failures with Pod failure policy", kubernetes.io/docs/concepts/workloads/
controllers/job/#pod-failure-policy): a disruption (a drain's eviction, a preemption) is ignored rather
than counted against `backoffLimit`, and so is the exit code the workloads use for a device error (75,
EX_TEMPFAIL in sysexits.h: "temporary failure, retry"), so the Job's pod is recreated, on another node once
Sickbay has tainted this one. `plant` adds, on nodes of their own, exactly one object per kind of finding
(`PLANTED`), so an audit of the planted cluster can be checked for exactly those findings.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from app.sim.kubeapi import builders
from app.sim.kubeapi.resources import JOBS, PODS

DEVICE_ERROR_EXIT_CODE = 75
FAILURE_POLICY: dict[str, Any] = {
    "rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [DEVICE_ERROR_EXIT_CODE]}},
    ]
}
NAMESPACE = "audit-demo"
POOL = "audit"
# kind of finding (app.audit.checks.Kind values) → the object it names.
PLANTED: dict[str, str] = {
    "non-gpu-pod-on-gpu-node": f"Pod {NAMESPACE}/log-shipper",
    "low-priority-pod-on-gpu-node": f"Pod {NAMESPACE}/preemptible-notebook",
    "job-without-disruption-rule": f"Job {NAMESPACE}/eval-no-disruption-rule",
    "job-without-exit-code-rule": f"Job {NAMESPACE}/eval-no-exit-codes",
    "pod-without-readiness-toleration": f"Pod {NAMESPACE}/trainer-no-window",
    "pod-short-grace-period": f"Pod {NAMESPACE}/trainer-short-grace",
    "gpu-allocatable-below-capacity": "Node audit-short",
    "node-version-drift": "Node audit-2",
    "dcgm-field-not-exported": "Metric DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "node-owned-by-sickbay": "Node audit-owned",
    "node-cordoned-by-hand": "Node audit-cordoned",
}
# The field the demo's "fleet" does not export (a Prometheus stand-in serves every other one).
UNEXPORTED_FIELD = "DCGM_FI_DEV_ROW_REMAP_FAILURE"


def _gfd(driver: str) -> dict[str, str]:
    """Labels as NVIDIA GPU feature discovery writes them (k8s-device-plugin docs/gpu-feature-discovery)."""
    major, minor, rev = driver.split(".")
    return {
        "sickbay.io/pool": POOL,
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
    }


def plant(document: dict[str, Any], *, now: datetime) -> dict[str, Any]:
    """`document` (a `cluster_seed`) with one of each problem added; the original is left as it was."""
    out = copy.deepcopy(document)
    stamp = now.isoformat()
    nodes = out.setdefault("nodes", [])
    nodes += [{"name": f"audit-{i}", "gpus": 8, "labels": _gfd("550.90.07")} for i in range(2)]
    nodes.append({"name": "audit-2", "gpus": 8, "labels": _gfd("535.161.08")})  # the drifted driver
    nodes.append({"name": "audit-cordoned", "gpus": 8, "unschedulable": True})
    owned_since = (now - timedelta(hours=2)).isoformat()
    nodes.append(
        {
            "name": "audit-owned",
            "gpus": 8,
            "unschedulable": True,
            "labels": {"sickbay.io/state": "quarantined"},
            "annotations": {"sickbay.io/owned-by": "sickbay", "sickbay.io/since": owned_since},
            "taints": [{"key": "sickbay.io/unhealthy", "value": "true", "effect": "NoSchedule"}],
        }
    )
    short = builders.gpu_node("audit-short", index=250, uid="audit-short", now=stamp, gpus=8)
    # The device plugin advertises only healthy devices: one marked unhealthy leaves 7 of 8 allocatable.
    short["status"]["allocatable"][builders.GPU_RESOURCE] = "7"
    objects = out.setdefault("objects", [])
    objects.append(short)
    pods = out.setdefault("pods", [])
    pods.append({"name": "log-shipper", "namespace": NAMESPACE, "node": "audit-0", "gpus": 0})
    objects += [
        _pod("preemptible-notebook", stamp, priority=-100, priority_class="preemptible"),
        _pod("trainer-no-window", stamp, tolerations=False),
        _pod("trainer-short-grace", stamp, grace_s=5),
        _job("eval-no-disruption-rule", [FAILURE_POLICY["rules"][1]]),
        _job("eval-no-exit-codes", [FAILURE_POLICY["rules"][0]]),
    ]
    out["namespaces"] = [*out.get("namespaces", []), NAMESPACE]
    return out


def _pod(
    name: str,
    now: str,
    *,
    priority: int = 0,
    priority_class: str = "",
    tolerations: bool = True,
    grace_s: int = 30,
) -> dict[str, Any]:
    pod = builders.pod(name, NAMESPACE, uid=f"audit-{name}", now=now, node="audit-1", gpus=1)
    pod["apiVersion"], pod["kind"] = PODS.api_version, PODS.kind
    spec = pod["spec"]
    spec["priority"] = priority
    if priority_class:
        spec["priorityClassName"] = priority_class
    if not tolerations:  # only the GPU toleration: NotReady/unreachable evict it at once
        spec["tolerations"] = [t for t in spec["tolerations"] if t["key"] == builders.GPU_RESOURCE]
    spec["terminationGracePeriodSeconds"] = grace_s
    return pod


def _job(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    template = builders.pod_template({"job-name": name}, gpus=1, restart_policy="Never")
    return {
        "apiVersion": JOBS.api_version,
        "kind": JOBS.kind,
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"audit-job-{name}"},
        "spec": {"template": template, "podFailurePolicy": {"rules": rules}},
        "status": {"active": 1},
    }
