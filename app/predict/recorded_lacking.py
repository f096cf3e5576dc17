"""Which GPUs lack each value field the recorded path reads sparse (`recorded_presence.VALUE_FIELDS`).

A sparse read answers only the GPUs whose value is not 0, so a GPU left out may hold 0 or not have the
field at all, and a field a GPU does not export must read as missing. The UUIDs of the field's series
(Prometheus' label-values API: an index lookup) say which GPUs have it; where that API is missing, or a
GPU has no UUID label, a join per field says it instead (`recorded_reads.lacking_raw`: the temperature's
series unless the field's). At 80,000 GPUs a join cost Prometheus ~3.5 s of CPU, a label-values call
~0.15 s (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from app.predict import recorded_presence as presence
from app.predict import recorded_reads
from app.predict.prometheus import Reader
from app.predict.promql import selector


def lacking(
    reads: recorded_reads.InstantReads,
    temperature: recorded_reads.Array,
    metrics: Sequence[str],
    instants: Sequence[float],
) -> dict[str, npt.NDArray[np.bool_]]:
    """Which GPUs (rows, in `reads.gpus`' numbering) lack each field at each instant: seen (they have a
    `temperature`) without the field. From the UUIDs of the field's series (`_lacking_one`, after the
    cycle's reads, so that one field's UUIDs are held at a time), else from a join per field."""
    uuids = [g[2] for g in sorted(reads.gpus, key=reads.gpus.__getitem__)]
    seen = ~np.isnan(recorded_reads.pad(temperature, len(uuids)))
    out: dict[str, npt.NDArray[np.bool_]] = {}
    for metric in metrics:
        one = _lacking_one(reads.reader, metric, uuids, seen, instants)
        if one is None:
            joins = reads.run([recorded_reads.lacking_raw(m, instants) for m in metrics])
            return {m: joins[recorded_reads.LACKING + m] == 1.0 for m in metrics}
        out[metric] = one
    return out


def _lacking_one(
    reader: Reader, metric: str, uuids: Sequence[str], seen: npt.NDArray[np.bool_], instants: Sequence[float]
) -> npt.NDArray[np.bool_] | None:
    """One field's GPUs lacking it, asking for the UUIDs under dcgm-exporter's label first and under the
    other spelling only where a GPU seen is not named by the first; None where the label values cannot
    say (no label-values API, a GPU without a UUID)."""
    start, end = _utc(instants[0] - reader.settings.step_s), _utc(instants[-1])
    out = seen
    for label in presence.UUID_LABELS:
        having = reader.label_values(label, start, end, match=selector(metric))
        if having is None:
            return None
        narrowed = presence.lacking_by_uuid(uuids, out, having)
        if narrowed is None or not narrowed.any():
            return narrowed
        out = narrowed
    return out


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)
