"""Which pods a drain may move: one rule for the quarantine drain, the proactive drain and `act`'s drainer.

Pure; kept apart from `plans` so the proactive ladder can share it without importing the plans module.
"""

from __future__ import annotations

from app.config import rules
from app.domain import PodState


def drainable(pod: PodState, policy: rules.DrainPolicy, mode: rules.DrainMode | None = None) -> bool:
    """Pods that an eviction should move: never DaemonSet or mirror pods, nor finished ones; GPU pods only
    unless the drain mode is `all` (without a mode, as `gpu_pods_only` says)."""
    if pod.is_daemonset or pod.is_mirror or pod.terminal:
        return False
    if pod.namespace in policy.excluded_namespaces:
        return False
    every_pod = mode == "all" if mode is not None else not policy.gpu_pods_only
    return pod.gpu_request > 0 or every_pod


def running_workload(pod: PodState) -> bool:
    """A running GPU pod of a workload that could checkpoint (not a node agent, not a static pod)."""
    return pod.phase == "Running" and pod.gpu_request > 0 and not (pod.is_daemonset or pod.is_mirror)
