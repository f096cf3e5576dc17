"""Reading a labelled dataset directory: the per-GPU time series and the ground truth beside it.

The layout is the one `sickbay simulate` writes (`timeseries.parquet` or `.csv`, `truth.json`); this module
reads files and never imports the simulator. A production dataset (Prometheus history plus the journal's
faults) can be written in the same layout. It must not compute features or labels: those stay pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from app.predict import features, history
from app.predict.sampling import Scan, scan_timestamps

# What features read from the table besides the DCGM fields.
ID_COLUMNS: tuple[str, ...] = ("timestamp", "node", "gpu", "uuid", "present")
TIMESERIES_NAMES: tuple[str, ...] = ("timeseries.parquet", "timeseries.csv")


class DatasetError(ValueError):
    """The directory is not a readable dataset."""


@dataclass(frozen=True, slots=True)
class Truth:
    """What really happened: failures (with precursor starts where known), repairs and trap GPUs."""

    start: float
    end: float
    failures: pd.DataFrame  # history.FAILURE_COLUMNS, as failures read back from history
    repairs: pd.DataFrame
    traps: pd.DataFrame


def timeseries_path(directory: Path) -> Path:
    for name in TIMESERIES_NAMES:
        path = directory / name
        if path.exists():
            return path
    raise DatasetError(f"{directory} has no {' or '.join(TIMESERIES_NAMES)}")


def read_timeseries(directory: Path) -> pd.DataFrame:
    """The columns features need (identity, presence, DCGM source fields), as the file has them."""
    path = timeseries_path(directory)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # type: ignore[import-untyped]  # noqa: PLC0415 - needed here only

        available = set(pq.read_schema(path).names)
        wanted = _wanted(available)
        return pd.read_parquet(path, columns=wanted)
    header = pd.read_csv(path, nrows=0).columns
    return pd.read_csv(path, usecols=_wanted(set(header)), low_memory=False)


def scan(directory: Path, *, batch_rows: int = 1 << 20) -> Scan:
    """The dataset's scan, reading only its time column, a batch at a time."""
    path = timeseries_path(directory)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # noqa: PLC0415 - needed here only

        handle = pq.ParquetFile(path)
        column = "timestamp" if "timestamp" in handle.schema_arrow.names else "time"
        batches = handle.iter_batches(columns=[column], batch_size=batch_rows)
        return scan_timestamps(features.timestamps(batch.to_pandas()) for batch in batches)
    header = pd.read_csv(path, nrows=0).columns
    column = "timestamp" if "timestamp" in header else "time"
    reader = pd.read_csv(path, usecols=[column], chunksize=batch_rows)
    return scan_timestamps(features.timestamps(chunk) for chunk in reader)


def _wanted(available: set[str]) -> list[str]:
    host = [name for name in features.HOST_COLUMNS if name in available][:1]
    names = [*ID_COLUMNS, *host, *features.SOURCE_METRICS, *features.ALIASES]
    if "timestamp" not in available and "time" in available:
        names.append("time")
    seen: list[str] = []
    for name in names:
        if name in available and name not in seen:
            seen.append(name)
    return seen


def read_truth(directory: Path) -> Truth:
    path = directory / "truth.json"
    if not path.exists():
        raise DatasetError(f"{directory} has no truth.json")
    raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return truth_from_dict(raw)


def truth_from_dict(raw: dict[str, Any]) -> Truth:
    """Failures (past and pending), repairs and traps from the simulator's `truth.json` layout."""
    rows: list[dict[str, Any]] = []
    for record in raw.get("failures", []):
        rows.append(
            {
                "id": record["id"],
                "node": record["node"],
                "gpu": int(record["gpu"]),
                "uuid": record.get("uuid") or "",
                "mode": record.get("mode", ""),
                "failure_time": float(record["failure_time_ts"]),
                "precursor_start": _float(record.get("precursor_start_ts")),
                "fault_class": record.get("expected_class") or record.get("fault_class", ""),
                "pending": False,
            }
        )
    for i, record in enumerate(raw.get("pending", [])):
        xid = int(record.get("xid", 0))
        hardware = xid in features.XID_HARDWARE
        rows.append(
            {
                "id": f"P{i + 1:05d}",
                "node": record["node"],
                "gpu": int(record["gpu"]),
                "uuid": record.get("uuid") or "",
                "mode": record.get("mode", ""),
                "failure_time": float(record["failure_time_ts"]),
                "precursor_start": _float(record.get("precursor_start_ts")),
                # A pending failure's class is not resolved yet; its XID's group says which side it falls.
                "fault_class": "reset-gpu" if hardware else "restart-workload",
                "pending": True,
            }
        )
    failures = pd.DataFrame(rows, columns=list(history.FAILURE_COLUMNS))
    repairs = pd.DataFrame(
        [
            {"node": op["node"], "time": float(op["time_ts"]), "kind": op["kind"]}
            for op in raw.get("ops", [])
            if op.get("kind") in ("reboot", "replace")
        ],
        columns=["node", "time", "kind"],
    )
    return Truth(
        start=_timestamp(raw.get("start")),
        end=_timestamp(raw.get("now")),
        failures=failures,
        repairs=repairs,
        traps=_traps(raw),
    )


