"""A scripted stand-in for the `pynvml` module (nvidia-ml-py), for agent tests on machines without a GPU.

It is passed to the agent exactly where production passes the real module. Constants and error classes are
taken from the installed real binding, so names, numeric codes and the `NVMLError(code)` → subclass mapping
are NVML's own; the functions keep the real names, argument order and return shapes (tuples, structs with
the same field names). Scriptable: N GPUs, injected events, a GPU that falls off the bus, functions a GPU
does not support, a node without the NVML library.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml as real

ALL_WATCHED_EVENTS = (
    real.nvmlEventTypeXidCriticalError
    | real.nvmlEventTypeDoubleBitEccError
    | real.nvmlEventTypeDramRetirementEvent
    | real.nvmlEventTypeDramRetirementFailure
    | real.nvmlEventTypeGpuUnavailableError
    | real.nvmlEventTypeGpuRecoveryAction
)
# How many NVLink ports the fake hardware has (an H100 SXM has 18; the binding's maximum is 36).
FAKE_NVLINK_PORTS = 18


def nvml_error(code: int) -> Exception:
    """Exactly what the real binding raises: `NVMLError(code)` becomes the matching subclass."""
    error: Exception = real.NVMLError(code)
    return error


@dataclass
class FakeGpu:
    """Mutable on purpose: tests script a GPU's state between polls."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str = "NVIDIA H100 80GB HBM3"
    temperature_c: int = 40
    memory_temperature_c: int | None = 45
    power_mw: int = 71_234
    # (NVML_MEMORY_ERROR_TYPE_*, NVML_*_ECC) → count
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    retired_pages_pending: int = 0
    clocks_event_reasons: int = 0x1
    pcie_replays: int = 0
    # active link → {NVML_NVLINK_ERROR_DL_* → count}; links not listed exist but are down
    nvlink: dict[int, dict[int, int]] = field(default_factory=dict)
    recovery_action: int = real.NVML_GPU_RECOVERY_ACTION_NONE
    supported_events: int = ALL_WATCHED_EVENTS
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False


@dataclass(frozen=True)
class FakeHandle:
    """Stands in for `c_nvmlDevice_t`; only identity matters."""

    index: int


@dataclass
class FakePciInfo:
    busId: str
    domain: int
    bus: int
    device: int
    pciDeviceId: int = 0x233010DE


@dataclass
class FakeValue:
    """`c_nvmlValue_t`: a union, so every member reads the same stored number."""

    number: float

    @property
    def dVal(self) -> float:
        return float(self.number)

    @property
    def uiVal(self) -> int:
        return int(self.number)

    ulVal = uiVal
    ullVal = uiVal
    sllVal = uiVal
    siVal = uiVal
    usVal = uiVal


@dataclass
class FakeFieldValue:
    """`c_nvmlFieldValue_t`, with a per-field `nvmlReturn` as NVML reports it."""

    fieldId: int
    scopeId: int
    timestamp: int
    latencyUsec: int
    valueType: int
    nvmlReturn: int
    value: FakeValue


@dataclass
class FakeEventData:
    """`c_nvmlEventData_t`: device, eventType, eventData (the XID for XID events), MIG instance ids."""

    device: FakeHandle
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


class FakeEventSet:
    def __init__(self) -> None:
        self.masks: dict[int, int] = {}
        self.pending: queue.Queue[FakeEventData] = queue.Queue()
        self.freed = False


def _copy_binding_names(target: type) -> None:
    for name in dir(real):
        if name.startswith(("NVML_", "NVMLError", "nvmlEventType", "nvmlClocksEvent", "nvmlClocksThrottle")):
            setattr(target, name, getattr(real, name))


