"""The broad priors a fleet's personality is drawn from, with the source of every range.

Sources (cited by short name below):
- Llama 3: Meta, "The Llama 3 Herd of Models" (2024), Table 5: 16,384 H100s for 54 days, 419 unexpected
  interruptions — faulty GPU 148, HBM3 72, software 54, network 35, host maintenance 32, SRAM 19, GSP 17.
  About 2.4 GPU-caused interruptions per 1,000 node-days (params.py).
- Delta: Cui et al., "Characterizing GPU Resilience and Impact on AI/HPC Systems" (NCSA Delta, 1,056 A100
  and H100 GPUs, 11.7M GPU-hours, arXiv:2503.11901): GSP the most error-prone hardware component; NVLink
  errors often absorbed by link retry without a job failure; H100 memory errors 3.2x as frequent per GPU as
  A100's.
- HBM'24: "Removing Obstacles before Breaking Through the Memory Wall: A Close Look at HBM Errors in the
  Field" (USENIX ATC'24): correctable errors concentrate on few devices (locality in row/bank), and the
  total correctable-error rate does not predict uncorrectable errors.
- ByteDance: SYSTOR'23 GPU failure prediction: precision 46% -> 84-85% only with sliding retraining,
  because fleet patterns drift — fleets and their noise differ, which is what the priors spread covers.
- dcgm-exporter: NVIDIA/dcgm-exporter etc/default-counters.csv and etc/dcp-metrics-included.csv (fieldsets.py).
- DCGM: PCIe replay health thresholds 8/16/31 per minute by generation; NVLink CRC at 100/s (links.py).

No public source measures the background rates of healthy links, their burstiness, or how often precursor
episodes recover: those ranges are ASSUMPTIONS, kept wide on purpose (domain randomisation: a model that
holds over the whole range holds on a fleet it has not seen), and centred so that the loudest healthy GPUs
stay below DCGM's own health thresholds.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from app.sim.fleet import fieldsets
from app.sim.fleet.params import (
    BackgroundParams,
    Baselines,
    ExporterView,
    FailureRates,
    HostLabelName,
    LinkNoise,
    MixEntry,
    OpsParams,
    PrecursorMix,
    TrapParams,
    WorkloadParams,
)


def log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Sections:
    """The parts of a simulator configuration a personality varies."""

    rates: FailureRates
    precursors: PrecursorMix
    background: BackgroundParams
    traps: TrapParams
    ops: OpsParams
    workloads: WorkloadParams
    exporter: ExporterView
    baselines: Baselines


def draw_rates(rng: random.Random) -> FailureRates:
    base = FailureRates()
    # Llama 3's 2.4 GPU-caused interruptions per 1,000 node-days, within a factor of two either way
    # (ASSUMPTION: fleets differ in age, cooling and workload; Delta's H100 memory errors alone are 3.2x A100's).
    per_1000 = log_uniform(rng, 1.2, 4.8)
    # Each category's share of the Llama 3 mix times a log-normal factor (sigma 0.5, ASSUMPTION).
    mix = tuple(
        MixEntry(e.category, e.mode, e.weight * math.exp(rng.gauss(0.0, 0.5)), e.xids) for e in base.mix
    )
    return replace(base, per_1000_node_days=per_1000, mix=mix)


def draw_precursors(rng: random.Random) -> PrecursorMix:
    # About a quarter of failures give no warning (TELEMETRY.md, from comparable fleets) and HBM'24 finds the
    # correctable rate a poor predictor: shares of strong/weak/none spread around that (ASSUMPTION).
    strong = rng.uniform(0.45, 0.85)
    weak = rng.uniform(0.1, 0.35) * (1.0 - strong) / 0.55
    none = max(0.0, 1.0 - strong - weak)
    return PrecursorMix(shares=(strong, weak, none), weak_factor=log_uniform(rng, 0.03, 0.3))


def draw_link(
    rng: random.Random,
    *,
    fraction: tuple[float, float],
    per_day: tuple[float, float],
    mean: tuple[float, float],
    chronic: tuple[float, float],
    chronic_per_day: tuple[float, float],
) -> LinkNoise:
    return LinkNoise(
        gpu_fraction=rng.uniform(*fraction),
        episodes_per_day=log_uniform(rng, *per_day),
        # Rates vary by orders of magnitude between healthy links (sigma 1.5-2.5 in natural log). ASSUMPTION.
        sigma=rng.uniform(1.5, 2.5),
        episode_mean=log_uniform(rng, *mean),
        chronic_fraction=rng.uniform(*chronic),
        chronic_per_day=log_uniform(rng, *chronic_per_day),
    )


def draw_background(rng: random.Random) -> BackgroundParams:
    # PCIe: a share of GPUs logs an episode of a few replays now and then; the median noisy GPU a few a
    # month to one a day; a few have a chronic trickle. Far below DCGM's 31/min Gen5 threshold. ASSUMPTION.
    pcie = draw_link(
        rng, fraction=(0.02, 0.3), per_day=(0.03, 1.0), mean=(2.0, 10.0), chronic=(0.0, 0.02),
        chronic_per_day=(0.5, 5.0),
    )  # fmt: skip
    # NVLink: Delta sees NVLink errors that link retry absorbs without a job failure; bursts of tens to
    # hundreds of CRC errors (a lane retraining) on a smaller share of GPUs, and a few chronic links.
    # ASSUMPTION in every number; the 100/s DCGM threshold is never reached by the background.
    nvlink = draw_link(
        rng, fraction=(0.01, 0.15), per_day=(0.02, 0.5), mean=(5.0, 200.0), chronic=(0.0, 0.01),
        chronic_per_day=(10.0, 2000.0),
    )  # fmt: skip
    return BackgroundParams(
        pcie=pcie,
        nvlink=nvlink,
        nvlink_data_share=rng.uniform(0.2, 0.6),
        nvlink_replay_per_crc=rng.uniform(0.0, 0.05),
        # A busy H100 at its power limit is clock-capped a share of the time (ASSUMPTION: 2-30% of minutes);
        # sync boost only on boards grouped for it; HW slowdown episodes rare on healthy boards.
        power_cap_share=rng.uniform(0.02, 0.3),
        sync_boost_share=rng.uniform(0.0, 0.05) if rng.random() < 0.3 else 0.0,
        hw_slowdown_per_gpu_day=log_uniform(rng, 0.001, 0.05),
        # Precursor episodes that recover: the same order as failures with precursors (Llama 3: ~0.3 per
        # 1,000 GPU-days). ASSUMPTION.
        recovered_per_1000_gpu_days=rng.uniform(0.1, 0.6),
    )


def draw_traps(rng: random.Random) -> TrapParams:
    # HBM'24: correctable errors concentrate on few devices — a small share of chronic-SBE GPUs (ASSUMPTION
    # 0.1-2%) at tens to hundreds an hour. Hot racks: a share of racks runs 5-12 C over the rest (ASSUMPTION;
    # ORNL Titan's GPU hazard tracked rack position, TELEMETRY.md).
    return replace(
        TrapParams(),
        stable_sbe_fraction=rng.uniform(0.001, 0.02),
        stable_sbe_per_h=(log_uniform(rng, 5.0, 30.0), log_uniform(rng, 60.0, 400.0)),
        hot_rack_fraction=rng.uniform(0.0, 0.2),
        hot_rack_offset_c=rng.uniform(5.0, 12.0),
        hot_rack_blips_per_day=rng.uniform(0.5, 6.0),
        noisy_nvlink_fraction=rng.uniform(0.0, 0.01),
        buggy_job_fraction=rng.uniform(0.01, 0.1),
    )


def draw_ops(rng: random.Random) -> OpsParams:
    # Exporter restarts from about one a quarter to one a week per node, maintenance reboots one a half-year
    # to one a month, occasional SBEs on 1-10% of GPUs (ASSUMPTIONS).
    return replace(
        OpsParams(),
        exporter_restarts_per_node_day=log_uniform(rng, 1 / 90, 1 / 7),
        maintenance_reboots_per_node_day=log_uniform(rng, 1 / 180, 1 / 30),
        background_sbe_fraction=rng.uniform(0.01, 0.1),
        background_sbe_per_day=log_uniform(rng, 0.1, 2.0),
    )


def draw_workloads(rng: random.Random) -> WorkloadParams:
    # Application XIDs (13 graphics exception, 31 MMU fault, 43 reset channel, 45 preemptive cleanup) follow
    # buggy code, not hardware (NVIDIA's XID catalog: RESTART_APP); how often varies by user base. ASSUMPTION.
    weights = tuple((xid, rng.uniform(0.2, 1.0)) for xid in (13, 31, 43, 45))
    return replace(
        WorkloadParams(),
        target_utilization=rng.uniform(0.6, 0.95),
        app_xid_normal_per_day=log_uniform(rng, 0.003, 0.05),
        app_xid_buggy_per_day=log_uniform(rng, 1.0, 10.0),
        app_xids=weights,
    )


_FIELD_SETS = ("default", "dcp", "default-ecc", "default-nvlink-flit", "extended", "full", "partial")
_FIELD_WEIGHTS = (0.25, 0.15, 0.1, 0.1, 0.2, 0.05, 0.15)
_HOSTS: tuple[HostLabelName | None, ...] = ("Hostname", "hostname", "kubernetes_node", "node", None)
_HOST_WEIGHTS = (0.45, 0.15, 0.15, 0.2, 0.05)


def draw_exporter(rng: random.Random) -> ExporterView:
    # Which counters file: the shipped default most often, the GPU Operator's dcp file, careful extended
    # files, and installs that enabled some error lines and not others (ASSUMPTION: the weights).
    name = rng.choices(_FIELD_SETS, weights=_FIELD_WEIGHTS)[0]
    if name == "partial":
        keep = rng.uniform(0.2, 0.8)
        fields: frozenset[str] | None = fieldsets.DEFAULT_FIELDS | {
            field for field in fieldsets.OPTIONAL_FIELDS if rng.random() < keep
        }
    else:
        fields = fieldsets.FIELD_SETS[name]
    host = rng.choices(_HOSTS, weights=_HOST_WEIGHTS)[0]
    return ExporterView(
        fields=fields,
        field_set=name,
        host_label=host,
        # DCGM 4.6 renamed fields; a share of fleets runs it (ASSUMPTION).
        metric_names="4.6" if rng.random() < 0.3 else "pre-4.6",
        # Lost scrapes (timeouts) from 1 in 10,000 to 1 in 100 (ASSUMPTION).
        scrape_gap_p=log_uniform(rng, 1e-4, 1e-2),
        table_host=True,
    )


def draw_baselines(rng: random.Random) -> Baselines:
    # Board-to-board spread of temperature at the same load and of power draw (ASSUMPTION: 1-3 C, 0-5%),
    # racks 0.5-2 C apart, a few racks cooler (nearer the CRAC) than the rest.
    return Baselines(
        gpu_temp_sigma_c=rng.uniform(1.0, 3.0),
        rack_temp_sigma_c=rng.uniform(0.5, 2.0),
        cool_rack_fraction=rng.uniform(0.0, 0.1),
        cool_rack_offset_c=-rng.uniform(2.0, 6.0),
        power_sigma=rng.uniform(0.0, 0.05),
    )


def draw_sections(seed: int) -> Sections:
    """Every varied section, drawn in a fixed order from the seed's own stream."""
    rng = random.Random(f"personality:{seed}")  # noqa: S311 - simulation, not cryptography
    return Sections(
        rates=draw_rates(rng),
        precursors=draw_precursors(rng),
        background=draw_background(rng),
        traps=draw_traps(rng),
        ops=draw_ops(rng),
        workloads=draw_workloads(rng),
        exporter=draw_exporter(rng),
        baselines=draw_baselines(rng),
    )