TRAP_COLUMNS: tuple[str, ...] = ("kind", "node", "gpu", "uuid", "start", "until")


def _traps(raw: dict[str, Any]) -> pd.DataFrame:
    """One row per trap: kind, node, gpu (-1: every GPU of the node), uuid ('' when by slot), and for an
    episode (a precursor that recovered) its `start` and `until` (Unix seconds; NaN for a standing trap)."""
    rows: list[dict[str, Any]] = []
    buggy_jobs = set()
    for trap in raw.get("traps", []):
        if trap["kind"] == "app-xid-job":
            buggy_jobs.add(trap.get("job"))
            continue
        gpu = trap.get("gpu")
        rows.append(
            {
                "kind": trap["kind"],
                "node": trap.get("node") or "",
                "gpu": -1 if gpu is None else int(gpu),
                "uuid": trap.get("uuid") or "",
                "start": _float(trap.get("time_ts")),
                "until": _float(trap.get("until_ts")),
            }
        )
    # A buggy job's XIDs follow the job: the GPUs they landed on are traps for the model.
    for record in raw.get("app_xids", []):
        if record.get("buggy_job") or record.get("job") in buggy_jobs:
            rows.append(
                {
                    "kind": "app-xid-job",
                    "node": record["node"],
                    "gpu": int(record["gpu"]),
                    "uuid": record.get("uuid") or "",
                    "start": float("nan"),
                    "until": float("nan"),
                }
            )
    return pd.DataFrame(rows, columns=list(TRAP_COLUMNS)).drop_duplicates(ignore_index=True)


def _float(value: Any) -> float:
    return float(value) if value is not None else float("nan")


def _timestamp(value: Any) -> float:
    if value is None:
        return float("nan")
    return float(pd.Timestamp(value).timestamp())


def data_hash(paths: Iterable[Path]) -> str:
    """sha256 over the files' names and bytes, in the order given."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def dataset_hash(directories: Sequence[Path]) -> str:
    files: list[Path] = []
    for directory in directories:
        files.extend([timeseries_path(directory), directory / "truth.json"])
    return data_hash(files)


# How long after an episode trap stops its rows are still its own: the features' longest short window
# (24 h: remapped-row growth, SBE persistence, link rates) still holds the episode's counts for a day, so a
# flag in that day is the episode's doing, not the standing trap's (or no trap's) the GPU is otherwise.
EPISODE_TAIL_S = 86400.0


def trap_kinds(traps: pd.DataFrame, rows: pd.DataFrame) -> npt.NDArray[np.object_]:
    """For each row (node, gpu, uuid, timestamp), the kind of trap its GPU is at that time, or ''.

    A standing trap (no `start`: a hot rack, chronic SBE, background link noise, a buggy job's GPU) holds
    for every row of its GPU (found by UUID, then slot, then node). An episode (`start`..`until`: a
    precursor that recovered) holds from its start to `EPISODE_TAIL_S` after it stops and overrides a
    standing kind there: a GPU can be both, and an alarm is the trap's it was raised under."""
    kinds = np.full(len(rows), "", dtype=object)
    if traps.empty or rows.empty:
        return kinds
    episodic = pd.to_numeric(traps["start"], errors="coerce").notna() if "start" in traps else None
    standing = traps if episodic is None else traps[~episodic]
    slot = rows["node"].astype(str) + "/" + rows["gpu"].astype(np.int64).astype(str)
    records = [{str(k): v for k, v in r.items()} for r in standing.to_dict("records")]
    by_uuid = {r["uuid"]: r["kind"] for r in records if r["uuid"]}
    by_slot = {
        f"{r['node']}/{int(r['gpu'])}": r["kind"] for r in records if not r["uuid"] and int(r["gpu"]) >= 0
    }
    by_node = {r["node"]: r["kind"] for r in records if not r["uuid"] and int(r["gpu"]) < 0}
    for keys, mapping in (
        (rows["uuid"].astype(str), by_uuid),
        (slot, by_slot),
        (rows["node"].astype(str), by_node),
    ):
        found = keys.map(mapping).to_numpy(dtype=object)
        fill = (kinds == "") & pd.notna(found)
        kinds[fill] = found[fill]
    if episodic is not None and episodic.any():
        t = pd.to_numeric(rows["timestamp"]).to_numpy(dtype=np.float64)
        uuid = rows["uuid"].astype(str).to_numpy()
        slots = slot.to_numpy()
        for record in traps[episodic].to_dict("records"):
            gpu = (
                uuid == record["uuid"]
                if record["uuid"]
                else slots == f"{record['node']}/{int(record['gpu'])}"
            )
            until = float(record["until"]) if pd.notna(record["until"]) else np.inf
            kinds[gpu & (t >= float(record["start"])) & (t <= until + EPISODE_TAIL_S)] = record["kind"]
    return kinds
