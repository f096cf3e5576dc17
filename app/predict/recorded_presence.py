"""Which exporter fields each GPU has at the instants scored, in one series per GPU, and what a sparse
read's absent GPUs read.

The recorded path needs, per GPU and instant, whether each of the 24 source fields has a sample, and
whether that sample is DCGM's blank (`DCGM_BLANK_MIN`: missing, yet the GPU is there), but the values of
only a few (`VALUE_FIELDS`: remapped rows, pending flags, retired pages). One query per field would be 24
series answered per GPU; `query()` is one: the sum over the fields of `2^k` for a real value of field `k`
and `2^(24+k)` for a blank, each field's term told apart by a label so `or` keeps them all, summed by GPU.
The sum is an integer below 2^48, exact in a float64 (Prometheus writes floats in the shortest form that
reads back the same: https://prometheus.io/docs/prometheus/latest/querying/api/#expression-query-result-formats).
A NaN sample counts as none (`> -Inf` drops it), as the raw frame's `notna` does.

A *sparse* read asks only for a series' non-zero values. An event counter's record (an increase, an
active-hour share, episodes, rows in a throttle class) is 0 on almost every GPU, and a GPU absent from
its answer reads 0 where it has the record's field (`filled`), NaN where it has not: the features of a
field a GPU does not export stay missing, never zero. A regular GPU (`recorded_reader`) has its fields
at every row of the week, so having the field at an instant scored is having it at the hours before.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.predict import features
from app.predict.features import fields as f
from app.predict.promql import selector
from app.predict.recorded_reads import BY

Array = npt.NDArray[np.float64]
Mask = npt.NDArray[np.int64]
NAME = "sickbay:fields_present"
FIELDS: tuple[str, ...] = features.SOURCE_METRICS
_LABEL = "sickbay_field"
_N = len(FIELDS)
VALUE_FIELDS: frozenset[str] = frozenset(
    {
        f.ROWS_CORRECTABLE,
        f.ROWS_UNCORRECTABLE,
        f.REMAP_PENDING,
        f.REMAP_FAILURE,
        f.RETIRED_PENDING,
        f.RETIRED_SBE,
        f.RETIRED_DBE,
    }
)
# The records' operations that count events, zero on a quiet GPU (`recorded_rules`' names end in them).
_COUNTING = ("increase", "active1h", "episodes", "resets")
_CLASS_ROWS = ("hardware_count_over_time", "thermal_count_over_time", "power_count_over_time")
PRESENT = 1.0  # a field read for its presence only, where it has a real value (`frame`)


def query() -> str:
    """One series per GPU whose value is its fields' bitmask (real: bit k; blank: bit 24 + k)."""
    blank = f"{f.DCGM_BLANK_MIN:g}"
    terms = []
    for k, metric in enumerate(FIELDS):
        value = f"(max by ({BY}) ({selector(metric)}) > -Inf)"
        weight = f"{2**k} * (1 + {2**_N - 1} * ({value} >= bool {blank}))"
        terms.append(f'label_replace({weight}, "{_LABEL}", "{k}", "", "")')
    return f"sum by ({BY}) ({' or '.join(terms)})"


def real(mask: Array, field: str) -> npt.NDArray[np.bool_]:
    """Where the bitmask (NaN: none read) says the field has a real value."""
    return _bit(mask, FIELDS.index(field))


def blank(mask: Array, field: str) -> npt.NDArray[np.bool_]:
    return _bit(mask, _N + FIELDS.index(field))


def _bit(mask: Array, bit: int) -> npt.NDArray[np.bool_]:
    bits: Mask = np.nan_to_num(mask, nan=0.0).astype(np.int64)
    return ((bits >> bit) & 1).astype(bool)


def frame_values(mask: Array, field: str) -> Array:
    """A field read for its presence only, as the instant frame holds it: `PRESENT` where real, the
    blank where blank, NaN where none (what `features.present_fields` and the boards' `present` read)."""
    return np.where(real(mask, field), PRESENT, np.where(blank(mask, field), f.DCGM_BLANK_MIN, np.nan))


def sparse(record: str) -> bool:
    """Whether a record counts events (read sparse: 0 on almost every GPU)."""
    op = record.rsplit(":", maxsplit=1)[-1]
    return op.startswith(_COUNTING) or op.startswith(_CLASS_ROWS)


def field_of(record: str) -> str | None:
    """The source field a record (`gpu:<field>:<op>`) is of; None for one of several fields."""
    parts = record.split(":")
    return parts[1] if len(parts) == 3 and parts[1] in FIELDS else None


def filled(values: Array, has: npt.NDArray[np.bool_]) -> Array:
    """A sparse read's values with 0 where it is absent and the GPU has the field (`has`: per row, or per
    row and column)."""
    where = has if has.ndim == values.ndim else has[:, None]
    return np.where(np.isnan(values) & where, 0.0, values)
