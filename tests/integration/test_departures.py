"""Waiting for evicted pods to be gone, through the real client against the simulated API server.

Gone means absent, or the name now taken by a pod with another UID; a pod still there when its wait ends
is reported with what was seen, never assumed gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.act import departures
from app.domain import PodRef
from app.kube.client import KubeClient, connect
from app.kube.retries import RetryPolicy
from app.sim.kubeapi import FaultConfig, KubeApiServer

pytestmark = pytest.mark.slow

NODE = "gpu-0"
SEED = {
    "nodes": [{"name": NODE, "gpus": 8}],
    "pods": [
        {"name": "trainer", "namespace": "training", "node": NODE, "gpus": 8},
        {"name": "other", "namespace": "training", "node": NODE, "gpus": 0},
    ],
}
TRAINER = PodRef("training", "trainer")


@pytest.fixture
async def sim() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(seed=SEED, grace_scale=0.01) as server:  # 30 s of grace: 0.3 s
        yield server


@pytest.fixture
async def kube(sim: KubeApiServer, tmp_path: Path) -> AsyncIterator[KubeClient]:
    client = await connect(
        kubeconfig=str(sim.write_kubeconfig(tmp_path / "kubeconfig")),
        retry=RetryPolicy(attempts=2, base=0.01, cap=0.01, timeout=2),
    )
    yield client
    await client.close()


async def trainer_uid(kube: KubeClient) -> str:
    return next(p.uid for p in await kube.list_pods(node=NODE) if p.name == "trainer")


def departure(uid: str, *, wait_s: float) -> departures.Departure:
    until = asyncio.get_running_loop().time() + wait_s
    return departures.Departure(TRAINER, uid, until, grace_period_s=30)


async def test_an_evicted_pod_is_waited_for_until_its_kubelet_removed_it(
    sim: KubeApiServer, kube: KubeClient
) -> None:
    uid = await trainer_uid(kube)
    await kube.evict_pod("training", "trainer", uid=uid)
    assert "trainer" in {p.name for p in await kube.list_pods(node=NODE)}, "Terminating, not gone yet"

    lingering = await departures.wait_until_gone(kube, NODE, [departure(uid, wait_s=10)])

    assert lingering == {}
    assert "trainer" not in {p.name for p in await kube.list_pods(node=NODE)}
    assert {p.name for p in await kube.list_pods(node=NODE)} == {"other"}, "the rest of the node is untouched"


async def test_a_new_pod_under_the_old_name_counts_as_gone(sim: KubeApiServer, kube: KubeClient) -> None:
    sim.reset_counters()
    lingering = await departures.wait_until_gone(
        kube, NODE, [departure("uid-of-an-earlier-trainer", wait_s=10)]
    )
    assert lingering == {}
    assert sim.counters()["requests"]["list"]["pods"] == 1, "decided on the first look"


async def test_a_pod_still_there_when_its_wait_ends_is_reported(sim: KubeApiServer, kube: KubeClient) -> None:
    sim.reset_counters()
    lingering = await departures.wait_until_gone(kube, NODE, [departure(await trainer_uid(kube), wait_s=0.6)])
    assert list(lingering) == [TRAINER]
    assert lingering[TRAINER].startswith("still Terminating")
    assert "grace period 30s" in lingering[TRAINER]
    polls = sim.counters()["requests"]["list"]["pods"]
    assert 2 <= polls <= 4, f"polls back off from {departures.FIRST_POLL_S}s, got {polls} in 0.6 s"


async def test_pods_that_cannot_be_listed_are_not_assumed_gone(sim: KubeApiServer, kube: KubeClient) -> None:
    uid = await trainer_uid(kube)
    sim.configure_faults(FaultConfig(error_rate=1.0, kinds=("500",), verbs=frozenset({"list"})))
    lingering = await departures.wait_until_gone(kube, NODE, [departure(uid, wait_s=0.3)])
    assert list(lingering) == [TRAINER]
    assert lingering[TRAINER].startswith("could not confirm it left:")
    assert "500" in lingering[TRAINER]
