"""Watches through the official client: changes after a resourceVersion, selectors, 410 Expired, timeouts.

The blocking client's `watch.Watch().stream(list_node, resource_version=...)` is what most Python
controllers run; it goes through `asyncio.to_thread` because the simulator shares the test's loop. Tests
that need the simulator's knobs (compaction, a short bookmark interval, counters) take `sim` or start
their own server; the others run against a real cluster too (see conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes import watch
from kubernetes.aio import client as aclient
from kubernetes.aio import config as aconfig
from kubernetes.aio import watch as awatch

from app.sim.kubeapi import KubeApiServer
from app.sim.kubeapi.watch import WatchConfig
from tests.contract.conftest import Nodes, PodFactory, unique

Event = tuple[str, str]


def _stream(sync_client: kubernetes.client.ApiClient, **query: Any) -> list[Event]:
    """Every event of one blocking watch of nodes, until its `timeout_seconds` ends it: (type, name)."""
    core = kubernetes.client.CoreV1Api(sync_client)
    seen = []
    for event in watch.Watch().stream(core.list_node, **query):
        seen.append((event["type"], event["raw_object"]["metadata"].get("name", "")))
    return seen


async def test_a_watch_from_a_list_sees_each_change_after_it_in_order(
    core: aclient.CoreV1Api, nodes: Nodes, sync_client: kubernetes.client.ApiClient
) -> None:
    group = {"sbc-watch": unique("g")}
    selector = f"sbc-watch={group['sbc-watch']}"
    first = await nodes.create(labels=group)
    listed = await core.list_node(label_selector=selector)
    since = listed.metadata.resource_version
    second = await nodes.create(labels=group)
    await core.patch_node(first, {"metadata": {"annotations": {"sbc/touched": "yes"}}})
    await core.delete_node(second)

    seen = await asyncio.to_thread(
        _stream, sync_client, resource_version=since, label_selector=selector, timeout_seconds=2
    )

    assert seen == [("ADDED", second), ("MODIFIED", first), ("DELETED", second)]


async def test_a_watch_without_a_resource_version_starts_with_what_exists(
    api_client: aclient.ApiClient, core: aclient.CoreV1Api, nodes: Nodes
) -> None:
    group = {"sbc-watch": unique("g")}
    made = sorted([await nodes.create(labels=group), await nodes.create(labels=group)])
    stream = awatch.Watch().stream(
        core.list_node, label_selector=f"sbc-watch={group['sbc-watch']}", timeout_seconds=1
    )
    seen = []
    async with stream:
        async for event in stream:
            seen.append((event["type"], event["object"].metadata.name))
    assert sorted(seen) == [("ADDED", name) for name in made]


async def test_an_update_across_the_selector_arrives_as_added_or_deleted(
    core: aclient.CoreV1Api, nodes: Nodes, sync_client: kubernetes.client.ApiClient
) -> None:
    key = unique("sbc-in")
    name = await nodes.create()
    since = (await core.read_node(name)).metadata.resource_version
    await core.patch_node(name, {"metadata": {"labels": {key: "yes"}}})
    await core.patch_node(name, {"metadata": {"annotations": {"sbc/still": "in"}}})
    await core.patch_node(name, {"metadata": {"labels": {key: None}}})

    seen = await asyncio.to_thread(
        _stream, sync_client, resource_version=since, label_selector=key, timeout_seconds=1
    )

    assert seen == [("ADDED", name), ("MODIFIED", name), ("DELETED", name)]


async def test_a_namespaced_pod_watch_follows_status_writes(
    core: aclient.CoreV1Api, namespace: str, make_pod: PodFactory
) -> None:
    since = (await core.list_namespaced_pod(namespace)).metadata.resource_version
    pod = await make_pod(phase="Running")  # a create, then a status write
    stream = awatch.Watch().stream(
        core.list_namespaced_pod, namespace, resource_version=since, timeout_seconds=1
    )
    seen = []
    async with stream:
        async for event in stream:
            seen.append((event["type"], event["object"].metadata.name, event["object"].status.phase))
    name = pod["metadata"]["name"]
    assert seen == [("ADDED", name, "Pending"), ("MODIFIED", name, "Running")]


async def test_timeout_seconds_ends_the_stream(
    sync_client: kubernetes.client.ApiClient, nodes: Nodes
) -> None:
    await nodes.create()
    core = kubernetes.client.CoreV1Api(sync_client)
    since = (await asyncio.to_thread(core.list_node)).metadata.resource_version
    started = time.monotonic()
    seen = await asyncio.to_thread(_stream, sync_client, resource_version=since, timeout_seconds=1)
    took = time.monotonic() - started
    assert seen == []
    assert 0.9 <= took < 10, f"the stream ended after {took:.2f}s"


async def test_a_compacted_resource_version_is_410_expired(
    sim: KubeApiServer, core: aclient.CoreV1Api, nodes: Nodes, sync_client: kubernetes.client.ApiClient
) -> None:
    await nodes.create()
    since = (await core.list_node()).metadata.resource_version
    await nodes.create()
    current = sim.compact_watch_history()

    with pytest.raises(kubernetes.client.ApiException) as caught:
        await asyncio.to_thread(_stream, sync_client, resource_version=since, timeout_seconds=1)
    assert caught.value.status == 410
    assert "Expired" in str(caught.value.reason)

    # In-band, as kube-apiserver answers it: HTTP 200, then one ERROR event carrying the Status.
    response = await core.list_node_without_preload_content(
        watch=True, resource_version=since, timeout_seconds=1
    )
    try:
        assert response.status == 200
        first = json.loads(await response.content.readline())
    finally:
        response.release()
    assert first["type"] == "ERROR"
    status = first["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"] == f"too old resource version: {since} ({current})"

    # A relist gives a resourceVersion to watch from again.
    relisted = (await core.list_node()).metadata.resource_version
    assert await asyncio.to_thread(_stream, sync_client, resource_version=relisted, timeout_seconds=1) == []


async def test_a_watch_too_far_behind_a_busy_resource_is_expired(tmp_path: Path) -> None:
    """The log is bounded per resource: writes beyond its capacity push the oldest out."""
    async with KubeApiServer(watch=WatchConfig(capacity=3)) as api, _client(api, tmp_path) as core:
        since = (await core.list_node()).metadata.resource_version
        for n in range(4):
            await core.create_node({"metadata": {"name": f"sbc-busy-{n}"}})
        response = await core.list_node_without_preload_content(
            watch=True, resource_version=since, timeout_seconds=1
        )
        first = json.loads(await response.content.readline())
        response.release()
        assert first["object"]["code"] == 410
        # From one change back the window still covers it.
        kept = await core.list_node_without_preload_content(
            watch=True, resource_version=str(int(api.store.resource_version) - 1), timeout_seconds=1
        )
        line = json.loads(await kept.content.readline())
        kept.release()
        assert (line["type"], line["object"]["metadata"]["name"]) == ("ADDED", "sbc-busy-3")


async def test_bookmarks_carry_the_resource_version_only(tmp_path: Path) -> None:
    async with (
        KubeApiServer(watch=WatchConfig(bookmark_interval_s=0.1)) as api,
        _client(api, tmp_path) as core,
    ):
        await core.create_node({"metadata": {"name": "sbc-marked"}})
        since = (await core.list_node()).metadata.resource_version
        await api_create_pod_elsewhere(core)  # another resource moves the cluster's resourceVersion
        stream = awatch.Watch().stream(
            core.list_node, resource_version=since, allow_watch_bookmarks=True, timeout_seconds=1
        )
        marks = []
        async with stream:
            async for event in stream:
                marks.append((event["type"], event["raw_object"]))
        assert marks, "an idle watch that allows bookmarks gets some"
        assert {kind for kind, _ in marks} == {"BOOKMARK"}
        assert marks[-1][1] == {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": api.store.resource_version},
        }
        # Without allowWatchBookmarks there are none.
        plain = awatch.Watch().stream(core.list_node, resource_version=since, timeout_seconds=1)
        async with plain:
            assert [event async for event in plain] == []
        assert api.counters()["requests"]["watch"]["nodes"] == 2


async def api_create_pod_elsewhere(core: aclient.CoreV1Api) -> None:
    await core.create_namespaced_pod(
        "default",
        {"metadata": {"name": "sbc-elsewhere"}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
    )


@contextlib.asynccontextmanager
async def _client(api: KubeApiServer, tmp: Path) -> AsyncIterator[aclient.CoreV1Api]:
    configuration = aclient.Configuration()
    kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
    await aconfig.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with aclient.ApiClient(configuration) as client:
        yield aclient.CoreV1Api(client)
