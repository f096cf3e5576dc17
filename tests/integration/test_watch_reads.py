"""With `kube.watch` (the default), reconciliation and the status page read the cluster view: after the
view's first lists, a reconcile round, the status page and `GET /api/v1/nodes` send no list request.
(The requeuer's list of the Workloads Sickbay holds, a label selector over a handful of objects, stays.)
With it off, the same steps list as before (which is also what shows the counters see lists at all).

The node is left `drain-failed` with a GPU pod still on it and its retry not due, so the round reads the
node and its GPU pods (`drain_again`) and waits: no drain starts, and nothing else lists behind the test.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from app.act.reconcile import Reconciler
from app.domain import RemediationState
from app.sim.kubeapi import FaultConfig, KubeApiServer
from tests.integration.remediation_world import GRACE_SCALE, SEED, World, eventually, open_world

pytestmark = pytest.mark.slow

NODE = "gpu-06"  # solo-a, 8 GPUs, runs on it (tests/fixtures/gang-cluster.yaml)


async def _leave_drain_failed(world: World) -> None:
    now = world.clock().isoformat()
    await world.core.patch_node(
        NODE,
        {
            "metadata": {
                "labels": {"sickbay.io/state": "drain-failed"},
                "annotations": {
                    "sickbay.io/owned-by": world.services.settings.identity,
                    "sickbay.io/fault": json.dumps({"class": "reboot-node"}),
                    "sickbay.io/drain-failed": "training/solo-a: eviction refused",
                    "sickbay.io/drain-failed-at": now,
                },
            }
        },
    )


async def _round_and_pages(world: World) -> tuple[str, list[Any]]:
    """One reconcile round, the status page and the node list, after the counters are reset."""
    world.sim.reset_counters()
    await world.reconcile()
    page = await world.client.get("/")
    assert page.status == 200
    listed = await world.client.get("/api/v1/nodes")
    assert listed.status == 200
    body = await listed.json()
    return await page.text(), body if isinstance(body, list) else body.get("nodes", body)


async def test_reconcile_and_the_status_page_read_the_view_and_list_nothing(tmp_path: Path) -> None:
    async with open_world(tmp_path, watch=True) as world:
        view = world.services.view
        assert view is not None, "kube.watch is on by default with the real client"

        async def fresh() -> bool:
            return view.synced and not view.stale

        await eventually(fresh, what="the view listed and watching")
        await _leave_drain_failed(world)

        async def seen() -> bool:
            node = view.node(NODE)
            return node is not None and node.state is RemediationState.DRAIN_FAILED

        await eventually(seen, what="the view has the drain-failed node")
        assert [p.name for p in view.gpu_pods_on(NODE)] == ["solo-a"]

        html, nodes = await _round_and_pages(world)

        requests = world.sim.counters()["requests"]
        # The one list left is the requeuer's of the Workloads Sickbay holds deactivated (a label
        # selector, a handful of objects whatever the fleet's size), not of nodes or pods.
        listed = requests.get("list", {})
        assert set(listed) <= {"workloads"}, f"no list of nodes or pods after start: {requests}"
        assert NODE in html
        assert "drain-failed" in html
        assert NODE in json.dumps(nodes)
        assert (await world.node(NODE)).metadata.labels["sickbay.io/state"] == "drain-failed", "it waited"
        metrics = await (await world.client.get("/metrics")).text()
        assert 'sickbay_watch_view_stale{resource="nodes"} 0.0' in metrics
        assert 'sickbay_watch_view_events_total{resource="nodes",type="MODIFIED"}' in metrics


async def test_without_the_view_the_same_steps_list(tmp_path: Path) -> None:
    async with open_world(tmp_path, watch=False) as world:
        assert world.services.view is None
        await _leave_drain_failed(world)
        html, _ = await _round_and_pages(world)

        listed = world.sim.counters()["requests"].get("list", {})
        assert listed.get("nodes", 0) >= 2, f"the round and the page each list nodes: {listed}"
        assert listed.get("pods", 0) >= 1, f"drain_again lists the node's pods: {listed}"
        assert NODE in html


# Every list of pods answers 500 (the client's retries included): the view cannot make its first list.
PODS_UNLISTABLE = FaultConfig(
    error_rate=1.0, kinds=("500",), verbs=frozenset({"list"}), resources=frozenset({"pods"})
)


def _lists(world: World) -> dict[str, int]:
    return dict(world.sim.counters()["requests"].get("list", {}))


async def test_the_first_round_waits_for_the_view_instead_of_listing_the_fleet_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.kube.viewgate")
    async with KubeApiServer(seed=SEED, grace_scale=GRACE_SCALE) as sim:
        sim.configure_faults(PODS_UNLISTABLE)  # before the service starts: its view cannot list pods
        async with open_world(tmp_path, cluster=sim, watch=True) as world:
            reconciler, view = world.services.reconciler, world.services.view
            assert reconciler is not None
            assert view is not None
            await asyncio.sleep(0.5)
            assert reconciler.rounds == 0, "the leader's first round waits for the view"
            assert any(r.getMessage().startswith("reconcile waits up to") for r in caplog.records)
            assert _lists(world).get("nodes") == 1, "the view listed the nodes; the round did not"

            sim.configure_faults(None)
            await eventually(_rounds(reconciler), what="the first round, from the view")

            assert _lists(world).get("nodes") == 1, f"the fleet was listed once: {_lists(world)}"
            metrics = await (await world.client.get("/metrics")).text()
            assert 'sickbay_watch_view_fallbacks_total{reader="reconcile"' not in metrics


async def test_a_view_that_does_not_list_in_time_leaves_the_round_to_list(tmp_path: Path) -> None:
    async with KubeApiServer(seed=SEED, grace_scale=GRACE_SCALE) as sim:
        sim.configure_faults(PODS_UNLISTABLE)
        wait = {"view_sync_wait_s": 0.5}
        async with open_world(tmp_path, cluster=sim, watch=True, kube_settings=wait) as world:
            reconciler = world.services.reconciler
            assert reconciler is not None
            await eventually(_rounds(reconciler), what="the first round, after the wait")

            assert _lists(world).get("nodes") == 2, (
                "the round listed the nodes itself, once the wait was over"
            )
            metrics = await (await world.client.get("/metrics")).text()
            assert 'sickbay_watch_view_fallbacks_total{reader="reconcile",reason="not-synced"} 1.0' in metrics


def _rounds(reconciler: Reconciler) -> Callable[[], Awaitable[bool]]:
    async def done() -> bool:
        return reconciler.rounds >= 1

    return done
