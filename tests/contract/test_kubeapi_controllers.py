"""The simulated disruption controller's lag, driven by a hand-cranked scheduler instead of the event loop.

No server and no clock: the registry is given a scheduler that only records what it is asked to run, so
each test decides exactly when the controller catches up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.sim.kubeapi import eviction
from app.sim.kubeapi.registry import Registry
from app.sim.kubeapi.resources import NAMESPACES, PDBS, PODS, Catalog, JsonObj, Ref
from app.sim.kubeapi.store import Store

NS = "train"
LABELS = {"app": "llama"}


class Crank:
    """A Scheduler that queues callbacks until the test turns it."""

    def __init__(self) -> None:
        self.queued: list[tuple[float, Callable[[], None]]] = []

    def __call__(self, delay: float, callback: Callable[[], None]) -> None:
        self.queued.append((delay, callback))

    def turn(self) -> None:
        ready, self.queued = self.queued, []
        for _, callback in ready:
            callback()


def running_pod(name: str) -> JsonObj:
    return {
        "metadata": {"name": name, "namespace": NS, "labels": dict(LABELS)},
        "spec": {"nodeName": "gpu-0", "containers": [{"name": "main", "image": "pause:3.10"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def budget_status(registry: Registry) -> dict[str, Any]:
    status: dict[str, Any] = registry.store.require(Ref(PDBS, namespace=NS, name="gang"))["status"]
    return status


@pytest.fixture
def crank() -> Crank:
    return Crank()


@pytest.fixture
def registry(crank: Crank) -> Registry:
    """Three ready pods under minAvailable 2, loaded as a seed: synced at once, whatever the delay."""
    made = Registry(Store(Catalog()), schedule=crank, disruption_sync_s=5.0)
    made.load(NAMESPACES, {"metadata": {"name": NS}})
    for name in ("rank-0", "rank-1", "rank-2"):
        made.load(PODS, running_pod(name))
    spec = {"selector": {"matchLabels": LABELS}, "minAvailable": 2}
    made.load(PDBS, {"metadata": {"name": "gang", "namespace": NS}, "spec": spec})
    return made


def test_seeded_budgets_are_synced_without_waiting(registry: Registry, crank: Crank) -> None:
    status = budget_status(registry)
    assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (3, 2, 1)
    assert crank.queued == []


def test_current_healthy_follows_the_eviction_only_when_the_controller_resyncs(
    registry: Registry, crank: Crank
) -> None:
    body = {"metadata": {"name": "rank-0"}, "deleteOptions": {"gracePeriodSeconds": 0}}
    eviction.evict(registry, Ref(PODS, namespace=NS, name="rank-0"), body=body)
    assert registry.store.get(Ref(PODS, namespace=NS, name="rank-0")) is None

    lagging = budget_status(registry)  # only what the eviction handler wrote itself
    assert (lagging["disruptionsAllowed"], lagging["currentHealthy"]) == (0, 3)
    assert set(lagging["disruptedPods"]) == {"rank-0"}
    assert [delay for delay, _ in crank.queued] == [5.0]  # the writes of one eviction share one sync

    crank.turn()
    synced = budget_status(registry)
    assert (synced["disruptionsAllowed"], synced["currentHealthy"], synced["expectedPods"]) == (0, 2, 2)
    assert "disruptedPods" not in synced  # the pod is gone, so the controller drops its entry


def test_writes_while_a_sync_is_queued_join_it(registry: Registry, crank: Crank) -> None:
    ref = Ref(PODS, namespace=NS, name="rank-1")
    unready = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}}
    registry.patch(ref, unready, content_type="application/merge-patch+json", subresource="status")
    registry.patch(ref, {"metadata": {"labels": {"x": "y"}}}, content_type="application/merge-patch+json")
    assert len(crank.queued) == 1
    assert budget_status(registry)["currentHealthy"] == 3  # not yet

    crank.turn()
    assert budget_status(registry)["currentHealthy"] == 2
    assert budget_status(registry)["disruptionsAllowed"] == 0


def test_without_a_delay_the_controller_syncs_inline(crank: Crank) -> None:
    registry = Registry(Store(Catalog()), schedule=crank, disruption_sync_s=0.0)
    registry.load(NAMESPACES, {"metadata": {"name": NS}})
    registry.load(PODS, running_pod("rank-0"))
    spec = {"selector": {"matchLabels": LABELS}, "minAvailable": 1}
    registry.create(PDBS, {"metadata": {"name": "gang"}, "spec": spec}, namespace=NS)
    assert budget_status(registry)["currentHealthy"] == 1
    assert crank.queued == []
