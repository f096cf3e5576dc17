"""List filtering: label selectors with every operator, field selectors Kubernetes indexes, pagination."""

from __future__ import annotations

import json

import pytest
from kubernetes.aio import client as aclient

from tests.contract.conftest import Nodes, PodFactory


@pytest.fixture
async def labelled_pods(make_pod: PodFactory, nodes: Nodes) -> dict[str, str]:
    """Four pods on two nodes: name → node."""
    first, second = await nodes.create(), await nodes.create()
    specs = [
        ("rank-0", first, {"gang": "llama", "rank": "0", "tier": "train"}, "Running"),
        ("rank-1", second, {"gang": "llama", "rank": "1", "tier": "train"}, "Running"),
        ("probe", first, {"tier": "probe"}, "Succeeded"),
        ("web", second, {"gang": "web", "rank": "7"}, "Pending"),
    ]
    for name, node, labels, phase in specs:
        await make_pod(name=name, node=node, labels=labels, phase=phase)
    return {name: node for name, node, _, _ in specs}


async def names(core: aclient.CoreV1Api, namespace: str, **query: str) -> list[str]:
    listed = await core.list_namespaced_pod(namespace, **query)
    return sorted(p.metadata.name for p in listed.items)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("gang=llama", ["rank-0", "rank-1"]),
        ("gang==llama", ["rank-0", "rank-1"]),
        ("gang!=llama", ["probe", "web"]),  # != also matches pods without the label
        ("gang", ["rank-0", "rank-1", "web"]),
        ("!gang", ["probe"]),
        ("rank in (0, 7)", ["rank-0", "web"]),
        ("rank notin (0,7)", ["probe", "rank-1"]),
        ("gang=llama,rank=1", ["rank-1"]),
        ("gang in (llama),tier=train,rank!=0", ["rank-1"]),
        ("rank>0", ["rank-1", "web"]),
    ],
)
async def test_label_selectors(
    core: aclient.CoreV1Api, namespace: str, labelled_pods: dict[str, str], selector: str, expected: list[str]
) -> None:
    assert await names(core, namespace, label_selector=selector) == expected


async def test_invalid_label_selector_is_400(core: aclient.CoreV1Api, namespace: str) -> None:
    with pytest.raises(aclient.ApiException) as caught:
        await core.list_namespaced_pod(namespace, label_selector="gang in llama")
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["reason"] == "BadRequest"


async def test_field_selectors(
    core: aclient.CoreV1Api, namespace: str, labelled_pods: dict[str, str]
) -> None:
    first = labelled_pods["rank-0"]
    assert await names(core, namespace, field_selector=f"spec.nodeName={first}") == ["probe", "rank-0"]
    assert await names(core, namespace, field_selector=f"spec.nodeName!={first}") == ["rank-1", "web"]
    assert await names(core, namespace, field_selector="metadata.name=web") == ["web"]
    assert await names(core, namespace, field_selector="status.phase=Running") == ["rank-0", "rank-1"]
    both = f"spec.nodeName={first},status.phase!=Succeeded,status.phase!=Failed"
    assert await names(core, namespace, field_selector=both) == ["rank-0"]
    assert await names(core, namespace, field_selector=f"metadata.namespace={namespace}") == sorted(
        labelled_pods
    )


async def test_field_and_label_selectors_combine_across_namespaces(
    core: aclient.CoreV1Api, namespace: str, labelled_pods: dict[str, str]
) -> None:
    listed = await core.list_pod_for_all_namespaces(
        label_selector="gang=llama", field_selector=f"metadata.namespace={namespace}"
    )
    assert sorted(p.metadata.name for p in listed.items) == ["rank-0", "rank-1"]
    assert int(listed.metadata.resource_version) > 0


async def test_unsupported_field_label_is_400(core: aclient.CoreV1Api, namespace: str) -> None:
    with pytest.raises(aclient.ApiException) as caught:
        await core.list_namespaced_pod(namespace, field_selector="spec.containers=x")
    assert caught.value.status == 400
    assert "field label not supported: spec.containers" in json.loads(caught.value.body)["message"]


async def test_node_field_selector_on_unschedulable(core: aclient.CoreV1Api, nodes: Nodes) -> None:
    cordoned, schedulable = await nodes.create(), await nodes.create()
    await core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    listed = await core.list_node(field_selector="spec.unschedulable=true")
    assert cordoned in [n.metadata.name for n in listed.items]
    assert schedulable not in [n.metadata.name for n in listed.items]
    listed = await core.list_node(field_selector="spec.unschedulable=false")
    assert schedulable in [n.metadata.name for n in listed.items]


async def test_pagination_with_limit_and_continue(
    core: aclient.CoreV1Api, namespace: str, labelled_pods: dict[str, str]
) -> None:
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = await core.list_namespaced_pod(namespace, limit=3, _continue=token)
        seen.extend(p.metadata.name for p in page.items)
        pages += 1
        token = page.metadata._continue
        if not token:
            break
    assert pages == 2
    assert seen == sorted(labelled_pods)
