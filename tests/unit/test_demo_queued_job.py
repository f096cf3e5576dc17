"""The demo's Kueue scene on the simulated cluster, without the stack: the queued job lands with its
admitted Workload, and the scene sees the requeue only once Kueue re-admitted it and its pod runs away
from the failed node."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.demo import queued_job
from app.sim.kubeapi.registry import MERGE_PATCH, Registry
from app.sim.kubeapi.resources import NODES, WORKLOADS, Catalog, Ref
from app.sim.kubeapi.server import load_seed
from app.sim.kubeapi.store import Store


@dataclass
class Identity:
    index: int


@dataclass
class Gpu:
    identity: Identity
    pod: object = None
    util: float = 0.0
    present: bool = True


@dataclass
class FleetNode:
    name: str
    gpus: list[Gpu] = field(default_factory=lambda: [Gpu(Identity(0)), Gpu(Identity(1))])


@dataclass
class Fleet:
    nodes: list[FleetNode]

    def node(self, name: str) -> FleetNode:
        return next(n for n in self.nodes if n.name == name)


class Kube:
    def __init__(self) -> None:
        self.registry = Registry(Store(Catalog()))
        self.store = self.registry.store

    def load(self, document: dict[str, Any]) -> int:
        return load_seed(self.registry, document, base=False)


@dataclass
class Stack:
    kube: Kube
    fleet: Fleet


def stack() -> Stack:
    kube = Kube()
    load_seed(kube.registry, {"nodes": [{"name": "gpu-{i}", "count": 3, "gpus": 2}]})
    return Stack(kube, Fleet([FleetNode("gpu-0"), FleetNode("gpu-1"), FleetNode("gpu-2")]))


def set_active(s: Stack, *, active: bool) -> None:
    (wl,) = s.kube.store.items(WORKLOADS, namespace=queued_job.NAMESPACE)
    ref = Ref(WORKLOADS, namespace=queued_job.NAMESPACE, name=wl["metadata"]["name"])
    s.kube.registry.patch(ref, {"spec": {"active": active}}, content_type=MERGE_PATCH)


def test_the_job_lands_where_asked_and_is_seen_requeued_only_off_the_failed_node() -> None:
    s = stack()
    s.fleet.node("gpu-0").gpus[0].pod = object()  # busy: not free
    assert queued_job.free_gpu(s, taken={"gpu-1"}) == ("gpu-0", 1)  # type: ignore[arg-type]
    for gpu in (*s.fleet.node("gpu-0").gpus, *s.fleet.node("gpu-2").gpus):
        gpu.pod = object()
    # Every GPU busy: the job takes one over.
    assert queued_job.free_gpu(s, taken={"gpu-1"}) == ("gpu-0", 0)  # type: ignore[arg-type]
    assert queued_job.free_gpu(s, taken={"gpu-0", "gpu-1", "gpu-2"}) is None  # type: ignore[arg-type]
    for gpu in (*s.fleet.node("gpu-0").gpus, *s.fleet.node("gpu-2").gpus):
        gpu.pod = None

    pod = queued_job.land_job(s, "gpu-1", 0)  # type: ignore[arg-type]
    assert s.fleet.node("gpu-1").gpus[0].pod.name == pod  # type: ignore[union-attr]
    assert queued_job.requeued_onto(s, away_from="gpu-1") is None  # type: ignore[arg-type]

    s.kube.registry.patch(  # what Sickbay's quarantine writes
        Ref(NODES, name="gpu-1"),
        {
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "sickbay.io/unhealthy", "effect": "NoSchedule"}],
            }
        },
        content_type=MERGE_PATCH,
    )
    set_active(s, active=False)
    assert queued_job.requeued_onto(s, away_from="gpu-1") is None  # type: ignore[arg-type]
    set_active(s, active=True)

    found = queued_job.requeued_onto(s, away_from="gpu-1")  # type: ignore[arg-type]
    assert found is not None
    what, where = found
    assert "Requeued (Reactivated)" in what
    assert where == "gpu-0"  # the first schedulable node: gpu-1 is tainted and cordoned
