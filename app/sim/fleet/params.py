"""Every number the fleet simulator runs on, in one place, as frozen values.

Rates come from published fleet numbers; everything else is an ASSUMPTION and is marked so: no public
source measures the time from a GPU precursor (SBE growth, pending remap, replay bursts) to the failure,
so lead times, precursor shapes and operational timings are parameters, never constants in the code.

Published anchors (see /work/shared/design/TELEMETRY.md):
- Meta Llama 3 (16,384 H100s, 54 days): about 2.4 GPU-caused interruptions per 1,000 node-days; of 419
  interruptions, faulty GPU 148, HBM3 72, SRAM 19, GSP 17.
- About a quarter of failures in comparable fleets come with no warning at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal


class FailureMode(StrEnum):
    """A named way for a GPU to fail (or a fleet event to happen); the names `inject` accepts."""

    HBM = "hbm"
    THERMAL = "thermal"
    PCIE = "pcie"
    NVLINK = "nvlink"
    GSP = "gsp"
    SUDDEN_XID = "sudden-xid"
    APP_XID = "app-xid"
    EXPORTER_RESTART = "exporter-restart"
    REBOOT = "reboot"
    DRIVER_MISMATCH = "driver-mismatch"
    GPU_VANISH = "gpu-vanish"
    # A soft event on healthy hardware: the GPU's clocks held down by the HW power brake (the board or
    # the rack asserted it), for `duration_s`. Nothing fails; a soft signal for Sickbay to leave alone.
    POWER_BRAKE = "power-brake"


# The modes that end in a GPU failure (the rest are workload or operational events).
GPU_FAILURE_MODES = frozenset(
    {
        FailureMode.HBM,
        FailureMode.THERMAL,
        FailureMode.PCIE,
        FailureMode.NVLINK,
        FailureMode.GSP,
        FailureMode.SUDDEN_XID,
    }
)

XidWeights = tuple[tuple[int, float], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class HardwareSpec:
    """An HGX H100 node by default: 8 SXM GPUs, 80 GB HBM3, PCIe Gen5 x16, 18 NVLinks per GPU."""

    gpus_per_node: int = 8
    model_name: str = "NVIDIA H100 80GB HBM3"
    fb_total_mib: int = 81559
    pcie_max_link_gen: int = 5
    pcie_max_link_width: int = 16
    nvlinks: int = 18
    tdp_w: float = 700.0
    idle_power_w: float = 72.0
    sm_clock_max_mhz: int = 1980
    sm_clock_idle_mhz: int = 345
    mem_clock_mhz: int = 2619
    driver_version: str = "550.90.07"
    mismatched_driver_version: str = "535.183.01"
    # PCI bus ids of the eight SXM slots on a typical HGX board (only the bus number differs).
    pci_buses: tuple[int, ...] = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


@dataclass(frozen=True, slots=True)
class MixEntry:
    """One row of the failure mix: Meta's category, the simulated mode, its weight and final XIDs."""

    category: str
    mode: FailureMode
    weight: float
    xids: XidWeights


# Meta's Llama 3 GPU-caused categories (faulty GPU 148, HBM3 72, SRAM 19, GSP 17 = 256). "Faulty GPU" is
# split (ASSUMPTION) over thermal, PCIe, NVLink and no-warning failures so that, with SRAM's, about a
# quarter (64/256) of all GPU failures have no precursor.
DEFAULT_MIX: tuple[MixEntry, ...] = (
    MixEntry("hbm3", FailureMode.HBM, 72.0, ((48, 0.45), (95, 0.30), (94, 0.25))),
    MixEntry("sram", FailureMode.SUDDEN_XID, 19.0, ((95, 0.6), (94, 0.4))),
    MixEntry("gsp", FailureMode.GSP, 17.0, ((119, 0.6), (120, 0.4))),
    MixEntry("faulty-gpu", FailureMode.THERMAL, 35.0, ((79, 1.0),)),
    MixEntry("faulty-gpu", FailureMode.PCIE, 30.0, ((79, 0.6), (62, 0.4))),
    MixEntry("faulty-gpu", FailureMode.NVLINK, 38.0, ((74, 1.0),)),
    MixEntry(
        "faulty-gpu",
        FailureMode.SUDDEN_XID,
        45.0,
        ((79, 0.35), (62, 0.15), (109, 0.15), (46, 0.1), (140, 0.1), (143, 0.05), (48, 0.1)),
    ),
)


