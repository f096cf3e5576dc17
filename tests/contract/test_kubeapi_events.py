"""core/v1 Events: create, list by involved object and reason, update the count, namespace rules."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.aio import client as aclient

from tests.contract.conftest import Cluster, Nodes, unique

STAMP = "2025-01-01T00:00:00Z"


def node_event(node: str, uid: str, *, reason: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "metadata": {"name": unique(f"{node}.sickbay"), "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid},
        "reason": reason,
        "message": f"{node} quarantined: XID 79 on GPU 3",
        "type": "Warning",
        "source": {"component": "sickbay"},
        "firstTimestamp": STAMP,
        "lastTimestamp": STAMP,
        "count": 1,
    }


async def test_events_create_list_and_count_update(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    name = await nodes.create()
    uid = (await core.read_node(name)).metadata.uid
    created = await core.create_namespaced_event(
        "default", node_event(name, uid, reason="SickbayQuarantined")
    )
    await core.create_namespaced_event("default", node_event(name, uid, reason="SickbayReleased"))

    listed = await core.list_namespaced_event(
        "default",
        field_selector=f"involvedObject.kind=Node,involvedObject.name={name},reason=SickbayQuarantined",
    )
    assert [e.metadata.name for e in listed.items] == [created.metadata.name]
    assert listed.items[0].source.component == "sickbay"

    everywhere = await core.list_event_for_all_namespaces(field_selector=f"involvedObject.uid={uid}")
    assert sorted(e.reason for e in everywhere.items) == ["SickbayQuarantined", "SickbayReleased"]

    bumped = await core.patch_namespaced_event(
        created.metadata.name, "default", {"count": 2, "lastTimestamp": "2025-01-01T00:05:00Z"}
    )
    assert bumped.count == 2
    assert int(bumped.metadata.resource_version) > int(created.metadata.resource_version)


async def test_pod_event_must_live_in_the_pods_namespace(core: aclient.CoreV1Api, namespace: str) -> None:
    event = {
        "metadata": {"name": unique("pod.sickbay")},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": namespace},
        "reason": "SickbayEvicted",
        "message": "evicted",
        "type": "Normal",
        "source": {"component": "sickbay"},
    }
    with pytest.raises(aclient.ApiException) as caught:
        await core.create_namespaced_event("default", event)
    assert caught.value.status == 422
    created = await core.create_namespaced_event(namespace, event)
    assert created.involved_object.namespace == namespace


async def test_generate_name(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    node = await nodes.create()
    body = node_event(node, "u", reason="SickbayQuarantined")
    body["metadata"] = {"generateName": f"{node}."}
    created = await core.create_namespaced_event("default", body)
    assert created.metadata.name.startswith(f"{node}.")
    assert len(created.metadata.name) == len(node) + 1 + 5


async def test_kubectl_get_events_prints_the_event(
    cluster: Cluster, core: aclient.CoreV1Api, nodes: Nodes
) -> None:
    name = await nodes.create()
    await core.create_namespaced_event("default", node_event(name, "u", reason="SickbayQuarantined"))
    _, out, _ = await cluster.kubectl(
        "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={name}"
    )
    header, row = out.strip().splitlines()[:2]
    assert header.split()[:4] == ["LAST", "SEEN", "TYPE", "REASON"]
    assert "SickbayQuarantined" in row
    assert f"node/{name}" in row
