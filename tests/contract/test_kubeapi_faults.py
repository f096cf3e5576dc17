"""Simulator-only steering: injected faults (seeded, never half-applied), added latency, request counters."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import aiohttp
import pytest
from kubernetes.aio import client as aclient

from app.sim.kubeapi import FaultConfig, KubeApiServer
from tests.contract.conftest import Nodes, PodFactory

MERGE = "application/merge-patch+json"


async def outcomes(core: aclient.CoreV1Api, count: int) -> list[int]:
    """Status codes of `count` sequential list calls; a 429 is recorded as -429 if it lacks Retry-After: 1."""
    codes = []
    for _ in range(count):
        try:
            await core.list_node()
            codes.append(200)
        except aclient.ApiException as error:
            retry_ok = error.status != 429 or error.headers.get("Retry-After") == "1"
            codes.append(int(error.status) if retry_ok else -429)
    return codes


async def test_fault_share_matches_the_rate_and_replays_with_the_seed(
    sim: KubeApiServer, core: aclient.CoreV1Api
) -> None:
    sim.configure_faults(FaultConfig(error_rate=0.3, kinds=("429", "500"), seed=7))
    first = await outcomes(core, 300)
    counts = Counter(first)
    assert 0.22 <= (counts[429] + counts[500]) / 300 <= 0.38
    assert counts[429] > 20
    assert counts[500] > 20
    assert counts[-429] == 0  # every injected 429 carried Retry-After: 1
    assert sim.counters()["faults"] == {"429": counts[429], "500": counts[500]}

    sim.configure_faults(FaultConfig(error_rate=0.3, kinds=("429", "500"), seed=7))
    assert await outcomes(core, 300) == first


async def test_failed_writes_change_nothing(
    sim: KubeApiServer, core: aclient.CoreV1Api, nodes: Nodes
) -> None:
    name = await nodes.create()
    before = await core.read_node(name)
    sim.configure_faults(FaultConfig(error_rate=1.0, kinds=("500",), verbs=frozenset({"patch"})))
    with pytest.raises(aclient.ApiException) as caught:
        await core.patch_node(name, {"spec": {"unschedulable": True}}, _content_type=MERGE)
    assert caught.value.status == 500
    after = await core.read_node(name)  # reads are not eligible: they pass
    assert after.metadata.resource_version == before.metadata.resource_version
    assert not after.spec.unschedulable


async def test_control_endpoint_sets_and_clears_faults(
    sim: KubeApiServer, core: aclient.CoreV1Api, nodes: Nodes
) -> None:
    name = await nodes.create()
    async with aiohttp.ClientSession(sim.url) as http:
        response = await http.post(
            "/_sim/faults", json={"error_rate": 1.0, "kinds": ["429"], "resources": ["nodes"]}
        )
        assert response.status == 200
        with pytest.raises(aclient.ApiException) as caught:
            await core.read_node(name)
        assert caught.value.status == 429
        await core.list_namespace()  # other resources are untouched
        assert (await http.delete("/_sim/faults")).status == 200
        assert (await core.read_node(name)).metadata.name == name
        bad = await http.post("/_sim/faults", json={"error_rate": 2, "kinds": ["teapot"]})
        assert bad.status == 400
        assert "error_rate" in (await bad.json())["message"]


async def test_latency_is_added_to_every_request(sim: KubeApiServer, core: aclient.CoreV1Api) -> None:
    await core.list_node()  # warm the connection
    sim.configure_faults(FaultConfig(latency_ms=25))
    started = time.monotonic()
    for _ in range(8):
        await core.list_node()
    assert time.monotonic() - started >= 8 * 0.025


async def test_hang_lasts_until_the_client_gives_up(sim: KubeApiServer, core: aclient.CoreV1Api) -> None:
    sim.configure_faults(FaultConfig(error_rate=1.0, kinds=("timeout",), hang_s=30))
    started = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        await core.list_node(_request_timeout=0.3)
    assert time.monotonic() - started < 2


async def test_stop_releases_hanging_requests(sim: KubeApiServer, core: aclient.CoreV1Api) -> None:
    sim.configure_faults(FaultConfig(error_rate=1.0, kinds=("timeout",), hang_s=30))
    hanging = asyncio.create_task(core.list_node())
    await asyncio.sleep(0.2)
    started = time.monotonic()
    await sim.stop()
    with pytest.raises((aclient.ApiException, aiohttp.ClientError)):
        await asyncio.wait_for(hanging, 5)
    assert time.monotonic() - started < 3


async def test_counters_show_one_read_and_one_write(
    sim: KubeApiServer, core: aclient.CoreV1Api, nodes: Nodes, namespace: str, make_pod: PodFactory
) -> None:
    name = await nodes.create()
    pod = await make_pod(node=name)
    sim.reset_counters()
    node = await core.read_node(name)
    await core.patch_node(
        name,
        {"metadata": {"resourceVersion": node.metadata.resource_version}, "spec": {"unschedulable": True}},
    )
    counters = sim.counters()
    assert counters["requests"] == {"get": {"nodes": 1}, "patch": {"nodes": 1}}
    assert (counters["reads"], counters["writes"]) == (1, 1)

    evict = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod["metadata"]["name"]}}
    await core.create_namespaced_pod_eviction(pod["metadata"]["name"], namespace, evict)
    async with aiohttp.ClientSession(sim.url) as http:
        over_http = await (await http.get("/_sim/counters")).json()
    assert over_http["requests"]["create"] == {"pods/eviction": 1}
    assert over_http["evictions"] == {"evicted": 1}
    assert over_http["responses"] == {"200": 2, "201": 1}