@dataclass(frozen=True, slots=True)
class LeadTime:
    """ASSUMPTION: precursor-to-failure time, log-normal around `median_s`, clipped to [min_s, max_s]."""

    median_s: float
    sigma: float
    min_s: float
    max_s: float

    def clip(self, seconds: float) -> float:
        return min(self.max_s, max(self.min_s, seconds))

    def from_normal(self, z: float) -> float:
        return self.clip(self.median_s * math.exp(self.sigma * z))


HOUR = 3600.0
DAY = 86400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LeadTimes:
    """ASSUMPTIONS, all of them: no public source measures these."""

    hbm: LeadTime = LeadTime(2 * DAY, 0.8, 6 * HOUR, 14 * DAY)
    thermal: LeadTime = LeadTime(8 * HOUR, 0.6, 1 * HOUR, 3 * DAY)
    pcie: LeadTime = LeadTime(12 * HOUR, 0.7, 1 * HOUR, 5 * DAY)
    nvlink: LeadTime = LeadTime(1 * DAY, 0.7, 2 * HOUR, 7 * DAY)
    # GSP failures have no precursor or a weak one (a driver-firmware XID 38 or two) in this window.
    gsp: LeadTime = LeadTime(2 * HOUR, 0.5, 10 * 60.0, 12 * HOUR)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrecursorShapes:
    """ASSUMPTIONS: how strong each precursor gets. Rates are per hour unless the name says otherwise."""

    # HBM: single-bit ECC rate grows from start to end (per instance, log-normal around the end rate);
    # this share of HBM failures only shows a weak rise, so no predictor reaches full recall.
    hbm_sbe_start_per_h: float = 1.0
    hbm_sbe_end_per_h: float = 300.0
    hbm_weak_fraction: float = 0.2
    hbm_weak_end_per_h: float = 6.0
    hbm_remap_per_sbe: float = 0.03
    hbm_row_remap_failure_p: float = 0.15
    # Thermal: memory/GPU temperature rise at failure (degrees C over the GPU's normal reading), and the
    # precursor progress at which SW thermal (0x20) then HW thermal (0x40) throttling set in.
    thermal_mem_rise_c: float = 28.0
    thermal_gpu_rise_c: float = 14.0
    thermal_sw_throttle_at: float = 0.45
    thermal_hw_throttle_at: float = 0.75
    # PCIe: replay bursts per hour and replays per burst grow; past `pcie_sustained_at` a sustained
    # replay rate (per minute at failure) crosses DCGM's Gen5 threshold of 31/min.
    pcie_bursts_start_per_h: float = 0.3
    pcie_bursts_end_per_h: float = 40.0
    pcie_burst_size_start: float = 4.0
    pcie_burst_size_end: float = 300.0
    pcie_sustained_at: float = 0.7
    pcie_sustained_end_per_min: float = 120.0
    # NVLink: CRC (flit + data) errors per second grow from start to end; DCGM's threshold is 100/s.
    nvlink_crc_start_per_s: float = 0.01
    nvlink_crc_end_per_s: float = 400.0
    nvlink_replay_per_crc: float = 0.02
    nvlink_recovery_at: float = 0.85
    # GSP: share with a weak precursor (XID 38 events in the lead window).
    gsp_weak_precursor_p: float = 0.3
    # XID 79: seconds the exporter still shows the GPU (with XID 79) before its series vanish.
    vanish_delay_s: float = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureRates:
    """GPU-caused failure rate from Llama 3, scaled per GPU, times `rate_multiplier` for demos."""

    per_1000_node_days: float = 2.4
    reference_gpus_per_node: int = 8
    rate_multiplier: float = 1.0
    mix: tuple[MixEntry, ...] = DEFAULT_MIX

    def per_gpu_second(self) -> float:
        per_node_day = self.per_1000_node_days / 1000.0 * self.rate_multiplier
        return per_node_day / self.reference_gpus_per_node / DAY


