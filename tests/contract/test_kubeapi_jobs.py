"""The batch/v1 Job behaviour the verification step relies on, through the official client.

A Job pinned to a node (spec.template.spec.nodeName) gets `status.startTime` and a pod on that node,
labelled with the Job's name and owned by it; one still running at `activeDeadlineSeconds` ends with the
`Failed` condition, reason `DeadlineExceeded`; Sickbay's `get_job` reads that as a failed `JobRun` and
a missing Job as None. Against a real cluster the `sbc-node-*` Nodes have no kubelet, so the pod never
runs and the deadline is what ends the Job; the simulator is told to let it hang. Jobs that succeed or
fail by their pod's exit need a kubelet, so they run on the simulator only (its outcome queue).
"""

from __future__ import annotations

from typing import Any

from kubernetes.aio import client as aclient

from app.config import rules
from app.decide import verification
from app.domain import JobRun, NodeState
from app.kube.client import KubeClient, connect
from app.kube.retries import RetryPolicy
from app.sim.kubeapi import KubeApiServer
from tests.contract.conftest import Cluster, Nodes, eventually, unique


def job_body(namespace: str, node: str, *, deadline: int = 30) -> dict[str, Any]:
    """The manifest Sickbay itself renders for a node with two GPUs, in the test's namespace."""
    policy = rules.Policy.model_validate(
        {"version": 1, "verification": {"namespace": namespace, "deadline": f"{deadline}s"}}
    )
    template = {
        "spec": {
            "template": {"spec": {"containers": [{"name": "diag", "image": "registry.k8s.io/pause:3.10"}]}}
        }
    }
    return verification.render(
        template, node=NodeState(name=node), name=unique("verify"), attempt=1, policy=policy
    )


async def sickbay_client(cluster: Cluster) -> KubeClient:
    return await connect(
        kubeconfig=str(cluster.kubeconfig), retry=RetryPolicy(attempts=3, base=0.01, cap=0.02)
    )


async def test_a_pinned_job_runs_its_pod_on_the_node_and_fails_at_its_deadline(
    cluster: Cluster, api_client: aclient.ApiClient, core: aclient.CoreV1Api, namespace: str, nodes: Nodes
) -> None:
    node = await nodes.create()
    if cluster.sim is not None:
        cluster.sim.registry.jobs.queue(node, "hang")
    body = job_body(namespace, node, deadline=2)
    name = body["metadata"]["name"]
    batch = aclient.BatchV1Api(api_client)
    await batch.create_namespaced_job(namespace, body)
    kube = await sickbay_client(cluster)
    try:
        running = await kube.get_job(namespace, name)
        assert running is not None
        assert running.succeeded is None
        assert not running.finished
        assert running.node == node

        async def has_pod() -> bool:
            pods = await core.list_namespaced_pod(
                namespace, label_selector=f"batch.kubernetes.io/job-name={name}"
            )
            return len(pods.items) == 1

        await eventually(has_pod)
        pods = await core.list_namespaced_pod(
            namespace, label_selector=f"batch.kubernetes.io/job-name={name}"
        )
        pod = pods.items[0]
        assert pod.spec.node_name == node
        assert pod.metadata.owner_references[0].kind == "Job"
        assert pod.metadata.owner_references[0].name == name
        started = await batch.read_namespaced_job(name, namespace)
        assert started.status.start_time is not None

        found: list[JobRun | None] = []

        async def failed() -> bool:
            found[:] = [await kube.get_job(namespace, name)]
            return found[0] is not None and found[0].finished

        await eventually(failed, timeout=30, interval=0.2)
        assert found[0] is not None
        assert found[0].succeeded is False
        assert found[0].reason == "DeadlineExceeded"
        assert await kube.get_job(namespace, unique("absent")) is None
    finally:
        await kube.close()


async def test_the_job_of_a_pod_that_exits_zero_completes_and_of_one_that_fails_fails(
    sim: KubeApiServer, cluster: Cluster, api_client: aclient.ApiClient, namespace: str, nodes: Nodes
) -> None:
    node = await nodes.create()
    sim.registry.jobs.run_s = 0.05
    sim.registry.jobs.queue(node, "fail")  # the first Job's pod fails, the second's succeeds (the default)
    batch = aclient.BatchV1Api(api_client)
    first, second = job_body(namespace, node), job_body(namespace, node)
    for body in (first, second):
        await batch.create_namespaced_job(namespace, body)
    kube = await sickbay_client(cluster)
    try:

        async def both_finished() -> bool:
            jobs = [await kube.get_job(namespace, b["metadata"]["name"]) for b in (first, second)]
            return all(j is not None and j.finished for j in jobs)

        await eventually(both_finished)
        failed = await kube.get_job(namespace, first["metadata"]["name"])
        passed = await kube.get_job(namespace, second["metadata"]["name"])
        assert failed is not None
        assert failed.succeeded is False
        assert failed.reason == "BackoffLimitExceeded"
        assert passed is not None
        assert passed.succeeded is True
        done = await batch.read_namespaced_job(second["metadata"]["name"], namespace)
        assert done.status.succeeded == 1
        assert done.status.completion_time is not None
        kinds = [c.type for c in done.status.conditions]
        assert kinds == ["SuccessCriteriaMet", "Complete"]
        gone = await batch.read_namespaced_job(first["metadata"]["name"], namespace)
        assert gone.status.failed == 1
        assert [c.type for c in gone.status.conditions] == ["FailureTarget", "Failed"]
    finally:
        await kube.close()
