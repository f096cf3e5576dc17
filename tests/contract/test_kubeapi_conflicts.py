"""resourceVersion is an optimistic lock: stale writes are 409 Conflict, duplicate creates 409 AlreadyExists."""

from __future__ import annotations

import asyncio
import json

import kubernetes
import pytest
from kubernetes.aio import client as aclient

from tests.contract.conftest import Nodes, PodFactory

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
GPU_DOWN = {"type": "GpuHealthy", "status": "False", "reason": "Xid79", "message": "GPU fell off the bus"}


def status_of(error: aclient.ApiException) -> dict[str, object]:
    body: dict[str, object] = json.loads(error.body)
    return body


async def test_patch_with_stale_resource_version_is_409_conflict(
    core: aclient.CoreV1Api, nodes: Nodes
) -> None:
    name = await nodes.create()
    node = await core.read_node(name)
    stale = node.metadata.resource_version
    await core.patch_node(
        name, {"metadata": {"labels": {"sickbay.io/state": "quarantined"}}}, _content_type=MERGE
    )

    for content_type in (MERGE, STRATEGIC):
        with pytest.raises(aclient.ApiException) as caught:
            await core.patch_node(
                name,
                {"metadata": {"resourceVersion": stale, "labels": {"sickbay.io/state": "draining"}}},
                _content_type=content_type,
            )
        assert caught.value.status == 409
        status = status_of(caught.value)
        assert status["kind"] == "Status"
        assert status["reason"] == "Conflict"
        assert status["code"] == 409
        assert "the object has been modified" in str(status["message"])

    after = await core.read_node(name)
    assert after.metadata.labels["sickbay.io/state"] == "quarantined"


async def test_patch_with_current_resource_version_succeeds_and_bumps_it(
    core: aclient.CoreV1Api, nodes: Nodes
) -> None:
    name = await nodes.create()
    node = await core.read_node(name)
    patched = await core.patch_node(
        name,
        {"metadata": {"resourceVersion": node.metadata.resource_version, "labels": {"a": "b"}}},
        _content_type=MERGE,
    )
    assert int(patched.metadata.resource_version) > int(node.metadata.resource_version)
    assert patched.metadata.labels["a"] == "b"


