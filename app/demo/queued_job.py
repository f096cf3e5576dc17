"""The demo's Kueue scene: a job Kueue admitted, on a node whose GPU falls off the bus, goes back through
its queue (its Workload deactivated, its quota released, reactivated and admitted again) and comes back
on a healthy node.

Its own module, so the shared script (`scenario`) only declares the scene and plays it. The job is
landed here, on a node no other scene plays, as Kueue's Job integration would have it: a Job labelled
with its queue, its admitted Workload and its pod (the simulated API server's Kueue stand-in,
`app.sim.kubeapi.kueue`, then does what Kueue does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from app.demo.stack import Stack
from app.demo.timeline import Recorder, Scene
from app.sim.fleet.workloads import PodRef
from app.sim.kubeapi.resources import PODS, WORKLOADS

NAMESPACE = "training"
JOB = "queued-train"
QUEUE = "team-a"


def free_gpu(stack: Stack, *, taken: Collection[str]) -> tuple[str, int] | None:
    """A node no scene plays and a GPU on it where the queued job lands: a free one if there is, else one it
    takes over (the fleet packs its GPUs; the node is drained whole anyway). None when every node plays."""
    spare = [n for n in stack.fleet.nodes if n.name not in taken]
    for node in spare:
        for gpu in node.gpus:
            if gpu.pod is None and gpu.present:
                return node.name, gpu.identity.index
    for node in spare:
        for gpu in node.gpus:
            if gpu.present:
                return node.name, gpu.identity.index
    return None


def add_scene(recorder: Recorder, node: str, gpu: int) -> Scene:
    return recorder.add(
        Scene(
            key="kueue",
            title=f"A Kueue-admitted job's GPU falls off the bus (XID 79): requeued through queue {QUEUE}",
            label="XID 79, queued job → Kueue requeue",
            node=node,
            gpu=gpu,
            expect=f"quarantine (reboot-node); Workload of {NAMESPACE}/{JOB} deactivated (Evicted: "
            "Deactivated, quota released), reactivated (Requeued), admitted again; its pod back on a "
            "healthy node",
        )
    )


def land_job(stack: Stack, node: str, gpu: int) -> str:
    """The queued Job, its admitted Workload and its pod on `node`'s GPU; returns the pod's name."""
    stack.kube.load(
        {
            "jobs": [
                {
                    "name": JOB,
                    "namespace": NAMESPACE,
                    "nodes": [node],
                    "gpus_per_pod": 1,
                    "labels": {"kueue.x-k8s.io/queue-name": QUEUE},
                }
            ]
        }
    )
    pod = next(p for p in _job_pods(stack) if (p.get("spec") or {}).get("nodeName") == node)
    name = str(pod["metadata"]["name"])
    state = stack.fleet.node(node).gpus[gpu]
    state.pod = PodRef(NAMESPACE, name, "main")  # the exporter attributes the GPU to it
    state.util = 90.0
    return name


def _job_pods(stack: Stack) -> list[dict[str, Any]]:
    return [
        p
        for p in stack.kube.store.items(PODS, namespace=NAMESPACE)
        if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == JOB
    ]


def requeued_onto(stack: Stack, *, away_from: str) -> tuple[str, str] | None:
    """The workload's requeue, as Kueue recorded it, and the node its pod runs on now; None until both."""
    for workload in stack.kube.store.items(WORKLOADS, namespace=NAMESPACE):
        conditions = {c["type"]: c for c in (workload.get("status") or {}).get("conditions") or []}
        requeued = conditions.get("Requeued") or {}
        admitted = conditions.get("Admitted") or {}
        if requeued.get("status") != "True" or admitted.get("status") != "True":
            continue
        for pod in _job_pods(stack):
            node = (pod.get("spec") or {}).get("nodeName")
            if node and node != away_from and not pod["metadata"].get("deletionTimestamp"):
                return f"{workload['metadata']['name']} Requeued ({requeued.get('reason')})", str(node)
    return None


async def play(stack: Stack, rec: Recorder, scene: Scene, *, within_s: float = 30.0) -> None:
    """Land the queued job, fail its GPU, wait for the quarantine, then for Kueue's requeue."""
    node, gpu = scene.node, scene.gpu
    assert gpu is not None
    pod = land_job(stack, node, gpu)
    rec.note(node, f"Kueue admitted {NAMESPACE}/{JOB} (queue {QUEUE}); pod {pod} on GPU {gpu}")
    rec.begin(scene, f"XID 79 on GPU {gpu} ({NAMESPACE}/{pod}, queued in {QUEUE})")
    await stack.inject(node, gpu, "sudden-xid", xid=79)
    await rec.wait([scene], within_s=within_s)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while loop.time() < deadline:
        found = requeued_onto(stack, away_from=node)
        if found is not None:
            what, where = found
            rec.note(node, f"Kueue: {what}, admitted again through {QUEUE}; pod now on {where}")
            scene.note = f"requeued through Kueue onto {where}"
            return
        await asyncio.sleep(0.1)
    scene.note = "Kueue requeue not seen in time"
    if scene.status == "done":  # quarantined, but the job did not go back through its queue
        scene.status = "timed out"
    rec.note(node, f"the Workload of {NAMESPACE}/{JOB} was not requeued within {within_s:.0f}s")
