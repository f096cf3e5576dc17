"""One simulated node: its GPUs, its exporter, and whether work may be scheduled on it."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.sim.fleet.gpu import GpuState


@dataclass(slots=True, kw_only=True)
class NodeState:
    name: str
    index: int
    rack: int
    hot: bool
    gpus: list[GpuState]
    driver_version: str
    # Hardware fault seen and not yet repaired: cordoned by "the operator" until repair.
    faulted: bool = False
    # Drained through the control API (a human or Sickbay): no new work until uncordoned.
    cordoned: bool = False
    exporter_down_until: float = 0.0
    rebooting_until: float = 0.0
    repair_at: float | None = None
    # Failure ids that took the node out, for the repair record.
    open_failures: list[str] = field(default_factory=list)

    def schedulable(self, t: float) -> bool:
        return not self.faulted and not self.cordoned and t >= self.rebooting_until

    def exporter_up(self, t: float) -> bool:
        return t >= self.exporter_down_until and t >= self.rebooting_until

    def usable_gpus(self) -> list[int]:
        """Indices of GPUs a new pod may get: present, healthy and free."""
        return [
            gpu.identity.index
            for gpu in self.gpus
            if gpu.present and not gpu.unhealthy and not gpu.failed and gpu.pod is None
        ]

    def allocatable(self, t: float) -> int:
        """What the device plugin advertises: present GPUs it has not marked unhealthy."""
        if t < self.rebooting_until:
            return 0
        return sum(1 for gpu in self.gpus if gpu.present and not gpu.unhealthy)
