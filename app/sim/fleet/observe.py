"""What the exporter would read from each GPU at an instant: values for every `metrics.Field`.

A pure function of the state and the time: gauge noise comes from `randomness.noise`, keyed by (seed,
GPU, second), so two reads at the same instant agree and reading never moves a random stream. The
healthy-GPU model (ASSUMPTIONS, H100-like): temperature follows load plus the rack's and the GPU's own
offsets; power follows utilisation; SW power capping (0x4) shows up now and then at full load, which no
rule may mistake for thermal trouble.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app import dcgm_fields
from app.sim.fleet import metrics
from app.sim.fleet.gpu import NO_EFFECTS, Effects, GpuIdentity, GpuState
from app.sim.fleet.nodes import NodeState
from app.sim.fleet.params import BackgroundParams, HardwareSpec, TrapParams
from app.sim.fleet.randomness import noise, unit
from app.sim.fleet.workloads import PodRef

AMBIENT_C = 27.0
_BLIP_SALT = 91
_POWER_CAP_SALT = 92
_SYNC_BOOST_SALT = 93
_SCRAPE_GAP_SALT = 94
THROTTLE_SYNC_BOOST = 0x10
HealthRow = tuple[str, int, str]
ALL_PASS: tuple[HealthRow, ...] = tuple(
    (watch, metrics.HEALTH_PASS, metrics.HEALTH_OK_CODE) for watch in metrics.HEALTH_WATCHES
)


@dataclass(frozen=True, slots=True)
class GpuObservation:
    """One GPU's exported values at one instant; `values` is indexed by `metrics.Field`.

    Values are ints except the double-valued fields (power), as DCGM reports them.
    """

    identity: GpuIdentity
    pod: PodRef | None
    values: tuple[float, ...]
    last_xid: int
    health: tuple[HealthRow, ...]


@dataclass(frozen=True, slots=True)
class NodeObservation:
    """A node's exporter at one instant: up or not, the GPUs it reports, and those it does not.

    `missing` lists every GPU without series: lost ones (XID 79, vanished) and, while the exporter is
    down, all of them; `lost` only the GPUs the exporter would not report even if it were up.
    """

    node: str
    time_s: float
    exporter_up: bool
    driver_version: str
    gpus: tuple[GpuObservation, ...]
    missing: tuple[GpuIdentity, ...]
    lost: tuple[GpuIdentity, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Observer:
    seed: int
    hardware: HardwareSpec
    traps: TrapParams
    rack_offsets: tuple[float, ...]
    background: BackgroundParams = field(default_factory=BackgroundParams)
    # Chance that one scrape of one node is lost (it then reads as the exporter being down).
    scrape_gap_p: float = 0.0

    def node(self, node: NodeState, t: float) -> NodeObservation:
        up = node.exporter_up(t)
        if up and self.scrape_gap_p > 0.0:
            up = unit(self.seed, -1 - node.index, int(t), _SCRAPE_GAP_SALT) >= self.scrape_gap_p
        lost = tuple(gpu.identity for gpu in node.gpus if not gpu.present)
        return NodeObservation(
            node=node.name,
            time_s=t,
            exporter_up=up,
            driver_version=node.driver_version,
            gpus=tuple(self.gpu(gpu, node, t) for gpu in node.gpus if gpu.present) if up else (),
            missing=lost if up else tuple(gpu.identity for gpu in node.gpus),
            lost=lost,
        )

    def gpu(self, gpu: GpuState, node: NodeState, t: float) -> GpuObservation:
        hw = self.hardware
        serial = gpu.identity.serial
        tick = int(t)
        effects = gpu.process.effects(t) if gpu.process is not None else NO_EFFECTS
        util = gpu.util
        busy = util > 0.0
        if busy:
            util = min(100.0, max(1.0, util + 2.5 * noise(self.seed, serial, tick, 1)))
        throttle = effects.throttle | self._ambient_throttle(node, gpu, t, busy=busy)
        if t < gpu.brake_until:
            throttle |= dcgm_fields.THROTTLE_HW_POWER_BRAKE
        clock_factor = effects.clock_factor
        if t < gpu.slowdown_until and busy:
            throttle |= dcgm_fields.THROTTLE_HW_SLOWDOWN
            clock_factor *= 0.7
        if throttle & dcgm_fields.THROTTLE_SW_POWER_CAP:
            clock_factor *= 0.96
        offset = self.rack_offsets[node.rack] + gpu.temp_offset_c
        gpu_temp = AMBIENT_C + offset + 0.42 * util + 0.8 * noise(self.seed, serial, tick, 2)
        mem_temp = gpu_temp + 5.0 + 0.06 * util + 0.6 * noise(self.seed, serial, tick, 3)
        power = hw.idle_power_w + (hw.tdp_w - hw.idle_power_w) * util / 100.0 * 0.92
        power *= effects.power_factor * (1.0 + 0.02 * noise(self.seed, serial, tick, 4))
        if gpu.power_scale != 1.0:
            power = min(hw.tdp_w, power * gpu.power_scale)
        sm_clock = hw.sm_clock_max_mhz * clock_factor if busy else hw.sm_clock_idle_mhz
        fb_used = gpu.fb_used_mib + (0 if not busy else int(64 * noise(self.seed, serial, tick, 5)))
        fb_used = max(0, fb_used)
        values = (
            int(sm_clock),
            hw.mem_clock_mhz,
            round(mem_temp + effects.mem_temp_c),
            round(gpu_temp + effects.gpu_temp_c),
            round(power, 3),
            int(gpu.energy_at(t)),
            gpu.pcie_replay,
            round(util),
            round(util * 0.42),
            int(gpu.power_violation_us),
            int(gpu.thermal_violation_us),
            max(0, hw.fb_total_mib - 512 - fb_used),
            fb_used,
            gpu.sbe_vol,
            gpu.dbe_vol,
            gpu.sbe_agg,
            gpu.dbe_agg,
            gpu.retired_sbe,
            gpu.retired_dbe,
            gpu.retired_pending,
            gpu.nvlink_flit,
            gpu.nvlink_data,
            gpu.nvlink_replay,
            gpu.nvlink_recovery,
            gpu.uncorrectable_rows,
            gpu.correctable_rows,
            gpu.remap_failure,
            gpu.remap_pending,
            throttle,
            hw.pcie_max_link_gen,
            gpu.recovery_action,
        )
        return GpuObservation(gpu.identity, gpu.pod, values, gpu.last_xid, self._health(gpu, effects))

    def _ambient_throttle(self, node: NodeState, gpu: GpuState, t: float, *, busy: bool) -> int:
        if not busy:
            return dcgm_fields.THROTTLE_IDLE
        minute = int(t // 60.0)
        bits = 0
        if unit(self.seed, gpu.identity.serial, minute, _POWER_CAP_SALT) < self.background.power_cap_share:
            bits |= dcgm_fields.THROTTLE_SW_POWER_CAP
        share = self.background.sync_boost_share
        if share > 0.0 and unit(self.seed, gpu.identity.serial, minute, _SYNC_BOOST_SALT) < share:
            bits |= THROTTLE_SYNC_BOOST
        if node.hot and self._hot_blip(node, minute):
            bits |= dcgm_fields.THROTTLE_SW_THERMAL
        return bits

    def _hot_blip(self, node: NodeState, minute: int) -> bool:
        """Hot-rack trap: one-minute SW thermal blips, never long enough for a 10-minute alert."""
        low, high = self.traps.hot_rack_blip_s
        share = self.traps.hot_rack_blips_per_day * (low + high) / 2.0 / 86400.0
        return unit(self.seed, -1 - node.index, minute, _BLIP_SALT) < share

    def _health(self, gpu: GpuState, effects: Effects) -> tuple[HealthRow, ...]:
        if not gpu.incidents and not effects.health and not gpu.remap_pending and not gpu.remap_failure:
            return ALL_PASS
        found: dict[str, tuple[int, str]] = {}
        if gpu.remap_pending:
            found["MEM"] = (metrics.HEALTH_WARN, "DCGM_FR_PENDING_ROW_REMAP")
        for watch, status, code in effects.health:
            found[watch] = (status, code)
        for watch, (status, code) in gpu.incidents.items():
            if watch not in found or found[watch][0] <= status:
                found[watch] = (status, code)
        if gpu.remap_failure:
            found["MEM"] = (metrics.HEALTH_FAIL, "DCGM_FR_ROW_REMAP_FAILURE")
        return tuple(
            (watch, *found.get(watch, (metrics.HEALTH_PASS, metrics.HEALTH_OK_CODE)))
            for watch in metrics.HEALTH_WATCHES
        )
