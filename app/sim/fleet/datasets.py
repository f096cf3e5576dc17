"""Datasets from a simulated fleet: per-GPU time series, ground truth, OpenMetrics for backfill.

One pass over the frames feeds every writer, and no writer keeps more than a batch, so a long run
(200 nodes x 8 GPUs x 14 days at 60 s) streams to disk in constant memory. The time series has one row
per GPU per instant — also for GPUs without series then (`present=0`, `exporter_up=0`, empty values) —
because a gap in the data is itself a feature. Parquet needs pyarrow; without it the table is CSV.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib
import json
import operator
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from app.sim.fleet import exposition, fieldsets, metrics
from app.sim.fleet.exposition import HostnameLabel
from app.sim.fleet.fleet import FleetSim
from app.sim.fleet.frames import Frame, FrameWriter, iter_frames
from app.sim.fleet.gpu import GpuIdentity
from app.sim.fleet.observe import ALL_PASS, GpuObservation, NodeObservation
from app.sim.fleet.openmetrics import CounterStyle, Grouping, OpenMetricsWriter
from app.sim.fleet.params import ExporterView, SimConfig
from app.sim.fleet.truth import GroundTruth, iso

Format = Literal["csv", "parquet", "openmetrics"]
ID_COLUMNS = (
    "time",
    "timestamp",
    "node",
    "gpu",
    "uuid",
    "pci_bus_id",
    "modelName",
    "driver_version",
    "namespace",
    "pod",
    "container",
    "exporter_up",
    "present",
)
VALUE_COLUMNS = (
    metrics.XID_SPEC.name,
    *(spec.name for spec in metrics.SPECS),
    metrics.HEALTH_SPEC.name,
    "health_errors",
)
COLUMNS = (*ID_COLUMNS, *VALUE_COLUMNS)
Row = tuple[object, ...]
_EMPTY_VALUES: tuple[object, ...] = (None,) * len(VALUE_COLUMNS)


@dataclass(frozen=True, slots=True)
class TableLayout:
    """The columns a fleet's table has: the exporter view's fields (absent ones have no column), under its
    names, and its host column. `keep` selects them from a full row (None: the full row, as classic)."""

    columns: tuple[str, ...]
    keep: tuple[int, ...] | None
    instance_host: bool

    def project(self, rows: list[Row]) -> list[Row]:
        if self.keep is None:
            return rows
        pick = operator.itemgetter(*self.keep)
        return [pick(row) for row in rows]


def table_layout(view: ExporterView) -> TableLayout:
    if not view.table_host and view.fields is None and view.metric_names == "pre-4.6":
        return TableLayout(COLUMNS, None, instance_host=False)
    host = (view.host_label or "instance") if view.table_host else "node"
    dcgm_4_6 = view.metric_names == "4.6"
    columns: list[str] = []
    keep: list[int] = []
    for index, name in enumerate(COLUMNS):
        if name == "health_errors":
            shown = fieldsets.exposed(view.fields, metrics.HEALTH_SPEC.name)
        else:
            shown = index < len(ID_COLUMNS) or fieldsets.exposed(view.fields, name)
        if shown:
            keep.append(index)
            renamed = host if name == "node" else fieldsets.exported_name(name, dcgm_4_6=dcgm_4_6)
            columns.append(renamed)
    return TableLayout(tuple(columns), tuple(keep), instance_host=host == "instance")


def frame_rows(frame: Frame, *, instance_host: bool = False) -> Iterable[Row]:
    """One row per GPU of the fleet: observed values, or empty values for GPUs without series.
    `instance_host` names each node by its exporter's `instance` (a fleet without a host label)."""
    stamp = iso(frame.time_s)
    for node in frame.nodes:
        up = 1 if node.exporter_up else 0
        host = exposition.exporter_instance(node.node) if instance_host else node.node
        for gpu in node.gpus:
            pod = gpu.pod
            workload = (pod.namespace, pod.name, pod.container) if pod else ("", "", "")
            yield (*_ids(stamp, frame.time_s, host, node, gpu.identity), *workload, up, 1, *_values(gpu))
        for identity in node.missing:
            yield (*_ids(stamp, frame.time_s, host, node, identity), "", "", "", up, 0, *_EMPTY_VALUES)


