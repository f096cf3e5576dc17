"""Seeding the simulator: the shipped example cluster, the compact format's expansion, and its errors."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from kubernetes.aio import client as aclient
from kubernetes.aio import config as aconfig

from app.sim.kubeapi import EXAMPLE_SEED, KubeApiServer, SeedError, run
from app.sim.kubeapi.resources import PODS, Ref


@pytest.fixture
async def example(tmp_path: Path) -> AsyncIterator[tuple[KubeApiServer, aclient.ApiClient]]:
    server = KubeApiServer(seed=EXAMPLE_SEED)
    await server.start()
    configuration = aclient.Configuration()
    await aconfig.load_kube_config(
        config_file=str(server.write_kubeconfig(tmp_path / "kubeconfig")), client_configuration=configuration
    )
    client = aclient.ApiClient(configuration)
    yield server, client
    await client.close()
    await server.stop()


async def test_example_cluster_shape(example: tuple[KubeApiServer, aclient.ApiClient]) -> None:
    _, client = example
    core = aclient.CoreV1Api(client)
    nodes = (await core.list_node()).items
    assert len(nodes) == 8
    assert {n.status.allocatable["nvidia.com/gpu"] for n in nodes} == {"8"}
    assert Counter(n.metadata.labels["sickbay.io/pool"] for n in nodes) == {"h100-a": 4, "h100-b": 4}

    gang = (
        await core.list_namespaced_pod(
            "training", label_selector="jobset.sigs.k8s.io/jobset-name=llama-pretrain"
        )
    ).items
    assert len(gang) == 4
    assert len({p.spec.node_name for p in gang}) == 4
    assert all(p.spec.containers[0].resources.limits["nvidia.com/gpu"] == "8" for p in gang)
    assert sorted(p.metadata.labels["jobset.sigs.k8s.io/job-index"] for p in gang) == ["0", "1", "2", "3"]

    batch = aclient.BatchV1Api(client)
    job_ref = gang[0].metadata.owner_references[0]
    assert (job_ref.kind, job_ref.controller) == ("Job", True)
    job = await batch.read_namespaced_job(job_ref.name, "training")
    assert job.metadata.uid == job_ref.uid
    assert job.metadata.owner_references[0].kind == "JobSet"

    exporters = (await core.list_namespaced_pod("gpu-operator")).items
    assert sorted(p.spec.node_name for p in exporters) == sorted(n.metadata.name for n in nodes)
    assert {p.metadata.owner_references[0].kind for p in exporters} == {"DaemonSet"}


async def test_example_budgets_are_computed(example: tuple[KubeApiServer, aclient.ApiClient]) -> None:
    _, client = example
    policy = aclient.PolicyV1Api(client)
    vllm = await policy.read_namespaced_pod_disruption_budget("vllm", "inference")
    assert (vllm.status.expected_pods, vllm.status.desired_healthy, vllm.status.disruptions_allowed) == (
        3,
        2,
        1,
    )
    gang = await policy.read_namespaced_pod_disruption_budget("llama-pretrain", "training")
    assert (gang.status.current_healthy, gang.status.disruptions_allowed) == (4, 0)


def test_seed_errors_are_reported_together() -> None:
    bad = {
        "nodes": [{"name": "gpu-0"}],
        "pods": [
            {"name": "lost", "node": "gpu-9"},
            {"name": "orphan", "node": "gpu-0", "owner": {"kind": "Job", "name": "nobody"}},
        ],
        "widgets": [],
    }
    with pytest.raises(SeedError) as caught:
        KubeApiServer(seed=bad)
    message = str(caught.value)
    assert "unknown sections ['widgets']" in message
    assert "node 'gpu-9' is not in the seed" in message
    assert "owner Job/nobody is not in the seed" in message


def test_invalid_and_duplicate_objects_load_nothing() -> None:
    server = KubeApiServer(seed={"nodes": [{"name": "gpu-0"}]})
    before = server.store.resource_version
    with pytest.raises(SeedError) as caught:
        server.load({"nodes": [{"name": "gpu-0"}, {"name": "Bad_Name"}]})
    assert "already exists" in str(caught.value)
    assert "metadata.name" in str(caught.value)
    assert server.store.resource_version == before


async def test_full_objects_and_the_load_endpoint(tmp_path: Path) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "hand-made", "labels": {"sickbay.io/managed": "false"}},
        "spec": {"unschedulable": True},
    }
    seed_file = tmp_path / "seed.yaml"
    seed_file.write_text(yaml.safe_dump({"objects": [node]}))
    async with KubeApiServer(seed=seed_file) as server, aiohttp.ClientSession(server.url) as http:
        more = {"pods": [{"name": "late", "namespace": "extra", "node": "hand-made", "gpus": 1}]}
        response = await http.post("/_sim/objects", data=yaml.safe_dump(more))
        assert response.status == 200
        assert (await response.json())["loaded"] == 2  # the pod and its namespace
        stored = server.store.get(Ref(PODS, namespace="extra", name="late"))
        assert stored is not None
        assert stored["spec"]["nodeName"] == "hand-made"
        bad = await http.post("/_sim/objects", data="pods: [{name: x, node: nowhere}]")
        assert bad.status == 400


async def test_run_serves_the_seed_until_cancelled(tmp_path: Path) -> None:
    """`run` is what `sickbay simulate kube-api` will call: serve a seed file, write a kubeconfig, stop on cancel."""
    started: asyncio.Queue[KubeApiServer] = asyncio.Queue()
    kubeconfig = tmp_path / "kubeconfig"
    task = asyncio.create_task(run(EXAMPLE_SEED, kubeconfig_path=kubeconfig, on_ready=started.put_nowait))
    server = await asyncio.wait_for(started.get(), 10)
    configuration = aclient.Configuration()
    await aconfig.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with aclient.ApiClient(configuration) as client:
        assert len((await aclient.CoreV1Api(client).list_node()).items) == 8
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientConnectionError):
            await http.get(f"http://127.0.0.1:{server.port}/version")
