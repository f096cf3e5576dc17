"""Per-GPU features at each instant, from a time-indexed frame of dcgm-exporter fields.

Pure: numpy and pandas only — no I/O, no clock, no asyncio — so training, scoring and backtests compute
exactly the same numbers from the same frame. A field that is missing from the frame gives NaN features,
never zeros; `missing_fields` names the fields a frame lacks.

- `fields`: the DCGM field names read, their 4.6 aliases, XID groups, throttle bits, exporter field groups;
- `frame`: input normalisation (host spellings, identities, sorting); `series`: the sorted view and the
  windowed building blocks (reset-aware counters, prefix-sum windows, peers, persistence);
- `memory`, `thermal`, `links`, `events`: one family of features each; `catalog`: `FEATURES` in order,
  the fields each reads, `missing_fields`; `compute`: `compute_features`.

The features prefer what stays meaningful from one fleet to the next (issue 12): change against the GPU's
own history, its node peers at the same instant, acceleration, persistence and distinct events, rather
than the presence of a counter, because healthy fleets differ in their background noise.
"""

from app.predict.features.catalog import (
    FEATURE_SOURCES,
    FEATURES,
    missing_fields,
    present_fields,
    source_fields,
)
from app.predict.features.compute import compute_features
from app.predict.features.events import MAX_HOURS_SINCE_RESET
from app.predict.features.fields import (
    ALIASES,
    DBE_AGG,
    DBE_VOL,
    DCGM_BLANK_MIN,
    ENERGY,
    EQUIVALENT,
    FIELD_GROUPS,
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
    SBE_VOL,
    SOURCE_METRICS,
    THERMAL_VIOLATION,
    THROTTLE,
    VOLATILE_COUNTERS,
    XID,
    XID_HARDWARE,
    XID_IGNORE,
    XID_WORKLOAD,
)
from app.predict.features.frame import (
    HOST_COLUMNS,
    KEY_COLUMNS,
    Normalised,
    host_column,
    normalise,
    timestamps,
)

__all__ = [
    "ALIASES",
    "DBE_AGG",
    "DBE_VOL",
    "DCGM_BLANK_MIN",
    "ENERGY",
    "EQUIVALENT",
    "FEATURES",
    "FEATURE_SOURCES",
    "FIELD_GROUPS",
    "GPU_TEMP",
    "GPU_UTIL",
    "HOST_COLUMNS",
    "KEY_COLUMNS",
    "MAX_HOURS_SINCE_RESET",
    "MEMORY_TEMP",
    "NVLINK_CRC_DATA",
    "NVLINK_CRC_FLIT",
    "NVLINK_RECOVERY",
    "NVLINK_REPLAY",
    "PCIE_REPLAY",
    "POWER_VIOLATION",
    "REMAP_FAILURE",
    "REMAP_PENDING",
    "RETIRED_DBE",
    "RETIRED_PENDING",
    "RETIRED_SBE",
    "ROWS_CORRECTABLE",
    "ROWS_UNCORRECTABLE",
    "SBE_AGG",
    "SBE_VOL",
    "SOURCE_METRICS",
    "THERMAL_VIOLATION",
    "THROTTLE",
    "VOLATILE_COUNTERS",
    "XID",
    "XID_HARDWARE",
    "XID_IGNORE",
    "XID_WORKLOAD",
    "Normalised",
    "compute_features",
    "host_column",
    "missing_fields",
    "normalise",
    "present_fields",
    "source_fields",
    "timestamps",
]
