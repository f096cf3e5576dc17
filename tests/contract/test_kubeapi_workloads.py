"""Kueue's `Workload` (kueue.x-k8s.io/v1beta1) through the official client and `KubeClient`: the fields
and transitions Sickbay's requeue relies on (deactivate → Evicted/Deactivated, quota released once the
job's pods are gone; reactivate → Requeued/Reactivated, admitted again, off the tainted node).

Against a real cluster (`SICKBAY_CONTRACT_KUBECONFIG`) these need Kueue installed and the name of a
LocalQueue in `SICKBAY_CONTRACT_KUEUE_QUEUE` (Kueue queues are namespaced: provide one, e.g. by a
namespace selector of your test setup, for the `sbc-*` namespaces the tests create); without it they skip.
The pods a job integration stops and recreates, and where, are checked on the simulator only.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes.aio import client as aclient

from app.domain import WorkloadState
from app.kube import errors
from app.kube.client import KubeClient, connect
from app.kube.retries import RetryPolicy
from tests.contract.conftest import Cluster, Nodes, PodFactory, eventually, unique

QUEUE = os.environ.get("SICKBAY_CONTRACT_KUEUE_QUEUE", "")
GROUP, VERSION, PLURAL = "kueue.x-k8s.io", "v1beta1", "workloads"


@pytest.fixture
async def kube(cluster: Cluster) -> AsyncIterator[KubeClient]:
    if cluster.real and not QUEUE:
        pytest.skip("a real cluster needs Kueue and SICKBAY_CONTRACT_KUEUE_QUEUE")
    client = await connect(
        kubeconfig=str(cluster.kubeconfig),
        retry=RetryPolicy(attempts=5, base=0.01, cap=0.05, jitter=0.5, timeout=5.0),
    )
    async with client:
        yield client


@pytest.fixture
def custom(api_client: aclient.ApiClient) -> aclient.CustomObjectsApi:
    return aclient.CustomObjectsApi(api_client)


async def make_workload(custom: aclient.CustomObjectsApi, namespace: str, *, job_uid: str) -> str:
    name = unique("job-train")
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/job-uid": job_uid}},
        "spec": {
            "active": True,
            "queueName": QUEUE or "team-a",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "main", "image": "pause:3.10"}]}},
                }
            ],
        },
    }
    await custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    return name


def job_owner(job_uid: str, name: str = "train") -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid, "controller": True}


async def admitted(kube: KubeClient, namespace: str, name: str) -> bool:
    wl = await kube.get_workload(namespace, name)
    return wl.is_true("QuotaReserved") and wl.is_true("Admitted") and bool(wl.admitted_to)


async def test_a_workload_is_found_by_its_job_uid_and_admitted(
    kube: KubeClient, custom: aclient.CustomObjectsApi, namespace: str
) -> None:
    job_uid = str(uuid.uuid4())
    name = await make_workload(custom, namespace, job_uid=job_uid)
    await make_workload(custom, namespace, job_uid=str(uuid.uuid4()))  # another job's: not found
    await eventually(lambda: admitted(kube, namespace, name))
    (found,) = await kube.list_workloads(namespace, job_uid=job_uid)
    assert (found.name, found.active, found.queue_name) == (name, True, QUEUE or "team-a")
    assert found.uid
    assert found.resource_version


async def test_deactivation_evicts_then_releases_quota_and_reactivation_requeues(
    kube: KubeClient,
    custom: aclient.CustomObjectsApi,
    namespace: str,
    nodes: Nodes,
    make_pod: PodFactory,
    core: aclient.CoreV1Api,
    cluster: Cluster,
) -> None:
    sick = await nodes.create()
    healthy = await nodes.create()
    job_uid = str(uuid.uuid4())
    name = await make_workload(custom, namespace, job_uid=job_uid)
    await eventually(lambda: admitted(kube, namespace, name))
    pod = await make_pod(node=sick, owner=job_owner(job_uid), gpus=1)
    await core.patch_node(
        sick,
        {"spec": {"taints": [{"key": "sickbay.io/unhealthy", "value": "reset-gpu", "effect": "NoSchedule"}]}},
    )

    wl = await kube.get_workload(namespace, name)
    wl = await kube.set_workload_active(wl, active=False, requeued_from=sick)
    assert (wl.active, wl.requeued_from) == (False, sick)
    assert (namespace, name) in {(w.namespace, w.name) for w in await kube.list_requeued_workloads()}

    async def evicted_and_released() -> bool:
        now = await kube.get_workload(namespace, name)
        return now.deactivated and not now.holds_quota and not now.is_true("Admitted")

    await eventually(evicted_and_released)
    if not cluster.real:  # the simulated job integration stopped the job: its pod is gone
        assert [p.name for p in await kube.list_pods(namespace=namespace)] == []
    evicted = (await kube.get_workload(namespace, name)).condition("Evicted")
    assert evicted is not None
    assert evicted.reason == "Deactivated"

    wl = await kube.get_workload(namespace, name)
    wl = await kube.set_workload_active(wl, active=True, requeued_from=None)
    assert (wl.active, wl.requeued_from) == (True, "")
    assert (namespace, name) not in {(w.namespace, w.name) for w in await kube.list_requeued_workloads()}
    await eventually(lambda: admitted(kube, namespace, name))
    requeued = (await kube.get_workload(namespace, name)).condition("Requeued")
    assert requeued is not None
    assert (requeued.status, requeued.reason) == ("True", "Reactivated")
    if not cluster.real:  # recreated under a new name, on the node without the taint
        (again,) = await kube.list_pods(namespace=namespace)
        assert again.name != pod["metadata"]["name"]
        assert again.node == healthy


async def test_a_stale_write_conflicts(
    kube: KubeClient, custom: aclient.CustomObjectsApi, namespace: str
) -> None:
    name = await make_workload(custom, namespace, job_uid=str(uuid.uuid4()))
    stale: WorkloadState = await kube.get_workload(namespace, name)
    await custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"labels": {"touched": "yes"}}}
    )
    with pytest.raises(errors.ConflictError):
        await kube.set_workload_active(stale, active=False, requeued_from="node-a")
    assert (await kube.get_workload(namespace, name)).active
