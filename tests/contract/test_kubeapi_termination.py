"""Graceful pod deletion as kube-apiserver and a kubelet do it, and evictions that fail outright.

A deleted pod bound to a node gets `deletionTimestamp` = now + its grace period and stays Terminating until
its kubelet confirms with a grace-0 delete; a second delete may only shorten the period; grace 0, an
unbound pod and a finished pod go at once. Against a real cluster the `sbc-node-*` Nodes have no kubelet,
so the parts that need one (the pod going by itself) run on the simulator only, whose stand-in kubelet
waits the grace period times `grace_scale`. Failing evictions are a simulator-only steering feature.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from kubernetes.aio import client as aclient

from app.kube import errors
from app.kube.client import KubeClient, connect
from app.kube.retries import RetryPolicy
from app.sim.kubeapi import EvictionFailure, KubeApiServer
from tests.contract.conftest import Cluster, PodFactory, eventually, unique

MERGE = "application/merge-patch+json"
SICKBAY = "system:serviceaccount:sickbay:sickbay"


async def read(core: aclient.CoreV1Api, namespace: str, name: str) -> Any | None:
    try:
        return await core.read_namespaced_pod(name, namespace)
    except aclient.ApiException as error:
        if error.status == 404:
            return None
        raise


async def delete(core: aclient.CoreV1Api, namespace: str, name: str, **options: Any) -> dict[str, Any]:
    response = await core.delete_namespaced_pod_without_preload_content(name, namespace, **options)
    body: dict[str, Any] = json.loads(await response.read())
    return body


async def evict(core: aclient.CoreV1Api, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    try:
        response = await core.create_namespaced_pod_eviction_without_preload_content(name, namespace, body)
        return response.status, json.loads(await response.read())
    except aclient.ApiException as error:
        return int(error.status), json.loads(error.body)


async def finish(cluster: Cluster, core: aclient.CoreV1Api, namespace: str, name: str) -> None:
    """What the kubelet would do; on a real cluster no kubelet runs behind the test nodes."""
    if cluster.real and await read(core, namespace, name) is not None:
        await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def stamp(raw: str) -> datetime:
    return datetime.fromisoformat(raw.replace("Z", "+00:00"))


async def test_a_deleted_pod_stays_terminating_for_its_grace_period(
    cluster: Cluster, core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    name = (await make_pod(gpus=1))["metadata"]["name"]  # terminationGracePeriodSeconds: 30
    before = datetime.now(UTC).replace(microsecond=0)
    body = await delete(core, namespace, name)
    after = datetime.now(UTC)

    assert body["kind"] == "Pod", "a pod's DELETE answers with the pod, Terminating"
    meta = body["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 30
    deadline = stamp(meta["deletionTimestamp"])
    assert before + timedelta(seconds=30) <= deadline <= after + timedelta(seconds=31)
    pod = await read(core, namespace, name)
    assert pod is not None
    assert pod.metadata.deletion_timestamp is not None
    if cluster.real:
        await finish(cluster, core, namespace, name)
        return
    # The simulator's kubelet takes 30 s x grace_scale (0.3 s here), then the pod is gone.
    await eventually(lambda: _gone(core, namespace, name))


async def _gone(core: aclient.CoreV1Api, namespace: str, name: str) -> bool:
    return await read(core, namespace, name) is None


async def test_a_second_delete_may_only_shorten_the_grace_period(
    cluster: Cluster, core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    name = (await make_pod())["metadata"]["name"]
    first = (await delete(core, namespace, name))["metadata"]

    longer = (await delete(core, namespace, name, grace_period_seconds=60))["metadata"]
    assert longer["deletionGracePeriodSeconds"] == 30, "a longer grace period is ignored"
    assert longer["deletionTimestamp"] == first["deletionTimestamp"]
    assert longer["resourceVersion"] == first["resourceVersion"], "and nothing is written"

    shorter = (await delete(core, namespace, name, grace_period_seconds=10))["metadata"]
    assert shorter["deletionGracePeriodSeconds"] == 10
    moved = stamp(first["deletionTimestamp"]) - stamp(shorter["deletionTimestamp"])
    assert moved == timedelta(seconds=20), "the deadline moves back by the difference"

    await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    assert await read(core, namespace, name) is None, "grace 0 finishes the deletion at once"


async def test_grace_zero_an_unbound_pod_and_a_finished_pod_go_at_once(
    core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    forced = (await make_pod())["metadata"]["name"]
    await core.delete_namespaced_pod(forced, namespace, grace_period_seconds=0)
    assert await read(core, namespace, forced) is None

    finished = (await make_pod(phase="Succeeded"))["metadata"]["name"]
    await core.delete_namespaced_pod(finished, namespace)
    assert await read(core, namespace, finished) is None, "a finished pod has nothing left to stop"

    unbound = unique("pending")
    spec = {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        "nodeSelector": {"sbc.sickbay.io/nowhere": "true"},  # no scheduler binds it anywhere
    }
    await core.create_namespaced_pod(namespace, {"metadata": {"name": unbound}, "spec": spec})
    await core.delete_namespaced_pod(unbound, namespace)
    assert await read(core, namespace, unbound) is None, "an unscheduled pod has no kubelet to wait for"


async def test_the_kubelet_leaves_a_finalizer_to_its_owner(
    sim: KubeApiServer, core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    name = (await make_pod())["metadata"]["name"]
    await core.patch_namespaced_pod(
        name, namespace, {"metadata": {"finalizers": ["sbc.sickbay.io/hold"]}}, _content_type=MERGE
    )
    await core.delete_namespaced_pod(name, namespace)

    async def confirmed() -> bool:
        pod = await read(core, namespace, name)
        return pod is not None and pod.metadata.deletion_grace_period_seconds == 0

    await eventually(confirmed)  # the kubelet is done, the finalizer still holds the object
    await core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}}, _content_type=MERGE)
    assert await read(core, namespace, name) is None


async def test_the_kubelet_never_removes_a_new_pod_under_the_old_name(
    sim: KubeApiServer, core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    name = (await make_pod())["metadata"]["name"]
    await core.delete_namespaced_pod(name, namespace)  # its kubelet will confirm in 0.3 s
    await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)  # forced, gone now
    reborn = await make_pod(name=name)  # a StatefulSet's replacement: same name, new UID
    await asyncio.sleep(0.5)
    pod = await read(core, namespace, name)
    assert pod is not None, "the old pod's kubelet deletes with its UID as a precondition"
    assert pod.metadata.uid == reborn["metadata"]["uid"]
    assert pod.metadata.deletion_timestamp is None


# --- evictions that fail outright (simulator steering) --------------------------------------------------


async def test_a_403_is_rbac_refusing_pods_eviction_before_the_pod_is_read(
    sim: KubeApiServer, core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    name = (await make_pod())["metadata"]["name"]
    other = (await make_pod())["metadata"]["name"]
    sim.fail_evictions(EvictionFailure(namespace, name, code=403))
    sim.reset_counters()

    code, status = await evict(core, namespace, name)
    assert code == 403
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'pods "{name}" is forbidden: User "{SICKBAY}" cannot create resource "pods/eviction" '
        f'in API group "" in the namespace "{namespace}"',
        "reason": "Forbidden",
        "details": {"name": name, "kind": "pods"},
        "code": 403,
    }
    pod = await read(core, namespace, name)
    assert pod.metadata.deletion_timestamp is None
    assert not any(c.type == "DisruptionTarget" for c in pod.status.conditions or [])
    assert (await evict(core, namespace, other))[0] == 201, "other pods are evicted as usual"
    sim.fail_evictions(EvictionFailure(namespace, "*", code=403))
    assert (await evict(core, namespace, unique("missing")))[0] == 403, "authorization comes before lookup"
    assert sim.counters()["evictions"] == {"evicted": 1, "failed": 2}


async def test_a_webhook_denial_is_a_400_without_a_reason(
    sim: KubeApiServer, core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    name = (await make_pod())["metadata"]["name"]
    sim.fail_evictions(EvictionFailure(namespace, name, code=400, webhook="pdb-guard.example.com"))
    code, status = await evict(core, namespace, name)
    assert code == 400
    assert "reason" not in status, "metav1.Status.reason is omitted when the webhook gave none"
    assert (
        status["message"]
        == 'admission webhook "pdb-guard.example.com" denied the request without explanation'
    )
    sim.fail_evictions(EvictionFailure("*", "*", code=400, message="node maintenance is frozen"))
    assert (await evict(core, namespace, name))[1]["message"] == (
        'admission webhook "deny-eviction.policy.example.com" denied the request: node maintenance is frozen'
    )
    sim.fail_evictions()
    assert (await evict(core, namespace, name))[0] == 201


async def test_each_failure_reaches_sickbays_client_as_its_typed_error(
    sim: KubeApiServer, cluster: Cluster, namespace: str, make_pod: PodFactory
) -> None:
    names = [(await make_pod())["metadata"]["name"] for _ in range(3)]
    sim.fail_evictions(
        *(EvictionFailure(namespace, n, code=c) for n, c in zip(names, (403, 400, 500), strict=True))
    )
    kube: KubeClient = await connect(
        kubeconfig=str(cluster.kubeconfig), retry=RetryPolicy(attempts=3, base=0.01, cap=0.02)
    )
    try:
        with pytest.raises(errors.ForbiddenError):
            await kube.evict_pod(namespace, names[0])
        with pytest.raises(errors.KubeError) as denied:
            await kube.evict_pod(namespace, names[1])
        assert denied.value.status == 400
        sim.reset_counters()
        with pytest.raises(
            errors.UnavailableError, match="Internal error occurred: etcdserver: request timed out"
        ):
            await kube.evict_pod(namespace, names[2])
        assert sim.counters()["requests"]["create"]["pods/eviction"] == 3, "a 500 is retried, then given up"
    finally:
        await kube.close()


async def test_the_control_endpoint_sets_reads_and_clears_eviction_failures(
    sim: KubeApiServer, core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    name = (await make_pod())["metadata"]["name"]
    async with aiohttp.ClientSession(sim.url) as http:
        response = await http.post(
            "/_sim/eviction-failures", json=[{"namespace": namespace, "name": name, "code": 500}]
        )
        assert response.status == 200
        listed = await (await http.get("/_sim/eviction-failures")).json()
        assert [(f["namespace"], f["name"], f["code"]) for f in listed] == [(namespace, name, 500)]
        code, status = await evict(core, namespace, name)
        assert (code, status["reason"]) == (500, "InternalError")
        for bad in (
            [{"namespace": namespace, "name": name, "code": 418}],
            [{"name": name, "code": 403, "x": 1}],
        ):
            refused = await http.post("/_sim/eviction-failures", json=bad)
            assert refused.status == 400
        assert (await http.delete("/_sim/eviction-failures")).status == 200
        assert await (await http.get("/_sim/eviction-failures")).json() == []
    assert (await evict(core, namespace, name))[0] == 201
