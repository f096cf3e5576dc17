"""The NVML port: exactly the part of the `pynvml` module (nvidia-ml-py) the agent calls, as a Protocol.

Production passes the real `pynvml` module, tests pass a scripted fake with the same names, so no code here
or elsewhere in the agent imports `pynvml` at module level or patches `sys.modules`. This module also turns
NVML's error classes into the three outcomes the agent cares about (value, unsupported, GPU lost). It must
not hold state or make policy decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class PciInfo(Protocol):
    busId: str | bytes  # NVML's own field names, hence camelCase


class FieldValueUnion(Protocol):
    dVal: float
    uiVal: int
    ulVal: int
    ullVal: int
    sllVal: int
    siVal: int
    usVal: int


class FieldValue(Protocol):
    fieldId: int
    valueType: int
    nvmlReturn: int
    value: FieldValueUnion


class EventData(Protocol):
    """`c_nvmlEventData_t`: `eventData` carries the XID for XID events and is 0 for every other type."""

    device: object
    eventType: int
    eventData: int


class NvmlLibrary(Protocol):
    """The subset of `pynvml` in use. Names are NVML's own, so they match the real module one to one."""

    NVMLError: type[Exception]
    NVMLError_GpuIsLost: type[Exception]
    NVMLError_NotSupported: type[Exception]
    NVMLError_LibraryNotFound: type[Exception]
    NVMLError_DriverNotLoaded: type[Exception]
    NVMLError_NoPermission: type[Exception]
    NVMLError_Timeout: type[Exception]
    NVMLError_FunctionNotFound: type[Exception]

    NVML_SUCCESS: int
    NVML_ERROR_GPU_IS_LOST: int
    NVML_TEMPERATURE_GPU: int
    NVML_MEMORY_ERROR_TYPE_CORRECTED: int
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int
    NVML_VOLATILE_ECC: int
    NVML_AGGREGATE_ECC: int
    NVML_NVLINK_MAX_LINKS: int
    NVML_NVLINK_ERROR_DL_REPLAY: int
    NVML_NVLINK_ERROR_DL_RECOVERY: int
    NVML_NVLINK_ERROR_DL_CRC_FLIT: int
    NVML_NVLINK_ERROR_DL_CRC_DATA: int
    NVML_FI_DEV_MEMORY_TEMP: int
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: int
    NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: int
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: int
    NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: int
    NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: int
    NVML_VALUE_TYPE_DOUBLE: int
    NVML_VALUE_TYPE_UNSIGNED_INT: int
    NVML_VALUE_TYPE_UNSIGNED_LONG: int
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: int
    NVML_VALUE_TYPE_SIGNED_LONG_LONG: int
    NVML_VALUE_TYPE_SIGNED_INT: int
    NVML_VALUE_TYPE_UNSIGNED_SHORT: int

    nvmlEventTypeDoubleBitEccError: int
    nvmlEventTypeXidCriticalError: int
    nvmlEventTypeDramRetirementEvent: int
    nvmlEventTypeDramRetirementFailure: int
    nvmlEventTypeGpuUnavailableError: int
    nvmlEventTypeGpuRecoveryAction: int

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> object: ...
    def nvmlDeviceGetIndex(self, handle: object) -> int: ...
    def nvmlDeviceGetUUID(self, handle: object) -> str: ...
    def nvmlDeviceGetName(self, handle: object) -> str: ...
    def nvmlDeviceGetPciInfo(self, handle: object) -> PciInfo: ...
    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: object) -> int: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: object, error_type: int, counter_type: int) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: object) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: object) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int: ...
    def nvmlDeviceGetPcieReplayCounter(self, handle: object) -> int: ...
    def nvmlDeviceGetNvLinkState(self, handle: object, link: int) -> int: ...
    def nvmlDeviceGetNvLinkErrorCounter(self, handle: object, link: int, counter: int) -> int: ...
    def nvmlDeviceGetFieldValues(self, handle: object, field_ids: list[int]) -> Sequence[FieldValue]: ...
    def nvmlDeviceGetSupportedEventTypes(self, handle: object) -> int: ...
    def nvmlDeviceRegisterEvents(self, handle: object, event_types: int, event_set: object) -> None: ...
    def nvmlEventSetCreate(self) -> object: ...
    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> EventData: ...
    def nvmlEventSetFree(self, event_set: object) -> None: ...


class GpuLostError(Exception):
    """NVML answered GPU_IS_LOST: the GPU fell off the bus (XID 79); nothing more can be read from it."""


class NvmlUnavailableError(Exception):
    """NVML could not start; `str()` is one line for the operator."""


def call_optional(nvml: NvmlLibrary, call: Callable[[], T]) -> T | None:
    """Run one NVML call: its value, None when the GPU or driver can't answer, GpuLostError when lost."""
    try:
        return call()
    except nvml.NVMLError_GpuIsLost as exc:
        raise GpuLostError(str(exc)) from exc
    except nvml.NVMLError:
        return None


def is_unsupported(nvml: NvmlLibrary, error: BaseException) -> bool:
    """NotSupported, or a symbol this driver lacks: an expected gap, never worth a warning."""
    return isinstance(error, (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound))


def start_nvml(nvml: NvmlLibrary) -> str:
    """`nvmlInit` with an operator-readable failure; returns the driver version for the exporter label."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError_LibraryNotFound:
        raise NvmlUnavailableError(
            "NVML library libnvidia-ml.so.1 not found: is the NVIDIA driver installed and its library "
            "mounted into this container?"
        ) from None
    except nvml.NVMLError_DriverNotLoaded:
        raise NvmlUnavailableError("NVIDIA kernel driver is not loaded on this node") from None
    except nvml.NVMLError_NoPermission:
        raise NvmlUnavailableError("no permission to use NVML (run the agent privileged)") from None
    except nvml.NVMLError as exc:
        raise NvmlUnavailableError(f"NVML failed to start: {exc}") from None
    version = call_optional(nvml, nvml.nvmlSystemGetDriverVersion)
    return as_text(version) if version is not None else ""


def as_text(value: str | bytes) -> str:
    """Old nvidia-ml-py releases return bytes for strings; current ones return str."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def field_number(nvml: NvmlLibrary, item: FieldValue) -> int | float | None:
    """The value of one `nvmlDeviceGetFieldValues` entry; None for a per-field error other than GPU lost."""
    if item.nvmlReturn == nvml.NVML_ERROR_GPU_IS_LOST:
        raise GpuLostError("GPU is lost")
    if item.nvmlReturn != nvml.NVML_SUCCESS:
        return None
    kind = item.valueType
    value = item.value
    if kind == nvml.NVML_VALUE_TYPE_DOUBLE:
        return float(value.dVal)
    by_type: dict[int, Callable[[], int]] = {
        nvml.NVML_VALUE_TYPE_UNSIGNED_INT: lambda: value.uiVal,
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: lambda: value.ulVal,
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: lambda: value.ullVal,
        nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: lambda: value.sllVal,
        nvml.NVML_VALUE_TYPE_SIGNED_INT: lambda: value.siVal,
        nvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: lambda: value.usVal,
    }
    getter = by_type.get(kind)
    return int(getter()) if getter is not None else None


def read_field(nvml: NvmlLibrary, handle: object, *, field_id: int) -> int | float | None:
    """One NVML field value (`NVML_FI_*`), None when unsupported; GpuLostError when the GPU is gone."""
    values = call_optional(nvml, lambda: nvml.nvmlDeviceGetFieldValues(handle, [field_id]))
    if not values:
        return None
    return field_number(nvml, values[0])
