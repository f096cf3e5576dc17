"""The eviction subresource against PodDisruptionBudgets, as kube-apiserver's EvictionREST behaves."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes.aio import client as aclient

from app.sim.kubeapi import KubeApiServer
from tests.contract.conftest import Cluster, PodFactory, eventually, unique

BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


def eviction(name: str, namespace: str, **delete_options: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if delete_options:
        body["deleteOptions"] = delete_options
    return body


async def evict(
    core: aclient.CoreV1Api, namespace: str, name: str, **delete_options: Any
) -> tuple[int, dict[str, Any]]:
    """Evict and return (HTTP status, Status body) whether it succeeded or not."""
    try:
        response = await core.create_namespaced_pod_eviction_without_preload_content(
            name, namespace, eviction(name, namespace, **delete_options)
        )
        body = await response.read()
        return response.status, json.loads(body)
    except aclient.ApiException as error:
        return int(error.status), json.loads(error.body)


async def make_budget(
    policy: aclient.PolicyV1Api,
    namespace: str,
    selector: dict[str, str],
    *,
    expect_allowed: int | None,
    **spec: Any,
) -> str:
    name = unique("pdb")
    await policy.create_namespaced_pod_disruption_budget(
        namespace, {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": selector}, **spec}}
    )
    if expect_allowed is not None:
        await wait_allowed(policy, namespace, name, expect_allowed)
    return name


async def wait_allowed(policy: aclient.PolicyV1Api, namespace: str, name: str, allowed: int) -> None:
    async def settled() -> bool:
        pdb = await policy.read_namespaced_pod_disruption_budget(name, namespace)
        status = pdb.status
        return (
            status is not None
            and status.observed_generation == pdb.metadata.generation
            and status.disruptions_allowed == allowed
        )

    await eventually(settled)


async def pod_gone(core: aclient.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        await core.read_namespaced_pod(name, namespace)
    except aclient.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


async def test_eviction_is_201_marks_disruption_target_then_the_pod_goes(
    cluster: Cluster, core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    name = (await make_pod())["metadata"]["name"]
    code, status = await evict(core, namespace, name)
    assert code == 201
    assert status["kind"] == "Status"
    assert status["status"] == "Success"

    pod = await core.read_namespaced_pod(name, namespace)  # terminating: the kubelet has yet to confirm
    assert pod.metadata.deletion_timestamp is not None
    target = [c for c in pod.status.conditions if c.type == "DisruptionTarget"]
    assert len(target) == 1
    assert (target[0].status, target[0].reason) == ("True", "EvictionByEvictionAPI")
    assert target[0].message == "Eviction API: evicting"
    if cluster.real:  # no kubelet behind the test node finishes the deletion
        await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    await eventually(lambda: pod_gone(core, namespace, name))


async def test_budget_with_no_disruptions_left_refuses_with_429(
    core: aclient.CoreV1Api, policy: aclient.PolicyV1Api, namespace: str, make_pod: PodFactory
) -> None:
    labels = {"app": "vllm"}
    first = (await make_pod(labels=labels))["metadata"]["name"]
    await make_pod(labels=labels)
    budget = await make_budget(policy, namespace, labels, expect_allowed=0, minAvailable=2)

    code, status = await evict(core, namespace, first)
    assert code == 429
    assert status["reason"] == "TooManyRequests"
    assert status["message"] == BUDGET_MESSAGE
    cause = status["details"]["causes"][0]
    assert cause["reason"] == "DisruptionBudget"
    assert cause["message"] == f"The disruption budget {budget} needs 2 healthy pods and has 2 currently"
    pod = await core.read_namespaced_pod(first, namespace)
    assert pod.metadata.deletion_timestamp is None
    assert not any(c.type == "DisruptionTarget" for c in pod.status.conditions)


async def test_new_budget_comes_back_with_zero_counts(
    policy: aclient.PolicyV1Api, namespace: str, make_pod: PodFactory
) -> None:
    """PrepareForCreate empties the status, and policy/v1 writes its four counts even when zero; the
    controller has not seen the budget yet when the create answers, on any cluster."""
    labels = {"app": "vllm"}
    await make_pod(labels=labels)
    name = unique("pdb")
    body = {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": labels}, "minAvailable": 1}}
    response = await policy.create_namespaced_pod_disruption_budget_without_preload_content(namespace, body)
    created = json.loads(await response.read())
    assert created["status"] == {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    }
    await wait_allowed(policy, namespace, name, 0)  # then the controller fills it in
    status = (await policy.read_namespaced_pod_disruption_budget(name, namespace)).status
    assert (status.current_healthy, status.desired_healthy, status.expected_pods) == (1, 1, 1)


async def test_eviction_spends_the_budget(
    core: aclient.CoreV1Api, policy: aclient.PolicyV1Api, namespace: str, make_pod: PodFactory
) -> None:
    """The eviction handler decrements disruptionsAllowed and records the pod in disruptedPods; currentHealthy
    follows only when the disruption controller resyncs. When that happens is a race on a real cluster, so
    this asserts what holds on either side of it, then waits for the controller's view."""
    labels = {"app": "vllm"}
    pods = [(await make_pod(labels=labels))["metadata"]["name"] for _ in range(3)]
    budget = await make_budget(policy, namespace, labels, expect_allowed=1, minAvailable=2)
    before = await policy.read_namespaced_pod_disruption_budget(budget, namespace)
    assert before.status.current_healthy == 3
    assert not before.status.disrupted_pods

    assert (await evict(core, namespace, pods[0], gracePeriodSeconds=0))[0] == 201
    after = (await policy.read_namespaced_pod_disruption_budget(budget, namespace)).status
    # Spent by the eviction itself, and still 0 once the controller has synced.
    assert after.disruptions_allowed == 0
    if after.current_healthy == 3:  # the controller has not synced yet: only the eviction's own write shows
        assert pods[0] in (after.disrupted_pods or {})
    else:
        assert after.current_healthy == 2

    async def resynced() -> bool:
        # A sync can also land between the pod's DisruptionTarget write and its deletion (currentHealthy 2,
        # the pod still listed); the one after the deletion drops the entry.
        status = (await policy.read_namespaced_pod_disruption_budget(budget, namespace)).status
        return status.current_healthy == 2 and pods[0] not in (status.disrupted_pods or {})

    await eventually(resynced)
    synced = (await policy.read_namespaced_pod_disruption_budget(budget, namespace)).status
    assert (synced.disruptions_allowed, synced.desired_healthy, synced.expected_pods) == (0, 2, 2)
    assert not synced.disrupted_pods  # the pod is gone: the controller drops its entry
    code, status = await evict(core, namespace, pods[1])
    assert code == 429
    assert status["details"]["causes"][0]["reason"] == "DisruptionBudget"


