"""One poll of one GPU's health counters through NVML, as a `GpuReading` keyed by dcgm-exporter field.

A field the GPU or driver does not support is left out (NotSupported is normal: ECC off, no NVLink, no HBM
sensor, pre-Ampere remapper); an unexpected NVML error on one field is logged once and also left out. Only
GPU_IS_LOST stops a read, as `GpuLostError`. No events, no labels, no exposition formatting here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from app.agent import nvml as nvml_port
from app.agent.devices import Gpu
from app.agent.model import Field, GpuReading

log = logging.getLogger(__name__)

T = TypeVar("T")

# DCGM's "blank" sentinels (e.g. 9223372036854775794) and NVML's garbage for an absent sensor.
_MAX_PLAUSIBLE_TEMP_C = 1000


class GpuReader:
    """Reads GPUs; the only state is which (GPU, field) gaps it already logged, so logs stay quiet."""

    def __init__(self, nvml: nvml_port.NvmlLibrary) -> None:
        self._nvml = nvml
        self._logged: set[tuple[int, str]] = set()

    def read(self, gpu: Gpu) -> GpuReading:
        """All supported fields of one GPU; raises GpuLostError when NVML says the GPU is gone."""
        handle = gpu.handle
        if handle is None:
            raise nvml_port.GpuLostError(f"GPU {gpu.identity.index} has no NVML handle")
        values: dict[Field, int | float] = {}
        for part in (
            self._temperatures,
            self._power,
            self._ecc,
            self._remapper,
            self._retirement,
            self._clocks_and_pcie,
            self._nvlink,
        ):
            values.update(part(gpu.identity.index, handle))
        return GpuReading(gpu.identity, values)

    def _get(self, what: str, call: Callable[[], T], *, gpu: int) -> T | None:
        nvml = self._nvml
        try:
            return call()
        except nvml.NVMLError_GpuIsLost as exc:
            raise nvml_port.GpuLostError(str(exc)) from exc
        except nvml.NVMLError as exc:
            if (gpu, what) not in self._logged:
                self._logged.add((gpu, what))
                level = logging.DEBUG if nvml_port.is_unsupported(nvml, exc) else logging.WARNING
                log.log(level, "GPU %d: %s unavailable (%s); skipping it", gpu, what, exc)
            return None

    def _temperatures(self, gpu: int, handle: object) -> dict[Field, int | float]:
        nvml = self._nvml
        sensor = nvml.NVML_TEMPERATURE_GPU
        # The versioned call replaces the deprecated plain one; older drivers and bindings lack it.
        versioned = getattr(nvml, "nvmlDeviceGetTemperatureV", None)
        temp = None
        if versioned is not None:
            temp = nvml_port.call_optional(nvml, lambda: versioned(handle, sensor))
        if temp is None:
            temp = self._get(
                "GPU temperature", lambda: nvml.nvmlDeviceGetTemperature(handle, sensor), gpu=gpu
            )
        memory = self._get(
            "memory temperature",
            lambda: nvml_port.read_field(nvml, handle, field_id=nvml.NVML_FI_DEV_MEMORY_TEMP),
            gpu=gpu,
        )
        values: dict[Field, int | float] = {}
        if temp is not None:
            values[Field.GPU_TEMP] = int(temp)
        if memory is not None and 0 <= memory < _MAX_PLAUSIBLE_TEMP_C:
            values[Field.MEMORY_TEMP] = int(memory)
        return values

    def _power(self, gpu: int, handle: object) -> dict[Field, int | float]:
        milliwatts = self._get("power", lambda: self._nvml.nvmlDeviceGetPowerUsage(handle), gpu=gpu)
        return {} if milliwatts is None else {Field.POWER_USAGE: milliwatts / 1000.0}

    def _ecc(self, gpu: int, handle: object) -> dict[Field, int | float]:
        nvml = self._nvml
        plan = (
            (Field.ECC_SBE_VOL_TOTAL, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC),
            (Field.ECC_DBE_VOL_TOTAL, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
            (Field.ECC_SBE_AGG_TOTAL, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_AGGREGATE_ECC),
            (Field.ECC_DBE_AGG_TOTAL, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC),
        )
        values: dict[Field, int | float] = {}
        for field, error_type, counter_type in plan:
            count = self._get(
                f"ECC {field.name}",
                partial(nvml.nvmlDeviceGetTotalEccErrors, handle, error_type, counter_type),
                gpu=gpu,
            )
            if count is not None:
                values[field] = int(count)
        return values

    def _remapper(self, gpu: int, handle: object) -> dict[Field, int | float]:
        rows = self._get("remapped rows", lambda: self._nvml.nvmlDeviceGetRemappedRows(handle), gpu=gpu)
        if rows is None:
            return {}
        corrected, uncorrected, pending, failure = rows
        return {
            Field.CORRECTABLE_REMAPPED_ROWS: int(corrected),
            Field.UNCORRECTABLE_REMAPPED_ROWS: int(uncorrected),
            Field.ROW_REMAP_PENDING: int(pending),
            Field.ROW_REMAP_FAILURE: int(failure),
        }

    def _retirement(self, gpu: int, handle: object) -> dict[Field, int | float]:
        pending = self._get(
            "retired pages pending",
            lambda: self._nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle),
            gpu=gpu,
        )
        return {} if pending is None else {Field.RETIRED_PENDING: int(pending)}

    def _clocks_and_pcie(self, gpu: int, handle: object) -> dict[Field, int | float]:
        nvml = self._nvml
        # "ClocksEventReasons" replaced the deprecated "ClocksThrottleReasons"; old bindings only have that.
        reasons_call = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        values: dict[Field, int | float] = {}
        if reasons_call is not None:
            reasons = self._get("clock event reasons", lambda: reasons_call(handle), gpu=gpu)
            if reasons is not None:
                values[Field.CLOCK_THROTTLE_REASONS] = int(reasons)
        replays = self._get(
            "PCIe replay counter", lambda: nvml.nvmlDeviceGetPcieReplayCounter(handle), gpu=gpu
        )
        if replays is not None:
            values[Field.PCIE_REPLAY_COUNTER] = int(replays)
        return values

    def _nvlink(self, gpu: int, handle: object) -> dict[Field, int | float]:
        """Per-link DL error counters summed over active links; NVML's all-link totals as the fallback."""
        nvml = self._nvml
        counters = (
            (Field.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT),
            (Field.NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, nvml.NVML_NVLINK_ERROR_DL_CRC_DATA),
            (Field.NVLINK_REPLAY_ERROR_COUNT_TOTAL, nvml.NVML_NVLINK_ERROR_DL_REPLAY),
            (Field.NVLINK_RECOVERY_ERROR_COUNT_TOTAL, nvml.NVML_NVLINK_ERROR_DL_RECOVERY),
        )
        totals: dict[Field, int | float] = {}
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            # NotSupported (no NVLink) or InvalidArgument (past the last link) both mean "no such link".
            active = nvml_port.call_optional(nvml, partial(nvml.nvmlDeviceGetNvLinkState, handle, link))
            if not active:
                continue
            for field, counter in counters:
                count = nvml_port.call_optional(
                    nvml, partial(nvml.nvmlDeviceGetNvLinkErrorCounter, handle, link, counter)
                )
                if count is not None:
                    totals[field] = totals.get(field, 0) + int(count)
        return totals or self._nvlink_totals(handle)

    def _nvlink_totals(self, handle: object) -> dict[Field, int | float]:
        nvml = self._nvml
        ids = {
            Field.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: nvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
            Field.NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: nvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
            Field.NVLINK_REPLAY_ERROR_COUNT_TOTAL: nvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
            Field.NVLINK_RECOVERY_ERROR_COUNT_TOTAL: nvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
        }
        items = nvml_port.call_optional(
            nvml, lambda: nvml.nvmlDeviceGetFieldValues(handle, list(ids.values()))
        )
        if not items:
            return {}
        values: dict[Field, int | float] = {}
        for field, item in zip(ids, items, strict=False):
            number = nvml_port.field_number(nvml, item)
            if number is not None:
                values[field] = int(number)
        return values