class FakeNvml:
    """Module-shaped: `FakeNvml(...).nvmlDeviceGetCount()` behaves like `pynvml.nvmlDeviceGetCount()`."""

    def __init__(
        self,
        gpus: int | Sequence[FakeGpu] = 2,
        *,
        driver_version: str = "550.54.15",
        library_present: bool = True,
    ) -> None:
        if isinstance(gpus, int):
            gpus = [make_gpu(i) for i in range(gpus)]
        self.gpus: list[FakeGpu] = list(gpus)
        self.driver_version = driver_version
        self.library_present = library_present
        self.initialized = False
        self.event_sets: list[FakeEventSet] = []
        self._lock = threading.Lock()

    # --- scripting -------------------------------------------------------------------------------------

    def inject_event(self, gpu: int, event_type: int, data: int = 0) -> None:
        """Deliver an event to every event set that registered this GPU for this type, as NVML does."""
        with self._lock:
            for event_set in self.event_sets:
                if event_set.masks.get(gpu, 0) & event_type:
                    event_set.pending.put(FakeEventData(FakeHandle(gpu), event_type, data))

    def inject_xid(self, gpu: int, xid: int) -> None:
        self.inject_event(gpu, real.nvmlEventTypeXidCriticalError, xid)

    def lose_gpu(self, gpu: int) -> None:
        self.gpus[gpu].lost = True

    def set_unsupported(self, gpu: int, *functions: str) -> None:
        self.gpus[gpu].unsupported.update(functions)

    def registered_mask(self, gpu: int) -> int:
        return max((event_set.masks.get(gpu, 0) for event_set in self.event_sets), default=0)

    # --- helpers ----------------------------------------------------------------------------------------

    def _require_init(self) -> None:
        if not self.initialized:
            raise nvml_error(real.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: FakeHandle, function: str) -> FakeGpu:
        self._require_init()
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self.gpus):
            raise nvml_error(real.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise nvml_error(real.NVML_ERROR_GPU_IS_LOST)
        if function in gpu.unsupported:
            raise nvml_error(real.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    # --- the NVML API -----------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if not self.library_present:
            # What the real binding does when CDLL("libnvidia-ml.so.1") fails.
            raise nvml_error(real.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialized = True

    def nvmlInitWithFlags(self, flags: int) -> None:
        self.nvmlInit()

    def nvmlShutdown(self) -> None:
        self._require_init()
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._require_init()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._require_init()
        if not 0 <= index < len(self.gpus):
            raise nvml_error(real.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    def nvmlDeviceGetIndex(self, handle: FakeHandle) -> int:
        return self._gpu(handle, "nvmlDeviceGetIndex").index

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> FakePciInfo:
        gpu = self._gpu(handle, "nvmlDeviceGetPciInfo")
        domain, bus, rest = gpu.pci_bus_id.split(":")
        return FakePciInfo(gpu.pci_bus_id, int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16))

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTemperature")
        if sensor != real.NVML_TEMPERATURE_GPU:
            raise nvml_error(real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetTemperatureV(
        self, handle: FakeHandle, sensor: int, version: int = real.nvmlTemperature_v1
    ) -> int:
        self._gpu(handle, "nvmlDeviceGetTemperatureV")
        return self.nvmlDeviceGetTemperature(handle, sensor)

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter_type: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        return gpu.ecc.get((error_type, counter_type), 0)

    def nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> tuple[int, int, int, int]:
        return self._gpu(handle, "nvmlDeviceGetRemappedRows").remapped_rows

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: FakeHandle) -> int:
        return self._gpu(handle, "nvmlDeviceGetRetiredPagesPendingStatus").retired_pages_pending

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").clocks_event_reasons

    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeHandle) -> int:
        return self._gpu(handle, "nvmlDeviceGetPcieReplayCounter").pcie_replays

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetNvLinkState")
        if not gpu.nvlink:
            raise nvml_error(real.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < FAKE_NVLINK_PORTS:
            raise nvml_error(real.NVML_ERROR_INVALID_ARGUMENT)
        return real.NVML_FEATURE_ENABLED if link in gpu.nvlink else real.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: FakeHandle, link: int, counter: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetNvLinkErrorCounter")
        if link not in gpu.nvlink:
            raise nvml_error(real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.nvlink[link].get(counter, 0)

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, field_ids: Iterable[int]) -> list[FakeFieldValue]:
        gpu = self._gpu(handle, "nvmlDeviceGetFieldValues")
        return [self._field(gpu, field_id) for field_id in field_ids]

    def _field(self, gpu: FakeGpu, field_id: int) -> FakeFieldValue:
        known: dict[int, tuple[int, float | None]] = {
            real.NVML_FI_DEV_MEMORY_TEMP: (real.NVML_VALUE_TYPE_UNSIGNED_INT, gpu.memory_temperature_c),
            real.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: (
                real.NVML_VALUE_TYPE_UNSIGNED_INT,
                gpu.recovery_action,
            ),
        }
        value_type, number = known.get(field_id, (real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, None))
        status = real.NVML_SUCCESS if number is not None else real.NVML_ERROR_NOT_SUPPORTED
        return FakeFieldValue(field_id, 0, 0, 0, value_type, status, FakeValue(number or 0))

    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeHandle) -> int:
        return self._gpu(handle, "nvmlDeviceGetSupportedEventTypes").supported_events

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._require_init()
        event_set = FakeEventSet()
        with self._lock:
            self.event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, event_types: int, event_set: FakeEventSet) -> None:
        gpu = self._gpu(handle, "nvmlDeviceRegisterEvents")
        # Real NVML refuses the whole mask when any bit is unsupported.
        if event_types & ~gpu.supported_events:
            raise nvml_error(real.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            event_set.masks[gpu.index] = event_set.masks.get(gpu.index, 0) | event_types

    def nvmlEventSetWait_v2(self, event_set: FakeEventSet, timeoutms: int) -> FakeEventData:
        self._require_init()
        try:
            return event_set.pending.get(timeout=timeoutms / 1000)
        except queue.Empty:
            raise nvml_error(real.NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetWait(self, event_set: FakeEventSet, timeoutms: int) -> FakeEventData:
        return self.nvmlEventSetWait_v2(event_set, timeoutms)

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        event_set.freed = True


_copy_binding_names(FakeNvml)


def make_gpu(index: int, **overrides: Any) -> FakeGpu:
    """A healthy GPU with distinct, recognisable identity values."""
    base: dict[str, Any] = {
        "index": index,
        "uuid": f"GPU-{index:08x}-aaaa-bbbb-cccc-{index:012x}",
        "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "temperature_c": 40 + index,
        "memory_temperature_c": 50 + index,
        "power_mw": 71_234 + index * 1000,
    }
    base.update(overrides)
    return FakeGpu(**base)