async def test_the_budget_lags_the_eviction_until_the_controller_resyncs(
    sim: KubeApiServer,
    core: aclient.CoreV1Api,
    policy: aclient.PolicyV1Api,
    namespace: str,
    make_pod: PodFactory,
) -> None:
    """The same eviction with the simulated controller held back: the lagging state is certain here."""
    labels = {"app": "vllm"}
    pods = [(await make_pod(labels=labels))["metadata"]["name"] for _ in range(3)]
    budget = await make_budget(policy, namespace, labels, expect_allowed=1, minAvailable=2)
    sim.configure_disruption_sync(60.0)  # longer than the test: it waits for sync_controllers()

    assert (await evict(core, namespace, pods[0], gracePeriodSeconds=0))[0] == 201
    lagging = (await policy.read_namespaced_pod_disruption_budget(budget, namespace)).status
    assert (lagging.disruptions_allowed, lagging.current_healthy) == (0, 3)
    assert set(lagging.disrupted_pods or {}) == {pods[0]}
    assert await pod_gone(core, namespace, pods[0])

    sim.sync_controllers()
    synced = (await policy.read_namespaced_pod_disruption_budget(budget, namespace)).status
    assert (synced.disruptions_allowed, synced.current_healthy) == (0, 2)
    assert not synced.disrupted_pods


async def test_concurrent_evictions_spend_the_last_disruption_once(
    core: aclient.CoreV1Api, policy: aclient.PolicyV1Api, namespace: str, make_pod: PodFactory
) -> None:
    labels = {"app": "gang"}
    pods = [(await make_pod(labels=labels))["metadata"]["name"] for _ in range(3)]
    await make_budget(policy, namespace, labels, expect_allowed=1, minAvailable=2)
    results = await asyncio.gather(*(evict(core, namespace, p, gracePeriodSeconds=0) for p in pods))
    assert sorted(code for code, _ in results) == [201, 429, 429]