def _ids(stamp: str | None, t: float, host: str, node: NodeObservation, identity: GpuIdentity) -> Row:
    return (
        stamp,
        t,
        host,
        identity.index,
        identity.uuid,
        identity.pci_bus_id,
        identity.model,
        node.driver_version,
    )


def _values(gpu: GpuObservation) -> Row:
    if gpu.health is ALL_PASS:
        return (gpu.last_xid, *gpu.values, 0, "")
    worst = max(status for _, status, _ in gpu.health)
    errors = ";".join(f"{watch}:{code}" for watch, status, code in gpu.health if status)
    return (gpu.last_xid, *gpu.values, worst, errors)


class CsvWriter:
    """The per-GPU time series as CSV (header: `COLUMNS`)."""

    def __init__(self, path: Path, *, layout: TableLayout | None = None) -> None:
        self.path = path
        self.rows = 0
        self.layout = layout or table_layout(ExporterView())
        self._file: IO[str] = path.open("w", newline="", encoding="utf-8")
        self._csv = csv.writer(self._file)
        self._csv.writerow(self.layout.columns)

    def write(self, frame: Frame) -> None:
        rows = self.layout.project(list(frame_rows(frame, instance_host=self.layout.instance_host)))
        self._csv.writerows(rows)
        self.rows += len(rows)

    def close(self) -> None:
        self._file.close()


class ParquetWriter:
    """The per-GPU time series as Parquet, one row group per `batch_rows` (needs pyarrow)."""

    def __init__(self, path: Path, *, batch_rows: int = 50_000, layout: TableLayout | None = None) -> None:
        self.path = path
        self.rows = 0
        self.layout = layout or table_layout(ExporterView())
        self._pa: Any = importlib.import_module("pyarrow")
        self._pq: Any = importlib.import_module("pyarrow.parquet")
        self._schema = self._pa.schema([(name, _arrow_type(self._pa, name)) for name in self.layout.columns])
        self._writer: Any = self._pq.ParquetWriter(str(path), self._schema)
        self._batch: list[Row] = []
        self._batch_rows = batch_rows

    def write(self, frame: Frame) -> None:
        self._batch.extend(frame_rows(frame, instance_host=self.layout.instance_host))
        if len(self._batch) >= self._batch_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._batch:
            return
        columns = list(zip(*self._batch, strict=True))
        if self.layout.keep is not None:
            columns = [columns[i] for i in self.layout.keep]
        arrays = [
            self._pa.array(list(values), type=self._schema.field(i).type) for i, values in enumerate(columns)
        ]
        self._writer.write_table(self._pa.Table.from_arrays(arrays, schema=self._schema))
        self.rows += len(self._batch)
        self._batch = []

    def close(self) -> None:
        self._flush()
        self._writer.close()


def _arrow_type(pa: Any, name: str) -> Any:
    if name in ("time", "node", "uuid", "pci_bus_id", "modelName", "driver_version", "namespace", "pod"):
        return pa.string()
    if name in ("Hostname", "hostname", "kubernetes_node", "instance"):
        return pa.string()
    if name in ("container", "health_errors"):
        return pa.string()
    if name in ("timestamp", metrics.SPECS[metrics.Field.POWER_USAGE].name):
        return pa.float64()
    return pa.int64()


def parquet_available() -> bool:
    try:
        importlib.import_module("pyarrow.parquet")
    except ImportError:
        return False
    return True


# -- ground truth ---------------------------------------------------------------------------------------


