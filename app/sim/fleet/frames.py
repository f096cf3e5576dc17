"""A fleet's observations over time, as a stream: one `Frame` per sampling instant, nothing kept.

Dataset writers consume frames one at a time, so a run of any length needs memory for one frame only
(200 nodes x 8 GPUs is about 1,600 small tuples).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from app.sim.fleet.fleet import FleetSim, NodeGpuCapacity
from app.sim.fleet.observe import NodeObservation


@dataclass(frozen=True, slots=True)
class Frame:
    """Every exporter and the GPU capacities at one instant."""

    time_s: float
    nodes: tuple[NodeObservation, ...]
    capacities: tuple[NodeGpuCapacity, ...]


class FrameWriter(Protocol):
    def write(self, frame: Frame) -> None: ...

    def close(self) -> None: ...


def iter_frames(sim: FleetSim, *, step_s: float, duration_s: float) -> Iterator[Frame]:
    """Observe now, then step and observe every `step_s` until `duration_s` has passed."""
    if step_s <= 0:
        raise ValueError("step_s must be positive")
    steps = int(duration_s // step_s)
    yield Frame(sim.time_s, sim.observe(), sim.gpu_capacity())
    for _ in range(steps):
        sim.step(step_s)
        yield Frame(sim.time_s, sim.observe(), sim.gpu_capacity())
