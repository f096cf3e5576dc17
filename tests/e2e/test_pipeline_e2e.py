"""The whole pipeline, end to end: simulated exporters → real Prometheus → real Alertmanager → `sickbay serve`
→ the simulated cluster, read back through the official Kubernetes client.

Faults are injected through the fleet simulator's control API (`POST /inject`). Hardware faults must take
the node out of the pool (cordon, `sickbay.io/unhealthy=<class>:NoSchedule`, GPU pods evicted, a gang
restarted) within 5 s of the metric changing, with 1 s scrape and evaluation intervals and a 0 s
group_wait; an application XID restarts only the pod named on the alert; a repaired node is released
after the healthy delay once its alerts resolve.

Prometheus runs on a generated copy of the rule bundle in which GpuMissingFromExporter (2m in the bundle)
and GpuDriverVersionMismatch (15m) have second-scale `for:` durations; see `app.demo.stack`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.decide import footprint
from tests.e2e.stack import (
    POOL_LABEL,
    STACK_MARKS,
    Stack,
    StackConfig,
    eventually,
    gpu_pods_on,
    official_client,
    running_stack,
    sickbay_taints,
    wait_unschedulable,
)

pytestmark = STACK_MARKS

LIMIT_S = 5.0
HEALTHY_DELAY_S = 3.0


@dataclass(frozen=True)
class HardwareFault:
    what: str
    mode: str
    fields: dict[str, Any]
    expected: str


HARDWARE = (
    HardwareFault("XID 79, GPU fell off the bus", "sudden-xid", {"xid": 79}, "reboot-node"),
    HardwareFault("HBM double-bit ECC error (XID 48)", "hbm", {"lead_time_s": 0}, "reset-gpu"),
    HardwareFault("GSP firmware error (XID 119)", "gsp", {"lead_time_s": 0}, "reset-gpu"),
    HardwareFault("XID 54, hardware to replace", "sudden-xid", {"xid": 54}, "replace"),
    HardwareFault("GPU vanished from the exporter", "gpu-vanish", {}, "reboot-node"),
)


@dataclass(frozen=True)
class Target:
    node: str
    gpu: int
    pod: tuple[str, str] | None  # (namespace, name) the exporter attributes the GPU to


def pick_targets(stack: Stack) -> tuple[Target, list[Target], set[tuple[str, str]]]:
    """The app-XID target (a single pod), one node per hardware fault (the first hosts a gang rank),
    and the gang's other pods (which must be restarted when the first node is quarantined)."""
    sim = stack.fleet
    jobs = sorted(sim.scheduler.running.values(), key=lambda j: j.name)
    gang = next(j for j in jobs if j.gang and len(j.placements) >= 2)
    first = gang.placements[0]
    gang_node = sim.nodes[first.node].name
    gang_target = Target(gang_node, first.gpus[0], (first.pod.namespace, first.pod.name))
    others = {(p.pod.namespace, p.pod.name) for p in gang.placements[1:]}
    app = next(
        Target(sim.nodes[p.node].name, p.gpus[0], (p.pod.namespace, p.pod.name))
        for j in jobs
        if not j.gang
        for p in j.placements
        if sim.nodes[p.node].name != gang_node
    )
    rest: list[Target] = []
    for node in sim.nodes:
        if node.name in (gang_node, app.node):
            continue
        busy = [g for g in node.gpus if g.pod is not None]
        gpu = busy[0] if busy else node.gpus[0]
        pod = (gpu.pod.namespace, gpu.pod.name) if gpu.pod else None
        rest.append(Target(node.name, gpu.identity.index, pod))
    rest.sort(key=lambda t: t.pod is None)  # nodes with a GPU pod first: their eviction is checked
    return app, [gang_target, *rest[: len(HARDWARE) - 1]], others


async def pod_gone(core: Any, namespace: str, name: str) -> bool:
    found = await core.list_namespaced_pod(namespace, field_selector=f"metadata.name={name}")
    return all(p.metadata.deletion_timestamp for p in found.items)


