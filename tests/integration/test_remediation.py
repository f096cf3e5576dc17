"""Remediation end to end against the simulated API server, through the real Kubernetes client.

Alerts go in through the webhook; the node and pod state is read back with the official client and
kubectl. Each test is one acceptance criterion of the remediation issue.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from app.decide import footprint
from tests.integration.remediation_world import World, eventually, open_world, write_policy

pytestmark = pytest.mark.slow


async def unschedulable(world: World, name: str) -> bool:
    return bool((await world.node(name)).spec.unschedulable)


def sickbay_taints(node: object) -> list[tuple[str, str, str]]:
    taints = node.spec.taints or []  # type: ignore[attr-defined]
    return [(t.key, t.value, t.effect) for t in taints if t.key.startswith("sickbay.io/")]


async def test_fatal_xid_quarantines_in_one_read_one_write_evicts_and_restarts_the_gang(
    tmp_path: Path,
) -> None:
    async with open_world(tmp_path) as world:
        rank0 = (
            await world.pods(
                "training",
                label_selector="jobset.sigs.k8s.io/jobset-name=llm",
                field_selector="spec.nodeName=gpu-00",
            )
        )[0]
        others = {
            p.metadata.name
            for p in await world.pods("training", label_selector="jobset.sigs.k8s.io/jobset-name=llm")
        } - {rank0.metadata.name}
        assert len(others) == 3
        world.spy.calls.clear()
        await world.post_alert(node="gpu-00", xid="79", gpu="3")
        await eventually(lambda: unschedulable(world, "gpu-00"), what="gpu-00 cordoned")

        node_calls = [c for c in world.spy.calls if c[1] == "gpu-00" and c[0] in ("get_node", "patch_node")]
        first_write = node_calls.index(("patch_node", "gpu-00"))
        assert node_calls[: first_write + 1] == [("get_node", "gpu-00"), ("patch_node", "gpu-00")], node_calls

        node = await world.node("gpu-00")
        assert sickbay_taints(node) == [(footprint.UNHEALTHY, "reboot-node", "NoSchedule")]
        assert node.metadata.labels[footprint.STATE] in ("quarantined", "draining", "remediating")
        assert node.metadata.annotations[footprint.OWNED_BY] == "sickbay-test-0"
        assert '"xid":79' in node.metadata.annotations[footprint.FAULT]

        async def unhealthy_condition() -> bool:  # written just after the quarantine, in the background
            conditions = (await world.node("gpu-00")).status.conditions or []
            return any(
                (c.type, c.status, c.reason) == ("GpuHealthy", "False", "RebootNode") for c in conditions
            )

        await eventually(unhealthy_condition, what="GpuHealthy=False with the class as reason")

        async def gang_gone() -> bool:
            left = {
                p.metadata.name
                for p in await world.pods("training", label_selector="jobset.sigs.k8s.io/jobset-name=llm")
            }
            return not left & (others | {rank0.metadata.name})

        await eventually(gang_gone, what="the whole gang restarted")
        daemonsets = await world.pods("gpu-operator", field_selector="spec.nodeName=gpu-00")
        assert daemonsets, "DaemonSet pods are never evicted"
        evicted = {e.involved_object.name for e in await world.events("SickbayEvicted")}
        restarted = {e.involved_object.name for e in await world.events("SickbayGangRestarted")}
        assert evicted == {rank0.metadata.name}
        assert restarted == others
        assert await world.events("SickbayQuarantined")
        await eventually(
            lambda: _has_event(world, "SickbayRemediationRequested"),
            what="remediation requested after the drain",
        )
        table = await world.kubectl("get", "nodes", "gpu-00")
        assert "SchedulingDisabled" in table
        described = await world.kubectl("describe", "node", "gpu-00")
        assert "sickbay.io/unhealthy=reboot-node:NoSchedule" in described


async def _has_event(world: World, reason: str) -> bool:
    return bool(await world.events(reason))


async def test_pdb_makes_the_eviction_wait_and_retry_never_delete(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, drain={"deadline": "2s", "on_deadline": "leave"})
    async with open_world(tmp_path, policy=policy) as world:
        before = await world.pods("inference")
        assert len(before) == 1
        await world.post_alert(node="gpu-05", xid="95", gpu="0", sickbay_class="reset-gpu")
        await eventually(
            lambda: _has_event(world, "SickbayEvictionBlocked"), timeout=20, what="eviction given up"
        )
        counters = world.sim.counters()
        assert counters["evictions"].get("refused", 0) >= 2, counters
        assert counters["requests"].get("delete", {}).get("pods", 0) == 0, (
            "a PDB-blocked pod is never deleted"
        )
        after = await world.pods("inference")
        assert [p.metadata.uid for p in after] == [p.metadata.uid for p in before]


async def test_app_xid_restarts_with_backoff_and_escalates_only_under_two_workloads(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        world.spy.calls.clear()
        await world.post_alert(
            node="gpu-06",
            xid="13",
            gpu="1",
            sickbay_class="restart-workload",
            namespace="training",
            pod="solo-a",
        )
        await eventually(lambda: _has_event(world, "SickbayRestarted"), what="solo-a restarted")
        assert not await world.pods("training", field_selector="metadata.name=solo-a")
        assert not any(c[0] == "patch_node" for c in world.spy.calls), "an app XID never touches the node"
        assert not await unschedulable(world, "gpu-06")

        await world.post_alert(
            node="gpu-06",
            xid="13",
            gpu="1",
            sickbay_class="restart-workload",
            namespace="training",
            pod="solo-b",
        )
        await eventually(lambda: unschedulable(world, "gpu-06"), what="quarantine after a second workload")
        node = await world.node("gpu-06")
        assert sickbay_taints(node) == [(footprint.UNHEALTHY, "reset-gpu", "NoSchedule")]
        assert "follows the GPU" in node.metadata.annotations[footprint.REASON]


async def test_storm_opens_the_breaker_and_journals_every_signal(tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path,
        budgets={
            "max_fraction": 0.2,
            "max_nodes": 100,
            "per_pool_max_fraction": 1.0,
            "per_pool_max_nodes": 100,
        },
    )
    async with open_world(tmp_path, policy=policy) as world:
        await world.reconcile()  # the gates learn the fleet: 10 nodes, so at most 2 quarantined
        storm = [f"gpu-{i:02d}" for i in range(4)]  # 40% of the GPU nodes
        for name in storm:
            await world.post_alert(node=name, xid="79", gpu="0")
        journal = world.services.journal
        assert journal is not None

        async def all_journaled() -> bool:
            return await journal.count() >= len(storm)

        await eventually(all_journaled, what="every signal journaled")
        await eventually(lambda: _has_event(world, "SickbayBreakerOpen"), what="breaker opened")
        cordoned = [n for n in storm if await unschedulable(world, n)]
        assert len(cordoned) == 2, cordoned
        response = await world.client.get("/api/v1/breaker")
        state = await response.json()
        assert state["open"] is True
        assert "budget" in state["reason"]
        metrics = await (await world.client.get("/metrics")).text()
        assert "sickbay_breaker_open 1.0" in metrics
        reset = await world.client.post("/api/v1/breaker/reset", json={})
        assert (await reset.json())["open"] is False


async def test_release_removes_exactly_what_sickbay_added(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, release={"healthy_delay": "10m"})
    async with open_world(tmp_path, policy=policy) as world:
        # An operator's own taint and label must survive the whole cycle.
        await world.core.patch_node(
            "gpu-08",
            {
                "metadata": {"labels": {"team": "infra"}},
                "spec": {"taints": [{"key": "team/maint", "value": "x", "effect": "PreferNoSchedule"}]},
            },
        )
        before = await world.node("gpu-08")
        await world.post_alert(
            node="gpu-08", xid="95", gpu="2", sickbay_class="reset-gpu", fingerprint="rel1"
        )
        await eventually(lambda: _state_is(world, "gpu-08", "remediating"), what="remediation requested")
        node = await world.node("gpu-08")
        assert node.metadata.annotations[footprint.REMEDIATION_REQUESTED] == "reset-gpu"
        # External automation resets the GPU and says so; the alert resolves.
        await world.core.patch_node(
            "gpu-08", {"metadata": {"annotations": {footprint.REMEDIATION_DONE: "reset-gpu"}}}
        )
        await world.post_alert(
            node="gpu-08", xid="95", gpu="2", sickbay_class="reset-gpu", fingerprint="rel1", status="resolved"
        )
        await eventually(lambda: _journaled(world, 2), what="the resolved notification journaled")
        await world.reconcile()
        assert await _state_is(world, "gpu-08", "verifying")
        await world.reconcile()
        assert await unschedulable(world, "gpu-08"), "still within healthy-delay"
        world.clock.advance(timedelta(minutes=11))
        await world.reconcile()
        after = await world.node("gpu-08")
        assert not after.spec.unschedulable
        assert [(t.key, t.value, t.effect) for t in after.spec.taints or []] == [
            ("team/maint", "x", "PreferNoSchedule")
        ]
        assert {k: v for k, v in after.metadata.labels.items()} == dict(before.metadata.labels)
        assert not [k for k in (after.metadata.annotations or {}) if k.startswith("sickbay.io/")]
        condition = next(c for c in after.status.conditions if c.type == "GpuHealthy")
        assert condition.status == "True"
        assert await world.events("SickbayReleased")


async def test_manual_uncordon_is_respected(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        await world.post_alert(node="gpu-09", xid="79", gpu="0")
        await eventually(lambda: unschedulable(world, "gpu-09"), what="quarantined")
        await world.core.patch_node("gpu-09", {"spec": {"unschedulable": False}})
        await world.reconcile()
        node = await world.node("gpu-09")
        assert not node.spec.unschedulable
        assert not sickbay_taints(node)
        await world.reconcile()
        assert not await unschedulable(world, "gpu-09"), "not re-cordoned without a new fault"


async def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    async with open_world(tmp_path, dry_run=True) as world:
        world.sim.reset_counters()
        await world.post_alert(node="gpu-00", xid="79", gpu="3")
        await eventually(lambda: _journaled(world, 1), what="journaled")
        await world.reconcile()
        outcomes = await world.services.journal.outcomes()  # type: ignore[union-attr]
        assert any(o["status"] == "dry-run" and o["kind"] == "quarantine" for o in outcomes)
        assert world.sim.counters()["writes"] == 0, world.sim.counters()
        assert not await unschedulable(world, "gpu-00")


async def test_allocatable_drop_longer_than_grace_quarantines(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        await world.core.patch_node_status("gpu-07", {"status": {"allocatable": {"nvidia.com/gpu": "7"}}})
        await world.reconcile()
        assert not await unschedulable(world, "gpu-07"), "within the grace period"
        world.clock.advance(timedelta(minutes=6))
        await world.reconcile()
        await eventually(lambda: unschedulable(world, "gpu-07"), what="quarantine after the grace period")
        reason = (await world.node("gpu-07")).metadata.annotations[footprint.REASON]
        assert "allocatable 7 below capacity 8" in reason


async def _state_is(world: World, name: str, state: str) -> bool:
    labels = (await world.node(name)).metadata.labels or {}
    return labels.get(footprint.STATE) == state


async def _journaled(world: World, count: int) -> bool:
    journal = world.services.journal
    assert journal is not None
    return await journal.count() >= count
