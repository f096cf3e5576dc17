"""Fleets for the scale benchmark built as copies of one base fleet, and their recorded series.

A fleet of `copies x base` nodes is `copies` renamed copies of the base fleet's history (`bench_scoring.
synthesise` with seed 0): node `i` of copy `c` is `gpu-node-{c*base + i:05d}`, its GPUs' UUIDs carry `c` where
the base's carry the seed. Copy 0 is the base itself.

Every recording rule is per GPU (level `gpu`: no aggregation across GPUs, `recorded_rules`), so a copied
GPU's recorded series are exactly the base GPU's, renamed: the benchmark has Prometheus evaluate the rules
over the base fleet's real raw history (`evaluate_on_grid`), reads the recorded series back (`export`), and
writes them for every copy (`write_copies`) instead of evaluating the rules over a raw week it cannot afford
to hold at 10,000 nodes. `--verify` checks this at a small size against the rules evaluated over the copied
fleet's own raw week.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from app.predict import features

HOST = "Hostname"
_NODE = re.compile(r"^(.*-)(\d+)$")


def copy_node(name: str, copy: int, base: int) -> str:
    head, index = _NODE.match(name).groups()  # type: ignore[union-attr]
    return f"{head}{copy * base + int(index):0{len(index)}d}"


def copy_uuid(uuid: str, copy: int) -> str:
    """The base's UUIDs are `GPU-{seed:04x}{index:08x}-...`: the copy takes the seed's place."""
    return f"GPU-{copy:04x}{uuid[8:]}" if uuid.startswith("GPU-") else f"{uuid}-{copy}"


def tile_dataset(base_dir: Path, out_dir: Path, *, copies: int, base: int, since: float) -> int:
    """A dataset directory holding `copies` copies of the base dataset's rows from `since` on; its rows."""
    table = pq.read_table(base_dir / "timeseries.parquet", filters=[("timestamp", ">=", since)])
    node_codes, node_names = pd.factorize(table.column("node").to_pandas())
    uuid_codes, uuid_names = pd.factorize(table.column("uuid").to_pandas())
    parts = []
    for c in range(copies):
        nodes = np.array([copy_node(str(n), c, base) for n in node_names], dtype=object)[node_codes]
        uuids = np.array([copy_uuid(str(u), c) for u in uuid_names], dtype=object)[uuid_codes]
        parts.append(
            table.set_column(table.schema.get_field_index("node"), "node", pa.array(nodes)).set_column(
                table.schema.get_field_index("uuid"), "uuid", pa.array(uuids)
            )
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    tiled = pa.concat_tables(parts)
    pq.write_table(tiled, out_dir / "timeseries.parquet", row_group_size=200_000)
    return int(tiled.num_rows)


@dataclass(frozen=True, slots=True)
class Recorded:
    """One recorded series read back: its labels (with `__name__`) and its points as text."""

    labels: tuple[tuple[str, str], ...]
    points: tuple[tuple[float, str], ...]


def export(url: str, starts: Mapping[str, float], *, end: float, step_s: float) -> list[Recorded]:
    """Every series of each record from its start to `end` (a range query per record, at the rules' step)."""
    out: list[Recorded] = []
    for name, start in starts.items():
        answer = _query_range(url, name, start=start, end=end, step_s=step_s, timeout=600, what=name)
        out.extend(_named(name, answer))
    return out


def evaluate_on_grid(
    url: str, record: str, expr: str, *, start: float, end: float, step_s: float
) -> list[Recorded]:
    """What a recording rule evaluated at `start`, `start + step`, ... `end` writes: the expression's result
    as a range query (each step evaluated as an instant query is), named `record`."""
    answer = _query_range(url, expr, start=start, end=end, step_s=step_s, timeout=1800, what=record)
    return _named(record, answer)


def _query_range(
    url: str, query: str, *, start: float, end: float, step_s: float, timeout: float, what: str
) -> list[dict[str, Any]]:
    """The result matrix of a range query, POSTed (a rule's expression can outgrow a URL)."""
    params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}s"}
    data = urllib.parse.urlencode(params).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query_range", data=data, timeout=timeout) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"{what}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _named(name: str, answer: Iterable[dict[str, Any]]) -> list[Recorded]:
    """The answer's series as the record `name` would store them."""
    return [
        Recorded(
            labels=tuple(sorted({**one["metric"], "__name__": name}.items())),
            points=tuple((float(t), str(v)) for t, v in one["values"]),
        )
        for one in answer
    ]


def _label_text(labels: Iterable[tuple[str, str]], copy: int, base: int | None) -> str:
    parts = []
    for key, value in labels:
        if key == "__name__":
            continue
        text = value
        if base is None:
            pass
        elif key == HOST or key in features.HOST_COLUMNS:
            text = copy_node(value, copy, base)
        elif key == "UUID":
            text = copy_uuid(value, copy)
        parts.append(f'{key}="{text}"')
    return ",".join(parts)


def thin(series: Iterable[Recorded], keep: Mapping[str, frozenset[float]]) -> list[Recorded]:
    """Each series with only the points at its record's instants in `keep` (all of a record not there)."""
    out = []
    for one in series:
        wanted = keep.get(dict(one.labels)["__name__"])
        points = one.points if wanted is None else tuple(p for p in one.points if p[0] in wanted)
        out.append(Recorded(labels=one.labels, points=points))
    return out


def write_copies(
    series: Sequence[Recorded], path: Path, *, copies: int, base: int | None, first: int = 0
) -> int:
    """The series for copies `first` .. `copies - 1` as one OpenMetrics file (each family once, series
    contiguous); samples. `base=None`: the series as they are (one copy, labels unchanged)."""
    by_name: dict[str, list[Recorded]] = {}
    for one in series:
        by_name.setdefault(dict(one.labels)["__name__"], []).append(one)
    samples = 0
    with path.open("w", encoding="utf-8") as out:
        for name, members in by_name.items():
            out.write(f"# TYPE {name} unknown\n")
            tails = [[f" {v} {int(t)}\n" for t, v in one.points] for one in members]
            for c in range(first, copies):
                for one, tail in zip(members, tails, strict=True):
                    prefix = f"{name}{{{_label_text(one.labels, c, base)}}}"
                    out.write("".join(prefix + piece for piece in tail))
                    samples += len(tail)
        out.write("# EOF\n")
    return samples


def values(series: Iterable[Recorded]) -> dict[tuple[tuple[tuple[str, str], ...], float], float]:
    return {(one.labels, t): float(v) for one in series for t, v in one.points}


def compare(expected: Iterable[Recorded], got: Iterable[Recorded]) -> dict[str, Any]:
    """Points compared, those that differ (or one side lacks), the largest absolute difference, and the
    records the differing points belong to."""
    want, have = values(expected), values(got)
    bad = set(want) ^ set(have)
    worst = 0.0
    for key in set(want) & set(have):
        a, b = want[key], have[key]
        if np.isnan(a) and np.isnan(b):
            continue
        diff = abs(a - b)
        worst = max(worst, diff if np.isfinite(diff) else np.inf)
        if not diff <= 1e-9 * max(1.0, abs(a)):
            bad.add(key)
    records = Counter(dict(labels)["__name__"] for labels, _ in bad)
    return {"points": len(want), "differ": len(bad), "max_abs_diff": worst, "records": dict(records)}
