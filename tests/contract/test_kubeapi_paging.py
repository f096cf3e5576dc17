"""List paging as kube-apiserver serves it: one snapshot per list, selectors, expiry, and a page's cost.

Over HTTP with the official client (these hold on a real cluster too, save the simulator-only ones), and
on the store directly for how many objects a page reads.
"""

from __future__ import annotations

import json

import pytest
from kubernetes.aio import client as aclient

from app.sim.kubeapi import KubeApiServer, paging
from app.sim.kubeapi.registry import selection
from app.sim.kubeapi.resources import NODES, PODS, Catalog, JsonObj
from app.sim.kubeapi.selectors import FieldSelector, parse_label_selector
from app.sim.kubeapi.store import Store
from tests.contract.conftest import PodFactory


def _meta(listed: aclient.V1PodList) -> aclient.V1ListMeta:
    assert listed.metadata is not None
    return listed.metadata


def _names(pods: list[aclient.V1Pod]) -> list[str]:
    return [str(p.metadata.name) for p in pods if p.metadata is not None]


async def test_later_pages_read_the_first_pages_snapshot(
    core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    for name in ("a", "b", "c", "d", "e"):
        await make_pod(name=name, labels={"tier": "train"})
    first = await core.list_namespaced_pod(namespace, limit=2)
    assert _names(first.items) == ["a", "b"]
    assert _meta(first).remaining_item_count == 3

    # Between pages: one pod past the page goes, one is created, one changes.
    await core.delete_namespaced_pod("d", namespace, grace_period_seconds=0)
    await make_pod(name="c2")
    await core.patch_namespaced_pod("e", namespace, {"metadata": {"labels": {"tier": "changed"}}})

    seen: list[aclient.V1Pod] = []
    token = _meta(first)._continue
    while token:
        page = await core.list_namespaced_pod(namespace, limit=2, _continue=token)
        assert _meta(page).resource_version == _meta(first).resource_version
        seen.extend(page.items)
        token = _meta(page)._continue
    # The list as it was at the first page: d still there, no c2, e with its old labels.
    assert _names(seen) == ["c", "d", "e"]
    assert seen[-1].metadata is not None
    assert seen[-1].metadata.labels == {"tier": "train"}
    # A new list sees the writes.
    now = await core.list_namespaced_pod(namespace)
    assert sorted(_names(now.items)) == ["a", "b", "c", "c2", "e"]


async def test_a_selected_list_pages_without_remaining_item_count(
    core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    for index in range(6):
        await make_pod(name=f"p{index}", labels={"even": str(index % 2 == 0).lower()})
    plain = await core.list_namespaced_pod(namespace, limit=2)
    assert _meta(plain).remaining_item_count == 4

    names: list[str] = []
    token, pages = None, 0
    while True:
        page = await core.list_namespaced_pod(namespace, limit=2, label_selector="even=true", _continue=token)
        assert _meta(page).remaining_item_count is None  # store.go GetList: only `if pred.Empty()`
        names.extend(_names(page.items))
        pages += 1
        token = _meta(page)._continue
        if not token:
            break
    assert names == ["p0", "p2", "p4"]
    assert pages == 2


async def test_a_continue_token_past_compaction_is_410_with_a_token_to_finish(
    sim: KubeApiServer, core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    for name in ("a", "b", "c"):
        await make_pod(name=name)
    first = await core.list_namespaced_pod(namespace, limit=1)
    await make_pod(name="b2")  # a write after the snapshot, then etcd's compaction forgets it
    sim.compact_watch_history()

    with pytest.raises(aclient.ApiException) as caught:
        await core.list_namespaced_pod(namespace, limit=1, _continue=_meta(first)._continue)
    assert caught.value.status == 410
    body = json.loads(
        caught.value.body or "{}"
    )  # the Status: its metadata.continue finishes the list inconsistently
    assert body["reason"] == "Expired"
    assert "too old to display a consistent list result" in body["message"]
    rest = await core.list_namespaced_pod(namespace, _continue=body["metadata"]["continue"])
    assert _names(rest.items) == ["b", "b2", "c"]  # current state, from where it was


async def test_continue_with_a_resource_version_is_refused(
    core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    for name in ("a", "b"):
        await make_pod(name=name)
    first = await core.list_namespaced_pod(namespace, limit=1)
    with pytest.raises(aclient.ApiException) as caught:
        await core.list_namespaced_pod(
            namespace, limit=1, _continue=_meta(first)._continue, resource_version="1"
        )
    assert caught.value.status == 400


def _node(name: str) -> JsonObj:
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "labels": {"n": name[-1]}}}


def test_a_page_reads_its_own_length_not_the_collection() -> None:
    store = Store(Catalog())
    for index in range(2_000):
        store.put(NODES, _node(f"node-{index:05d}"))
    seen: list[str] = []
    token, pages = None, 0
    while True:
        page = paging.list_page(store, NODES, namespace=None, matches=None, limit=100, token=token)
        # The page plus the one key that tells whether more follow; never the 2,000.
        assert page.examined <= 101
        seen.extend(o["metadata"]["name"] for o in page.items)
        pages += 1
        token = page.continue_token
        if token is None:
            break
        # A write between pages costs the next page that one write, not a rescan.
        store.put(NODES, _node(f"node-{index:05d}-late"))
    assert pages == 20
    assert seen == [f"node-{i:05d}" for i in range(2_000)]


def test_a_page_within_a_namespace_reads_only_that_namespace() -> None:
    store = Store(Catalog())
    for namespace in ("a", "b", "c"):
        for index in range(500):
            pod = {"metadata": {"name": f"p{index:03d}", "namespace": namespace, "labels": {"i": str(index)}}}
            store.put(PODS, pod)
    page = paging.list_page(store, PODS, namespace="b", matches=None, limit=None, token=None)
    assert page.examined == 500
    assert {o["metadata"]["namespace"] for o in page.items} == {"b"}
    assert page.remaining is None
    assert page.continue_token is None

    # A selector is applied while reading: the scan stops once the limit is met.
    matches = selection(parse_label_selector("i in (3,4)"), FieldSelector())
    page = paging.list_page(store, PODS, namespace="b", matches=matches, limit=1, token=None)
    assert [o["metadata"]["name"] for o in page.items] == ["p003"]
    assert page.examined == 5  # p000..p003, then one more key to know more follow
    assert page.remaining is None
    assert page.continue_token is not None
