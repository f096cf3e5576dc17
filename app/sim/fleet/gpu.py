"""One simulated GPU: its identity (frozen) and its latent state (mutable, owned by `FleetSim`).

The state holds what the driver and DCGM would report — ECC and error counters, the row remapper, the
last XID — plus what only the simulator knows: the failure process under way, whether the GPU is a trap,
its steady error rates. Reboot semantics live here because they are a property of the counters: volatile
ECC, PCIe replay, NVLink error and energy counters restart at zero; aggregate ECC and remapped-row counts
live in the InfoROM and survive; a pending remap is applied by the reset.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.sim.fleet.process import FailureProcess
    from app.sim.fleet.workloads import PodRef


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuIdentity:
    """The labels dcgm-exporter writes for a GPU; `serial` is its fleet-wide index (noise key)."""

    node: str
    index: int
    uuid: str
    pci_bus_id: str
    model: str
    serial: int

    @property
    def device(self) -> str:
        return f"nvidia{self.index}"


@dataclass(frozen=True, slots=True)
class Effects:
    """What a precursor does to the gauges at one instant (added to the GPU's normal readings)."""

    gpu_temp_c: float = 0.0
    mem_temp_c: float = 0.0
    throttle: int = 0
    clock_factor: float = 1.0
    power_factor: float = 1.0
    health: tuple[tuple[str, int, str], ...] = ()


NO_EFFECTS = Effects()

# The workload on the slot (and its power draw) is the scheduler's business, not the board's.
_KEPT_ON_REPLACE = frozenset({"pod", "util", "fb_used_mib", "power_w", "temp_offset_c", "power_scale"})


@dataclass(slots=True)
class GpuState:
    """A GPU's latent state; mutable and owned by one `FleetSim` (observations are frozen copies)."""

    identity: GpuIdentity
    sbe_vol: int = 0
    dbe_vol: int = 0
    sbe_agg: int = 0
    dbe_agg: int = 0
    retired_sbe: int = 0
    retired_dbe: int = 0
    retired_pending: int = 0
    correctable_rows: int = 0
    uncorrectable_rows: int = 0
    remap_pending: int = 0
    remap_failure: int = 0
    pcie_replay: int = 0
    nvlink_flit: int = 0
    nvlink_data: int = 0
    nvlink_replay: int = 0
    nvlink_recovery: int = 0
    thermal_violation_us: float = 0.0
    power_violation_us: float = 0.0
    # The HW power brake slowdown (clocks event reason 0x80) holds until this simulated time.
    brake_until: float = 0.0
    # A HW slowdown (0x8) on a healthy board (background noise) holds until this simulated time.
    slowdown_until: float = 0.0
    last_xid: int = 0
    recovery_action: int = 0
    present: bool = True
    # A hardware fault that needs remediation; `unhealthy` is the device plugin's view (allocatable).
    failed: bool = False
    unhealthy: bool = False
    needs_replacement: bool = False
    # DCGM health incidents that persist until the GPU is reset: watch -> (status, error code).
    incidents: dict[str, tuple[int, str]] = field(default_factory=dict)
    process: FailureProcess | None = None
    trap: str | None = None
    sbe_per_s: float = 0.0
    nvlink_noise_per_s: float = 0.0
    temp_offset_c: float = 0.0
    # The board's power draw relative to the nominal curve (a per-GPU baseline).
    power_scale: float = 1.0
    # Workload: the pod on this GPU, its utilisation target and framebuffer use.
    pod: PodRef | None = None
    util: float = 0.0
    fb_used_mib: int = 0
    # Energy since boot, integrated lazily: value at `energy_t` plus nominal power since then.
    energy_mj: float = 0.0
    energy_t: float = 0.0
    power_w: float = 0.0

    @property
    def active(self) -> bool:
        """Whether `FleetSim.step` has anything to integrate for this GPU."""
        return self.process is not None or self.sbe_per_s > 0.0 or self.nvlink_noise_per_s > 0.0

    def add_sbe(self, count: int) -> None:
        self.sbe_vol += count
        self.sbe_agg += count

    def add_dbe(self, count: int) -> None:
        self.dbe_vol += count
        self.dbe_agg += count

    def set_power(self, t: float, watts: float) -> None:
        """Integrate energy up to `t` at the old power, then continue at the new one."""
        self.energy_mj = self.energy_at(t)
        self.energy_t = t
        self.power_w = watts

    def energy_at(self, t: float) -> float:
        return self.energy_mj + self.power_w * max(0.0, t - self.energy_t) * 1000.0

    def reboot(self, t: float) -> None:
        """A node reboot: volatile counters restart, InfoROM counts stay, a pending remap is applied."""
        self.sbe_vol = self.dbe_vol = 0
        self.pcie_replay = 0
        self.nvlink_flit = self.nvlink_data = self.nvlink_replay = self.nvlink_recovery = 0
        self.thermal_violation_us = self.power_violation_us = 0.0
        self.retired_pending = 0
        self.remap_pending = 0
        self.last_xid = 0
        self.recovery_action = 0
        self.present = True
        self.failed = False
        self.unhealthy = False
        self.incidents.clear()
        self.energy_mj = 0.0
        self.energy_t = t
        if self.process is not None and self.process.fail_at <= t:
            self.process = None

    def replace_with(self, identity: GpuIdentity, t: float) -> None:
        """A new board in the same slot: new UUID, every counter from zero, no failure under way."""
        fresh = GpuState(identity=identity, temp_offset_c=self.temp_offset_c, energy_t=t)
        for spec in fields(GpuState):
            if spec.name not in _KEPT_ON_REPLACE:
                setattr(self, spec.name, getattr(fresh, spec.name))
