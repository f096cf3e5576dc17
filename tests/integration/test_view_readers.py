"""The readers moved to the cluster view, through the service against the simulated API server (the real
`KubeClient` over HTTP): planning an at-risk signal measures its proactive budget on the view's nodes, and
the scheduled audit reads its nodes from the view. Each gives what the list it replaces gives, and sends
no list of nodes; the reads that stay direct (the node and its pods, every pod for the audit) still go out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.audit.snapshot import read_cluster
from app.decide import footprint
from app.domain import Fault, FaultClass, Signal, SignalSource, SignalStatus, freeze_mapping
from app.service import observing
from tests.integration.remediation_world import World, eventually, open_world

pytestmark = pytest.mark.slow

AT_RISK_NODE = "gpu-03"
ACTING = "gpu-05"  # carries the at-risk taint at act: the budget must count it


def _lists(world: World) -> dict[str, int]:
    return dict(world.sim.counters()["requests"].get("list", {}))


async def _fresh_view(world: World) -> None:
    view = world.services.view
    assert view is not None, "kube.watch is on by default with the real client"
    taint = {"key": footprint.AT_RISK, "value": "act", "effect": "NoSchedule"}
    await world.core.patch_node(ACTING, {"spec": {"taints": [taint]}})

    async def seen() -> bool:
        node = view.node(ACTING)
        return not view.stale and node is not None and footprint.at_risk_level(node) is not None

    await eventually(seen, what="the view, fresh, with the acting node")


def _risk(world: World) -> Fault:
    now = world.clock()
    signal = Signal(
        source=SignalSource.PREDICTION,
        fingerprint=f"risk:{AT_RISK_NODE}",
        status=SignalStatus.FIRING,
        name="GpuAtRisk",
        starts_at=now,
        received_at=now,
        node=AT_RISK_NODE,
        gpu=0,
        labels=freeze_mapping({"sickbay_class": "at-risk", "level": "act"}),
    )
    return Fault(fault_class=FaultClass.AT_RISK, signal=signal, reason="predicted", rule="label")


async def test_an_at_risk_plan_measures_its_budget_on_the_view(tmp_path: Path) -> None:
    async with open_world(tmp_path, watch=True) as world:
        await _fresh_view(world)
        services = world.services
        policy, fault = services.rules.policy, _risk(world)

        world.sim.reset_counters()
        viewed = await observing.situation_of(
            fault, kube=services.kube, journal=None, policy=policy, now=world.clock(), view=services.view_gate
        )
        from_view = _lists(world)
        world.sim.reset_counters()
        listed = await observing.situation_of(
            fault, kube=services.kube, journal=None, policy=policy, now=world.clock()
        )

        assert "nodes" not in from_view, f"the budget's fleet came from the view: {from_view}"
        assert from_view.get("pods") == 1, "the node's pods are still listed, as they are now"
        assert _lists(world).get("nodes") == 1, "without the view, the fleet is listed"
        assert viewed.proactive is not None
        assert viewed.proactive == listed.proactive
        assert viewed.proactive.acting == frozenset({ACTING})
        assert viewed.proactive.gpu_nodes > 1
        assert viewed.node == listed.node


async def test_the_scheduled_audit_reads_its_nodes_from_the_view(tmp_path: Path) -> None:
    async with open_world(tmp_path, watch=True) as world:
        await _fresh_view(world)
        kube, now = world.services.kube, world.clock()
        assert kube is not None

        world.sim.reset_counters()
        viewed = await read_cluster(kube, now=now, view=world.services.view_gate)  # type: ignore[arg-type]
        from_view = _lists(world)
        listed = await read_cluster(kube, now=now)  # type: ignore[arg-type]

        assert "nodes" not in from_view, f"the nodes came from the view: {from_view}"
        assert from_view.get("pods") == 1, "every pod, with its facts, is still listed"
        assert viewed == listed, "the same snapshot either way"
        assert len(viewed.nodes) > 1
