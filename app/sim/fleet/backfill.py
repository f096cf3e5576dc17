"""Backfilling a dataset's history into Prometheus: lean OpenMetrics text, then `promtool` blocks.

The simulator's `OpenMetricsWriter` writes every family with every label a scrape would carry (about 370
bytes a sample): right for the rule bundle, far too big for weeks of a large fleet. This module writes only
what the risk predictor reads — the `features.SOURCE_METRICS` columns (and their DCGM 4.6 names) present
in the dataset's time series — with the labels `Reader` needs to tell GPUs apart ({Hostname, gpu, UUID},
plus `instance`/`job` on request): 125-135 bytes a sample, a third of it the UUID.

- A row with `present == 0`, or a NaN/empty value, gives no sample: a gap stays a gap. (A backfill has no
  staleness markers, so a Prometheus reading it should run with a query look-back shorter than the data's
  step: `tests/prom.py` does.)
- Counters are typed `unknown` (valid OpenMetrics, names unchanged), as `OpenMetricsWriter` types them.
- Memory stays bounded: the data is cut into time windows aligned on promtool's block boundaries (each
  window becomes exactly one block), each window is written one metric family at a time, and each family
  in pieces of at most `PIECE_SAMPLES` samples. Strings are built with Arrow's vectorised kernels; no
  Python loop runs per sample.
- promtool parses a file once per block it makes, keeps the block in memory and pays again for every
  series in every block (at 384k series that cost dominates), so windows are as long as possible while
  holding at most `window_samples` samples (`block_duration_s`); up to `jobs` promtool runs turn windows
  into blocks while the next window is written. Roughly 0.3-0.8M samples/s on 2 cores, promtool-bound.

It reads a dataset and writes files and blocks; it never touches a running Prometheus.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, get_args

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from app.predict import dataset, features
from app.sim.fleet import exposition, metrics

HostLabel = Literal["Hostname", "hostname", "node", "kubernetes_node"]
BLOCK_BASE_S = 2 * 3600.0  # promtool's (and Prometheus') smallest block; larger ones are 3^k times it
BLOCK_LEVELS = 10
WINDOW_SAMPLES = 20_000_000  # per promtool run: ~2.5 GB of text, a block promtool holds in memory
PIECE_SAMPLES = 1_000_000  # per string-building step: ~120 MB of text
_TYPES: dict[str, tuple[str, str]] = {
    spec.name: ("unknown" if spec.prom_type == "counter" else spec.prom_type, spec.help)
    for spec in (*metrics.SPECS, metrics.XID_SPEC)
}


class BackfillError(RuntimeError):
    """promtool refused the text, or the dataset cannot be backfilled."""


@dataclass(frozen=True, slots=True)
class WriteStats:
    samples: int
    gpus: int
    bytes: int
    families: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class BackfillStats:
    """What a backfill wrote; rates are over the whole run (writing and promtool overlap)."""

    samples: int
    gpus: int
    bytes: int
    families: tuple[str, ...]
    windows: int
    block_s: float
    step_s: float | None
    start: float
    end: float
    write_s: float
    promtool_s: float  # summed over runs, which overlap each other and the writing
    elapsed_s: float
    om_files: tuple[Path, ...] = ()

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes / self.samples if self.samples else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "gpus": self.gpus,
            "bytes": self.bytes,
            "bytes_per_sample": round(self.bytes_per_sample, 1),
            "samples_per_s": round(self.samples_per_s),
            "families": list(self.families),
            "windows": self.windows,
            "block_hours": self.block_s / 3600.0,
            "step_s": self.step_s,
            "start": self.start,
            "end": self.end,
            "write_s": round(self.write_s, 2),
            "promtool_s": round(self.promtool_s, 2),
            "elapsed_s": round(self.elapsed_s, 2),
            "om_files": [str(p) for p in self.om_files],
        }


# -- choosing what and how much -------------------------------------------------------------------------


def source_columns(columns: Sequence[str]) -> tuple[str, ...]:
    """The predictor's source metrics (either DCGM name) among `columns`, in `SOURCE_METRICS` order."""
    available = set(columns)
    out: list[str] = []
    for metric in features.SOURCE_METRICS:
        names = [metric, *(old for old, new in features.ALIASES.items() if new == metric)]
        out.extend(name for name in names if name in available)
    return tuple(out)


