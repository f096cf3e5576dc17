"""Casting: which nodes, GPUs and pods of the running fleet play which part of the demo's scenes.

Chosen from the fleet's own workloads (a gang for the fatal XID, a single-GPU training pod for the
application XID, busy GPUs for the storm), deterministically for a seed. Reads the stack; the only thing
it may change is to land one single-GPU workload when every GPU went to gangs.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from app.demo.stack import Stack


@dataclass(frozen=True, slots=True)
class Cast:
    """Which nodes, GPUs and pods play which part (chosen from the fleet's own workloads)."""

    gang_node: str
    gang_gpu: int
    gang_job: str
    hbm_node: str
    hbm_gpu: int
    app_node: str
    app_gpu: int
    app_pod: tuple[str, str]
    driver_node: str
    storm: tuple[tuple[str, int], ...]
    risk_node: str | None = None  # the GPU the model will flag (planted in the fleet's past)
    risk_gpu: int | None = None
    soft_node: str | None = None  # a team's own soft alert (HW power brake) on a busy GPU
    soft_gpu: int | None = None


class CastingError(RuntimeError):
    """The fleet's workloads do not offer what the scenario needs (another seed or size will)."""


def cast(stack: Stack, *, storm: int = 4, avoid: Collection[str] = ()) -> Cast:
    """Parts for every scene, from the fleet's own workloads; nodes in `avoid` play none (nor do gangs
    with a rank on them)."""
    sim = stack.fleet
    if len(sim.nodes) < 6 + storm + len(avoid):
        raise CastingError(f"the demo needs at least {6 + storm + len(avoid)} nodes")
    jobs = sorted(sim.scheduler.running.values(), key=lambda j: j.name)
    gangs = [
        j
        for j in jobs
        if j.gang
        and len(j.placements) >= 2
        and not any(sim.nodes[p.node].name in avoid for p in j.placements)
    ]
    if not gangs:
        raise CastingError("the fleet placed no gang; try another --seed")
    # The largest gang that spans at most half the fleet: big enough to show, small enough to leave room.
    gangs.sort(key=lambda j: (len(j.placements) > len(sim.nodes) // 2, -len(j.placements), j.name))
    gang = gangs[0]
    first = gang.placements[0]
    gang_node = sim.nodes[first.node].name
    gang_nodes = {sim.nodes[p.node].name for p in gang.placements}
    singles = [
        (sim.nodes[p.node].name, p.gpus[0], p.pod, j.namespace)
        for j in jobs
        if not j.gang
        for p in j.placements
        if sim.nodes[p.node].name != gang_node
        and sim.nodes[p.node].name not in avoid
        # the app XID's pod must be named on its alert (an exporter that maps no pods names none)
        and stack.maps_pods(sim.nodes[p.node].name)
    ]
    if not singles:  # every GPU went to gangs: a single-GPU job lands on a free GPU (or takes one)
        free = [
            (n.name, g.identity.index)
            for n in sim.nodes
            if n.name != gang_node and n.name not in avoid and stack.maps_pods(n.name)
            for g in n.gpus
            if g.pod is None and g.present
        ]
        if not free:
            raise CastingError("no GPU is free for a single-pod job; try another --seed or more --nodes")
        node, gpu = free[0]
        pod = stack.attach_workload(node, gpu, namespace="training", name="finetune-demo-0")
        singles = [(node, gpu, pod, "training")]
    # A training pod if there is one, off the gang's nodes if possible.
    singles.sort(key=lambda s: (s[0] in gang_nodes, s[3] != "training"))
    app_node, app_gpu, app_pod, _ = singles[0]
    used = {gang_node, app_node, *avoid}
    others = [n for n in sim.nodes if n.name not in used]
    others.sort(key=lambda n: (n.name in gang_nodes, not any(g.pod for g in n.gpus)))

    def busy_gpu(name: str) -> int:
        node = sim.node(name)
        return next((g.identity.index for g in node.gpus if g.pod is not None), 0)

    names = [n.name for n in others]
    hbm_node, driver_node, *rest = names
    soft = next((name for name in rest[storm:] if any(g.pod for g in sim.node(name).gpus)), None)
    return Cast(
        gang_node=gang_node,
        gang_gpu=first.gpus[0],
        gang_job=f"{gang.namespace}/{gang.name} ({len(gang.placements)} ranks)",
        hbm_node=hbm_node,
        hbm_gpu=busy_gpu(hbm_node),
        app_node=app_node,
        app_gpu=app_gpu,
        app_pod=(app_pod.namespace, app_pod.name),
        driver_node=driver_node,
        storm=tuple((name, busy_gpu(name)) for name in rest[:storm]),
        soft_node=soft,
        soft_gpu=busy_gpu(soft) if soft is not None else None,
    )
