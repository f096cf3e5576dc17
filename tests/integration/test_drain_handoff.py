"""The hand-off waits for a really drained node, and a drain that cannot empty it says so.

Against the simulated API server with real grace periods (a deleted pod stays Terminating for 30 s scaled
down to 0.3 s before its kubelet removes it) and evictions made to fail outright, through the real client.
A hook on Sickbay's kube port reads the simulator's store at the instant the remediation request is
written, so "no pod left at the hand-off" is checked exactly, not by polling.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from app.decide import footprint
from app.domain import NodePatch
from app.sim.kubeapi import EvictionFailure
from app.sim.kubeapi.resources import PODS
from tests.integration.remediation_world import World, eventually, open_world, write_policy

pytestmark = pytest.mark.slow

NODE = "gpu-07"  # only the DaemonSet's pod runs there in the fixture; each test adds its GPU pods
TRAINERS = ("trainer-a", "trainer-b")


def gpu_pods(world: World, node: str) -> list[dict[str, Any]]:
    """The GPU pods bound to `node` in the simulator's store right now, Terminating ones included."""
    found = []
    for pod in world.sim.store.items(PODS):
        containers = (pod.get("spec") or {}).get("containers") or []
        gpus = any(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu") for c in containers)
        if (pod.get("spec") or {}).get("nodeName") == node and gpus:
            found.append(pod)
    return found


def add_trainers(world: World, node: str = NODE) -> None:
    pods = [
        {"name": n, "namespace": "training", "node": node, "gpus": 4, "labels": {"app": n}} for n in TRAINERS
    ]
    world.sim.load({"pods": pods})


class HandOffWatch:
    """Records, at each remediation request Sickbay writes for `node`, which of its GPU pods still exist;
    and, at each poll of the node's pods, whether a drained pod was Terminating then."""

    def __init__(self, world: World, node: str = NODE) -> None:
        self.world = world
        self.node = node
        self.at_handoff: list[list[str]] = []
        self.terminating_seen = 0
        world.spy.hooks.append(self)

    def __call__(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        patch = args[0] if name == "patch_node" else None
        if isinstance(patch, NodePatch) and patch.node == self.node and _requests_remediation(patch):
            self.at_handoff.append([p["metadata"]["name"] for p in gpu_pods(self.world, self.node)])
        if name == "list_pods" and kwargs.get("node") == self.node:
            pods = gpu_pods(self.world, self.node)
            if any(p["metadata"].get("deletionTimestamp") for p in pods):
                self.terminating_seen += 1


def _requests_remediation(patch: NodePatch) -> bool:
    return any(key == footprint.REMEDIATION_REQUESTED and value for key, value in patch.annotations)


async def state_of(world: World, node: str = NODE) -> str | None:
    labels = (await world.node(node)).metadata.labels or {}
    return labels.get(footprint.STATE)


async def state_is(world: World, state: str, node: str = NODE) -> bool:
    return await state_of(world, node) == state


async def events(world: World, reason: str, node: str = NODE) -> list[Any]:
    return [e for e in await world.events(reason) if e.involved_object.name == node]


async def gpu_condition(world: World, node: str = NODE) -> Any:
    return next(c for c in (await world.node(node)).status.conditions if c.type == "GpuHealthy")


async def test_no_remediation_request_while_a_drained_pod_still_exists(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        add_trainers(world)
        watch = HandOffWatch(world)
        await world.post_alert(node=NODE, xid="79", gpu="0")

        await eventually(lambda: state_is(world, "remediating"), what="the hand-off")
        assert watch.at_handoff == [[]], "the remediator was asked while a drained pod still existed"
        assert watch.terminating_seen >= 1, "the drain should have met its pods Terminating and waited"
        node = await world.node(NODE)
        assert node.metadata.annotations[footprint.REMEDIATION_REQUESTED] == "reboot-node"
        evicted = {e.involved_object.name for e in await world.events("SickbayEvicted")}
        assert evicted == set(TRAINERS)
        assert await events(world, "SickbayRemediationRequested")
        assert not await world.pods("training", terminating=True, field_selector=f"spec.nodeName={NODE}")


async def test_delete_after_the_deadline_waits_for_the_deletion(tmp_path: Path) -> None:
    # gpu-05's inference pod has a PodDisruptionBudget that allows no disruption: every eviction is a 429.
    policy = write_policy(tmp_path, drain={"deadline": "1s", "on_deadline": "delete"})
    async with open_world(tmp_path, policy=policy) as world:
        watch = HandOffWatch(world, node="gpu-05")
        await world.post_alert(node="gpu-05", xid="95", gpu="0", sickbay_class="reset-gpu")

        await eventually(lambda: state_is(world, "remediating", "gpu-05"), timeout=20, what="the hand-off")
        assert await world.events("SickbayDeleted"), "the pod should have been deleted at the deadline"
        assert watch.at_handoff == [[]], "handed off before the deleted pod was gone"
        assert watch.terminating_seen >= 1


async def test_a_budget_that_holds_past_the_deadline_leaves_the_node_drain_failed(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, drain={"deadline": "1s", "on_deadline": "leave"})
    async with open_world(tmp_path, policy=policy) as world:
        await world.post_alert(node="gpu-05", xid="95", gpu="0", sickbay_class="reset-gpu")

        await eventually(lambda: state_is(world, "drain-failed", "gpu-05"), timeout=20, what="drain-failed")
        node = await world.node("gpu-05")
        assert footprint.REMEDIATION_REQUESTED not in (node.metadata.annotations or {})
        assert "blocked" in node.metadata.annotations[footprint.DRAIN_FAILED]
        assert not await events(world, "SickbayRemediationRequested", "gpu-05")
        assert len(await world.pods("inference")) == 1, "the pod the budget protects stays"


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (403, 'cannot create resource "pods/eviction"'),
        (400, 'admission webhook "deny-eviction.policy.example.com" denied the request: no evictions today'),
        (500, "Internal error occurred"),
    ],
)
async def test_an_eviction_that_fails_for_good_stops_the_hand_off(
    tmp_path: Path, code: int, says: str
) -> None:
    async with open_world(tmp_path) as world:
        add_trainers(world)
        world.sim.fail_evictions(
            EvictionFailure("training", "trainer-b", code=code, message="no evictions today")
        )
        watch = HandOffWatch(world)
        await world.post_alert(node=NODE, xid="79", gpu="0")

        await eventually(lambda: state_is(world, "drain-failed"), what="drain-failed")
        assert watch.at_handoff == []
        reason = (await world.node(NODE)).metadata.annotations[footprint.DRAIN_FAILED]
        assert "trainer-b (eviction-failed:" in reason
        assert f"failed with {code}" in reason
        assert says in reason
        assert [
            p.metadata.name for p in await world.pods("training", field_selector=f"spec.nodeName={NODE}")
        ] == ["trainer-b"], "trainer-a was evicted; trainer-b keeps running"


async def test_a_403_ends_drain_failed_visibly_and_a_later_reconcile_hands_off(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        add_trainers(world)
        # Sickbay's service account lacks RBAC for pods/eviction in this namespace.
        world.sim.fail_evictions(EvictionFailure("training", "*", code=403))
        watch = HandOffWatch(world)
        await world.post_alert(node=NODE, xid="79", gpu="0")
        await eventually(lambda: state_is(world, "drain-failed"), what="drain-failed")

        # Visible on the node: still quarantined, the label, why, the condition, an Event.
        node = await world.node(NODE)
        assert node.spec.unschedulable
        assert (footprint.UNHEALTHY, "reboot-node") in [(t.key, t.value) for t in node.spec.taints]
        annotations = node.metadata.annotations
        assert footprint.REMEDIATION_REQUESTED not in annotations
        assert "2 of 2 pod(s) still on the node" in annotations[footprint.DRAIN_FAILED]
        assert (
            'User "system:serviceaccount:sickbay:sickbay" cannot create resource "pods/eviction"'
            in (annotations[footprint.DRAIN_FAILED])
        )

        async def condition_says_drain_failed() -> bool:
            condition = await gpu_condition(world)
            return (condition.status, condition.reason) == ("False", "DrainFailed")

        await eventually(condition_says_drain_failed, what="GpuHealthy=False, reason DrainFailed")
        assert (await gpu_condition(world)).message.startswith("reboot-node: not handed off")
        failed = await events(world, "SickbayDrainFailed")
        assert len(failed) == 1
        assert failed[0].type == "Warning"
        assert "forbidden" in failed[0].message
        assert not await events(world, "SickbayRemediationRequested")
        assert len(await world.pods("training", field_selector=f"spec.nodeName={NODE}")) == 2
        # ... in kubectl, the metrics, the status page and the journal.
        labels = await world.kubectl("get", "node", NODE, "-L", footprint.STATE)
        assert "drain-failed" in labels
        metrics = await (await world.client.get("/metrics")).text()
        assert 'sickbay_drains_failed_total{reason="eviction-failed"} 1.0' in metrics
        page = await (await world.client.get("/")).text()
        assert "drain-failed" in page
        assert "not handed off" in page
        outcomes = await world.services.journal.outcomes()  # type: ignore[union-attr]
        held = [o for o in outcomes if o["kind"] == "request-remediation"]
        assert [o["status"] for o in held] == ["blocked"]

        # Not yet due for a retry: a reconcile leaves it as it is, and counts it.
        await world.reconcile()
        assert await state_is(world, "drain-failed")
        metrics = await (await world.client.get("/metrics")).text()
        assert 'sickbay_nodes{state="drain-failed"} 1.0' in metrics
        # The RBAC is fixed; once drain.retry_after (10 min) has passed, a reconcile drains it again, and
        # this time the pods go and the node is handed off.
        world.sim.fail_evictions()
        world.clock.advance(timedelta(minutes=11))
        await world.reconcile()
        await eventually(lambda: state_is(world, "remediating"), what="the hand-off after the retry")
        assert watch.at_handoff == [[]]
        node = await world.node(NODE)
        assert footprint.DRAIN_FAILED not in node.metadata.annotations
        assert footprint.DRAIN_FAILED_AT not in node.metadata.annotations
        assert (await gpu_condition(world)).reason == "RebootNode"


async def test_a_human_who_moves_the_pods_lets_the_next_reconcile_hand_off(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, drain={"retry_after": None})  # never retried by itself
    async with open_world(tmp_path, policy=policy) as world:
        add_trainers(world)
        world.sim.fail_evictions(EvictionFailure("*", "*", code=400))
        watch = HandOffWatch(world)
        await world.post_alert(node=NODE, xid="79", gpu="0")
        await eventually(lambda: state_is(world, "drain-failed"), what="drain-failed")
        world.clock.advance(timedelta(hours=3))
        await world.reconcile()
        assert await state_is(world, "drain-failed"), "retry_after: null never retries by itself"

        # The operator deletes the pods (the webhook denies evictions, not deletes).
        await world.kubectl("delete", "pod", "-n", "training", *TRAINERS, "--wait=false")
        await world.reconcile()
        assert await state_is(world, "drain-failed"), "the pods are still Terminating"
        await eventually(lambda: _no_gpu_pods(world), what="the deleted pods gone")
        await world.reconcile()
        await eventually(lambda: state_is(world, "remediating"), what="the hand-off")
        assert watch.at_handoff == [[]]


async def _no_gpu_pods(world: World) -> bool:
    return not gpu_pods(world, NODE)


async def test_relabelling_a_drain_failed_node_draining_retries_it_now(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:
        add_trainers(world)
        world.sim.fail_evictions(EvictionFailure("training", "*", code=403))
        await world.post_alert(node=NODE, xid="79", gpu="0")
        await eventually(lambda: state_is(world, "drain-failed"), what="drain-failed")

        world.sim.fail_evictions()  # the ClusterRole is fixed; the operator does not wait for retry_after
        await world.kubectl("label", "node", NODE, f"{footprint.STATE}=draining", "--overwrite")
        await world.reconcile()
        await eventually(lambda: state_is(world, "remediating"), what="the hand-off")
        annotations = (await world.node(NODE)).metadata.annotations
        assert footprint.DRAIN_FAILED not in annotations
        assert annotations[footprint.REMEDIATION_REQUESTED] == "reboot-node"
