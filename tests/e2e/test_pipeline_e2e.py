"""The whole pipeline, end to end: simulated exporters → real Prometheus → real Alertmanager → `sickbay serve`
→ the simulated cluster, read back through the official Kubernetes client.

Faults are injected through the fleet simulator's control API (`POST /inject`). Hardware faults must take
the node out of the pool (cordon, `sickbay.io/unhealthy=<class>:NoSchedule`, GPU pods evicted, a gang
restarted) within 5 s of the metric changing, with 1 s scrape and evaluation intervals and a 0 s
group_wait; an application XID restarts only the pod on that GPU; a repaired node is released after the
healthy delay once its alerts resolve.

Prometheus scrapes the exporters three ways (`app.sim.fleet.scrape`): as prometheus-operator does with
`honorLabels: false` (the exporter's own pod in `pod`, the workload in `exported_pod`), with
`honorLabels: true`, and the plain way from an exporter that maps no pods. So the real Prometheus does the
label renaming, and Sickbay must restart the workload, never the exporter, and find a fatal fault's pod
from the cluster when the alert names none. A team's own rule (TeamGpuPowerBrake, unknown to Sickbay)
must restart nothing and, while it lasts, raise the node's GpuSoftFault condition.

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
SOFT_PERSIST_S = 3.0


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


@dataclass(frozen=True)
class Targets:
    apps: list[Target]  # an application XID each: one operator-scraped node, one honorLabels node
    hardware: list[Target]  # one node per HARDWARE fault, the first hosting a gang rank
    gang_others: set[tuple[str, str]]  # restarted when the first hardware node is quarantined
    unlabelled: Target  # a plain-scraped node whose exporter maps no pods, running one GPU pod
    soft: Target  # the TeamGpuPowerBrake node


def pick_targets(stack: Stack) -> Targets:
    sim = stack.fleet
    style = stack.scrape_styles
    jobs = sorted(sim.scheduler.running.values(), key=lambda j: j.name)
    gang = next(j for j in jobs if j.gang and len(j.placements) >= 2)
    first = gang.placements[0]
    gang_node = sim.nodes[first.node].name
    gang_target = Target(gang_node, first.gpus[0], (first.pod.namespace, first.pod.name))
    others = {(p.pod.namespace, p.pod.name) for p in gang.placements[1:]}
    taken = {gang_node}

    def node_targets() -> list[Target]:
        out = []
        for node in sim.nodes:
            busy = [g for g in node.gpus if g.pod is not None]
            gpu = busy[0] if busy else node.gpus[0]
            pod = (gpu.pod.namespace, gpu.pod.name) if gpu.pod else None
            out.append(Target(node.name, gpu.identity.index, pod))
        return out

    def pods_on(node: str) -> set[str]:
        return {g.pod.name for g in sim.node(node).gpus if g.pod is not None}

    def single(target: Target) -> bool:
        """A pod of a job of its own (not a gang rank, which the gang's node fault would restart)."""
        gpu = sim.node(target.node).gpus[target.gpu]
        job = sim.scheduler.job_of(gpu.pod)
        return job is not None and not job.gang

    def take(wanted: str | None, *, one_pod: bool = False, gang_ok: bool = False) -> Target:
        found = next(
            (
                t
                for t in node_targets()
                if t.node not in taken
                and (wanted is None or style.get(t.node, "plain") == wanted)
                and t.pod is not None
                and (gang_ok or single(t))
                and (not one_pod or len(pods_on(t.node)) == 1)
            ),
            None,
        )
        assert found is not None, (
            f"seed 7 has no free {wanted} node with a {'gang' if gang_ok else 'single'} pod"
        )
        taken.add(found.node)
        return found

    apps = [take("operator"), take("honor")]
    unlabelled = take("plain", one_pod=True)
    soft = take(None, gang_ok=True)
    rest = [t for t in node_targets() if t.node not in taken]
    rest.sort(key=lambda t: t.pod is None)  # nodes with a GPU pod first: their eviction is checked
    return Targets(apps, [gang_target, *rest[: len(HARDWARE) - 1]], others, unlabelled, soft)


def group_key(pod: Any) -> str:
    """Sickbay's workload key for a pod of the simulated fleet (its gang or its Job)."""
    labels = pod.metadata.labels or {}
    if labels.get("jobset.sigs.k8s.io/jobset-name"):
        return f"jobset:{pod.metadata.namespace}/{labels['jobset.sigs.k8s.io/jobset-name']}"
    return f"job:{pod.metadata.namespace}/{labels['batch.kubernetes.io/job-name']}"


async def pod_uid(core: Any, namespace: str, name: str) -> str | None:
    found = await core.list_namespaced_pod(namespace, field_selector=f"metadata.name={name}")
    return next((p.metadata.uid for p in found.items if not p.metadata.deletion_timestamp), None)


async def pod_gone(core: Any, namespace: str, name: str) -> bool:
    found = await core.list_namespaced_pod(namespace, field_selector=f"metadata.name={name}")
    return all(p.metadata.deletion_timestamp for p in found.items)


async def test_faults_flow_from_metrics_to_the_cluster(tmp_path: Path) -> None:
    config = StackConfig(
        nodes=12,
        seed=7,
        healthy_delay=f"{HEALTHY_DELAY_S:g}s",
        reconcile_interval_s=0.5,
        scrape="mixed",
        user_alerts=True,
        policy={
            "transient": {"persist_after": f"{SOFT_PERSIST_S:g}s"},
            "retry": {"initial": "500ms", "max": "2s"},
        },
    )
    started = time.perf_counter()
    async with running_stack(tmp_path, config) as stack, official_client(stack.kubeconfig) as core:
        ready_s = time.perf_counter() - started
        picked = pick_targets(stack)
        targets, gang_others = picked.hardware, picked.gang_others
        rows: list[tuple[str, str, str, float]] = []

        # -- an application XID restarts the GPU's workload, never the exporter, and leaves the node --
        for app in picked.apps:
            assert app.pod is not None
            app_ns, app_pod = app.pod
            exporter = stack.exporter_pod(app.node)
            exporter_uid = await pod_uid(core, "gpu-operator", exporter)
            injected = await stack.inject(app.node, app.gpu, "app-xid", xid=13)
            await eventually(
                lambda ns=app_ns, name=app_pod: pod_gone(core, ns, name),
                timeout=15,
                what=f"pod {app_ns}/{app_pod} restarted",
            )
            scraped = stack.scrape_styles[app.node]
            rows.append(
                (
                    "restart-workload",
                    f"application XID 13 ({scraped})",
                    app.node,
                    time.perf_counter() - injected.at,
                )
            )
            assert await pod_uid(core, "gpu-operator", exporter) == exporter_uid, (
                "the exporter is never restarted"
            )
            node = await core.read_node(app.node)
            assert not node.spec.unschedulable
            assert sickbay_taints(node) == []
            assert not any(
                k.startswith("sickbay.io/") and k != POOL_LABEL for k in (node.metadata.labels or {})
            )
            assert not any(k.startswith("sickbay.io/") for k in (node.metadata.annotations or {}))

        # -- a team's own soft alert: restarts nothing, and while it lasts the node shows it --------------
        soft = picked.soft
        assert soft.pod is not None
        soft_uid = await pod_uid(core, *soft.pod)
        injected = await stack.inject(soft.node, soft.gpu, "power-brake", duration_s=600)

        async def soft_condition() -> Any:
            node = await core.read_node(soft.node)
            found = [
                c for c in node.status.conditions or [] if c.type == "GpuSoftFault" and c.status == "True"
            ]
            return found[0] if found else None

        condition = await eventually(soft_condition, timeout=30, what="GpuSoftFault=True on the soft node")
        rows.append(
            ("transient", "TeamGpuPowerBrake, made visible", soft.node, time.perf_counter() - injected.at)
        )
        assert condition.reason == "TeamGpuPowerBrake"
        assert await pod_uid(core, *soft.pod) == soft_uid, "a soft alert restarts nothing"
        node = await core.read_node(soft.node)
        assert not node.spec.unschedulable
        assert sickbay_taints(node) == []

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

        # -- a fatal XID whose alert names no pod: Sickbay finds the GPU's pod from the cluster -----------
        bare = picked.unlabelled
        assert bare.pod is not None
        bare_pod = (
            await core.list_namespaced_pod(bare.pod[0], field_selector=f"metadata.name={bare.pod[1]}")
        ).items[0]
        injected = await stack.inject(bare.node, bare.gpu, "sudden-xid", xid=79)
        latency = await wait_unschedulable(core, bare.node, since=injected.at)
        rows.append(("reboot-node", "XID 79, no pod labels on the alert", bare.node, latency))
        await eventually(lambda: pod_gone(core, *bare.pod), timeout=15, what=f"{bare.pod} evicted")

        journal = await stack.actions()
        classes = {(item["node"], item["class"]) for item in journal["items"] if item["status"] == "firing"}
        for fault, target in zip(HARDWARE, targets, strict=True):
            assert (target.node, fault.expected) in classes, (fault.what, classes)
        for app in picked.apps:
            app_items = [i for i in journal["items"] if i["node"] == app.node]
            assert [i["class"] for i in app_items] == ["restart-workload"], app_items
            assert [a["kind"] for a in app_items[0]["plan"]["actions"]] == ["restart-pod"]
            assert [a["pod"]["name"] for a in app_items[0]["plan"]["actions"]] == [
                app.pod[1] if app.pod else ""
            ]
        bare_items = [i for i in journal["items"] if i["node"] == bare.node and i["class"] == "reboot-node"]
        assert bare_items, journal["items"]
        assert bare_items[0]["plan"]["workload"] == group_key(bare_pod), bare_items[0]["plan"]
        soft_items = [i for i in journal["items"] if i["node"] == soft.node]
        assert {i["class"] for i in soft_items} == {"transient"}, soft_items
        kinds = [a["kind"] for i in soft_items for a in i["plan"]["actions"]]
        assert "raise-condition" in kinds
        assert "recheck" in kinds
        assert not {"restart-pod", "evict-pod", "quarantine"} & set(kinds)

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
