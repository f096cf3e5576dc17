"""Patch semantics: strategic merge with Kubernetes' real merge keys, JSON merge patch, JSON patch."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.aio import client as aclient

from tests.contract.conftest import Nodes, PodFactory, unique

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def condition(kind: str, status: str, reason: str) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": reason}


async def test_strategic_merge_keeps_node_conditions_by_type(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    name = await nodes.create()
    await core.patch_node_status(
        name,
        {
            "status": {
                "conditions": [
                    condition("Ready", "True", "KubeletReady"),
                    condition("GpuHealthy", "True", "Ok"),
                ]
            }
        },
        _content_type=STRATEGIC,
    )
    await core.patch_node_status(
        name, {"status": {"conditions": [condition("GpuHealthy", "False", "Xid79")]}}, _content_type=STRATEGIC
    )
    node = await core.read_node(name)
    by_type = {c.type: (c.status, c.reason) for c in node.status.conditions}
    assert by_type["GpuHealthy"] == ("False", "Xid79")
    assert by_type["Ready"] == ("True", "KubeletReady")


async def test_merge_patch_replaces_the_whole_conditions_list(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    name = await nodes.create()
    both = [condition("Ready", "True", "KubeletReady"), condition("GpuHealthy", "True", "Ok")]
    await core.patch_node_status(name, {"status": {"conditions": both}}, _content_type=STRATEGIC)
    await core.patch_node_status(
        name, {"status": {"conditions": [condition("GpuHealthy", "False", "Xid79")]}}, _content_type=MERGE
    )
    node = await core.read_node(name)
    assert [c.type for c in node.status.conditions] == ["GpuHealthy"]


async def test_strategic_merge_replaces_taints_as_a_whole_list(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    existing = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
    name = await nodes.create(taints=[existing])
    ours = {"key": "sickbay.io/unhealthy", "value": "reset-gpu", "effect": "NoSchedule"}
    await core.patch_node(name, {"spec": {"taints": [ours]}}, _content_type=STRATEGIC)
    node = await core.read_node(name)
    # spec.taints has no patch merge key: the operator's taint is gone. Clients must send the full list.
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [
        ("sickbay.io/unhealthy", "reset-gpu", "NoSchedule")
    ]


async def test_merge_patch_null_deletes_a_key(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    name = await nodes.create(labels={"sickbay.io/state": "quarantined", "keep": "me"})
    await core.patch_node(
        name,
        {"metadata": {"labels": {"sickbay.io/state": None}, "annotations": {"sickbay.io/reason": "xid 79"}}},
        _content_type=MERGE,
    )
    node = await core.read_node(name)
    assert node.metadata.labels == {"keep": "me"}
    assert node.metadata.annotations == {"sickbay.io/reason": "xid 79"}


async def test_quarantine_in_one_patch(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    """Taint + cordon + label + annotation in one write with the read resourceVersion, as Sickbay does it."""
    name = await nodes.create()
    node = await core.read_node(name)
    patch = {
        "metadata": {
            "resourceVersion": node.metadata.resource_version,
            "labels": {"sickbay.io/state": "quarantined"},
            "annotations": {"sickbay.io/fault": json.dumps({"class": "reset-gpu", "xid": 79})},
        },
        "spec": {
            "unschedulable": True,
            "taints": [{"key": "sickbay.io/unhealthy", "value": "reset-gpu", "effect": "NoSchedule"}],
        },
    }
    patched = await core.patch_node(name, patch, _content_type=MERGE)
    assert patched.spec.unschedulable is True
    assert patched.metadata.labels["sickbay.io/state"] == "quarantined"
    assert json.loads(patched.metadata.annotations["sickbay.io/fault"])["xid"] == 79


async def test_strategic_merge_of_owner_references_by_uid_and_containers_by_name(
    core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "j",
        "uid": "11111111-1111-1111-1111-111111111111",
    }
    pod = await make_pod(owner={**owner, "controller": True})
    name = pod["metadata"]["name"]
    other = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "c",
        "uid": "22222222-2222-2222-2222-222222222222",
    }
    patched = await core.patch_namespaced_pod(
        name,
        namespace,
        {
            "metadata": {"ownerReferences": [other]},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]},
        },
        _content_type=STRATEGIC,
    )
    assert sorted(r.uid for r in patched.metadata.owner_references) == [owner["uid"], other["uid"]]
    assert [(c.name, c.image) for c in patched.spec.containers] == [("main", "registry.k8s.io/pause:3.9")]


async def test_strategic_merge_directives(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    name = await nodes.create()
    both = [condition("Ready", "True", "KubeletReady"), condition("GpuHealthy", "True", "Ok")]
    await core.patch_node_status(name, {"status": {"conditions": both}}, _content_type=STRATEGIC)
    await core.patch_node_status(
        name,
        {"status": {"conditions": [{"type": "GpuHealthy", "$patch": "delete"}]}},
        _content_type=STRATEGIC,
    )
    assert [c.type for c in (await core.read_node(name)).status.conditions] == ["Ready"]
    await core.patch_node_status(
        name,
        {"status": {"conditions": [{"$patch": "replace"}, condition("GpuHealthy", "False", "Xid48")]}},
        _content_type=STRATEGIC,
    )
    assert [c.type for c in (await core.read_node(name)).status.conditions] == ["GpuHealthy"]


async def test_json_patch(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    name = await nodes.create(labels={"a": "1"})
    node = await core.read_node(name)
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version},
        {"op": "add", "path": "/metadata/labels/sickbay.io~1state", "value": "draining"},
        {"op": "remove", "path": "/metadata/labels/a"},
        {"op": "add", "path": "/spec/taints", "value": [{"key": "k", "effect": "NoExecute"}]},
    ]
    patched = await core.patch_node(name, ops)  # a list body goes out as application/json-patch+json
    assert patched.metadata.labels == {"sickbay.io/state": "draining"}
    assert patched.spec.taints[0].key == "k"
    with pytest.raises(aclient.ApiException) as caught:
        await core.patch_node(
            name, [{"op": "test", "path": "/metadata/labels/sickbay.io~1state", "value": "x"}]
        )
    assert caught.value.status == 422


UNSUPPORTED_EFFECT = 'metadata.taints[0].effect: Unsupported value: "Sometimes"'


def taint_causes(error: aclient.ApiException) -> list[tuple[str, str]]:
    body = json.loads(error.body)
    assert (error.status, body["reason"]) == (422, "Invalid")
    return [(c["reason"], c["field"]) for c in body["details"]["causes"] if "taints" in c["field"]]


async def test_invalid_taint_on_create_is_reported_once_under_metadata_taints(
    core: aclient.CoreV1Api, nodes: Nodes
) -> None:
    """ValidateNode checks taints with a path rooted at "metadata": the field reads metadata.taints[0]."""
    name = unique("sbc-node")
    nodes.created.append(name)  # cleaned up should the create succeed after all
    bad = {"metadata": {"name": name}, "spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}}
    with pytest.raises(aclient.ApiException) as caught:
        await core.create_node(bad)
    assert taint_causes(caught.value) == [("FieldValueNotSupported", "metadata.taints[0].effect")]
    message = json.loads(caught.value.body)["message"]
    assert message.startswith(f'Node "{name}" is invalid: {UNSUPPORTED_EFFECT}')


async def test_invalid_taint_on_update_is_reported_twice_and_named_once(
    core: aclient.CoreV1Api, nodes: Nodes
) -> None:
    """An update runs ValidateNode and ValidateNodeUpdate, and both check the taints; the message, built by
    ToAggregate, names the duplicate once."""
    name = await nodes.create()
    with pytest.raises(aclient.ApiException) as caught:
        await core.patch_node(
            name, {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}}, _content_type=MERGE
        )
    assert taint_causes(caught.value) == [("FieldValueNotSupported", "metadata.taints[0].effect")] * 2
    message = json.loads(caught.value.body)["message"]
    assert message.startswith(f'Node "{name}" is invalid: {UNSUPPORTED_EFFECT}')
    assert message.count(UNSUPPORTED_EFFECT) == 1
    assert not (await core.read_node(name)).spec.taints


async def test_invalid_label_is_422(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    name = await nodes.create()
    with pytest.raises(aclient.ApiException) as caught:
        await core.patch_node(
            name, {"metadata": {"labels": {"sickbay.io/fault": "{xid: 79}"}}}, _content_type=MERGE
        )
    assert caught.value.status == 422
    causes = json.loads(caught.value.body)["details"]["causes"]
    assert {c["field"] for c in causes} == {"metadata.labels"}
    assert "sickbay.io/fault" not in ((await core.read_node(name)).metadata.labels or {})


async def test_pod_spec_is_immutable_except_images(
    core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory, nodes: Nodes
) -> None:
    pod = await make_pod()
    with pytest.raises(aclient.ApiException) as caught:
        await core.patch_namespaced_pod(
            pod["metadata"]["name"],
            namespace,
            {"spec": {"nodeName": await nodes.create()}},
            _content_type=MERGE,
        )
    assert caught.value.status == 422