@dataclass(frozen=True, slots=True, kw_only=True)
class TrapParams:
    """Healthy things that look sick: they must never fail (and never do, unless injected)."""

    # GPUs with a stable, high single-bit ECC rate (per hour) and a few old remapped rows.
    stable_sbe_fraction: float = 0.005
    stable_sbe_per_h: tuple[float, float] = (20.0, 200.0)
    # Racks that run hot (degrees C over the rest) but whose GPUs are fine; brief SW-thermal blips.
    hot_rack_fraction: float = 0.1
    hot_rack_offset_c: float = 9.0
    hot_rack_blips_per_day: float = 2.0
    hot_rack_blip_s: tuple[float, float] = (30.0, 180.0)
    # GPUs with a low, steady NVLink CRC error rate (per second) that link retry absorbs.
    noisy_nvlink_fraction: float = 0.003
    noisy_nvlink_per_s: tuple[float, float] = (0.5, 20.0)
    # Jobs whose code raises application XIDs wherever they run (the XIDs follow the job).
    buggy_job_fraction: float = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadParams:
    """ASSUMPTIONS: a training-heavy mix of single-node jobs and multi-node gangs."""

    target_utilization: float = 0.8
    gang_fraction: float = 0.35
    gang_nodes: tuple[int, ...] = (2, 2, 4, 4, 8, 16)
    single_gpus: tuple[int, ...] = (1, 2, 4, 8, 8)
    single_median_s: float = 3 * HOUR
    gang_median_s: float = 10 * HOUR
    duration_sigma: float = 1.0
    duration_clip_s: tuple[float, float] = (10 * 60.0, 7 * DAY)
    namespaces: tuple[str, ...] = ("research", "training", "inference", "eval", "team-vision", "team-llm")
    # Application XIDs (13, 31, 43) per job-day: buggy jobs and everyone else.
    app_xid_buggy_per_day: float = 4.0
    app_xid_normal_per_day: float = 0.01
    app_xids: XidWeights = ((13, 0.5), (31, 0.35), (43, 0.15))
    # After an application XID 13/31 the job's pods are recreated and may land on other nodes.
    app_xid_reschedule_p: float = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class OpsParams:
    """ASSUMPTIONS: operational events and how long they take."""

    exporter_restarts_per_node_day: float = 1 / 30
    exporter_restart_s: tuple[float, float] = (20.0, 120.0)
    maintenance_reboots_per_node_day: float = 1 / 90
    reboot_s: float = 300.0
    # A node with a hardware fault is repaired (rebooted; a GPU needing replacement gets a new UUID)
    # this long after the fault; None leaves repair to whoever drives the simulation (e.g. Sickbay).
    auto_repair_after_s: float | None = 6 * HOUR
    # GPUs with an occasional single-bit ECC error (per day), healthy and not a trap.
    background_sbe_fraction: float = 0.03
    background_sbe_per_day: float = 0.3