def block_duration_s(
    *, start: float, end: float, samples_per_s: float, window_samples: int = WINDOW_SAMPLES
) -> float:
    """The block (and window) length: a length promtool accepts (2 h x 3^k), aligned on multiples of
    itself as promtool aligns blocks, giving the fewest windows (promtool pays for every series in every
    block) among those whose windows hold at most `window_samples` samples; the shortest such length."""
    span = max(end - start, 0.0)
    best = BLOCK_BASE_S
    fewest = len(_windows(start, end, best))
    for level in range(1, BLOCK_LEVELS):
        length = BLOCK_BASE_S * 3**level
        if samples_per_s * min(length, span) > window_samples:
            break
        count = len(_windows(start, end, length))
        if count < fewest:
            best, fewest = length, count
    return best


# -- reading the dataset in windows ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Source:
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


def open_source(directory: Path) -> _Source:
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


def _source(path: Path, names: Sequence[str], timestamps: npt.NDArray[np.float64], *, table: Any) -> _Source:
    host = next((name for name in features.HOST_COLUMNS if name in names), None)
    if host is None or "gpu" not in names:
        raise BackfillError(f"{path} has no host or gpu column")
    uuid = "uuid" if "uuid" in names else "UUID" if "UUID" in names else None
    columns = source_columns(names)
    if not columns:
        raise BackfillError(f"{path} has none of the predictor's source metrics")
    return _Source(
        path=path,
        host=host,
        uuid=uuid,
        columns=columns,
        present="present" in names,
        timestamps=timestamps,
        table=table,
    )


def _step_s(timestamps: npt.NDArray[np.float64]) -> float | None:
    instants = np.unique(timestamps)
    return float(np.median(np.diff(instants))) if instants.size > 1 else None


# -- writing OpenMetrics --------------------------------------------------------------------------------


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _series_labels(
    node: npt.NDArray[np.object_],
    gpu: npt.NDArray[np.int64],
    uuid: npt.NDArray[np.object_] | None,
    *,
    host_label: HostLabel | None,
    target_labels: bool,
) -> list[str]:
    """Each series' label text, without braces (one Python loop per series, never per sample)."""
    out: list[str] = []
    for i in range(len(node)):
        name = str(node[i])
        # A fleet without a host label names its nodes by `instance` (host:port) in the dataset.
        instance_named = name.endswith(f":{exposition.EXPORTER_PORT}")
        host = name.rsplit(":", 1)[0] if instance_named else name
        parts = [f'{host_label}="{_escape(host)}"'] if host_label else []
        parts.append(f'gpu="{int(gpu[i])}"')
        if uuid is not None and str(uuid[i]):
            parts.append(f'UUID="{_escape(str(uuid[i]))}"')
        if target_labels:
            instance = _escape(name if instance_named else exposition.exporter_instance(name))
            parts.append(f'instance="{instance}",job="{exposition.EXPORTER_JOB}"')
        out.append(",".join(parts))
    return out


def _write_lines(out: IO[bytes], lines: Any) -> int:
    """Write an Arrow string array whose every element is one full line: its data buffer is the text."""
    if len(lines) == 0:
        return 0
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    _, offsets_buffer, data_buffer = lines.buffers()
    kind = np.int64 if pa.types.is_large_string(lines.type) else np.int32
    offsets = np.frombuffer(offsets_buffer, dtype=kind)
    first, last = int(offsets[lines.offset]), int(offsets[lines.offset + len(lines)])
    out.write(memoryview(data_buffer)[first:last])
    return last - first


