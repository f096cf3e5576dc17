"""The agent's own value types: which GPU, what it read, what happened to it, who was using it.

They live apart from the code that fills them so the exposition and the standalone real-GPU check can use
them without pulling in aiohttp, gRPC or pydantic. Standard library only; no I/O, no NVML calls here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from app import dcgm_fields


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
    """A polled reading, named as dcgm-exporter names the series; the order is /metrics' order."""

    GPU_TEMP = dcgm_fields.GPU_TEMP.name
    MEMORY_TEMP = dcgm_fields.MEMORY_TEMP.name
    POWER_USAGE = dcgm_fields.POWER_USAGE.name
    ECC_SBE_VOL_TOTAL = dcgm_fields.ECC_SBE_VOL_TOTAL.name
    ECC_DBE_VOL_TOTAL = dcgm_fields.ECC_DBE_VOL_TOTAL.name
    ECC_SBE_AGG_TOTAL = dcgm_fields.ECC_SBE_AGG_TOTAL.name
    ECC_DBE_AGG_TOTAL = dcgm_fields.ECC_DBE_AGG_TOTAL.name
    CORRECTABLE_REMAPPED_ROWS = dcgm_fields.CORRECTABLE_REMAPPED_ROWS.name
    UNCORRECTABLE_REMAPPED_ROWS = dcgm_fields.UNCORRECTABLE_REMAPPED_ROWS.name
    ROW_REMAP_FAILURE = dcgm_fields.ROW_REMAP_FAILURE.name
    ROW_REMAP_PENDING = dcgm_fields.ROW_REMAP_PENDING.name
    RETIRED_PENDING = dcgm_fields.RETIRED_PENDING.name
    PCIE_REPLAY_COUNTER = dcgm_fields.PCIE_REPLAY_COUNTER.name
    NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = dcgm_fields.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL.name
    NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = dcgm_fields.NVLINK_CRC_DATA_ERROR_COUNT_TOTAL.name
    NVLINK_REPLAY_ERROR_COUNT_TOTAL = dcgm_fields.NVLINK_REPLAY_ERROR_COUNT_TOTAL.name
    NVLINK_RECOVERY_ERROR_COUNT_TOTAL = dcgm_fields.NVLINK_RECOVERY_ERROR_COUNT_TOTAL.name
    CLOCK_THROTTLE_REASONS = dcgm_fields.CLOCK_THROTTLE_REASONS.name


# The agent's wording of two help strings predates the catalog; it is what deployed agents serve, so it
# stays until someone changes what /metrics says on purpose.
HELP_AS_SERVED: Mapping[Field, str] = {
    Field.ROW_REMAP_PENDING: "Whether a row remap waits for the next GPU reset",
    Field.CLOCK_THROTTLE_REASONS: "Current clock throttle reasons.",
}


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
