"""Helpers for the fleet simulator's tests: quiet configurations and reading one GPU's values."""

from __future__ import annotations

from dataclasses import replace

from app.sim.fleet import FleetSim, SimConfig
from app.sim.fleet.metrics import Field
from app.sim.fleet.observe import GpuObservation


def quiet_config(config: SimConfig | None = None) -> SimConfig:
    """No random GPU failures, exporter restarts or maintenance reboots: injected events only."""
    base = config or SimConfig()
    return replace(
        base,
        rates=replace(base.rates, rate_multiplier=0.0),
        ops=replace(base.ops, exporter_restarts_per_node_day=0.0, maintenance_reboots_per_node_day=0.0),
    )


def quiet_sim(*, nodes: int = 4, seed: int = 7, config: SimConfig | None = None) -> FleetSim:
    return FleetSim(nodes=nodes, seed=seed, config=quiet_config(config))


def gpu_obs(sim: FleetSim, node: str, index: int) -> GpuObservation | None:
    """The observation of one GPU now, or None when it has no series."""
    for gpu in sim.observe_node(node).gpus:
        if gpu.identity.index == index:
            return gpu
    return None


def value(sim: FleetSim, node: str, index: int, field: Field) -> float:
    obs = gpu_obs(sim, node, index)
    assert obs is not None, f"{node} GPU {index} has no series"
    return obs.values[field]


def run(sim: FleetSim, *, seconds: float, step: float = 60.0) -> None:
    for _ in range(int(seconds // step)):
        sim.step(step)
