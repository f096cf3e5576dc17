"""Which exporter fields the recorded path reads, and how: what it knows of each field's presence per GPU.

A series answered costs Prometheus and Sickbay about the same whatever it holds, so the recorded path
reads per GPU only what the features need (`recorded_reader`):

- the fleet's fields come from Prometheus' label-values API (`Reader.metric_names`: the metric names
  with samples around the instants, an index lookup): a field no series is named after has no records
  to read and its features are NaN;
- the GPU temperature, raw at the instants, finds every GPU (a new one has no records yet);
- a few fields are read for their values (`VALUE_FIELDS`: remapped rows, pending flags, retired pages),
  sparse: 0 on almost every GPU; which GPUs have each of them comes from the label-values API too (the
  `UUID`s of the field's series: `lacking_by_uuid`), an index lookup where a join of the field's series
  with the temperature's cost Prometheus ~20x the CPU (docs/benchmarks.md);
- records that count events (increases, active-hour shares, episodes, rows in a throttle class:
  `sparse`) are read sparse too: the non-zero values, and NaN for a GPU without the record (a field it
  does not export stays missing, never 0: `recorded_reads`).

The instant frame (`frame_values`) then holds, per field, the values read, or `PRESENT` where the GPU
has the field (what `features.present_fields` and the boards' `present` read), or NaN. A regular GPU has its fields at every row of the week or not at all, so a record at the
instants scored stands for the field being there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set

import numpy as np
import numpy.typing as npt

from app.predict import features
from app.predict.features import fields as f

Array = npt.NDArray[np.float64]
VALUE_FIELDS: tuple[str, ...] = (
    f.ROWS_CORRECTABLE,
    f.ROWS_UNCORRECTABLE,
    f.REMAP_PENDING,
    f.REMAP_FAILURE,
    f.RETIRED_PENDING,
    f.RETIRED_SBE,
    f.RETIRED_DBE,
)
# The records' operations that count events, 0 on a quiet GPU (`recorded_rules`' names end in them).
_COUNTING = ("increase", "active1h", "episodes", "resets")
_CLASS_ROWS = ("hardware_count_over_time", "thermal_count_over_time", "power_count_over_time")
PRESENT = 1.0  # a field known only to be there (one of its records has a value), in the instant frame
NAMES_MATCH = '{__name__=~"DCGM_FI_.+"}'  # the exporter's series, for the label-values API
# The labels naming a GPU's UUID: dcgm-exporter's, and the lower-case spelling `promql.gpu_identity` reads too.
UUID_LABELS = ("UUID", "uuid")


def sparse(record: str) -> bool:
    """Whether a record counts events (read sparse: 0 on almost every GPU)."""
    op = record.rsplit(":", maxsplit=1)[-1]
    return op.startswith(_COUNTING) or op.startswith(_CLASS_ROWS)


def field_of(record: str) -> str | None:
    """The source field a record (`gpu:<field>:<op>`) is of; None for one of several fields."""
    parts = record.split(":")
    return parts[1] if len(parts) == 3 and parts[1] in features.SOURCE_METRICS else None


def exported(names: Iterable[str] | None) -> frozenset[str]:
    """The source fields among these metric names, under either DCGM name (None: all, unknown)."""
    if names is None:
        return frozenset(features.SOURCE_METRICS)
    found = {features.ALIASES.get(name, name) for name in names}
    return frozenset(m for m in features.SOURCE_METRICS if m in found)


def frame_values(
    metric: str,
    values: Mapping[str, Array],
    *,
    seen: npt.NDArray[np.bool_],
    lacking: npt.NDArray[np.bool_] | None,
    exported: bool,
) -> Array:
    """A field's column of the instant frame where its values were not read: `PRESENT` where the GPU
    (`seen`: it has a temperature) has the field, else NaN. It has it where the field's lacking read does
    not name it, else where one of the field's records has a value, else (no record of it read: no
    feature needs one) wherever a GPU is seen, if the fleet exports the field."""
    if lacking is not None:
        known = seen & ~lacking
    else:
        mine = [v for name, v in values.items() if field_of(name) == metric and v.shape == seen.shape]
        if mine:
            known = np.logical_or.reduce([~np.isnan(v) for v in mine])
        else:
            known = seen if exported else np.zeros(seen.shape, dtype=bool)
    return np.where(known, PRESENT, np.nan)


def lacking_by_uuid(
    uuids: Sequence[str], seen: npt.NDArray[np.bool_], having: Set[str]
) -> npt.NDArray[np.bool_] | None:
    """Which GPUs lack a field (rows: `uuids`, the GPUs' UUIDs in their numbering; columns: instants),
    from the UUIDs of the field's series (`having`, the label-values API over the instants' span): a GPU
    `seen` (it has a temperature) whose UUID none of them carries. None where a GPU seen has no UUID:
    the label values cannot say, and the caller asks Prometheus per GPU (`recorded_reads.lacking_raw`).

    The label-values API answers per block of the TSDB, not per sample: a GPU whose exporter stopped
    sending the field still has it until the block holding its last sample no longer overlaps the
    instants (Prometheus' head block: up to ~3 h), and reads 0 there, not missing. A field stops only
    when an exporter's counter list is changed; 0 is every value field's healthy reading."""
    if any(not uuids[i] for i in np.flatnonzero(seen.any(axis=1)).tolist()):
        return None
    # A set's lookups: `np.isin` compares object arrays pairwise (70 s at 80,000 GPUs).
    has = np.fromiter((uuid in having for uuid in uuids), dtype=bool, count=len(uuids))
    out: npt.NDArray[np.bool_] = seen & ~has[:, None]
    return out