# What the fleet's healthy hardware, exporter and precursors look like beyond the classic simulator. Every
# default below is "off" (the classic simulator); `personality.py` draws values from published ranges.


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkNoise:
    """Background errors on one kind of healthy link: bursty episodes at a per-GPU rate.

    A share `gpu_fraction` of GPUs has a background at all; each such GPU's episode rate is log-normal
    around `episodes_per_day` with `sigma` (natural log: 2.3 spreads rates over about two orders of
    magnitude either way); an episode adds a geometric number of errors with mean `episode_mean`. A share
    `chronic_fraction` of GPUs also has a steady low rate of single errors (`chronic_per_day`). GPUs whose
    rate is at least `loud_per_day` episodes a day are recorded as traps (they look sick and are not).
    """

    gpu_fraction: float = 0.0
    episodes_per_day: float = 0.0
    sigma: float = 0.0
    episode_mean: float = 1.0
    chronic_fraction: float = 0.0
    chronic_per_day: float = 0.0
    loud_per_day: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class BackgroundParams:
    """Healthy-hardware noise beyond the classic traps (a personality's `noise` is already applied)."""

    pcie: LinkNoise = field(default_factory=LinkNoise)
    nvlink: LinkNoise = field(default_factory=LinkNoise)
    # Share of NVLink CRC errors that are data (not flow-control) CRC errors, and replays per CRC error
    # (link-level retry is what absorbs them).
    nvlink_data_share: float = 0.4
    nvlink_replay_per_crc: float = 0.0
    # Throttle reasons on healthy, busy GPUs: share of minutes at the SW power cap (0x4), of minutes with
    # sync boost (0x10), and HW slowdown (0x8) episodes per GPU-day (60-600 s each).
    power_cap_share: float = 0.1
    sync_boost_share: float = 0.0
    hw_slowdown_per_gpu_day: float = 0.0
    # Precursor episodes on healthy GPUs that stop and never fail, per 1,000 GPU-days.
    recovered_per_1000_gpu_days: float = 0.0


PrecursorStrength = Literal["strong", "weak", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PrecursorMix:
    """How strong the precursors of failures with one are: shares of strong / weak / no precursor.

    `None` (the classic simulator) leaves every mode's own rule (HBM's weak share, GSP's hint share).
    A weak precursor scales the precursor's end rates (and temperature rise) by `weak_factor`.
    """

    shares: tuple[float, float, float] | None = None
    weak_factor: float = 0.1


HostLabelName = Literal["Hostname", "hostname", "node", "kubernetes_node"]
MetricNames = Literal["pre-4.6", "4.6"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ExporterView:
    """What the fleet's exporter shows: which fields, under which names, with which host label.

    `fields` None exposes every field the simulator has (the classic set); otherwise only those family
    names appear (a field not exposed has no series at all, and no column in the dataset). `host_label`
    None is an exporter run with --no-hostname (series told apart by `instance`). `scrape_gap_p` is the
    chance that one scrape of one node is lost (a timeout): no samples at that instant.
    """

    fields: frozenset[str] | None = None
    field_set: str = "full"
    host_label: HostLabelName | None = "Hostname"
    metric_names: MetricNames = "pre-4.6"
    scrape_gap_p: float = 0.0
    # The dataset's host column takes the label's name (`Hostname`, `instance`, ...) rather than `node`.
    table_host: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Baselines:
    """Per-GPU and per-rack spread of temperature and power on healthy hardware (classic: 1.5 C, 1.0 C)."""

    gpu_temp_sigma_c: float = 1.5
    rack_temp_sigma_c: float = 1.0
    cool_rack_fraction: float = 0.0
    cool_rack_offset_c: float = -4.0
    power_sigma: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """Everything `FleetSim` needs besides the node count and the seed."""

    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    rates: FailureRates = field(default_factory=FailureRates)
    lead_times: LeadTimes = field(default_factory=LeadTimes)
    shapes: PrecursorShapes = field(default_factory=PrecursorShapes)
    traps: TrapParams = field(default_factory=TrapParams)
    workloads: WorkloadParams = field(default_factory=WorkloadParams)
    ops: OpsParams = field(default_factory=OpsParams)
    background: BackgroundParams = field(default_factory=BackgroundParams)
    precursors: PrecursorMix = field(default_factory=PrecursorMix)
    exporter: ExporterView = field(default_factory=ExporterView)
    baselines: Baselines = field(default_factory=Baselines)
    nodes_per_rack: int = 4
    node_prefix: str = "gpu-node"
    # The personality this configuration came from (its name and drawn values), for the ground truth.
    personality: dict[str, object] | None = field(default=None, compare=False, hash=False)
