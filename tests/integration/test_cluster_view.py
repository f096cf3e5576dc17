"""The cluster view's informers against the simulated API server over HTTP, through the real `KubeClient`.

They list once and then follow the watch; a 410 makes them list again; a server error or an outage makes
the view stale (hooks say so) and they resume from their resourceVersion once the server answers, without
a list. Faults are the simulator's own (`FaultConfig`), injected on the watch requests only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.backoff import Backoff
from app.kube import client as kube_client
from app.kube import views
from app.kube.informer import Hooks
from app.kube.retries import RetryPolicy
from app.sim.kubeapi import FaultConfig, KubeApiServer
from app.sim.kubeapi.resources import NODES, PODS, Ref

FAST = Backoff(base=0.05, factor=2.0, cap=0.2)


@dataclass
class Reported:
    events: list[tuple[str, str]] = field(default_factory=list)
    relists: list[tuple[str, str]] = field(default_factory=list)
    stale: list[tuple[str, bool]] = field(default_factory=list)

    def hooks(self) -> Hooks:
        return Hooks(
            event=lambda r, t: self.events.append((r, t)),
            relist=lambda r, why: self.relists.append((r, why)),
            stale=lambda r, s: self.stale.append((r, s)),
        )


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}


def pod(name: str, on: str, *, gpus: int = 1) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "trainer"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": on, "containers": [container]},
    }


@contextlib.asynccontextmanager
async def viewing(
    tmp: Path, *, watch_timeout_s: int = 300, reported: Reported | None = None
) -> AsyncIterator[tuple[KubeApiServer, views.ClusterView]]:
    async with KubeApiServer() as api:
        api.registry.load(NODES, node("gpu-a"))
        api.registry.load(PODS, pod("train-0", "gpu-a"))
        api.registry.load(PODS, pod("sidecar", "gpu-a", gpus=0))
        kube = await kube_client.connect(
            kubeconfig=str(api.write_kubeconfig(tmp / "kubeconfig")),
            retry=RetryPolicy(attempts=2, base=0.01, cap=0.05, timeout=5),
            qps=1000,
            burst=1000,
        )
        view = views.cluster_view(
            kube.transport,
            hooks=(reported or Reported()).hooks(),
            watch_timeout_s=watch_timeout_s,
            backoff=FAST,
        )
        view.start()
        try:
            assert await view.wait_synced(5.0)
            yield api, view
        finally:
            await view.stop()
            await kube.close()


async def eventually(check: Callable[[], bool], *, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


def names(view: views.ClusterView) -> list[str]:
    return [n.name for n in view.nodes()]


def gpu_pods(view: views.ClusterView, on: str) -> list[str]:
    return [p.name for p in view.gpu_pods_on(on)]


async def test_the_view_lists_once_then_follows_each_change(tmp_path: Path) -> None:
    reported = Reported()
    async with viewing(tmp_path, reported=reported) as (api, view):
        assert names(view) == ["gpu-a"]
        assert gpu_pods(view, "gpu-a") == ["train-0"], "the pod without a GPU is not kept"
        await eventually(lambda: not view.stale)

        api.registry.create(NODES, node("gpu-b"), namespace="")
        api.registry.create(PODS, pod("train-1", "gpu-b"), namespace="default")
        api.registry.patch(
            Ref(NODES, name="gpu-a"),
            {"metadata": {"labels": {"sickbay.io/state": "quarantined"}}},
            content_type="application/merge-patch+json",
        )
        api.registry.delete(Ref(PODS, namespace="default", name="train-0"), options={"gracePeriodSeconds": 0})

        await eventually(lambda: names(view) == ["gpu-a", "gpu-b"] and not gpu_pods(view, "gpu-a"))
        await eventually(lambda: gpu_pods(view, "gpu-b") == ["train-1"])
        await eventually(lambda: [n.name for n in view.labelled("sickbay.io/state")] == ["gpu-a"])
        quarantined = view.node("gpu-a")
        assert quarantined is not None
        assert quarantined.state is not None

        requests = api.counters()["requests"]
        assert requests["list"] == {"nodes": 1, "pods": 1}, "listed once each, then only watched"
        assert requests["watch"] == {"nodes": 1, "pods": 1}
        assert ("nodes", "MODIFIED") in reported.events
        assert ("pods", "DELETED") in reported.events
        assert reported.relists == []


async def test_a_watch_resumed_from_a_compacted_version_lists_again(tmp_path: Path) -> None:
    reported = Reported()
    # Watches of one second: each ends and is resumed from the informer's resourceVersion.
    async with viewing(tmp_path, watch_timeout_s=1, reported=reported) as (api, view):
        await eventually(lambda: not view.stale)
        api.configure_faults(FaultConfig(error_rate=1.0, kinds=("500",), verbs=frozenset({"watch"})))
        await eventually(lambda: view.stale, timeout=5)  # the next resume is refused
        api.registry.create(NODES, node("gpu-late"), namespace="")
        api.compact_watch_history()  # the change is out of the history the informer would resume from
        api.configure_faults(None)

        await eventually(lambda: "gpu-late" in names(view) and not view.stale)
        assert ("nodes", "expired") in reported.relists
        assert api.counters()["requests"]["list"]["nodes"] == 2, "listed at the start and after the 410"
        assert ("nodes", True) in reported.stale
        assert reported.stale[-1][1] is False


async def test_after_a_server_error_the_watch_resumes_without_a_list(tmp_path: Path) -> None:
    reported = Reported()
    async with viewing(tmp_path, watch_timeout_s=1, reported=reported) as (api, view):
        await eventually(lambda: not view.stale)
        api.configure_faults(FaultConfig(error_rate=1.0, kinds=("500",), verbs=frozenset({"watch"})))
        await eventually(lambda: view.stale, timeout=5)
        api.registry.create(NODES, node("gpu-during"), namespace="")
        await asyncio.sleep(0.3)  # a few refused retries, with backoff
        assert api.counters()["faults"]["500"] >= 2
        api.configure_faults(None)

        await eventually(lambda: "gpu-during" in names(view) and not view.stale)
        assert api.counters()["requests"]["list"] == {"nodes": 1, "pods": 1}, "resumed, not relisted"
        assert reported.relists == []


async def test_an_api_server_that_goes_away_leaves_a_stale_view_and_a_running_informer(
    tmp_path: Path,
) -> None:
    async with viewing(tmp_path, watch_timeout_s=1) as (api, view):
        await eventually(lambda: not view.stale)
        await api.stop()
        await eventually(lambda: view.stale, timeout=5)
        await asyncio.sleep(0.3)
        assert names(view) == ["gpu-a"], "what was seen is still there to read"
        assert not any(t.done() for t in view._tasks), "the informers keep retrying"
