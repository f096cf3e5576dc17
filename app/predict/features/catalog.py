"""The model's inputs: `FEATURES` in a fixed order, the dcgm-exporter fields each one reads, and which of
those fields a frame lacks (`missing_fields`: what `serve`, `score` and `backtest` tell the operator)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from app.predict.features import events, links, memory, thermal
from app.predict.features.fields import (
    ALIASES,
    DBE_AGG,
    DCGM_BLANK_MIN,
    ENERGY,
    EQUIVALENT,
    GPU_TEMP,
    GPU_UTIL,
    MEMORY_TEMP,
    NVLINK_CRC_DATA,
    NVLINK_CRC_FLIT,
    NVLINK_RECOVERY,
    NVLINK_REPLAY,
    PCIE_REPLAY,
    POWER_VIOLATION,
    REMAP_FAILURE,
    REMAP_PENDING,
    RETIRED_DBE,
    RETIRED_PENDING,
    RETIRED_SBE,
    ROWS_CORRECTABLE,
    ROWS_UNCORRECTABLE,
    SBE_AGG,
    SOURCE_METRICS,
    THERMAL_VIOLATION,
    THROTTLE,
    XID,
)

FEATURES: tuple[str, ...] = (*memory.FEATURES, *thermal.FEATURES, *links.FEATURES, *events.FEATURES)

# The fields each feature reads, by name prefix (the first match wins); a field in `EQUIVALENT` may be
# replaced by its equivalent. The data-quality features read whatever is there.
_SOURCES_BY_PREFIX: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sbe_", (SBE_AGG,)),
    ("dbe_", (DBE_AGG,)),
    ("correctable_remapped_rows", (ROWS_CORRECTABLE,)),
    ("uncorrectable_remapped_rows", (ROWS_UNCORRECTABLE,)),
    ("row_remap_pending", (REMAP_PENDING,)),
    ("row_remap_failure", (REMAP_FAILURE,)),
    ("retired_pages_pending", (RETIRED_PENDING,)),
    ("retired_pages", (RETIRED_SBE, RETIRED_DBE)),
    ("gpu_temp_", (GPU_TEMP, GPU_UTIL)),
    ("mem_gpu_temp_gap", (MEMORY_TEMP, GPU_TEMP, GPU_UTIL)),
    ("mem_temp_", (MEMORY_TEMP, GPU_UTIL)),
    ("util_", (GPU_UTIL,)),
    ("thermal_throttle", (THROTTLE,)),
    ("hw_slowdown", (THROTTLE,)),
    ("power_throttle", (THROTTLE,)),
    ("thermal_violation", (THERMAL_VIOLATION,)),
    ("power_violation", (POWER_VIOLATION,)),
    ("pcie_", (PCIE_REPLAY,)),
    ("nvlink_crc_", (NVLINK_CRC_FLIT, NVLINK_CRC_DATA)),
    ("nvlink_replay", (NVLINK_REPLAY,)),
    ("nvlink_recovery", (NVLINK_RECOVERY,)),
    ("xid_", (XID,)),
    ("hours_since_reset", (ENERGY,)),
    ("missing_", ()),
)


def _sources(name: str) -> tuple[str, ...]:
    return next(fields for prefix, fields in _SOURCES_BY_PREFIX if name.startswith(prefix))


FEATURE_SOURCES: Mapping[str, tuple[str, ...]] = {name: _sources(name) for name in FEATURES}


def source_fields(feature_names: Iterable[str] = FEATURES) -> tuple[str, ...]:
    """The dcgm-exporter fields these features read, in `SOURCE_METRICS` order."""
    wanted = {field for name in feature_names for field in FEATURE_SOURCES.get(name, ())}
    return tuple(name for name in SOURCE_METRICS if name in wanted)


def present_fields(frame: pd.DataFrame) -> frozenset[str]:
    """The source fields the frame carries (under either name) with at least one real value."""
    found: set[str] = set()
    for column in frame.columns:
        name = ALIASES.get(column, column)
        if name in SOURCE_METRICS and name not in found:
            values = pd.to_numeric(frame[column], errors="coerce")
            if ((values < DCGM_BLANK_MIN) & values.notna()).any():
                found.add(name)
    return frozenset(found)


def missing_fields(frame: pd.DataFrame, feature_names: Iterable[str] = FEATURES) -> tuple[str, ...]:
    """The fields the model's features read that the frame lacks — absent, or blank in every row — in
    `SOURCE_METRICS` order. Their features are NaN (missing, never zero), so the model scores without
    them; an operator should know, since a precursor on such a field is invisible."""
    present = present_fields(frame)
    return tuple(
        name
        for name in source_fields(feature_names)
        if not any(other in present for other in EQUIVALENT.get(name, (name,)))
    )