def write_window(
    table: Any,
    out: IO[bytes],
    *,
    host: str,
    uuid: str | None,
    columns: Sequence[str],
    host_label: HostLabel | None = "Hostname",
    target_labels: bool = False,
) -> WriteStats:
    """One window's samples as OpenMetrics families (no `# EOF`): each family once, its series contiguous
    and each series in time order, so the text is valid for strict parsers as well as promtool."""
    if table.num_rows == 0:
        return WriteStats(0, 0, 0, ())
    node_codes, node_names = pd.factorize(table.column(host).to_pandas())
    gpu = np.asarray(table.column("gpu").to_numpy(zero_copy_only=False), dtype=np.int64)
    if uuid is not None:
        uuid_codes, uuid_names = pd.factorize(table.column(uuid).to_pandas().fillna(""))
    else:
        uuid_codes, uuid_names = np.zeros(table.num_rows, dtype=np.int64), pd.Index([""])
    gpu_span = int(gpu.max()) - int(gpu.min()) + 1
    key = (node_codes.astype(np.int64) * gpu_span + (gpu - int(gpu.min()))) * len(uuid_names) + uuid_codes
    codes, keys = pd.factorize(key)
    keys = np.asarray(keys, dtype=np.int64)
    labels = _series_labels(
        np.asarray(node_names, dtype=object)[keys // len(uuid_names) // gpu_span],
        (keys // len(uuid_names)) % gpu_span + int(gpu.min()),
        np.asarray(uuid_names, dtype=object)[keys % len(uuid_names)] if uuid is not None else None,
        host_label=host_label,
        target_labels=target_labels,
    )
    t = np.asarray(table.column("timestamp").to_numpy(zero_copy_only=False), dtype=np.float64)
    instants, instant_of = np.unique(t, return_inverse=True)
    stamps = pa.array([f" {_format_timestamp(v)}\n" for v in instants], type=pa.string())
    order = np.lexsort((t, codes))
    codes, instant_of = codes[order], instant_of[order]
    present = np.ones(len(order), dtype=bool)
    if "present" in table.column_names:
        flags = np.asarray(table.column("present").to_numpy(zero_copy_only=False), dtype=np.float64)
        present = np.nan_to_num(flags[order], nan=0.0) > 0
    order_array = pa.array(order)
    samples = written = 0
    families: list[str] = []
    for name in columns:
        column = table.column(name).combine_chunks().take(order_array)
        keep = present & np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if pa.types.is_floating(column.type):
            keep &= ~np.isnan(np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64))
        rows = np.flatnonzero(keep)
        if rows.size == 0:
            continue
        om_type, help_text = _TYPES.get(name, ("unknown", ""))
        written += out.write(f"# TYPE {name} {om_type}\n# HELP {name} {help_text}\n".encode())
        prefixes = pa.array([f"{name}{{{text}}} " for text in labels], type=pa.string())
        for lo in range(0, rows.size, PIECE_SAMPLES):
            piece = rows[lo : lo + PIECE_SAMPLES]
            lines = pc.binary_join_element_wise(
                prefixes.take(pa.array(codes[piece])),
                pc.cast(column.take(pa.array(piece)), pa.string()),
                stamps.take(pa.array(instant_of[piece])),
                "",
            )
            written += _write_lines(out, lines)
        samples += int(rows.size)
        families.append(name)
    return WriteStats(samples=samples, gpus=len(labels), bytes=written, families=tuple(families))


def _format_timestamp(t: float) -> str:
    return str(int(t)) if float(t).is_integer() else f"{t:.3f}"


# -- the backfill ---------------------------------------------------------------------------------------


def _windows(start: float, end: float, block_s: float) -> list[tuple[float, float]]:
    first = math.floor(start / block_s)
    last = math.floor(end / block_s)
    return [(k * block_s, (k + 1) * block_s) for k in range(first, last + 1)]


class _Promtool:
    """Up to `jobs` `promtool tsdb create-blocks-from openmetrics` runs at once, in the background."""

    def __init__(self, promtool: Path, tsdb_dir: Path, *, block_s: float, jobs: int) -> None:
        self.promtool = promtool
        self.tsdb_dir = tsdb_dir
        self.block_s = block_s
        self.jobs = max(1, jobs)
        self.seconds = 0.0
        self._running: list[tuple[subprocess.Popen[bytes], Path, float, bool]] = []

    def start(self, path: Path, *, remove: bool) -> None:
        while len(self._running) >= self.jobs:
            self._wait_oldest()
        command = [
            str(self.promtool),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--quiet",
            f"--max-block-duration={int(self.block_s)}s",
            str(path),
            str(self.tsdb_dir),
        ]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._running.append((proc, path, time.perf_counter(), remove))

    def wait(self) -> None:
        while self._running:
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        proc, path, started, remove = self._running.pop(0)
        output, _ = proc.communicate()
        self.seconds += time.perf_counter() - started
        if proc.returncode != 0:
            text = output.decode(errors="replace")[-3000:]
            raise BackfillError(f"promtool failed on {path} (exit {proc.returncode}):\n{text}")
        if remove:
            path.unlink(missing_ok=True)

    def stop(self) -> None:
        for proc, *_ in self._running:
            proc.kill()
            proc.wait()
        self._running.clear()


def backfill(
    dataset_dir: Path,
    tsdb_dir: Path,
    *,
    promtool: Path,
    om_dir: Path | None = None,
    host_label: HostLabel | None = "Hostname",
    target_labels: bool = False,
    window_samples: int = WINDOW_SAMPLES,
    jobs: int = 2,
) -> BackfillStats:
    """Write the dataset's source metrics as OpenMetrics, one file per block-aligned window, and turn each
    into a TSDB block in `tsdb_dir` (Prometheus' `--storage.tsdb.path`). The files are removed unless
    `om_dir` is given, where they are kept (`backfill-NNNN.om`). `jobs` promtool runs turn windows into
    blocks at once, while the next window is written (each holds a window's block in memory)."""
    if host_label is None and not target_labels:
        raise ValueError("without a host label, `instance` (target_labels) must name the node")
    started = time.perf_counter()
    source = open_source(dataset_dir)
    if source.rows == 0:
        raise BackfillError(f"{dataset_dir} has no rows")
    start, end = float(source.timestamps.min()), float(source.timestamps.max())
    block_s = block_duration_s(
        start=start,
        end=end,
        samples_per_s=source.rows * len(source.columns) / max(end - start, 1.0),
        window_samples=window_samples,
    )
    tsdb_dir.mkdir(parents=True, exist_ok=True)
    keep = om_dir is not None
    scratch = None if keep else tempfile.TemporaryDirectory(prefix="sickbay-backfill-", dir=tsdb_dir.parent)
    folder = om_dir if om_dir is not None else Path(scratch.name if scratch else ".")
    folder.mkdir(parents=True, exist_ok=True)
    runner = _Promtool(promtool, tsdb_dir, block_s=block_s, jobs=jobs)
    samples = written = gpus = 0
    write_s = 0.0
    families: set[str] = set()
    files: list[Path] = []
    windows = 0
    try:
        for lo, hi in _windows(start, end, block_s):
            writing = time.perf_counter()
            table = source.window(lo, hi)
            path = folder / f"backfill-{len(files):04d}.om"
            with path.open("wb") as out:
                stats = write_window(
                    table,
                    out,
                    host=source.host,
                    uuid=source.uuid,
                    columns=source.columns,
                    host_label=host_label,
                    target_labels=target_labels,
                )
                out.write(b"# EOF\n")
            del table
            write_s += time.perf_counter() - writing
            if stats.samples == 0:
                path.unlink()
                continue
            files.append(path)
            windows += 1
            samples += stats.samples
            written += stats.bytes + len(b"# EOF\n")
            gpus = max(gpus, stats.gpus)
            families.update(stats.families)
            runner.start(path, remove=not keep)
        runner.wait()
    finally:
        runner.stop()
        if scratch is not None:
            scratch.cleanup()
    return BackfillStats(
        samples=samples,
        gpus=gpus,
        bytes=written,
        families=tuple(name for name in source.columns if name in families),
        windows=windows,
        block_s=block_s,
        step_s=_step_s(source.timestamps),
        start=start,
        end=end,
        write_s=write_s,
        promtool_s=runner.seconds,
        elapsed_s=time.perf_counter() - started,
        om_files=tuple(files) if keep else (),
    )


def dataset_host_label(dataset_dir: Path) -> tuple[HostLabel | None, bool]:
    """The host label a dataset's fleet exposes (its personality's, in truth.json) and whether series then
    need `instance` to tell nodes apart; a dataset without a personality: `Hostname`, as released exporters."""
    path = dataset_dir / "truth.json"
    try:
        view = json.loads(path.read_text(encoding="utf-8"))["personality"]["exporter"]
    except (OSError, ValueError, KeyError, TypeError):
        return "Hostname", False
    label = view.get("host_label", "Hostname")
    if label is None:
        return None, True
    return (label if label in get_args(HostLabel) else "Hostname"), False


def find_promtool(explicit: Path | None = None) -> Path:
    """`explicit`, or promtool on PATH."""
    if explicit is not None:
        return explicit
    found = shutil.which("promtool")
    if found is None:
        raise BackfillError("promtool not found: install Prometheus (Debian package `prometheus`)")
    return Path(found)