def write_truth(truth: GroundTruth, directory: Path) -> list[Path]:
    """`truth.json` with everything, plus one CSV per record kind (failures.csv, traps.csv, ...)."""
    directory.mkdir(parents=True, exist_ok=True)
    rendered = truth.as_dict()
    paths = [directory / "truth.json"]
    paths[0].write_text(json.dumps(rendered, indent=2) + "\n", encoding="utf-8")
    for kind in ("failures", "pending", "app_xids", "ops", "traps", "interruptions"):
        path = directory / f"{kind}.csv"
        _write_records_csv(path, rendered[kind])
        paths.append(path)
    return paths


def _write_records_csv(path: Path, rendered: list[dict[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        if not rendered:
            return
        writer = csv.DictWriter(handle, fieldnames=list(rendered[0]))
        writer.writeheader()
        for row in rendered:
            writer.writerow({k: ";".join(v) if isinstance(v, list) else v for k, v in row.items()})


# -- the whole dataset ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetReport:
    paths: tuple[Path, ...]
    frames: int
    rows: int
    samples: int
    failures: int
    elapsed_s: float
    files: dict[str, str] = field(default_factory=dict)


def write_dataset(
    directory: Path,
    *,
    nodes: int,
    duration_s: float,
    step_s: float = 60.0,
    seed: int = 0,
    config: SimConfig | None = None,
    formats: Sequence[Format] = ("csv", "openmetrics"),
    hostname_label: HostnameLabel | Literal["view"] = "view",
    counter_style: CounterStyle = "unknown",
    grouping: Grouping = "time",
    om_families: Collection[str] | None = None,
    sim: FleetSim | None = None,
) -> DatasetReport:
    """Simulate and write the chosen formats plus the ground truth into `directory`.

    "parquet" falls back to CSV (with the report's `files` saying so) when pyarrow is missing. The fleet's
    exporter view (`config.exporter`, from its personality) decides which fields the table and the
    OpenMetrics have, under which names; `hostname_label` "view" takes its host label too.
    """
    started = time.perf_counter()
    directory.mkdir(parents=True, exist_ok=True)
    sim = sim or FleetSim(nodes=nodes, seed=seed, config=config)
    view = sim.config.exporter
    host_label: HostnameLabel = view.host_label if hostname_label == "view" else hostname_label
    layout = table_layout(view)
    writers: list[FrameWriter] = []
    files: dict[str, str] = {}
    table_format = "parquet" if "parquet" in formats and parquet_available() else "csv"
    table: CsvWriter | ParquetWriter | None = None
    if "csv" in formats or "parquet" in formats:
        if table_format == "parquet":
            table = ParquetWriter(directory / "timeseries.parquet", layout=layout)
        else:
            table = CsvWriter(directory / "timeseries.csv", layout=layout)
        files["timeseries"] = str(table.path)
        writers.append(table)
    om: OpenMetricsWriter | None = None
    if "openmetrics" in formats:
        om = OpenMetricsWriter(
            directory / "metrics.om",
            hostname_label=host_label,
            counter_style=counter_style,
            grouping=grouping,
            families=om_families,
            view=view,
        )
        files["openmetrics"] = str(om.path)
        writers.append(om)
    frames = 0
    try:
        for frame in iter_frames(sim, step_s=step_s, duration_s=duration_s):
            frames += 1
            for writer in writers:
                writer.write(frame)
    finally:
        for writer in writers:
            writer.close()
    truth = sim.truth(include_pending=True)
    truth_paths = write_truth(truth, directory)
    files["truth"] = str(truth_paths[0])
    paths = tuple(Path(p) for p in files.values() if p) + tuple(truth_paths[1:])
    return DatasetReport(
        paths=paths,
        frames=frames,
        rows=table.rows if table else 0,
        samples=om.samples if om else 0,
        failures=len(truth.failures),
        elapsed_s=time.perf_counter() - started,
        files=files,
    )


def report_dict(report: DatasetReport) -> dict[str, Any]:
    out = dataclasses.asdict(report)
    out["paths"] = [str(p) for p in report.paths]
    return out
