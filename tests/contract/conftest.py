"""Fixtures for the Kubernetes API contract tests.

Every test talks to an API server only through the official `kubernetes` client (async and sync) or
kubectl, and creates the objects it needs through the API, so the same tests run against a real cluster:
point `SICKBAY_CONTRACT_KUBECONFIG` at a kubeconfig (use a disposable cluster: tests create and delete
namespaces and Node objects named `sbc-*`). Without it they run against the simulator in-process.
Tests of simulator-only features (fault injection, counters, seeds) take the `sim` fixture, which skips
against a real cluster.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.aio import client as aclient
from kubernetes.aio import config as aconfig

from app.sim.kubeapi import KubeApiServer

REAL_KUBECONFIG = os.environ.get("SICKBAY_CONTRACT_KUBECONFIG")


@dataclass
class Cluster:
    kubeconfig: Path
    sim: KubeApiServer | None
    cache_dir: Path

    @property
    def real(self) -> bool:
        return self.sim is None

    async def kubectl(self, *args: str, check: bool = True, timeout: float = 30) -> tuple[int, str, str]:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), KUBECACHEDIR=str(self.cache_dir))
        proc = await asyncio.create_subprocess_exec(
            "kubectl", *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
        code = proc.returncode or 0
        if check and code != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({code}): {err.decode()}")
        return code, out.decode(), err.decode()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    if REAL_KUBECONFIG:
        yield Cluster(Path(REAL_KUBECONFIG), None, tmp_path / "kube-cache")
        return
    # grace_scale plays the kubelet: a deleted pod stays Terminating for its grace period scaled down
    # (the 30 s of the pods made here: 0.3 s), then disappears.
    async with KubeApiServer(grace_scale=0.01) as api:
        yield Cluster(api.write_kubeconfig(tmp_path / "kubeconfig"), api, tmp_path / "kube-cache")


@pytest.fixture
def sim(cluster: Cluster) -> KubeApiServer:
    if cluster.sim is None:
        pytest.skip("simulator-only behaviour")
    return cluster.sim


@pytest.fixture
async def api_client(cluster: Cluster) -> AsyncIterator[aclient.ApiClient]:
    configuration = aclient.Configuration()
    await aconfig.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    async with aclient.ApiClient(configuration) as client:
        yield client


@pytest.fixture
def sync_client(cluster: Cluster) -> kubernetes.client.ApiClient:
    """The blocking client; call it through `asyncio.to_thread` (the simulator shares the test's loop)."""
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(
        config_file=str(cluster.kubeconfig), client_configuration=configuration
    )
    return kubernetes.client.ApiClient(configuration)


@pytest.fixture
def core(api_client: aclient.ApiClient) -> aclient.CoreV1Api:
    return aclient.CoreV1Api(api_client)


@pytest.fixture
def policy(api_client: aclient.ApiClient) -> aclient.PolicyV1Api:
    return aclient.PolicyV1Api(api_client)


@pytest.fixture
def coordination(api_client: aclient.ApiClient) -> aclient.CoordinationV1Api:
    return aclient.CoordinationV1Api(api_client)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def namespace(core: aclient.CoreV1Api) -> AsyncIterator[str]:
    name = unique("sbc")
    await core.create_namespace({"metadata": {"name": name}})
    yield name
    try:
        await core.delete_namespace(name)
    except aclient.ApiException as error:
        if error.status != 404:
            raise


@dataclass
class Nodes:
    """Creates Node objects for a test and deletes them afterwards."""

    core: aclient.CoreV1Api
    created: list[str] = field(default_factory=list)

    async def create(
        self, *, labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None
    ) -> str:
        name = unique("sbc-node")
        spec: dict[str, Any] = {"taints": taints} if taints else {}
        await self.core.create_node({"metadata": {"name": name, "labels": labels or {}}, "spec": spec})
        self.created.append(name)
        return name


@pytest.fixture
async def nodes(core: aclient.CoreV1Api) -> AsyncIterator[Nodes]:
    made = Nodes(core)
    yield made
    for name in made.created:
        try:
            await core.delete_node(name)
        except aclient.ApiException as error:
            if error.status != 404:
                raise


def running_status(*, ready: bool = True, phase: str = "Running") -> dict[str, Any]:
    flag = "True" if ready else "False"
    return {
        "phase": phase,
        "conditions": [
            {"type": "Ready", "status": flag},
            {"type": "ContainersReady", "status": flag},
            {"type": "PodScheduled", "status": "True"},
        ],
    }


PodFactory = Callable[..., Awaitable[dict[str, Any]]]


@pytest.fixture
def make_pod(core: aclient.CoreV1Api, namespace: str, nodes: Nodes) -> PodFactory:
    """Create a pod bound to a node through the API, then move it to `phase` via /status as a kubelet would.

    Binding every pod to an `sbc-node-*` Node object (no kubelet behind it) keeps a real cluster's scheduler
    and kubelets away from test pods, so the status written here is the status the test sees.
    """

    async def create(
        *,
        name: str | None = None,
        node: str | None = None,
        labels: dict[str, str] | None = None,
        phase: str = "Running",
        ready: bool = True,
        owner: dict[str, Any] | None = None,
        gpus: int = 0,
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name or unique("pod"), "labels": labels or {}}
        if owner is not None:
            meta["ownerReferences"] = [owner]
        container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
        if gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 30}
        if node is None:
            node = nodes.created[0] if nodes.created else await nodes.create()
        spec["nodeName"] = node
        pod = await core.create_namespaced_pod(namespace, {"metadata": meta, "spec": spec})
        if phase != "Pending":
            pod = await core.patch_namespaced_pod_status(
                meta["name"],
                namespace,
                {"status": running_status(ready=ready and phase == "Running", phase=phase)},
                _content_type="application/merge-patch+json",
            )
        result: dict[str, Any] = core.api_client.sanitize_for_serialization(pod)
        return result

    return create


async def eventually(
    check: Callable[[], Awaitable[bool]], *, timeout: float = 10.0, interval: float = 0.05
) -> None:
    """Poll until `check` holds: immediate on the simulator, a controller's lag on a real cluster."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)
