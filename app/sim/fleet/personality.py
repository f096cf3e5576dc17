"""A fleet's personality: how its healthy hardware, its exporter and its failures differ from other fleets'.

API (for training and evaluation scripts):

    from app.sim.fleet import personality
    p = personality.named("random", seed=3)          # or personality.draw(3), personality.named("classic")
    report = personality.simulate(p, Path("out/random-3"), nodes=200, days=14, seed=3)
    # out/random-3/timeseries.parquet (only the fields this fleet exposes, under its names and host
    # column) and truth.json (with "personality": every drawn value, failures' precursor_strength, traps
    # incl. background-pcie-replays / background-nvlink-crc / recovered-precursor).
    config = p.config()                              # a SimConfig, for FleetSim(config=...) directly

`sickbay simulate --personality NAME --seed N` does the same from the command line.

The classic simulator is the personality `classic` (every section at its default): same seed, same output.
Named personalities each change one thing against classic; `random` draws every section from the broad
priors in `priors.py` (their sources are cited there), `stress-10x` is a drawn one with ten times its
background noise (`noise` multiplies every background rate: link errors, occasional SBEs, app XIDs, HW
slowdowns). Named ones ignore the seed unless drawn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from app.sim.fleet import fieldsets, priors
from app.sim.fleet.params import (
    BackgroundParams,
    Baselines,
    ExporterView,
    FailureRates,
    LinkNoise,
    OpsParams,
    PrecursorMix,
    SimConfig,
    TrapParams,
    WorkloadParams,
)
from app.sim.personality_names import NAMES


@dataclass(frozen=True, slots=True, kw_only=True)
class Personality:
    """The sections of a simulator configuration that differ between fleets, and a name for them."""

    name: str
    seed: int | None = None  # the draw's seed; None for a fixed personality
    noise: float = 1.0
    rates: FailureRates = field(default_factory=FailureRates)
    precursors: PrecursorMix = field(default_factory=PrecursorMix)
    background: BackgroundParams = field(default_factory=BackgroundParams)
    traps: TrapParams = field(default_factory=TrapParams)
    ops: OpsParams = field(default_factory=OpsParams)
    workloads: WorkloadParams = field(default_factory=WorkloadParams)
    exporter: ExporterView = field(default_factory=ExporterView)
    baselines: Baselines = field(default_factory=Baselines)

    def config(self, base: SimConfig | None = None) -> SimConfig:
        """The simulator configuration: `base` (hardware, lead times, shapes...) with these sections, the
        background noise multiplied by `noise`, and the personality recorded for the ground truth."""
        start = base or SimConfig()
        n = self.noise
        return replace(
            start,
            rates=self.rates,
            precursors=self.precursors,
            background=_louder(self.background, n),
            traps=self.traps,
            ops=replace(self.ops, background_sbe_per_day=self.ops.background_sbe_per_day * n),
            workloads=replace(
                self.workloads, app_xid_normal_per_day=self.workloads.app_xid_normal_per_day * n
            ),
            exporter=self.exporter,
            baselines=self.baselines,
            personality=self.as_dict(),
        )

    def as_dict(self) -> dict[str, Any]:
        """Every value, JSON-ready (field sets as sorted lists)."""
        out = _jsonable(dataclasses.asdict(self))
        assert isinstance(out, dict)
        return out


def _louder(background: BackgroundParams, noise: float) -> BackgroundParams:
    if noise == 1.0:
        return background

    def link(params: LinkNoise) -> LinkNoise:
        return replace(
            params,
            episodes_per_day=params.episodes_per_day * noise,
            chronic_per_day=params.chronic_per_day * noise,
        )

    return replace(
        background,
        pcie=link(background.pcie),
        nvlink=link(background.nvlink),
        hw_slowdown_per_gpu_day=background.hw_slowdown_per_gpu_day * noise,
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, frozenset | set):
        return sorted(value)
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    return value


# -- drawn and named personalities ----------------------------------------------------------------------


def draw(seed: int) -> Personality:
    """A personality drawn from the broad priors (priors.py): the same seed, the same personality."""
    sections = priors.draw_sections(seed)
    return Personality(
        name="random", seed=seed, **{f.name: getattr(sections, f.name) for f in dataclasses.fields(sections)}
    )


CLASSIC = Personality(name="classic")

# Moderate, fixed background noise for the named personalities that are about something else.
_MODERATE = BackgroundParams(
    pcie=LinkNoise(gpu_fraction=0.1, episodes_per_day=0.2, sigma=2.0, episode_mean=4.0),
    nvlink=LinkNoise(gpu_fraction=0.05, episodes_per_day=0.1, sigma=2.0, episode_mean=30.0),
    nvlink_replay_per_crc=0.02,
)
_TABLE_HOST = ExporterView(table_host=True)


def _default_counters() -> Personality:
    view = ExporterView(fields=fieldsets.DEFAULT_FIELDS, field_set="default", table_host=True)
    return Personality(name="default-counters", exporter=view, background=_MODERATE)


def _noisy_links() -> Personality:
    # The loud end of the priors: a third of GPUs with background replays, a sixth with NVLink CRC bursts,
    # chronic trickles on a few, replays following CRC errors as link retry does.
    background = BackgroundParams(
        pcie=LinkNoise(
            gpu_fraction=0.3, episodes_per_day=0.5, sigma=2.3, episode_mean=6.0, chronic_fraction=0.02,
            chronic_per_day=3.0,
        ),
        nvlink=LinkNoise(
            gpu_fraction=0.15, episodes_per_day=0.3, sigma=2.3, episode_mean=100.0, chronic_fraction=0.01,
            chronic_per_day=500.0,
        ),
        nvlink_data_share=0.4,
        nvlink_replay_per_crc=0.03,
        hw_slowdown_per_gpu_day=0.01,
    )  # fmt: skip
    view = ExporterView(fields=fieldsets.EXTENDED_FIELDS, field_set="extended", table_host=True)
    return Personality(name="noisy-links", background=background, exporter=view)


def _hot_racks() -> Personality:
    traps = replace(TrapParams(), hot_rack_fraction=0.25, hot_rack_offset_c=11.0, hot_rack_blips_per_day=5.0)
    baselines = Baselines(
        gpu_temp_sigma_c=2.5, rack_temp_sigma_c=1.5, cool_rack_fraction=0.1, cool_rack_offset_c=-5.0,
        power_sigma=0.04,
    )  # fmt: skip
    background = replace(_MODERATE, power_cap_share=0.25, hw_slowdown_per_gpu_day=0.02)
    return Personality(
        name="hot-racks",
        traps=traps,
        baselines=baselines,
        background=background,
        exporter=replace(_TABLE_HOST, host_label="kubernetes_node"),
    )


def _weak_precursors() -> Personality:
    background = replace(_MODERATE, recovered_per_1000_gpu_days=0.6)
    return Personality(
        name="weak-precursors",
        precursors=PrecursorMix(shares=(0.3, 0.45, 0.25), weak_factor=0.08),
        background=background,
        exporter=_TABLE_HOST,
    )


def _stress(seed: int) -> Personality:
    return replace(draw(seed), name="stress-10x", noise=10.0)


def named(name: str, *, seed: int = 0) -> Personality:
    """The personality of this name (`random` and `stress-10x` are drawn from `seed`)."""
    if name == "classic":
        return CLASSIC
    if name == "default-counters":
        return _default_counters()
    if name == "noisy-links":
        return _noisy_links()
    if name == "hot-racks":
        return _hot_racks()
    if name == "weak-precursors":
        return _weak_precursors()
    if name == "stress-10x":
        return _stress(seed)
    if name == "random":
        return draw(seed)
    raise ValueError(f"unknown personality {name!r} (one of {', '.join(NAMES)})")


def simulate(
    personality: Personality,
    directory: Path,
    *,
    nodes: int,
    days: float,
    seed: int,
    step_s: float = 60.0,
    formats: Sequence[str] = ("parquet",),
    rate_multiplier: float = 1.0,
    base: SimConfig | None = None,
) -> Any:
    """Simulate a fleet of this personality and write its dataset (see `datasets.write_dataset`); returns
    the `DatasetReport`. `rate_multiplier` scales the failure rate (tests use hundreds)."""
    from app.sim.fleet import datasets  # noqa: PLC0415 - the dataset writers import the whole simulator

    config = personality.config(base)
    if rate_multiplier != 1.0:
        config = replace(config, rates=replace(config.rates, rate_multiplier=rate_multiplier))
    return datasets.write_dataset(
        directory,
        nodes=nodes,
        duration_s=days * 86400.0,
        step_s=step_s,
        seed=seed,
        config=config,
        formats=tuple(formats),  # type: ignore[arg-type]
    )
