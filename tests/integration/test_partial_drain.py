"""A GPU reset drains only the faulty GPU's pod; the node's healthy workload keeps running under the taint.

Against the simulated API server through the official client: two GPU workloads on one node, a double-bit
ECC alert (reset-gpu) naming one of them in `exported_pod` (as Prometheus renames dcgm-exporter's workload
label under prometheus-operator). Without that mapping the drain falls back to every GPU pod and cordons.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from app.decide import footprint
from app.sim.kubeapi import EvictionFailure
from tests.integration.remediation_world import World, eventually, open_world

pytestmark = pytest.mark.slow

NODE = "gpu-07"  # only the DaemonSet's pod runs there in the fixture
FAULTY, HEALTHY = "trainer-a", "serve-b"


def add_workloads(world: World) -> None:
    world.sim.load(
        {
            "pods": [
                {"name": name, "namespace": "training", "node": NODE, "gpus": 4, "labels": {"app": name}}
                for name in (FAULTY, HEALTHY)
            ]
        }
    )


async def state_is(world: World, state: str) -> bool:
    labels = (await world.node(NODE)).metadata.labels or {}
    return labels.get(footprint.STATE) == state


async def pods_here(world: World) -> dict[str, Any]:
    """The training pods bound to the node, by name, Terminating ones included."""
    found = await world.pods("training", terminating=True, field_selector=f"spec.nodeName={NODE}")
    return {p.metadata.name: p for p in found}


def sickbay_taints(node: Any) -> list[tuple[str, str, str]]:
    return [(t.key, t.value, t.effect) for t in node.spec.taints or [] if t.key.startswith("sickbay.io/")]


async def test_a_gpu_reset_evicts_only_the_faulty_gpus_pod(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        add_workloads(world)
        await world.post_alert(
            alertname="GpuDoubleBitEccError",
            node=NODE,
            gpu="3",
            xid="95",
            sickbay_class="reset-gpu",
            exported_namespace="training",
            exported_pod=FAULTY,
        )

        await eventually(lambda: state_is(world, "remediating"), what="the hand-off after the partial drain")
        node = await world.node(NODE)
        assert node.metadata.annotations[footprint.REMEDIATION_REQUESTED] == "reset-gpu"
        assert sickbay_taints(node) == [(footprint.UNHEALTHY, "reset-gpu", "NoSchedule")]
        assert not node.spec.unschedulable, "a partial drain taints the node; it does not cordon it"
        evicted = {e.involved_object.name for e in await world.events("SickbayEvicted")}
        assert evicted == {FAULTY}
        left = await pods_here(world)
        assert set(left) == {HEALTHY}
        assert left[HEALTHY].status.phase == "Running"
        assert not left[HEALTHY].metadata.deletion_timestamp

        await world.reconcile()  # an uncordoned node Sickbay never cordoned is not "taken back by hand"
        assert await state_is(world, "remediating")
        assert set(await pods_here(world)) == {HEALTHY}


async def test_without_a_mapping_every_gpu_pod_is_drained_and_the_node_cordoned(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        add_workloads(world)
        await world.post_alert(
            alertname="GpuDoubleBitEccError", node=NODE, gpu="3", xid="95", sickbay_class="reset-gpu"
        )

        await eventually(lambda: state_is(world, "remediating"), what="the hand-off after the full drain")
        node = await world.node(NODE)
        assert node.metadata.annotations[footprint.REMEDIATION_REQUESTED] == "reset-gpu"
        assert node.spec.unschedulable
        evicted = {e.involved_object.name for e in await world.events("SickbayEvicted")}
        assert evicted == {FAULTY, HEALTHY}
        assert not await pods_here(world)


async def test_a_retried_partial_drain_moves_the_same_pod_and_keeps_the_healthy_one(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        add_workloads(world)
        # A webhook denies the faulty pod's eviction: the partial drain ends drain-failed.
        world.sim.fail_evictions(EvictionFailure("training", FAULTY, code=400))
        await world.post_alert(
            alertname="GpuDoubleBitEccError",
            node=NODE,
            gpu="3",
            xid="95",
            sickbay_class="reset-gpu",
            exported_namespace="training",
            exported_pod=FAULTY,
        )
        await eventually(lambda: state_is(world, "drain-failed"), what="drain-failed")

        async def drain_over() -> bool:  # its last step: the hand-off it did not make, journaled
            outcomes = await world.services.journal.outcomes()  # type: ignore[union-attr]
            return any(o["kind"] == "request-remediation" and o["status"] == "blocked" for o in outcomes)

        await eventually(drain_over, what="the failed drain's end")
        node = await world.node(NODE)
        assert node.metadata.annotations[footprint.DRAIN_PODS] == f"training/{FAULTY}"
        assert "1 of 1 pod(s) still on the node" in node.metadata.annotations[footprint.DRAIN_FAILED]

        # The webhook is fixed and the retry is due: the retry moves the faulty pod only.
        world.sim.fail_evictions()
        world.clock.advance(timedelta(minutes=11))
        await world.reconcile()
        await eventually(lambda: state_is(world, "remediating"), what="the hand-off after the retry")
        assert set(await pods_here(world)) == {HEALTHY}
        evicted = {e.involved_object.name for e in await world.events("SickbayEvicted")}
        assert evicted == {FAULTY}
        assert not (await world.node(NODE)).spec.unschedulable


async def test_a_second_gpu_faulting_widens_the_drain_to_the_whole_node(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        add_workloads(world)
        dbe = {"alertname": "GpuDoubleBitEccError", "node": NODE, "xid": "95", "sickbay_class": "reset-gpu"}
        where = {"exported_namespace": "training"}
        await world.post_alert(**dbe, **where, gpu="3", exported_pod=FAULTY, fingerprint="dbe-gpu-3")
        await eventually(lambda: state_is(world, "remediating"), what="the partial drain's hand-off")
        assert set(await pods_here(world)) == {HEALTHY}

        await world.post_alert(**dbe, **where, gpu="5", exported_pod=HEALTHY, fingerprint="dbe-gpu-5")

        async def cordoned() -> bool:
            return bool((await world.node(NODE)).spec.unschedulable)

        await eventually(cordoned, what="the node cordoned once a second GPU faulted")
        await eventually(lambda: state_is(world, "remediating"), what="the whole-node drain's hand-off")
        assert not await pods_here(world)
        node = await world.node(NODE)
        assert footprint.DRAIN_PODS not in (node.metadata.annotations or {})
