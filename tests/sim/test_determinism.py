"""A seed fixes everything: the fleet, its failures, its workloads and every value it exports."""

from __future__ import annotations

from dataclasses import replace

from app.sim.fleet import FleetSim, SimConfig
from app.sim.fleet.exposition import render_node
from tests.sim.helpers import run

DAY = 86400.0


def _busy() -> SimConfig:
    base = SimConfig()
    return replace(base, rates=replace(base.rates, rate_multiplier=300.0))


def _fingerprint(sim: FleetSim) -> tuple[object, ...]:
    texts = tuple(render_node(sim.observe_node(name)) for name in sim.node_names)
    return (sim.truth(include_pending=True), texts)


def test_same_seed_same_fleet_same_history() -> None:
    first, second = (FleetSim(nodes=6, seed=42, config=_busy()) for _ in range(2))
    for sim in (first, second):
        run(sim, seconds=2 * DAY, step=300)
    assert first.truth().failures, "the run must contain failures to compare"
    assert _fingerprint(first) == _fingerprint(second)


def test_different_seeds_differ() -> None:
    a, b = FleetSim(nodes=6, seed=1, config=_busy()), FleetSim(nodes=6, seed=2, config=_busy())
    assert a.node(a.node_names[0]).gpus[0].identity.uuid != b.node(b.node_names[0]).gpus[0].identity.uuid
    run(a, seconds=DAY, step=600)
    run(b, seconds=DAY, step=600)
    assert a.truth().failures != b.truth().failures


def test_failure_schedule_does_not_depend_on_the_step_size() -> None:
    fine, coarse = FleetSim(nodes=10, seed=9, config=_busy()), FleetSim(nodes=10, seed=9, config=_busy())
    run(fine, seconds=3 * DAY, step=60)
    run(coarse, seconds=3 * DAY, step=3600)

    def schedule(sim: FleetSim) -> list[tuple[object, ...]]:
        return [
            (f.uuid, f.mode, f.precursor_start, f.failure_time, f.xid, f.row_remap_failure, f.vanished)
            for f in sim.truth().failures
        ]

    assert len(schedule(fine)) >= 5
    assert schedule(fine) == schedule(coarse)


def test_observing_does_not_change_the_simulation() -> None:
    watched, unwatched = FleetSim(nodes=4, seed=3, config=_busy()), FleetSim(nodes=4, seed=3, config=_busy())
    for _ in range(200):
        watched.step(120)
        unwatched.step(120)
        watched.observe()
        watched.observe()
    assert _fingerprint(watched) == _fingerprint(unwatched)
