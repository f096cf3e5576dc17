"""Building a fleet from a seed: nodes in racks, GPU identities, hot racks and trap GPUs.

Everything here draws from the identity stream only, so the same seed and size always give the same
UUIDs, racks and traps, whatever the rates or the step size.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from app.sim.fleet.gpu import GpuIdentity, GpuState
from app.sim.fleet.nodes import NodeState
from app.sim.fleet.params import SimConfig
from app.sim.fleet.randomness import gpu_uuid
from app.sim.fleet.truth import TrapRecord

# Initial InfoROM history of a trap GPU with a stable high SBE rate: it has been like this for months.
_TRAP_HISTORY_S = 120 * 86400.0


@dataclass(frozen=True, slots=True)
class BuiltFleet:
    nodes: list[NodeState]
    rack_offsets: tuple[float, ...]
    traps: list[TrapRecord]


def node_name(config: SimConfig, index: int) -> str:
    return f"{config.node_prefix}-{index:03d}"


def new_identity(config: SimConfig, rng: random.Random, *, node: str, index: int, serial: int) -> GpuIdentity:
    buses = config.hardware.pci_buses
    bus = buses[index % len(buses)] + 0x100 * (index // len(buses))
    return GpuIdentity(
        node=node,
        index=index,
        uuid=gpu_uuid(rng),
        pci_bus_id=f"00000000:{bus:02X}:00.0",
        model=config.hardware.model_name,
        serial=serial,
    )


def build_fleet(
    config: SimConfig, *, nodes: int, rng: random.Random, variety: random.Random | None = None
) -> BuiltFleet:
    """`variety` draws what only a personality varies (cool racks, per-GPU power), never the identities."""
    baselines = config.baselines
    racks = max(1, math.ceil(nodes / config.nodes_per_rack))
    hot = [rng.random() < config.traps.hot_rack_fraction for _ in range(racks)]
    offsets = tuple(
        config.traps.hot_rack_offset_c if is_hot else rng.gauss(0.0, baselines.rack_temp_sigma_c)
        for is_hot in hot
    )
    if variety is not None and baselines.cool_rack_fraction > 0.0:
        offsets = tuple(
            offset + baselines.cool_rack_offset_c
            if not is_hot and variety.random() < baselines.cool_rack_fraction
            else offset
            for offset, is_hot in zip(offsets, hot, strict=True)
        )
    built: list[NodeState] = []
    traps: list[TrapRecord] = []
    serial = 0
    for index in range(nodes):
        name = node_name(config, index)
        rack = index // config.nodes_per_rack
        gpus: list[GpuState] = []
        for gpu_index in range(config.hardware.gpus_per_node):
            identity = new_identity(config, rng, node=name, index=gpu_index, serial=serial)
            serial += 1
            gpu = GpuState(identity=identity, temp_offset_c=rng.gauss(0.0, baselines.gpu_temp_sigma_c))
            if variety is not None and baselines.power_sigma > 0.0:
                gpu.power_scale = math.exp(variety.gauss(0.0, baselines.power_sigma))
            trap = _make_trap(config, gpu, rng)
            if trap is not None:
                traps.append(trap)
            gpus.append(gpu)
        if hot[rack]:
            traps.append(TrapRecord(kind="hot-rack", node=name, detail=f"rack {rack}"))
        built.append(
            NodeState(
                name=name,
                index=index,
                rack=rack,
                hot=hot[rack],
                gpus=gpus,
                driver_version=config.hardware.driver_version,
            )
        )
    return BuiltFleet(nodes=built, rack_offsets=offsets, traps=traps)


def _make_trap(config: SimConfig, gpu: GpuState, rng: random.Random) -> TrapRecord | None:
    """Maybe make this GPU a trap (or give it a background SBE rate); returns its trap record."""
    traps, ops = config.traps, config.ops
    draw = rng.random()
    identity = gpu.identity
    if draw < traps.stable_sbe_fraction:
        per_h = rng.uniform(*traps.stable_sbe_per_h)
        gpu.trap = "stable-high-sbe"
        gpu.sbe_per_s = per_h / 3600.0
        gpu.sbe_agg = int(per_h * _TRAP_HISTORY_S / 3600.0)
        gpu.correctable_rows = 1 + rng.randrange(6)
        return TrapRecord(
            kind=gpu.trap, node=identity.node, gpu=identity.index, uuid=identity.uuid, detail=f"{per_h:.0f}/h"
        )
    draw -= traps.stable_sbe_fraction
    if draw < traps.noisy_nvlink_fraction:
        per_s = rng.uniform(*traps.noisy_nvlink_per_s)
        gpu.trap = "noisy-nvlink"
        gpu.nvlink_noise_per_s = per_s
        return TrapRecord(
            kind=gpu.trap, node=identity.node, gpu=identity.index, uuid=identity.uuid, detail=f"{per_s:.1f}/s"
        )
    draw -= traps.noisy_nvlink_fraction
    if draw < ops.background_sbe_fraction:
        gpu.sbe_per_s = ops.background_sbe_per_day / 86400.0
    return None