async def test_budget_ignores_pods_that_are_not_running(
    core: aclient.CoreV1Api, policy: aclient.PolicyV1Api, namespace: str, make_pod: PodFactory
) -> None:
    labels = {"app": "train"}
    for _ in range(2):
        await make_pod(labels=labels)
    pending = (await make_pod(labels=labels, phase="Pending"))["metadata"]["name"]
    done = (await make_pod(labels=labels, phase="Succeeded"))["metadata"]["name"]
    failed = (await make_pod(labels=labels, phase="Failed"))["metadata"]["name"]
    await make_budget(policy, namespace, labels, expect_allowed=0, minAvailable=2)
    for name in (pending, done, failed):
        code, _ = await evict(core, namespace, name, gracePeriodSeconds=0)
        assert code == 201, name


async def test_unready_pod_goes_without_spending_a_met_budget(
    core: aclient.CoreV1Api, policy: aclient.PolicyV1Api, namespace: str, make_pod: PodFactory
) -> None:
    labels = {"app": "train"}
    ready = (await make_pod(labels=labels))["metadata"]["name"]
    await make_pod(labels=labels)
    unready = (await make_pod(labels=labels, ready=False))["metadata"]["name"]
    await make_budget(policy, namespace, labels, expect_allowed=0, minAvailable=2)
    assert (await evict(core, namespace, ready))[0] == 429
    assert (await evict(core, namespace, unready, gracePeriodSeconds=0))[0] == 201


async def test_pods_of_a_controller_without_scale_get_no_disruptions(
    core: aclient.CoreV1Api, policy: aclient.PolicyV1Api, namespace: str, make_pod: PodFactory
) -> None:
    """maxUnavailable needs the controller's scale; a Job has none, so the controller fails safe to 0."""
    labels = {"jobset.sigs.k8s.io/jobset-name": "llama"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "llama-0",
        "uid": "33333333-3333-3333-3333-333333333333",
    }
    first = (await make_pod(labels=labels, owner={**job, "controller": True}))["metadata"]["name"]
    await make_pod(labels=labels, owner={**job, "controller": True})
    budget = await make_budget(policy, namespace, labels, expect_allowed=None, maxUnavailable=1)

    async def sync_failed() -> bool:
        status = (await policy.read_namespaced_pod_disruption_budget(budget, namespace)).status
        return any(c.reason == "SyncFailed" for c in (status.conditions if status else None) or [])

    await eventually(sync_failed)
    status = (await policy.read_namespaced_pod_disruption_budget(budget, namespace)).status
    assert status.disruptions_allowed == 0
    condition = next(c for c in status.conditions if c.type == "DisruptionAllowed")
    assert condition.status == "False"
    assert condition.message.startswith("found no controllers for pod")
    code, body = await evict(core, namespace, first)
    assert code == 429
    assert body["message"] == BUDGET_MESSAGE


async def test_daemonset_pods_are_evicted_like_any_other(
    core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "dcgm-exporter",
        "uid": "44444444-4444-4444-4444-444444444444",
        "controller": True,
    }
    name = (await make_pod(owner=owner))["metadata"]["name"]
    assert (await evict(core, namespace, name, gracePeriodSeconds=0))[0] == 201


async def test_evicting_a_gone_pod_is_404(
    core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    name = (await make_pod())["metadata"]["name"]
    await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    await eventually(lambda: pod_gone(core, namespace, name))
    code, status = await evict(core, namespace, name)
    assert code == 404
    assert status["reason"] == "NotFound"


async def test_eviction_body_must_name_the_pod(
    core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    name = (await make_pod())["metadata"]["name"]
    with pytest.raises(aclient.ApiException) as caught:
        await core.create_namespaced_pod_eviction(name, namespace, eviction("someone-else", namespace))
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["message"] == "name in URL does not match name in Eviction object"


async def test_typed_client_call_returns_without_error(
    cluster: Cluster, core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    """The generated client deserialises the Success Status into its declared V1Eviction return type."""
    name = (await make_pod())["metadata"]["name"]
    await core.create_namespaced_pod_eviction(
        name, namespace, eviction(name, namespace, gracePeriodSeconds=0)
    )
    await eventually(lambda: pod_gone(core, namespace, name))
