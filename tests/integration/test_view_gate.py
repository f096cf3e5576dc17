"""The view's gate against the simulated API server over HTTP, through the real `KubeClient`: a periodic
reader waits for the view's first lists (client-go's WaitForCacheSync) but only within the start-up window,
and a read the view cannot answer (not listed in time, or a watch down) falls back, counted and logged once.
Faults are the simulator's own (`FaultConfig`), on the view's requests only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.kube import client as kube_client
from app.kube import views
from app.kube.retries import RetryPolicy
from app.kube.viewgate import NOT_SYNCED, STALE, ViewGate
from app.sim.kubeapi import FaultConfig, KubeApiServer
from app.sim.kubeapi.resources import NODES, PODS
from tests.integration.test_cluster_view import FAST, eventually, node, pod, viewing

# Every list of pods answers 500 (the client's retries included): the view cannot make its first list.
PODS_UNLISTABLE = FaultConfig(
    error_rate=1.0, kinds=("500",), verbs=frozenset({"list"}), resources=frozenset({"pods"})
)


# Every watch answers 500: the view lists, but never opens a watch.
UNWATCHABLE = FaultConfig(error_rate=1.0, kinds=("500",), verbs=frozenset({"watch"}))


@contextlib.asynccontextmanager
async def unsynced(
    tmp: Path, faults: FaultConfig = PODS_UNLISTABLE
) -> AsyncIterator[tuple[KubeApiServer, views.ClusterView]]:
    """A started view whose first list of pods (or its watches) fails until the test clears the faults."""
    async with KubeApiServer() as api:
        api.registry.load(NODES, node("gpu-a"))
        api.registry.load(PODS, pod("train-0", "gpu-a"))
        api.configure_faults(faults)
        kube = await kube_client.connect(
            kubeconfig=str(api.write_kubeconfig(tmp / "kubeconfig")),
            retry=RetryPolicy(attempts=2, base=0.01, cap=0.05, timeout=5),
            qps=1000,
            burst=1000,
        )
        view = views.cluster_view(kube.transport, backoff=FAST)
        view.start()
        try:
            yield api, view
        finally:
            await view.stop()
            await kube.close()


class Fallbacks(list[tuple[str, str]]):
    def __call__(self, reader: str, reason: str) -> None:
        self.append((reader, reason))


async def test_a_periodic_reader_waits_for_the_first_lists_then_reads_the_view(tmp_path: Path) -> None:
    async with unsynced(tmp_path) as (api, view):
        fallbacks = Fallbacks()
        gate = ViewGate(view, sync_wait_s=30, fallback=fallbacks)
        reading = asyncio.create_task(gate.synced("reconcile"))
        await asyncio.sleep(0.3)
        assert not reading.done(), "it waits while the view's first list of pods keeps failing"
        assert not view.synced

        api.configure_faults(None)
        answered = await asyncio.wait_for(reading, 5)

        assert answered is view
        assert [n.name for n in answered.nodes()] == ["gpu-a"]
        assert [p.name for p in answered.gpu_pods_on("gpu-a")] == ["train-0"]
        assert fallbacks == [], "it waited instead of listing"
        assert api.counters()["requests"]["watch"] == {"nodes": 1, "pods": 1}, "both watches opened"


async def test_a_view_that_does_not_list_in_time_falls_back_loudly_and_no_one_waits_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with unsynced(tmp_path) as (_, view):
        fallbacks = Fallbacks()
        gate = ViewGate(view, sync_wait_s=0.3, fallback=fallbacks)
        with caplog.at_level(logging.INFO, logger="app.kube.viewgate"):
            started = time.monotonic()
            assert await gate.synced("reconcile") is None
            waited = time.monotonic() - started
            started = time.monotonic()
            assert await gate.synced("reconcile") is None
            again = time.monotonic() - started
            assert gate.fresh("audit") is None

        assert 0.25 <= waited < 2.0, f"it waited for the window, no longer: {waited:.2f}s"
        assert again < 0.1, f"past the window a reader does not wait: {again:.2f}s"
        assert fallbacks == [("reconcile", NOT_SYNCED)] * 2 + [("audit", NOT_SYNCED)]
        warnings = [
            r.getMessage()
            for r in caplog.records
            if r.name == "app.kube.viewgate" and r.levelno == logging.WARNING
        ]
        assert len(warnings) == 2, f"one warning per reader, not per read: {warnings}"
        assert "reconcile lists from the API server" in warnings[0]
        assert "first lists and watches have not come" in warnings[0]


async def test_a_view_listed_but_not_yet_watching_is_waited_for_as_not_synced(tmp_path: Path) -> None:
    async with unsynced(tmp_path, UNWATCHABLE) as (api, view):
        fallbacks = Fallbacks()
        gate = ViewGate(view, sync_wait_s=30, fallback=fallbacks)
        await eventually(lambda: view.synced)
        reading = asyncio.create_task(gate.synced("audit"))
        await asyncio.sleep(0.3)
        assert not reading.done(), "listed is not enough: it waits for the watches too"
        assert gate.fresh("reads") is None
        assert fallbacks == [("reads", NOT_SYNCED)], "never watched yet: not an outage"

        api.configure_faults(None)
        assert await asyncio.wait_for(reading, 5) is view
        assert fallbacks == [("reads", NOT_SYNCED)]


async def test_a_stale_view_is_not_read_until_its_watch_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Watches of one second: each ends and is resumed, so a refused resume makes the view stale.
    async with viewing(tmp_path, watch_timeout_s=1) as (api, view):
        fallbacks = Fallbacks()
        gate = ViewGate(view, sync_wait_s=0, fallback=fallbacks)  # the start-up window is over
        await eventually(lambda: not view.stale)
        assert gate.fresh("reads") is view

        api.configure_faults(FaultConfig(error_rate=1.0, kinds=("500",), verbs=frozenset({"watch"})))
        await eventually(lambda: view.stale, timeout=5)
        with caplog.at_level(logging.INFO, logger="app.kube.viewgate"):
            started = time.monotonic()
            assert await gate.synced("reconcile") is None, "a stale view is not read"
            assert time.monotonic() - started < 0.1, "nor waited for, past the start-up window"
            assert gate.fresh("reads") is None
            api.configure_faults(None)
            await eventually(lambda: not view.stale, timeout=5)
            assert gate.fresh("reads") is view

        assert fallbacks == [("reconcile", STALE), ("reads", STALE)]
        messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "app.kube.viewgate"]
        assert (
            logging.WARNING,
            "reads lists from the API server: the cluster view cannot answer (a watch is down)",
        ) in messages
        assert (logging.INFO, "reads reads the cluster view again") in messages
