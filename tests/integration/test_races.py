"""Remediation under a flaky, contended API server: nothing duplicated, nothing lost, the service stays up.

The simulated API server answers a fifth of all requests with 429, 500 or a hang past the client's
per-attempt timeout, while another writer (an operator's script, a node-feature controller) keeps
patching the target nodes' labels and annotations, so Sickbay's resourceVersion-guarded writes meet
409s. Four nodes get hardware XIDs at once. Afterwards every one of them must carry exactly one Sickbay
taint, be cordoned, still hold the other writer's latest labels and the operator's own taint, and every
evictable GPU pod must have been evicted exactly once (ARCHITECTURE.md: "Node writes are desired-state and
safe under races"; evictions through the Eviction API; retries on 429/5xx/timeouts).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes.aio.client.exceptions import ApiException

from app.decide import footprint
from app.kube.retries import RetryPolicy
from app.sim.kubeapi import FaultConfig
from app.sim.kubeapi.resources import EVENTS, NODES, PODS, Ref
from tests.integration.remediation_world import World, eventually, open_world, write_policy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NODE_COUNT = 6
# node → (xid, class): hardware faults of both hardware classes that drain.
TARGETS = {
    "gpu-00": ("79", "reboot-node"),
    "gpu-01": ("95", "reset-gpu"),
    "gpu-02": ("119", "reset-gpu"),
    "gpu-03": ("79", "reboot-node"),
}
WRITER_LABEL = "race.example/tick"
WRITER_ANNOTATION = "race.example/writer"
OPERATOR_TAINT = ("team/maint", "x", "PreferNoSchedule")


def seed() -> dict[str, Any]:
    pods: list[dict[str, Any]] = []
    for i in range(NODE_COUNT):
        node = f"gpu-{i:02d}"
        pods += [
            {"name": f"train-{i}-a", "namespace": "training", "node": node, "gpus": 4},
            {"name": f"train-{i}-b", "namespace": "training", "node": node, "gpus": 4},
            # No GPU request: a drain leaves it alone (policy: gpu_pods_only).
            {"name": f"web-{i}", "namespace": "web", "node": node, "gpus": 0},
        ]
    return {
        "namespaces": ["training", "web", "gpu-operator"],
        "nodes": [
            {"name": "gpu-{i:02d}", "count": NODE_COUNT, "gpus": 8, "labels": {"sickbay.io/pool": "h100"}}
        ],
        "daemonsets": [
            {"name": "dcgm-exporter", "namespace": "gpu-operator", "labels": {"app": "dcgm"}, "nodes": "all"}
        ],
        "pods": pods,
    }


def gpu_pods_of(node: str) -> set[str]:
    i = int(node.split("-")[1])
    return {f"train-{i}-a", f"train-{i}-b"}


@dataclass
class Writer:
    """Keeps bumping the targets' resourceVersions; remembers the last value each node acknowledged."""

    world: World
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    acked: dict[str, int] = field(default_factory=dict)
    writes: int = 0
    errors: int = 0

    async def run(self, node: str) -> None:
        tick = 0
        while not self.stop.is_set():
            tick += 1
            body = {
                "metadata": {
                    "labels": {WRITER_LABEL: str(tick)},
                    "annotations": {WRITER_ANNOTATION: f"write-{tick}"},
                }
            }
            try:
                await self.world.core.patch_node(node, body, _request_timeout=3)
            except (ApiException, TimeoutError, OSError):
                self.errors += 1  # an injected fault: the write did not happen, the next one will
            else:
                self.acked[node] = tick
                self.writes += 1
            await asyncio.sleep(0.05)


def stored_node(world: World, name: str) -> dict[str, Any]:
    node = world.sim.store.get(Ref(NODES, name=name))
    assert node is not None
    return node


def stored_pods(world: World) -> set[tuple[str, str]]:
    return {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in world.sim.store.items(PODS)}


def stored_events(world: World, reason: str) -> list[dict[str, Any]]:
    return [e for e in world.sim.store.items(EVENTS) if e.get("reason") == reason]


def settled(world: World) -> bool:
    """Read straight from the simulator's store (the faults apply to HTTP clients, the test's included)."""
    pods = stored_pods(world)
    asked = {e["involvedObject"]["name"] for e in stored_events(world, "SickbayRemediationRequested")}
    announced = {e["involvedObject"]["name"] for e in stored_events(world, "SickbayQuarantined")}
    for name in TARGETS:
        node = stored_node(world, name)
        taints = {t["key"] for t in node["spec"].get("taints") or []}
        if footprint.UNHEALTHY not in taints or not node["spec"].get("unschedulable"):
            return False
        if any(("training", pod) in pods for pod in gpu_pods_of(name)):
            return False
        if name not in asked or name not in announced:
            return False
    return True


