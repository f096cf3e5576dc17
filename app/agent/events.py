"""The NVML event watcher: one dedicated thread blocked in `nvmlEventSetWait`, handing events over at once.

NVML's wait is a blocking C call, so it gets a thread of its own; everything it learns goes out through the
`deliver` callback, which the caller makes thread-safe (`loop.call_soon_threadsafe`). This module turns raw
NVML event data into `GpuEvent`s and nothing more: no ids, pods, spooling or pushing, and no deduplication.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from app.agent import nvml as nvml_port
from app.agent import xid as xid_names
from app.agent.devices import Gpu
from app.agent.model import EventKind, GpuEvent, GpuIdentity

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def event_kinds(nvml: nvml_port.NvmlLibrary) -> Mapping[int, EventKind]:
    """The NVML event type bits the agent watches, and the wire `kind` each one becomes."""
    return {
        nvml.nvmlEventTypeXidCriticalError: EventKind.XID,
        nvml.nvmlEventTypeDoubleBitEccError: EventKind.DOUBLE_BIT_ECC,
        nvml.nvmlEventTypeDramRetirementEvent: EventKind.DRAM_RETIREMENT,
        nvml.nvmlEventTypeDramRetirementFailure: EventKind.DRAM_RETIREMENT_FAILURE,
        nvml.nvmlEventTypeGpuUnavailableError: EventKind.GPU_UNAVAILABLE,
        nvml.nvmlEventTypeGpuRecoveryAction: EventKind.RECOVERY_ACTION,
    }


@dataclass(frozen=True, slots=True)
class Registration:
    """What one GPU accepted: the watched mask, and whether it could be registered at all."""

    gpu: int
    mask: int
    error: str | None = None


def register_gpu(nvml: nvml_port.NvmlLibrary, event_set: object, *, gpu: Gpu, wanted: int) -> Registration:
    """Register the wanted bits the GPU supports; if the combined mask is refused, bit by bit."""
    index = gpu.identity.index
    if gpu.handle is None:
        return Registration(index, 0, "no NVML handle")
    handle = gpu.handle
    supported = nvml_port.call_optional(nvml, lambda: nvml.nvmlDeviceGetSupportedEventTypes(handle))
    mask = wanted & supported if supported is not None else wanted
    try:
        nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
        return Registration(index, mask)
    except nvml.NVMLError as exc:
        first_error = str(exc)
    registered = 0
    for bit in (1 << shift for shift in range(64)):
        if not mask & bit:
            continue
        try:
            nvml.nvmlDeviceRegisterEvents(handle, bit, event_set)
            registered |= bit
        except nvml.NVMLError:
            continue
    return Registration(index, registered, None if registered else first_error)


class EventWatcher:
    """Owns the event set and the waiting thread. `start` registers every GPU; `stop` joins the thread."""

    def __init__(
        self,
        nvml: nvml_port.NvmlLibrary,
        gpus: Sequence[Gpu],
        *,
        deliver: Callable[[GpuEvent], None],
        wait_ms: int = 1000,
        clock: Clock = utc_now,
    ) -> None:
        self._nvml = nvml
        self._gpus = tuple(gpus)
        self._deliver = deliver
        self._wait_ms = wait_ms
        self._clock = clock
        self._kinds = event_kinds(nvml)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: object | None = None

    def start(self) -> tuple[Registration, ...]:
        """Register every GPU and start waiting; without an event set, counters and loss polling go on."""
        nvml = self._nvml
        try:
            self._event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            log.error("NVML events unavailable (%s): XIDs will only show up as GPU loss or not at all", exc)
            return ()
        wanted = 0
        for bit in self._kinds:
            wanted |= bit
        registrations = tuple(
            register_gpu(nvml, self._event_set, gpu=gpu, wanted=wanted) for gpu in self._gpus
        )
        for item in registrations:
            if item.error is not None:
                log.warning("GPU %d: no NVML events registered (%s)", item.gpu, item.error)
            elif item.mask != wanted:
                log.info(
                    "GPU %d: watching NVML events 0x%x of 0x%x (rest unsupported)",
                    item.gpu,
                    item.mask,
                    wanted,
                )
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        self._thread.start()
        return registrations

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                return  # still inside nvmlEventSetWait: freeing the set under it would be unsafe
        if self._event_set is not None:
            nvml_port.call_optional(self._nvml, lambda: self._nvml.nvmlEventSetFree(self._event_set))
            self._event_set = None

    def _run(self) -> None:
        nvml = self._nvml
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
        while not self._stopping.is_set():
            try:
                data = wait(self._event_set, self._wait_ms)
            except nvml.NVMLError_Timeout:
                continue
            except nvml.NVMLError as exc:
                # GPU_IS_LOST here names no GPU; the poller finds which one. Back off so we never spin.
                log.warning("waiting for NVML events failed: %s", exc)
                self._stopping.wait(self._wait_ms / 1000)
                continue
            try:
                event = self._convert(data)
            except Exception:
                log.exception("could not read an NVML event")
                continue
            if event is not None:
                self._deliver(event)

    def _convert(self, data: nvml_port.EventData) -> GpuEvent | None:
        kind = self._kinds.get(int(data.eventType))
        if kind is None:
            return None
        gpu = self._locate(data.device)
        if gpu is None:
            log.warning("NVML event 0x%x from a device the agent does not know; dropped", data.eventType)
            return None
        identity = gpu.identity
        where = f"GPU {identity.index} ({identity.uuid or 'unknown UUID'})"
        xid: int | None = None
        action: int | None = None
        if kind is EventKind.XID:
            xid = int(data.eventData)
            message = f"XID {xid} ({xid_names.describe_xid(xid)}) on {where}"
        elif kind is EventKind.RECOVERY_ACTION:
            action = self._recovery_action(gpu)
            message = (
                f"driver requests recovery action: {xid_names.describe_recovery_action(action)} on {where}"
            )
        else:
            message = f"{_DESCRIPTIONS[kind]} on {where}"
        return GpuEvent(
            kind=kind,
            gpu=identity,
            occurred_at=self._clock(),
            message=message,
            xid=xid,
            recovery_action=action,
        )

    def _locate(self, device: object) -> Gpu | None:
        """The known GPU behind the event's handle: by handle (works even once the GPU is lost), then by
        UUID, then by index, else the only GPU there is."""
        for gpu in self._gpus:
            if gpu.handle is not None and same_handle(gpu.handle, device):
                return gpu
        nvml = self._nvml
        try:
            uuid = nvml_port.call_optional(nvml, lambda: nvml.nvmlDeviceGetUUID(device))
            index = nvml_port.call_optional(nvml, lambda: nvml.nvmlDeviceGetIndex(device))
        except nvml_port.GpuLostError:
            uuid, index = None, None
        for gpu in self._gpus:
            if uuid is not None and gpu.identity.uuid == nvml_port.as_text(uuid):
                return gpu
        for gpu in self._gpus:
            if index is not None and gpu.identity.index == index:
                return gpu
        return self._gpus[0] if len(self._gpus) == 1 else None

    def _recovery_action(self, gpu: Gpu) -> int | None:
        if gpu.handle is None:
            return None
        handle = gpu.handle
        try:
            value = nvml_port.read_field(
                self._nvml, handle, field_id=self._nvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
            )
        except nvml_port.GpuLostError:
            return None
        return int(value) if value is not None and 0 <= value <= 7 else None


_DESCRIPTIONS: Mapping[EventKind, str] = {
    EventKind.DOUBLE_BIT_ECC: "double-bit ECC error",
    EventKind.DRAM_RETIREMENT: "DRAM retirement event (row remap or page retirement)",
    EventKind.DRAM_RETIREMENT_FAILURE: "DRAM retirement failure",
    EventKind.GPU_UNAVAILABLE: "GPU unavailable",
}


def same_handle(left: object, right: object) -> bool:
    """NVML device handles are ctypes pointers: two wrappers of one device differ as objects but not in
    the address they hold. Fakes compare by value."""
    if left is right or left == right:
        return True
    return _address(left) is not None and _address(left) == _address(right)


def _address(handle: object) -> int | None:
    try:
        return ctypes.cast(cast(Any, handle), ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def describe_lost(gpu: GpuIdentity) -> str:
    return (
        f"GPU {gpu.index} ({gpu.uuid or 'unknown UUID'}) is lost: NVML answers GPU_IS_LOST "
        "(reported as XID 79, GPU has fallen off the bus)"
    )
