"""The lean OpenMetrics text a backfill writes: the predictor's source metrics with the labels `Reader`
needs to tell GPUs apart ({Hostname, gpu, UUID}, plus `instance`/`job` on request), 125-135 bytes a
sample, a third of it the UUID.

A row with `present == 0`, or a NaN/empty value, gives no sample: a gap stays a gap. Counters are typed
`unknown` (valid OpenMetrics, names unchanged), as `OpenMetricsWriter` types them. Each family is written
once, in pieces of at most `PIECE_SAMPLES` samples built with Arrow's vectorised kernels: no Python loop
runs per sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from app.sim.fleet import exposition, metrics
from app.sim.fleet.backfill_results import WriteStats

HostLabel = Literal["Hostname", "hostname", "node", "kubernetes_node"]
PIECE_SAMPLES = 1_000_000  # per string-building step: ~120 MB of text
_TYPES: dict[str, tuple[str, str]] = {
    spec.name: ("unknown" if spec.kind == "counter" else spec.kind, spec.help)
    for spec in (*metrics.SPECS, metrics.XID_SPEC)
}


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