async def test_faults_and_a_concurrent_writer_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path,
        budgets={
            "max_fraction": 1.0,
            "max_nodes": 100,
            "per_pool_max_fraction": 1.0,
            "per_pool_max_nodes": 100,
            "quarantines_per_minute": 100,
        },
    )
    retry = RetryPolicy(attempts=10, base=0.05, cap=0.5, timeout=1.0)
    async with open_world(tmp_path, seed=seed(), policy=policy, retry=retry) as world:
        for name in TARGETS:  # an operator's own taint, which no write may lose
            await world.core.patch_node(
                name,
                {"spec": {"taints": [dict(zip(("key", "value", "effect"), OPERATOR_TAINT, strict=True))]}},
            )
        before = stored_pods(world)
        world.sim.reset_counters()
        world.sim.configure_faults(
            FaultConfig(error_rate=0.2, kinds=("429", "500", "timeout"), hang_s=1.5, seed=20240611)
        )
        writer = Writer(world)
        writers = [asyncio.create_task(writer.run(name), name=f"writer-{name}") for name in TARGETS]
        try:
            await asyncio.sleep(0.2)  # the writer is already bumping resourceVersions when the faults arrive
            for name, (xid, cls) in TARGETS.items():
                await world.post_alert(node=name, xid=xid, gpu="1", sickbay_class=cls)

            async def done() -> bool:
                return settled(world)

            await eventually(done, timeout=60, what="every target quarantined, drained and handed off")
            # Keep the writer racing a little longer against whatever Sickbay still writes (state labels).
            await asyncio.sleep(0.5)
        finally:
            writer.stop.set()
            await asyncio.gather(*writers, return_exceptions=True)
        counters = world.sim.counters()
        world.sim.configure_faults(None)

        injected = sum(counters["faults"].values())
        print(
            f"\ninjected faults: {counters['faults']} ({injected} of {sum(counters['responses'].values())} "
            f"responses); responses: {counters['responses']}; evictions: {counters['evictions']}; "
            f"writer: {writer.writes} writes acknowledged, {writer.errors} failed"
        )
        assert injected >= 5, counters
        assert writer.writes >= 4 * len(TARGETS), "the writer really raced"

        await world.reconcile()  # re-asserts GpuHealthy=False wherever the best-effort write was lost
        for name, (_, cls) in TARGETS.items():
            node = await world.node(name)
            taints = [(t.key, t.value, t.effect) for t in node.spec.taints or []]
            ours = [t for t in taints if t[0] == footprint.UNHEALTHY]
            assert ours == [(footprint.UNHEALTHY, cls, "NoSchedule")], (name, taints)
            assert OPERATOR_TAINT in taints, (name, taints)
            assert len(taints) == 2, (name, taints)
            assert node.spec.unschedulable is True, name
            labels = node.metadata.labels or {}
            annotations = node.metadata.annotations or {}
            assert labels.get(WRITER_LABEL) == str(writer.acked[name]), (name, labels, writer.acked)
            assert annotations.get(WRITER_ANNOTATION) == f"write-{writer.acked[name]}", name
            assert labels.get(footprint.STATE) == "remediating", (name, labels)
            assert annotations.get(footprint.OWNED_BY) == "sickbay-test-0"
            assert annotations.get(footprint.REMEDIATION_REQUESTED) == cls
            condition = next((c for c in node.status.conditions or [] if c.type == "GpuHealthy"), None)
            assert condition is not None, name
            assert condition.status == "False", (name, condition)

        for i in range(len(TARGETS), NODE_COUNT):
            bystander = await world.node(f"gpu-{i:02d}")
            assert not bystander.spec.unschedulable
            assert not [t for t in bystander.spec.taints or [] if t.key.startswith("sickbay.io/")]

        evicted_expected = {("training", pod) for name in TARGETS for pod in gpu_pods_of(name)}
        after = stored_pods(world)
        assert before - after == evicted_expected, "exactly the targets' GPU pods left"
        evicted_events = Counter(
            (e.involved_object.namespace, e.involved_object.name)
            for e in await world.events("SickbayEvicted")
        )
        assert set(evicted_events) == evicted_expected
        assert all(count == 1 for count in evicted_events.values()), evicted_events
        assert counters["evictions"].get("evicted", 0) == len(evicted_expected), counters["evictions"]
        quarantined = Counter(e.involved_object.name for e in await world.events("SickbayQuarantined"))
        assert quarantined == Counter(set(TARGETS)), quarantined

        journal = world.services.journal
        assert journal is not None
        outcomes = await journal.outcomes(limit=1000)
        failed = [o for o in outcomes if o["status"] in ("failed", "blocked")]
        assert not failed, failed

        health = await world.client.get("/healthz")
        assert health.status == 200
        metrics = await world.client.get("/metrics")
        assert metrics.status == 200
        text = await metrics.text()
        assert 'sickbay_actions_total{kind="evict-pod",outcome="applied"} 8.0' in text, text
        assert "sickbay_breaker_open 0.0" in text


async def test_a_lost_gpuhealthy_condition_write_is_repaired(tmp_path: Path) -> None:
    """The condition write fails while the API server is unwell; once it recovers, reconciliation (which
    moves every owned node through remediation anyway) must put GpuHealthy=False on the quarantined node.
    The same loss happens under contention alone: the race test above hits it now and then (409s)."""
    retry = RetryPolicy(attempts=3, base=0.01, cap=0.05, timeout=1.0)
    async with open_world(tmp_path, seed=seed(), retry=retry) as world:
        await world.reconcile()  # the gates learn the fleet
        world.sim.configure_faults(
            FaultConfig(
                error_rate=1.0,
                kinds=("500",),
                verbs=frozenset({"patch"}),
                resources=frozenset({"nodes/status"}),
            )
        )
        await world.post_alert(node="gpu-00", xid="79", gpu="1")

        async def quarantined_and_announced() -> bool:
            node = stored_node(world, "gpu-00")
            announced = stored_events(world, "SickbayQuarantined")
            return bool(node["spec"].get("unschedulable")) and bool(announced)

        await eventually(quarantined_and_announced, timeout=30, what="quarantine and its Event")
        assert world.sim.counters()["faults"].get("500", 0) >= 1, "the condition write was refused"
        world.sim.configure_faults(None)
        for _ in range(3):
            await world.reconcile()
        node = await world.node("gpu-00")
        condition = next((c for c in node.status.conditions or [] if c.type == "GpuHealthy"), None)
        assert condition is not None, "no GpuHealthy condition on a quarantined node"
        assert (condition.status, condition.reason) == ("False", "RebootNode")
