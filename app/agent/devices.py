"""Which GPUs this node has, and the identity labels each one carries, read once at start.

A GPU that is already lost at start still gets an entry (with what NVML could tell), so the poller reports it
instead of silently exporting fewer series. Nothing here polls readings or waits for events.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from app.agent import nvml as nvml_port
from app.agent.model import GpuIdentity

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Gpu:
    identity: GpuIdentity
    # None when NVML could not even hand out a handle (the GPU was lost before the agent started).
    handle: object | None


def discover_gpus(nvml: nvml_port.NvmlLibrary) -> tuple[Gpu, ...]:
    """Every GPU NVML enumerates, in index order. Raises NvmlUnavailableError when NVML can't count them."""
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as exc:
        raise nvml_port.NvmlUnavailableError(f"NVML cannot enumerate GPUs: {exc}") from None
    return tuple(_discover_one(nvml, index) for index in range(count))


def _discover_one(nvml: nvml_port.NvmlLibrary, index: int) -> Gpu:
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as exc:
        log.warning("GPU %d: no NVML handle (%s); it will be reported as lost", index, exc)
        return Gpu(GpuIdentity(index=index, uuid="", pci_bus_id="", model=""), None)
    return Gpu(_identify(nvml, handle, index), handle)


def _identify(nvml: nvml_port.NvmlLibrary, handle: object, index: int) -> GpuIdentity:
    def text(value: str | bytes | None) -> str:
        return nvml_port.as_text(value) if value is not None else ""

    try:
        uuid = text(nvml_port.call_optional(nvml, lambda: nvml.nvmlDeviceGetUUID(handle)))
        model = text(nvml_port.call_optional(nvml, lambda: nvml.nvmlDeviceGetName(handle)))
        pci = nvml_port.call_optional(nvml, lambda: nvml.nvmlDeviceGetPciInfo(handle))
    except nvml_port.GpuLostError:
        log.warning("GPU %d is lost already at start; it will be reported as XID 79", index)
        return GpuIdentity(index=index, uuid="", pci_bus_id="", model="")
    return GpuIdentity(
        index=index, uuid=uuid, pci_bus_id=text(pci.busId) if pci is not None else "", model=model
    )
