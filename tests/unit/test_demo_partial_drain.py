"""The demo's partial-drain scene: who plays it, and how the node watch counts a taint without a cordon."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.demo import cluster_watch, partial_drain
from app.demo.milestones import NodeView, Scene
from app.sim.fleet import FleetSim
from app.sim.fleet.workloads import PodRef


@dataclass
class FakeStack:
    """The parts of `Stack` casting reads: the fleet, which exporters name pods, landing a workload."""

    fleet: FleetSim
    unmapped: set[str] = field(default_factory=set)
    landed: list[tuple[str, int, str]] = field(default_factory=list)

    def maps_pods(self, node: str) -> bool:
        return node not in self.unmapped

    def attach_workload(self, node: str, gpu: int, *, namespace: str, name: str) -> PodRef:
        ref = PodRef(namespace, name, "main")
        self.fleet.node(node).gpus[gpu].pod = ref
        self.landed.append((node, gpu, name))
        return ref


def test_the_cast_is_two_workloads_on_one_node_no_other_scene_uses() -> None:
    sim = FleetSim(nodes=6, seed=3)
    names = [n.name for n in sim.nodes]
    stack = FakeStack(sim, unmapped={names[1]})
    part = partial_drain.cast_partial(stack, avoid={names[0]})  # type: ignore[arg-type]
    assert part is not None
    assert part.node not in (names[0], names[1])
    assert part.faulty != part.healthy
    gpus = sim.node(part.node).gpus
    assert gpus[part.gpu].pod is not None
    assert (gpus[part.gpu].pod.namespace, gpus[part.gpu].pod.name) == part.faulty
    holders = {
        (g.pod.namespace, g.pod.name) for g in gpus if g.pod is not None and g.identity.index != part.gpu
    }
    assert part.healthy in holders, "the healthy workload runs on another GPU of the same node"


def test_no_cast_when_every_node_is_taken() -> None:
    sim = FleetSim(nodes=3, seed=1)
    stack = FakeStack(sim)
    assert partial_drain.cast_partial(stack, avoid={n.name for n in sim.nodes}) is None  # type: ignore[arg-type]


def test_a_taint_without_a_cordon_is_a_quarantines_effect() -> None:
    scene = Scene(key="hbm", title="t", label="l", node="n1", started=0.0)
    tainted = NodeView(unschedulable=False, taint="reset-gpu:NoSchedule")
    cluster_watch.mark_effects([scene], 1.5, "n1", NodeView(), tainted)
    assert scene.effect == 1.5
    assert "not cordoned" in scene.effect_text


def test_the_partial_scene_is_marked_by_its_own_watch_not_the_node_watch() -> None:
    part = partial_drain.Part(node="n1", gpu=3, faulty=("t", "a"), healthy=("t", "b"))
    scene = Scene(
        key="partial-drain", title="t", label="l", node=part.node, effect_kind="partial-drain", started=0.0
    )
    cluster_watch.mark_effects([scene], 1.0, "n1", NodeView(), NodeView(taint="reset-gpu:NoSchedule"))
    assert scene.effect is None
