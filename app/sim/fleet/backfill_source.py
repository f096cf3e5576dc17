"""Reading a dataset's time series for a backfill, one time window at a time.

Parquet is read window by window (row groups pruned on `timestamp`), so a long history never sits in
memory whole; CSV, or a table without `timestamp`, is read once. Only the predictor's source metrics are
kept (`features.SOURCE_METRICS`, under either DCGM name), with the labels that tell GPUs apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from app.predict import dataset, features
from app.sim.fleet.backfill_results import BackfillError


def source_columns(columns: Sequence[str]) -> tuple[str, ...]:
    """The predictor's source metrics (either DCGM name) among `columns`, in `SOURCE_METRICS` order."""
    available = set(columns)
    out: list[str] = []
    for metric in features.SOURCE_METRICS:
        names = [metric, *(old for old, new in features.ALIASES.items() if new == metric)]
        out.extend(name for name in names if name in available)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Source:
    """A dataset's time series, as an Arrow table source that yields time windows."""

    path: Path
    host: str
    uuid: str | None
    columns: tuple[str, ...]
    present: bool
    timestamps: npt.NDArray[np.float64]
    table: Any = None  # the whole table, for CSV (read once); None for Parquet (read per window)

    @property
    def rows(self) -> int:
        return int(self.timestamps.size)

    def window(self, lo: float, hi: float) -> Any:
        """The rows with lo <= timestamp < hi, as an Arrow table."""
        wanted = [self.host, "gpu", *([self.uuid] if self.uuid else []), "timestamp"]
        wanted += ["present"] if self.present else []
        wanted += list(self.columns)
        if self.table is not None:
            mask = (self.timestamps >= lo) & (self.timestamps < hi)
            return self.table.select(wanted).filter(pa.array(mask))
        return pq.read_table(
            self.path, columns=wanted, filters=[("timestamp", ">=", lo), ("timestamp", "<", hi)]
        )


def open_source(directory: Path) -> Source:
    """The dataset's time series: Parquet is read window by window (row groups pruned on `timestamp`);
    CSV, or a table without `timestamp`, is read once."""
    try:
        path = dataset.timeseries_path(directory)
    except dataset.DatasetError as exc:
        raise BackfillError(str(exc)) from exc
    if path.suffix == ".parquet":
        names = pq.read_schema(path).names
        if "timestamp" in names:
            stamps = pq.read_table(path, columns=["timestamp"]).column("timestamp")
            timestamps = np.asarray(stamps.to_numpy(), dtype=np.float64)
            return _source(path, names, timestamps, table=None)
    frame = dataset.read_timeseries(directory)
    timestamps = features.timestamps(frame)
    frame = frame.assign(timestamp=timestamps).drop(columns=["time"], errors="ignore")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    return _source(path, list(frame.columns), timestamps, table=table)


def _source(path: Path, names: Sequence[str], timestamps: npt.NDArray[np.float64], *, table: Any) -> Source:
    host = next((name for name in features.HOST_COLUMNS if name in names), None)
    if host is None or "gpu" not in names:
        raise BackfillError(f"{path} has no host or gpu column")
    uuid = "uuid" if "uuid" in names else "UUID" if "UUID" in names else None
    columns = source_columns(names)
    if not columns:
        raise BackfillError(f"{path} has none of the predictor's source metrics")
    return Source(
        path=path,
        host=host,
        uuid=uuid,
        columns=columns,
        present="present" in names,
        timestamps=timestamps,
        table=table,
    )


def step_s(timestamps: npt.NDArray[np.float64]) -> float | None:
    instants = np.unique(timestamps)
    return float(np.median(np.diff(instants))) if instants.size > 1 else None