async def test_faults_flow_from_metrics_to_the_cluster(tmp_path: Path) -> None:
    config = StackConfig(nodes=12, seed=7, healthy_delay=f"{HEALTHY_DELAY_S:g}s", reconcile_interval_s=0.5)
    started = time.perf_counter()
    async with running_stack(tmp_path, config) as stack, official_client(stack.kubeconfig) as core:
        ready_s = time.perf_counter() - started
        app, targets, gang_others = pick_targets(stack)
        rows: list[tuple[str, str, str, float]] = []

        # -- an application XID restarts the pod on the alert and leaves the node alone ---------------
        assert app.pod is not None
        app_ns, app_pod = app.pod
        injected = await stack.inject(app.node, app.gpu, "app-xid", xid=13)
        await eventually(
            lambda: pod_gone(core, app_ns, app_pod), timeout=15, what=f"pod {app_ns}/{app_pod} restarted"
        )
        rows.append(("restart-workload", "application XID 13", app.node, time.perf_counter() - injected.at))
        node = await core.read_node(app.node)
        assert not node.spec.unschedulable
        assert sickbay_taints(node) == []
        assert not any(k.startswith("sickbay.io/") and k != POOL_LABEL for k in (node.metadata.labels or {}))
        assert not any(k.startswith("sickbay.io/") for k in (node.metadata.annotations or {}))

        # -- hardware faults: quarantine within 5 s of the metric changing -----------------------------
        latencies: dict[str, float] = {}
        for fault, target in zip(HARDWARE, targets, strict=True):
            injected = await stack.inject(target.node, target.gpu, fault.mode, **fault.fields)
            latency = await wait_unschedulable(core, target.node, since=injected.at)
            latencies[fault.what] = latency
            rows.append((fault.expected, fault.what, target.node, latency))

        print(f"\nstack ready in {ready_s:.1f}s; fault → effect, 1 s scrape/evaluation, group_wait 0s:")
        print(f"{'class':<17} {'fault':<36} {'node':<14} {'latency':>8}")
        for cls, what, node_name, seconds in rows:
            print(f"{cls:<17} {what:<36} {node_name:<14} {seconds * 1000:>6.0f}ms")

        slow = {what: s for what, s in latencies.items() if s >= LIMIT_S}
        assert not slow, f"slower than {LIMIT_S}s from metric change to unschedulable: {slow}"

        for fault, target in zip(HARDWARE, targets, strict=True):
            node = await core.read_node(target.node)
            assert sickbay_taints(node) == [(footprint.UNHEALTHY, fault.expected, "NoSchedule")], (
                fault.what,
                node.spec.taints,
            )
            assert node.metadata.labels.get(footprint.STATE) in ("quarantined", "draining", "remediating")

            async def drained(name: str = target.node) -> bool:
                return not await gpu_pods_on(core, name)

            await eventually(drained, timeout=15, what=f"GPU pods evicted from {target.node}")
            daemon = await core.list_namespaced_pod(
                "gpu-operator", field_selector=f"spec.nodeName={target.node}"
            )
            assert daemon.items, "DaemonSet pods are never evicted"

        async def gang_restarted() -> bool:
            return all([await pod_gone(core, ns, name) for ns, name in gang_others])

        await eventually(gang_restarted, timeout=15, what="the gang's other ranks restarted")

        journal = await stack.actions()
        classes = {(item["node"], item["class"]) for item in journal["items"] if item["status"] == "firing"}
        for fault, target in zip(HARDWARE, targets, strict=True):
            assert (target.node, fault.expected) in classes, (fault.what, classes)
        app_items = [i for i in journal["items"] if i["node"] == app.node]
        assert [i["class"] for i in app_items] == ["restart-workload"], app_items
        assert [a["kind"] for a in app_items[0]["plan"]["actions"]] == ["restart-pod"]

        # -- remediation done, the GPU repaired, the alerts resolved: released after the healthy delay --
        released = [targets[0].node, targets[-1].node]  # XID 79 and the vanished GPU (both reboot-node)

        async def remediating(name: str) -> bool:
            node = await core.read_node(name)
            return bool((node.metadata.annotations or {}).get(footprint.REMEDIATION_REQUESTED))

        for name in released:
            await eventually(lambda name=name: remediating(name), timeout=15, what=f"{name} handed off")
            stack.repair(name)
            await core.patch_node(name, {"metadata": {"annotations": {footprint.REMEDIATION_DONE: "true"}}})
        done_at = time.perf_counter()

        async def back_in_pool(name: str) -> bool:
            node = await core.read_node(name)
            return (
                not node.spec.unschedulable
                and not sickbay_taints(node)
                and footprint.STATE not in (node.metadata.labels or {})
            )

        for name in released:
            await eventually(lambda name=name: back_in_pool(name), timeout=40, what=f"{name} released")
        release_s = time.perf_counter() - done_at
        print(f"released {released} {release_s:.1f}s after remediation was reported done")
        assert release_s >= HEALTHY_DELAY_S, "released before the healthy delay"
        journal = await stack.actions()
        for name in released:
            assert any(i["node"] == name and i["status"] == "resolved" for i in journal["items"]), name
        # The replace-class node is never released automatically.
        replace_node = await core.read_node(targets[3].node)
        assert replace_node.spec.unschedulable
