"""The whole stack for end-to-end tests: `app.demo.stack.Stack` (the demo's own), plus test conveniences.

The stack-starting code lives in `app/demo/stack.py` (the demo ships with the package and `app` never
imports `tests`); this module only adds what tests need around it: a skip reason when Debian's
Prometheus or Alertmanager is missing, polling helpers, and the official Kubernetes client (`kubernetes.aio`)
on the simulated cluster, through which tests read node and pod state back.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes.aio import client as kclient
from kubernetes.aio import config as kconfig

from app.decide import footprint
from app.demo.stack import (
    DEFAULT_SHORT_FOR,
    POOL_LABEL,
    Injection,
    Stack,
    StackConfig,
    StackError,
    quiet_fleet_config,
    write_rules_copy,
)

__all__ = [
    "DEFAULT_SHORT_FOR",
    "POOL_LABEL",
    "STACK_MARKS",
    "Injection",
    "Stack",
    "StackConfig",
    "StackError",
    "eventually",
    "gpu_pods_on",
    "missing_binaries",
    "official_client",
    "quiet_fleet_config",
    "running_stack",
    "sickbay_taints",
    "wait_unschedulable",
    "write_rules_copy",
]

T = TypeVar("T")
BINARIES = ("prometheus", "prometheus-alertmanager")


def missing_binaries() -> list[str]:
    return [name for name in BINARIES if not (shutil.which(name) or Path(f"/usr/bin/{name}").exists())]


# A test module that starts the whole stack: slow, 4 minutes at most, skipped without Debian's binaries.
# real_clock: the simulated exporters stamp Python's time, Prometheus and Alertmanager their own (Go) time.
STACK_MARKS = [
    pytest.mark.slow,
    pytest.mark.real_clock,
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        bool(missing_binaries()),
        reason=f"needs {', '.join(missing_binaries())} (scripts/install-system-packages.sh)",
    ),
]


@contextlib.asynccontextmanager
async def running_stack(workdir: Path, config: StackConfig | None = None) -> AsyncIterator[Stack]:
    """Start the stack under `workdir` (logs in `workdir/logs`, printed if the body fails); always stopped."""
    async with Stack(workdir, config) as stack:
        yield stack


@contextlib.asynccontextmanager
async def official_client(kubeconfig: Path) -> AsyncIterator[Any]:
    """The official client's CoreV1Api on the cluster of `kubeconfig`; closed on exit."""
    configuration = kclient.Configuration()
    await kconfig.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    api = kclient.ApiClient(configuration)
    try:
        yield kclient.CoreV1Api(api)
    finally:
        await api.close()


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout: float = 15.0, every: float = 0.05, what: str = "it"
) -> T:
    """Await `probe` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


async def wait_unschedulable(core: Any, node: str, *, since: float, timeout: float = 20.0) -> float:
    """Poll the node every 50 ms through the official client; seconds from `since` to its quarantine:
    `spec.unschedulable`, or the NoSchedule taint alone where a reset-gpu drain is partial (the taint and
    the cordon are one patch, so either marks the same instant)."""
    deadline = since + timeout
    while True:
        found = await core.read_node(node)
        now = time.perf_counter()
        if found.spec.unschedulable or any(t.key == footprint.UNHEALTHY for t in found.spec.taints or []):
            return now - since
        if now > deadline:
            raise AssertionError(f"{node} still schedulable {timeout:.0f}s after the fault")
        await asyncio.sleep(0.05)


def sickbay_taints(node: Any) -> list[tuple[str, str, str]]:
    return [
        (t.key, t.value, t.effect) for t in (node.spec.taints or []) if str(t.key).startswith("sickbay.io/")
    ]


async def gpu_pods_on(core: Any, node: str) -> list[Any]:
    """Pods on `node` that request GPUs and are not terminating (DaemonSet pods request none)."""
    found = await core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
    pods = []
    for pod in found.items:
        if pod.metadata.deletion_timestamp:
            continue
        requests = [(c.resources.requests or {}) for c in pod.spec.containers if c.resources]
        if any(int(r.get("nvidia.com/gpu", "0")) > 0 for r in requests):
            pods.append(pod)
    return pods
