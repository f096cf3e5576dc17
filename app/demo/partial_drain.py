"""The demo's partial-drain scene: a GPU reset evicts only the faulty GPU's pod, and a healthy workload
keeps running on the same node.

An uncontained ECC error (XID 95, `reset-gpu`) strikes one GPU of a node whose exporter names the pod on
each GPU (`exported_pod`). The policy drains `reset-gpu` partially: Sickbay taints the node NoSchedule (no
cordon), evicts the pod on that GPU, and leaves the pod on another GPU Running. The scene's effect is all
three seen through the cluster API. Its own module, so the shared scene list stays as it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass

from app.decide import footprint
from app.demo.stack import Stack
from app.demo.timeline import Recorder, Scene
from app.sim.fleet.workloads import PodRef

XID = 95  # Uncontained memory error: NVIDIA's RESET_GPU bucket
WITHIN_S = 25.0


@dataclass(frozen=True, slots=True)
class Part:
    """Who plays the scene: the node, the faulty GPU and its pod, and the healthy pod that stays."""

    node: str
    gpu: int
    faulty: tuple[str, str]
    healthy: tuple[str, str]


def cast_partial(stack: Stack, *, avoid: Collection[str]) -> Part | None:
    """A node none of the other scenes uses, whose exporter names pods and which runs no gang rank, with
    a single-pod workload on one GPU and another on a second GPU (landed on free GPUs where needed)."""
    sim = stack.fleet
    for node in sorted(sim.nodes, key=lambda n: n.name):
        if node.name in avoid or not stack.maps_pods(node.name):
            continue
        held = [g for g in node.gpus if g.pod is not None]
        if any(_gang(stack, g.pod) for g in held):
            continue
        free = [g.identity.index for g in node.gpus if g.pod is None and g.present]
        if len(held) + len(free) < 2 or not node.gpus:
            continue
        pods: list[tuple[int, tuple[str, str]]] = []
        for state in node.gpus:
            if state.pod is not None and all(state.pod.name != p[1][1] for p in pods):
                pods.append((state.identity.index, (state.pod.namespace, state.pod.name)))
        for name in ("finetune-partial-a", "serve-partial-b")[: max(0, 2 - len(pods))]:
            index = free.pop(0)
            ref = stack.attach_workload(node.name, index, namespace="training", name=name)
            pods.append((index, (ref.namespace, ref.name)))
        (gpu, faulty), (_, healthy) = pods[0], pods[1]
        return Part(node=node.name, gpu=gpu, faulty=faulty, healthy=healthy)
    return None


def _gang(stack: Stack, pod: PodRef | None) -> bool:
    job = stack.fleet.scheduler.job_of(pod)
    return job is not None and job.gang


def add_scene(recorder: Recorder, part: Part) -> Scene:
    return recorder.add(
        Scene(
            key="partial-drain",
            title=f"Uncontained ECC error (XID {XID}) on one GPU of a node running two workloads",
            label="XID 95 → partial drain",
            node=part.node,
            gpu=part.gpu,
            expect=f"taint (reset-gpu) without cordon; evict {'/'.join(part.faulty)} only; "
            f"{'/'.join(part.healthy)} keeps running",
            effect_kind="partial-drain",  # marked here, not by the node watch
            classes=frozenset({"reset-gpu"}),
        )
    )


async def play(stack: Stack, recorder: Recorder, scene: Scene, part: Part) -> None:
    """Inject the fault, then watch the cluster until the faulty pod is gone and the healthy one still
    runs on the tainted, schedulable node; that moment is the scene's effect."""
    recorder.begin(scene, f"XID {XID} on GPU {part.gpu} ({'/'.join(part.faulty)})")
    await stack.inject(part.node, part.gpu, "sudden-xid", xid=XID)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WITHIN_S
    while loop.time() < deadline:
        node = await stack.cluster.get_node(part.node)
        tainted = any(t.key == footprint.UNHEALTHY for t in node.taints)
        pods = {(p.namespace, p.name): p for p in await stack.cluster.list_pods(node=part.node)}
        healthy = pods.get(part.healthy)
        if tainted and part.faulty not in pods and healthy is not None and healthy.phase == "Running":
            t = recorder.now()
            scene.effect = t
            scene.effect_text = (
                f"{'/'.join(part.faulty)} evicted; {'/'.join(part.healthy)} still Running on the node, "
                f"which is tainted and schedulable={not node.unschedulable}"
            )
            recorder.emit(t, part.node, "cluster", scene.effect_text)
            break
        await asyncio.sleep(0.1)
    await recorder.wait([scene], within_s=1.0)
