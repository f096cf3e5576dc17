"""The agent's own value types: which GPU, what it read, what happened to it, who was using it.

They live apart from the code that fills them so the exposition and the standalone real-GPU check can use
them without pulling in aiohttp, gRPC or pydantic. Standard library only; no I/O, no NVML calls here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal

PromType = Literal["gauge", "counter"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuIdentity:
    """The labels dcgm-exporter puts on every series of one GPU; `index` is NVML's enumeration order."""

    index: int
    uuid: str
    pci_bus_id: str
    model: str

    @property
    def device(self) -> str:
        # dcgm-exporter names the device after the GPU index, not the /dev minor number.
        return f"nvidia{self.index}"


@dataclass(frozen=True, slots=True)
class PodRef:
    """The container a GPU is allocated to, as the kubelet reports it."""

    namespace: str
    name: str
    container: str


class Field(StrEnum):
    """A polled reading, named exactly as dcgm-exporter names the series."""

    GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
    MEMORY_TEMP = "DCGM_FI_DEV_MEMORY_TEMP"
    POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
    ECC_SBE_VOL_TOTAL = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
    ECC_DBE_VOL_TOTAL = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
    ECC_SBE_AGG_TOTAL = "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"
    ECC_DBE_AGG_TOTAL = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
    CORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
    UNCORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
    ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
    ROW_REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"
    RETIRED_PENDING = "DCGM_FI_DEV_RETIRED_PENDING"
    PCIE_REPLAY_COUNTER = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
    NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
    NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
    NVLINK_REPLAY_ERROR_COUNT_TOTAL = "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"
    NVLINK_RECOVERY_ERROR_COUNT_TOTAL = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
    CLOCK_THROTTLE_REASONS = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"


XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"


@dataclass(frozen=True, slots=True)
class FieldSpec:
    prom_type: PromType
    help: str
    # DCGM stores power as a double and prints it with six decimals; everything else is an integer.
    is_float: bool = False


# The exporter's types: ECC, remap, retirement, replay and NVLink totals are counters; the rest are gauges.
FIELD_SPECS: Mapping[Field, FieldSpec] = {
    Field.GPU_TEMP: FieldSpec("gauge", "GPU temperature (in C)."),
    Field.MEMORY_TEMP: FieldSpec("gauge", "Memory temperature (in C)."),
    Field.POWER_USAGE: FieldSpec("gauge", "Power draw (in W).", is_float=True),
    Field.ECC_SBE_VOL_TOTAL: FieldSpec("counter", "Total number of single-bit volatile ECC errors."),
    Field.ECC_DBE_VOL_TOTAL: FieldSpec("counter", "Total number of double-bit volatile ECC errors."),
    Field.ECC_SBE_AGG_TOTAL: FieldSpec("counter", "Total number of single-bit persistent ECC errors."),
    Field.ECC_DBE_AGG_TOTAL: FieldSpec("counter", "Total number of double-bit persistent ECC errors."),
    Field.CORRECTABLE_REMAPPED_ROWS: FieldSpec("counter", "Number of remapped rows for correctable errors"),
    Field.UNCORRECTABLE_REMAPPED_ROWS: FieldSpec(
        "counter", "Number of remapped rows for uncorrectable errors"
    ),
    Field.ROW_REMAP_FAILURE: FieldSpec("gauge", "Whether remapping of rows has failed"),
    Field.ROW_REMAP_PENDING: FieldSpec("gauge", "Whether a row remap waits for the next GPU reset"),
    Field.RETIRED_PENDING: FieldSpec("counter", "Total number of pages pending retirement."),
    Field.PCIE_REPLAY_COUNTER: FieldSpec("counter", "Total number of PCIe retries."),
    Field.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: FieldSpec(
        "counter", "Total number of NVLink flow-control CRC errors."
    ),
    Field.NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: FieldSpec("counter", "Total number of NVLink data CRC errors."),
    Field.NVLINK_REPLAY_ERROR_COUNT_TOTAL: FieldSpec("counter", "Total number of NVLink retries."),
    Field.NVLINK_RECOVERY_ERROR_COUNT_TOTAL: FieldSpec("counter", "Total number of NVLink recovery errors."),
    Field.CLOCK_THROTTLE_REASONS: FieldSpec("gauge", "Current clock throttle reasons."),
}
XID_SPEC = FieldSpec("gauge", "Value of the last XID error encountered.")


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One poll of one GPU. A field the GPU does not support is simply absent."""

    gpu: GpuIdentity
    values: Mapping[Field, int | float] = field(default_factory=dict)

    def get(self, name: Field) -> int | float | None:
        return self.values.get(name)


class EventKind(StrEnum):
    """The `kind` of a pushed GPU event; the service validates exactly these strings."""

    XID = "xid"
    DOUBLE_BIT_ECC = "double-bit-ecc"
    DRAM_RETIREMENT = "dram-retirement"
    DRAM_RETIREMENT_FAILURE = "dram-retirement-failure"
    GPU_UNAVAILABLE = "gpu-unavailable"
    RECOVERY_ACTION = "recovery-action"
    GPU_LOST = "gpu-lost"


# NVIDIA's XID for "GPU has fallen off the bus"; NVML then answers every call with GPU_IS_LOST.
XID_GPU_LOST = 79


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuEvent:
    """Something NVML told us (or we inferred) about one GPU, before it gets an id and a pod."""

    kind: EventKind
    gpu: GpuIdentity
    occurred_at: datetime
    message: str
    xid: int | None = None
    recovery_action: int | None = None

    @property
    def means_lost(self) -> bool:
        return self.kind is EventKind.GPU_LOST or self.xid == XID_GPU_LOST
