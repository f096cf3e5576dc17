"""The audit's checks: pure functions from a snapshot of the cluster to findings naming the offenders.

No I/O and no clock (the snapshot carries `now`). Each check follows the Kubernetes guidance on GPU
failures; where a rule comes from a Kubernetes or NVIDIA document, the comment cites it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from app.domain import JobState, NodeState, PodState

GPU_RESOURCE = "nvidia.com/gpu"
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
# The built-in classes system-cluster-critical (2000000000) and system-node-critical (2000001000): anything
# at or above is what the cluster itself needs on every node (kube-proxy, CNI, CSI), never a finding.
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
SYSTEM_NAMESPACES = frozenset({"kube-system"})
# Labels NVIDIA GPU feature discovery writes (NVIDIA/k8s-device-plugin docs/gpu-feature-discovery/README.md,
# "Generated Labels"): the driver's version as major.minor.rev and the CUDA version as major.minor.
DRIVER_LABELS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
CUDA_LABELS = ("nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor")
# GFD labels no device-plugin version: the image of the device plugin's pod on the node says it.
DEVICE_PLUGIN_IMAGE = "k8s-device-plugin"
# Sickbay's marks (app/decide/footprint.py): the owner annotation and since when it holds the node.
OWNED_BY = "sickbay.io/owned-by"
SINCE = "sickbay.io/since"
STATE = "sickbay.io/state"


class Kind(StrEnum):
    """The kinds of finding: a bounded set, so a metric may carry it as a label."""

    NON_GPU_POD = "non-gpu-pod-on-gpu-node"
    LOW_PRIORITY_POD = "low-priority-pod-on-gpu-node"
    JOB_NO_DISRUPTION_RULE = "job-without-disruption-rule"
    JOB_NO_EXIT_CODE_RULE = "job-without-exit-code-rule"
    POD_NO_READINESS_TOLERATION = "pod-without-readiness-toleration"
    POD_SHORT_GRACE = "pod-short-grace-period"
    ALLOCATABLE_SHORT = "gpu-allocatable-below-capacity"
    VERSION_DRIFT = "node-version-drift"
    DCGM_FIELD_MISSING = "dcgm-field-not-exported"
    SICKBAY_OWNED = "node-owned-by-sickbay"
    HAND_CORDONED = "node-cordoned-by-hand"


class Severity(StrEnum):
    WARNING = "warning"  # fails CI (exit 1)
    INFO = "info"  # reported, never fails: e.g. a node Sickbay holds for less than `max_owned_s`


@dataclass(frozen=True, slots=True)
class Finding:
    kind: Kind
    object: str  # "Pod ns/name", "Job ns/name", "Node name", "Metric DCGM_FI_..."
    detail: str
    severity: Severity = Severity.WARNING


@dataclass(frozen=True, slots=True)
class AuditConfig:
    min_grace_s: int = 30  # a GPU pod's terminationGracePeriodSeconds below this cannot checkpoint
    low_priority_below: int = 0  # a pod on a GPU node with spec.priority below this is low-priority
    pool_label: str = "sickbay.io/pool"  # policy `pool_label`: a pool is the nodes sharing its value
    max_owned_s: float = 24 * 3600.0  # a node Sickbay holds longer than this is a warning, not info
    gpu_resource: str = GPU_RESOURCE


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: datetime
    nodes: tuple[NodeState, ...] = ()
    pods: tuple[PodState, ...] = ()
    jobs: tuple[JobState, ...] = ()
    # dcgm-exporter series names the fleet exports (read from Prometheus); None: not read, not checked.
    exported_fields: frozenset[str] | None = None
    # field → who needs it ("rules", "model"), in the catalog's (pre-4.6) names.
    needed_fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # DCGM 4.6 name → pre-4.6 name: an exporter may name a series either way (app.dcgm_fields).
    aliases: Mapping[str, str] = field(default_factory=dict)


def audit(snapshot: Snapshot, config: AuditConfig = AuditConfig()) -> list[Finding]:
    """Every finding, sorted by kind and object (stable output for CI diffs)."""
    gpu_nodes = {n.name: n for n in snapshot.nodes if n.gpu_capacity > 0}
    running = [p for p in snapshot.pods if p.node and not p.terminal]
    findings = [
        *pods_on_gpu_nodes(running, gpu_nodes, config),
        *gpu_jobs(snapshot.jobs),
        *gpu_pod_resilience(running, config),
        *allocatable(gpu_nodes.values()),
        *version_drift(gpu_nodes.values(), running, config),
        *footprint(snapshot.nodes, now=snapshot.now, config=config),
    ]
    if snapshot.exported_fields is not None:
        findings += missing_fields(snapshot.exported_fields, snapshot.needed_fields, snapshot.aliases)
    return sorted(findings, key=lambda f: (f.kind, f.object))


def _pod(pod: PodState) -> str:
    return f"Pod {pod.namespace}/{pod.name}"


def _system(pod: PodState) -> bool:
    """Pods every node runs by design: DaemonSets (the device plugin, dcgm-exporter, Sickbay's agent), static
    (mirror) pods, the system-critical classes, kube-system. Draining ignores DaemonSet pods too."""
    return (
        pod.is_daemonset
        or pod.is_mirror
        or pod.facts.priority >= SYSTEM_CRITICAL_PRIORITY
        or pod.namespace in SYSTEM_NAMESPACES
    )


def pods_on_gpu_nodes(
    pods: Iterable[PodState], gpu_nodes: Mapping[str, NodeState], config: AuditConfig
) -> Iterator[Finding]:
    """Non-GPU and low-priority pods on GPU nodes: they compete with the device plugin and the kubelet for
    the node's CPU and memory, and each is one more pod a drain must wait for."""
    for pod in pods:
        if pod.node not in gpu_nodes or _system(pod):
            continue
        if pod.gpu_request == 0:
            yield Finding(
                Kind.NON_GPU_POD, _pod(pod), f"requests no {config.gpu_resource} on GPU node {pod.node}"
            )
        elif pod.facts.priority < config.low_priority_below:
            named = f" ({pod.facts.priority_class})" if pod.facts.priority_class else ""
            yield Finding(
                Kind.LOW_PRIORITY_POD,
                _pod(pod),
                f"priority {pod.facts.priority}{named} < {config.low_priority_below} on GPU node {pod.node}",
            )


def gpu_jobs(jobs: Iterable[JobState]) -> Iterator[Finding]:
    """GPU Jobs whose pod failure policy does not follow the Kubernetes Job docs ("Handling retriable and
    non-retriable pod failures with Pod failure policy", kubernetes.io/docs/concepts/workloads/controllers/
    job/#pod-failure-policy): an `Ignore` rule on the `DisruptionTarget` condition, so an eviction (a drain,
    a preemption, a taint) does not count against `backoffLimit`; and an `onExitCodes` rule, so a device
    error the program reports by its exit code fails (or retries) the Job as intended."""
    for job in jobs:
        if job.gpu_request == 0 or job.done:
            continue
        name = f"Job {job.namespace}/{job.name}"
        ignores = any(r.action == "Ignore" and "DisruptionTarget" in r.conditions for r in job.failure_rules)
        if not ignores:
            yield Finding(
                Kind.JOB_NO_DISRUPTION_RULE,
                name,
                f"no podFailurePolicy rule `Ignore` on DisruptionTarget: each eviction burns one of "
                f"backoffLimit {job.backoff_limit}",
            )
        if not any(r.exit_operator and r.exit_codes for r in job.failure_rules):
            yield Finding(
                Kind.JOB_NO_EXIT_CODE_RULE, name, "no podFailurePolicy onExitCodes rule for device errors"
            )


def gpu_pod_resilience(pods: Iterable[PodState], config: AuditConfig) -> Iterator[Finding]:
    """GPU pods that a short node hiccup kills, or that a drain kills before they checkpoint.

    The node lifecycle controller taints a NotReady/unreachable node NoExecute; a pod without a toleration
    for it (with `tolerationSeconds`, the window) is evicted at once (kubernetes.io/docs/concepts/
    scheduling-eviction/taint-and-toleration/#taint-based-evictions). A toleration with no
    `tolerationSeconds` keeps the pod bound to a dead node forever: no window either."""
    for pod in pods:
        if pod.gpu_request == 0 or _system(pod):
            continue
        missing = [
            key
            for key in (NOT_READY, UNREACHABLE)
            if not any(t.tolerates(key, "NoExecute") and t.seconds is not None for t in pod.facts.tolerations)
        ]
        if missing:
            yield Finding(
                Kind.POD_NO_READINESS_TOLERATION,
                _pod(pod),
                "no NoExecute toleration with tolerationSeconds for " + ", ".join(missing),
            )
        if pod.grace_period_s < config.min_grace_s:
            yield Finding(
                Kind.POD_SHORT_GRACE,
                _pod(pod),
                f"terminationGracePeriodSeconds {pod.grace_period_s} < {config.min_grace_s}: too short to checkpoint",
            )


def allocatable(nodes: Iterable[NodeState]) -> Iterator[Finding]:
    """The device plugin advertises only healthy devices: allocatable below capacity is a GPU it marked
    unhealthy (NVIDIA/k8s-device-plugin health checks)."""
    for node in nodes:
        if node.gpu_allocatable < node.gpu_capacity:
            yield Finding(
                Kind.ALLOCATABLE_SHORT,
                f"Node {node.name}",
                f"allocatable {node.gpu_allocatable} of {node.gpu_capacity} GPUs",
            )


def _version(node: NodeState, labels: Sequence[str]) -> str | None:
    parts = [node.label(key) for key in labels]
    return ".".join(p for p in parts if p) if parts[0] else None


def _plugin_version(pods: Iterable[PodState]) -> str | None:
    for pod in pods:
        for image in pod.facts.images:
            if DEVICE_PLUGIN_IMAGE in image:
                return image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else "latest"
    return None


def version_drift(
    nodes: Iterable[NodeState], pods: Iterable[PodState], config: AuditConfig
) -> Iterator[Finding]:
    """Nodes whose driver, CUDA or device-plugin version differs from the most common one in their pool."""
    on_node: dict[str, list[PodState]] = {}
    for pod in pods:
        on_node.setdefault(pod.node or "", []).append(pod)
    pools: dict[str, list[NodeState]] = {}
    for node in nodes:
        pools.setdefault(node.label(config.pool_label) or "", []).append(node)
    for pool, members in sorted(pools.items()):
        versions = {
            "driver": {n.name: _version(n, DRIVER_LABELS) for n in members},
            "CUDA": {n.name: _version(n, CUDA_LABELS) for n in members},
            "device plugin": {n.name: _plugin_version(on_node.get(n.name, ())) for n in members},
        }
        for what, by_node in versions.items():
            known = {name: v for name, v in by_node.items() if v}
            if len(set(known.values())) < 2:
                continue
            counts = Counter(known.values())
            usual = min(counts, key=lambda v: (-counts[v], v))
            for name, value in sorted(known.items()):
                if value != usual:
                    yield Finding(
                        Kind.VERSION_DRIFT,
                        f"Node {name}",
                        f"{what} {value} differs from pool {pool or '(none)'}'s {usual} "
                        f"({counts[usual]} of {len(known)} nodes)",
                    )


def _age(since: str | None, now: datetime) -> float | None:
    try:
        return (now - datetime.fromisoformat(since or "")).total_seconds()
    except (ValueError, TypeError):
        return None


def _span(seconds: float) -> str:
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m"


def footprint(nodes: Iterable[NodeState], *, now: datetime, config: AuditConfig) -> Iterator[Finding]:
    """Sickbay's own footprint: the nodes it holds (and since when), and cordons no Sickbay mark explains."""
    for node in nodes:
        name = f"Node {node.name}"
        if node.annotation(OWNED_BY) is not None:
            age = _age(node.annotation(SINCE), now)
            state = node.label(STATE) or "owned"
            long = age is not None and age > config.max_owned_s
            yield Finding(
                Kind.SICKBAY_OWNED,
                name,
                f"{state} for {_span(age)}" if age is not None else f"{state} (no valid {SINCE})",
                Severity.WARNING if long else Severity.INFO,
            )
        elif node.unschedulable:
            yield Finding(Kind.HAND_CORDONED, name, "unschedulable without Sickbay's marks: cordoned by hand")


def missing_fields(
    exported: frozenset[str], needed: Mapping[str, tuple[str, ...]], aliases: Mapping[str, str]
) -> Iterator[Finding]:
    """Counters the rules or the model read that no exporter of the fleet writes (under either name)."""
    have = {aliases.get(name, name) for name in exported}
    for name, users in sorted(needed.items()):
        if name not in have:
            yield Finding(
                Kind.DCGM_FIELD_MISSING,
                f"Metric {name}",
                f"needed by {' and '.join(users)}; add it to dcgm-exporter's counters file",
            )