async def test_put_with_stale_resource_version_is_409(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    name = await nodes.create()
    first = await core.read_node(name)
    second = await core.read_node(name)
    first.metadata.labels = {"writer": "one"}
    await core.replace_node(name, first)
    second.metadata.labels = {"writer": "two"}
    with pytest.raises(aclient.ApiException) as caught:
        await core.replace_node(name, second)
    assert caught.value.status == 409
    assert status_of(caught.value)["reason"] == "Conflict"
    assert (await core.read_node(name)).metadata.labels == {"writer": "one"}


async def test_concurrent_read_modify_write_one_wins_one_conflicts(
    core: aclient.CoreV1Api, nodes: Nodes
) -> None:
    name = await nodes.create()
    snapshot = await core.read_node(name)
    rv = snapshot.metadata.resource_version

    async def write(value: str) -> int:
        try:
            await core.patch_node(
                name, {"metadata": {"resourceVersion": rv, "labels": {"w": value}}}, _content_type=MERGE
            )
        except aclient.ApiException as error:
            return int(error.status)
        return 200

    codes = sorted(await asyncio.gather(*(write(str(i)) for i in range(5))))
    assert codes == [200, 409, 409, 409, 409]


async def test_create_existing_name_is_409_already_exists(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    name = await nodes.create()
    with pytest.raises(aclient.ApiException) as caught:
        await core.create_node({"metadata": {"name": name}})
    status = status_of(caught.value)
    assert caught.value.status == 409
    assert status["reason"] == "AlreadyExists"
    assert status["details"] == {"name": name, "kind": "nodes"}


async def test_missing_object_is_404_not_found_status(core: aclient.CoreV1Api, namespace: str) -> None:
    with pytest.raises(aclient.ApiException) as caught:
        await core.read_namespaced_pod("no-such-pod", namespace)
    status = status_of(caught.value)
    assert caught.value.status == 404
    assert status["reason"] == "NotFound"
    assert status["message"] == 'pods "no-such-pod" not found'


async def test_resource_versions_come_from_one_increasing_counter(
    core: aclient.CoreV1Api, nodes: Nodes, make_pod: PodFactory
) -> None:
    node = await core.read_node(await nodes.create())
    pod = await make_pod(node=node.metadata.name)
    ns_list = await core.list_namespace()
    assert int(node.metadata.resource_version) < int(pod["metadata"]["resourceVersion"])
    assert int(pod["metadata"]["resourceVersion"]) <= int(ns_list.metadata.resource_version)
    assert node.metadata.uid
    assert node.metadata.uid != pod["metadata"]["uid"]
    assert node.metadata.creation_timestamp is not None


async def test_no_op_patch_keeps_the_resource_version(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    name = await nodes.create(labels={"a": "b"})
    before = await core.read_node(name)
    after = await core.patch_node(name, {"metadata": {"labels": {"a": "b"}}}, _content_type=MERGE)
    assert after.metadata.resource_version == before.metadata.resource_version


async def test_main_endpoint_ignores_status(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    name = await nodes.create()
    await core.patch_node(name, {"status": {"conditions": [GPU_DOWN]}}, _content_type=STRATEGIC)
    node = await core.read_node(name)
    assert not any(c.type == "GpuHealthy" for c in (node.status.conditions if node.status else None) or [])


async def test_node_status_endpoint_keeps_label_changes_and_drops_spec_changes(
    core: aclient.CoreV1Api, nodes: Nodes
) -> None:
    """nodeStatusStrategy.PrepareForUpdate resets only the spec: labels written through /status stay."""
    name = await nodes.create(labels={"keep": "me"})
    patched = await core.patch_node_status(
        name,
        {
            "metadata": {"labels": {"x": "y"}},
            "spec": {"unschedulable": True},
            "status": {"conditions": [GPU_DOWN]},
        },
        _content_type=STRATEGIC,
    )
    assert patched.metadata.labels == {"keep": "me", "x": "y"}
    node = await core.read_node(name)
    assert [c.type for c in node.status.conditions if c.type == "GpuHealthy"] == ["GpuHealthy"]
    assert node.metadata.labels == {"keep": "me", "x": "y"}
    assert not node.spec.unschedulable


async def test_delete_with_a_stale_uid_precondition_is_409_conflict(
    core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    pod = await make_pod()
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    stale = "00000000-0000-0000-0000-000000000000"
    with pytest.raises(aclient.ApiException) as caught:
        await core.delete_namespaced_pod(name, namespace, body={"preconditions": {"uid": stale}})
    assert caught.value.status == 409
    status = status_of(caught.value)
    assert (status["reason"], status["code"]) == ("Conflict", 409)
    assert status["message"] == (
        f'Operation cannot be fulfilled on Pod "{name}": the UID in the precondition ({stale}) does not '
        f"match the UID in record ({uid}). The object might have been deleted and then recreated"
    )
    assert status["details"] == {"name": name, "kind": "Pod"}  # named by kind, not by resource ("pods")
    assert (await core.read_namespaced_pod(name, namespace)).metadata.deletion_timestamp is None

    deleted = await core.delete_namespaced_pod(
        name, namespace, body={"preconditions": {"uid": uid}}, grace_period_seconds=0
    )
    assert deleted.metadata.name == name
    with pytest.raises(aclient.ApiException) as gone:
        await core.delete_namespaced_pod(name, namespace)
    assert gone.value.status == 404


async def test_delete_with_a_stale_resource_version_precondition_is_409_conflict(
    core: aclient.CoreV1Api, nodes: Nodes
) -> None:
    name = await nodes.create()
    stale = (await core.read_node(name)).metadata.resource_version
    await core.patch_node(name, {"metadata": {"labels": {"a": "b"}}}, _content_type=MERGE)
    current = (await core.read_node(name)).metadata.resource_version
    with pytest.raises(aclient.ApiException) as caught:
        await core.delete_node(name, body={"preconditions": {"resourceVersion": stale}})
    assert caught.value.status == 409
    status = status_of(caught.value)
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        f'Operation cannot be fulfilled on Node "{name}": the ResourceVersion in the precondition ({stale}) '
        f"does not match the ResourceVersion in record ({current}). The object might have been modified"
    )
    assert (await core.read_node(name)).metadata.name == name
    await core.delete_node(name, body={"preconditions": {"resourceVersion": current}})
    with pytest.raises(aclient.ApiException) as gone:
        await core.read_node(name)
    assert gone.value.status == 404


async def test_sync_client_sees_the_same_conflict(
    sync_client: kubernetes.client.ApiClient, core: aclient.CoreV1Api, nodes: Nodes
) -> None:
    name = await nodes.create()
    api = kubernetes.client.CoreV1Api(sync_client)
    node = await asyncio.to_thread(api.read_node, name)
    await core.patch_node(name, {"metadata": {"labels": {"a": "1"}}}, _content_type=MERGE)
    node.metadata.labels = {"a": "2"}
    with pytest.raises(kubernetes.client.ApiException) as caught:
        await asyncio.to_thread(api.replace_node, name, node)
    assert caught.value.status == 409


async def test_dry_run_validates_without_writing(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    name = await nodes.create()
    before = await core.read_node(name)
    await core.patch_node(name, {"spec": {"unschedulable": True}}, dry_run="All", _content_type=MERGE)
    after = await core.read_node(name)
    assert not after.spec.unschedulable
    assert after.metadata.resource_version == before.metadata.resource_version
