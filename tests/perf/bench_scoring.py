"""Scoring cycle cost against a real Prometheus, by fleet size, next to a per-node-query baseline.

For each fleet size (500, 1,000, 2,000 nodes x 8 GPUs by default) a synthetic history of plausible DCGM
series (every source metric the predictor reads; a few GPUs with ECC trickles, PCIe replays, link errors
and XIDs; short exporter gaps) is generated, backfilled into a fresh TSDB with `app.sim.fleet.backfill`,
and served by a real Prometheus. Then, each in its own process (so its peak RSS is its own), with the
shipped model (`models/`) and scoring on one thread, as `sickbay serve` runs it:

- cold: `ScoringService.run_once(now)` on a fresh `RecentWindow`: the whole look-back, one range query
  per source metric for the whole fleet;
- warm: the next cycle, one step later: only the new step is read, the window is kept in memory;
- baseline: the same cycles with one query per metric PER NODE (`Reader.read` narrowed to one host,
  `hosts=[...]`, so each query carries a `Hostname=~"..."` matcher, looped over the nodes). At large sizes it runs on a random sample of nodes
  (`--baseline-nodes`) and its read time is scaled to the fleet (reads of different nodes are independent;
  the scoring part is the same code on the same frame, so the cold/warm scoring time is added as is):
  such figures are marked `~`.

The look-back is 3 h by default (`--lookback-hours`), not the shipped 7 days: 7 days at 5-min steps for
2,000 nodes is ~770M samples, beyond a 2-core machine's budget for a benchmark (3 h keeps the whole run
near 5 minutes; 6 h near 10). A cold cycle reads (and parses) every sample of the look-back, so its cost
grows linearly with look-back x GPUs; a warm cycle reads one step whatever the look-back, but the window
kept in memory is regridded and featurised whole every cycle, which also grows with the look-back.

    python -m tests.perf scoring                              # via the runner, like `make bench`
    python -m tests.perf.bench_scoring --quick                # 20 and 40 nodes, 2 h: a smoke run
    python -m tests.perf.bench_scoring --nodes 200 --lookback-hours 24
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from app import dcgm_fields
from app.config.settings import PredictionSettings
from app.demo.processes import free_port
from app.predict import features, prometheus, promql, recent_window, service
from app.sim.fleet import backfill
from tests.perf import machine
from tests.prom import backfilled_prometheus

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "out" / "bench" / "scoring.json"
MODELS = REPO / "models"
PROMETHEUS = Path("/usr/bin/prometheus")
SIZES = (500, 1000, 2000)
QUICK_SIZES = (20, 40)
GPUS_PER_NODE = 8
STEP_S = 300.0
START = 1_735_689_600.0  # 2025-01-01T00:00:00Z
BASELINE_NODES = 100


# -- synthetic DCGM history -----------------------------------------------------------------------------


def synthesise(
    directory: Path, *, nodes: int, steps: int, seed: int = 0, gap_share: float = 0.005
) -> pd.DataFrame:
    """A dataset directory (`timeseries.parquet`) of `nodes` x 8 GPUs at `steps` instants, 5 min apart.

    Vectorised, seconds for millions of rows. Per GPU: utilisation with a per-GPU level and noise, GPU and
    memory temperatures that follow it, power-capping throttle reasons when busy, energy and violation
    counters; 2% of GPUs trickle single-bit ECC errors (a few grow remapped rows), 1% replay PCIe
    packets, 1% see NVLink CRC errors, 0.5% have XIDs (mostly workload ones, a few 79/48). 0.5% of nodes
    have their exporter down for 15-30 minutes (present=0, no values; `gap_share`). Returns the node names.
    """
    rng = np.random.default_rng(seed)
    g = nodes * GPUS_PER_NODE
    t = START + STEP_S * np.arange(steps)

    def per_gpu(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return np.broadcast_to(values, (steps, g))

    def trickle(share: float, rate: float) -> npt.NDArray[np.int64]:
        """Cumulative Poisson counts, non-zero for `share` of the GPUs."""
        affected = rng.random(g) < share
        lam = np.where(affected, rng.exponential(rate, g), 0.0)
        return np.cumsum(rng.poisson(per_gpu(lam)), axis=0, dtype=np.int64)

    level = rng.uniform(0, 100, g)
    util = np.clip(level + rng.normal(0, 12, (steps, g)), 0, 100).round()
    rack = rng.normal(0, 3, g)
    gpu_temp = (33 + 0.35 * util + rack + rng.normal(0, 1.5, (steps, g))).round()
    mem_temp = (gpu_temp + 9 + rng.normal(0, 1.5, (steps, g))).round()
    capped = (util > 90) & (rng.random((steps, g)) < 0.2)
    throttle = np.where(capped, dcgm_fields.THROTTLE_SW_POWER_CAP, 0)
    power_w = 80 + 6 * util
    energy = rng.integers(10**9, 10**11, g) + np.cumsum(power_w * STEP_S * 1000, axis=0).astype(np.int64)
    sbe = trickle(0.02, 0.5)
    rows_remapped = np.minimum(sbe // 50, 512)
    xid = np.zeros((steps, g), dtype=np.int64)
    xid_gpus = np.flatnonzero(rng.random(g) < 0.005)
    for i in xid_gpus:
        at = int(rng.integers(0, steps))
        xid[at:, i] = rng.choice([13, 31, 43, 79, 48], p=[0.4, 0.3, 0.2, 0.05, 0.05])
    present = np.ones((steps, g), dtype=bool)
    for node in np.flatnonzero(rng.random(nodes) < gap_share):
        at = int(rng.integers(0, steps))
        present[at : at + int(rng.integers(3, 7)), node * GPUS_PER_NODE : (node + 1) * GPUS_PER_NODE] = False
    zeros = np.zeros((steps, g), dtype=np.int64)
    columns: dict[str, npt.NDArray[Any]] = {
        features.SBE_VOL: sbe,
        features.SBE_AGG: sbe,
        features.DBE_VOL: zeros,
        features.DBE_AGG: zeros,
        features.ROWS_CORRECTABLE: rows_remapped,
        features.ROWS_UNCORRECTABLE: zeros,
        features.REMAP_PENDING: zeros,
        features.REMAP_FAILURE: zeros,
        features.RETIRED_PENDING: zeros,
        features.RETIRED_SBE: zeros,
        features.RETIRED_DBE: zeros,
        features.GPU_TEMP: gpu_temp,
        features.MEMORY_TEMP: mem_temp,
        features.GPU_UTIL: util,
        features.THROTTLE: throttle,
        features.THERMAL_VIOLATION: trickle(0.01, 2e5),
        features.POWER_VIOLATION: np.cumsum(np.where(capped, 60_000_000, 0), axis=0),
        features.PCIE_REPLAY: trickle(0.01, 3.0),
        features.NVLINK_CRC_FLIT: trickle(0.01, 5.0),
        features.NVLINK_CRC_DATA: trickle(0.005, 1.0),
        features.NVLINK_REPLAY: trickle(0.005, 0.5),
        features.NVLINK_RECOVERY: zeros,
        features.XID: xid,
        features.ENERGY: energy,
    }
    names = np.array([f"gpu-node-{i:05d}" for i in range(nodes)], dtype=object)
    uuids = np.array([f"GPU-{seed:04x}{i:08x}-5eed-4b6e-9d1c-{i * 7919 % 16**12:012x}" for i in range(g)])
    mask = present.ravel()
    table = {
        "timestamp": pa.array(np.repeat(t, g)),
        "node": pa.array(np.tile(np.repeat(names, GPUS_PER_NODE), steps)),
        "gpu": pa.array(np.tile(np.tile(np.arange(GPUS_PER_NODE), nodes), steps)),
        "uuid": pa.array(np.tile(uuids, steps)),
        "present": pa.array(mask.astype(np.int64)),
    }
    for name in features.SOURCE_METRICS:
        values = np.asarray(columns[name], dtype=np.int64).ravel()
        table[name] = pa.array(values, mask=~mask)
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(table), directory / "timeseries.parquet", row_group_size=200_000)
    return pd.DataFrame({"node": names})


# -- one measured process -------------------------------------------------------------------------------


class CountingReader(prometheus.Reader):
    """A `Reader` that counts the samples its reads returned."""

    samples = 0

    def read(self, start: datetime, end: datetime, **kwargs: Any) -> pd.DataFrame:
        frame = super().read(start, end, **kwargs)
        metrics = [m for m in self.settings.metrics if m in frame.columns]
        self.samples += int(frame[metrics].notna().to_numpy().sum())
        return frame


class PerNodeReader(CountingReader):
    """The baseline: the same reads, one query per metric per node (each read narrowed to one host)."""

    def __init__(self, settings: prometheus.ReaderSettings, *, nodes: Sequence[str]) -> None:
        super().__init__(settings)
        self.one_each = [promql.HostRef(node=node, label="Hostname", value=node) for node in nodes]

    def read(self, start: datetime, end: datetime, **kwargs: Any) -> pd.DataFrame:
        read = super().read
        return pd.concat([read(start, end, hosts=[host]) for host in self.one_each], ignore_index=True)


def child_main(args: argparse.Namespace) -> None:
    """Cold then warm cycle in this process; prints one JSON line with the figures."""
    settings = prometheus.ReaderSettings(
        url=args.url,
        step_s=STEP_S,
        lookback_s=args.lookback_hours * 3600,
        mmap_threshold_bytes=PredictionSettings().mmap_threshold_bytes,  # as `sickbay serve` reads
    )
    nodes = json.loads(args.nodes_json) if args.nodes_json else None
    reader = PerNodeReader(settings, nodes=nodes) if nodes is not None else CountingReader(settings)
    window = recent_window.RecentWindow(reader)
    read_s = [0.0]

    def read_recent(now: datetime) -> pd.DataFrame:
        started = time.perf_counter()
        frame = window.refresh(now)
        read_s[0] += time.perf_counter() - started
        return frame

    # What `ScoringService.from_prometheus` builds, with the reader kept in reach for its counts.
    scoring = service.ScoringService(models_dir=args.models, read_recent=read_recent, threads=1)
    if scoring.reload() is None:
        raise SystemExit(f"no usable model in {args.models}")
    out: dict[str, Any] = {}
    for name, at in (("cold", args.now), ("warm", args.now + STEP_S)):
        queries, samples, read_s[0] = reader.queries, reader.samples, 0.0
        started = time.perf_counter()
        cycle = scoring.run_once(datetime.fromtimestamp(at, UTC))
        seconds = time.perf_counter() - started
        if cycle.status is not service.CycleStatus.SCORED or cycle.scores is None:
            raise SystemExit(f"{name} cycle not scored: {cycle.status} {cycle.reason}")
        out[name] = {
            "seconds": seconds,
            "read_s": read_s[0],
            "score_s": seconds - read_s[0],
            "queries": reader.queries - queries,
            "samples": reader.samples - samples,
            "gpus": len(cycle.scores.gpus),
            "nodes": len(cycle.scores.nodes),
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    print(json.dumps(out))


def run_child(
    url: str, *, now: float, args: argparse.Namespace, nodes: Sequence[str] | None
) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "tests.perf.bench_scoring",
        "--child",
        "--url",
        url,
        "--now",
        repr(now),
        "--lookback-hours",
        repr(args.lookback_hours),
        "--models",
        str(args.models),
    ]
    env = dict(os.environ)
    if nodes is not None:
        env["SICKBAY_BENCH_NODES"] = json.dumps(list(nodes))
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"measurement failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the runs -------------------------------------------------------------------------------------------


@dataclass
class Row:
    nodes: int
    gpus: int
    history_samples: int
    backfill_s: float
    bytes_per_sample: float
    backfill: dict[str, Any]
    cold: dict[str, Any]
    warm: dict[str, Any]
    baseline_nodes: int
    baseline: dict[str, Any] = field(default_factory=dict)
    baseline_cold_s: float = 0.0
    baseline_warm_s: float = 0.0
    baseline_queries: int = 0

    @property
    def scaled(self) -> bool:
        return self.baseline_nodes < self.nodes


def run_size(nodes: int, *, args: argparse.Namespace, tmp: Path, port: int) -> Row:
    steps = int(args.lookback_hours * 3600 / STEP_S) + 2  # the look-back, its end, and one more step
    directory = tmp / f"fleet-{nodes}"
    names = synthesise(directory, nodes=nodes, steps=steps, seed=nodes)["node"].tolist()
    now = START + STEP_S * (steps - 2)
    stats: list[backfill.BackfillStats] = []
    serving = tmp / f"prom-{nodes}"
    serving.mkdir()
    with backfilled_prometheus(
        directory,
        serving,
        prometheus=args.prometheus,
        promtool=args.promtool,
        port=port,
        stats=stats,
    ) as url:
        (fill,) = stats
        main = run_child(url, now=now, args=args, nodes=None)
        k = min(nodes, args.baseline_nodes) if args.baseline_nodes > 0 else nodes
        sample = sorted(np.random.default_rng(nodes).choice(names, size=k, replace=False).tolist())
        base = run_child(url, now=now, args=args, nodes=sample)
    scale = nodes / k
    row = Row(
        nodes=nodes,
        gpus=nodes * GPUS_PER_NODE,
        history_samples=fill.samples,
        backfill_s=fill.elapsed_s,
        bytes_per_sample=fill.bytes_per_sample,
        backfill={k: v for k, v in fill.as_dict().items() if k != "families"},
        cold=main["cold"],
        warm=main["warm"],
        baseline_nodes=k,
        baseline=base,
    )
    scored = main if k < nodes else base
    row.baseline_cold_s = base["cold"]["read_s"] * scale + scored["cold"]["score_s"]
    row.baseline_warm_s = base["warm"]["read_s"] * scale + scored["warm"]["score_s"]
    row.baseline_queries = round(base["cold"]["queries"] * scale)
    print(
        f"  {nodes:,} nodes: backfill {fill.samples:,} samples in {fill.elapsed_s:.1f}s, cold "
        f"{row.cold['seconds']:.1f}s, warm {row.warm['seconds']:.1f}s, baseline cold {row.baseline_cold_s:.1f}s",
        file=sys.stderr,
    )
    return row


def add_common_options(parser: argparse.ArgumentParser, *, out: Path) -> None:
    """The options this bench and `bench_scoring_scale` share: the model, the binaries, the JSON report
    (`out`, each bench its own file) and the hidden ones the parent passes the child process it starts."""
    parser.add_argument("--models", type=Path, default=MODELS)
    parser.add_argument("--prometheus", type=Path, default=PROMETHEUS)
    parser.add_argument("--promtool", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--now", type=float, help=argparse.SUPPRESS)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_scoring", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--nodes", type=int, action="append", help="fleet size (repeatable; default 500, 1000, 2000)"
    )
    parser.add_argument("--lookback-hours", type=float, default=3.0, help="scoring look-back (default 3)")
    parser.add_argument(
        "--baseline-nodes",
        type=int,
        default=BASELINE_NODES,
        help=f"nodes the per-node baseline really reads, scaled to the fleet (default {BASELINE_NODES}; 0: all)",
    )
    parser.add_argument("--quick", action="store_true", help="20 and 40 nodes, 2 h look-back: a smoke run")
    add_common_options(parser, out=OUT)
    args = parser.parse_args(list(argv))
    if args.quick:
        args.nodes = args.nodes or list(QUICK_SIZES)
        args.lookback_hours = min(args.lookback_hours, 2.0)
    args.nodes = args.nodes or list(SIZES)
    args.promtool = backfill.find_promtool(args.promtool)
    args.nodes_json = os.environ.get("SICKBAY_BENCH_NODES")
    return args


def main(argv: Sequence[str] | None = None) -> Group:
    args = parse_args(argv or [])
    load_at_start = os.getloadavg()
    if not args.prometheus.exists():
        raise SystemExit(f"{args.prometheus} is missing (Debian package `prometheus`)")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="sickbay-bench-scoring-") as tmpdir:
        for nodes in args.nodes:
            rows.append(run_size(nodes, args=args, tmp=Path(tmpdir), port=free_port()))
    report = {
        "benchmark": "scoring",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine.describe(load_at_start),
        "config": {
            "lookback_hours": args.lookback_hours,
            "step_s": STEP_S,
            "gpus_per_node": GPUS_PER_NODE,
            "scoring_threads": 1,
            "baseline_nodes": args.baseline_nodes,
        },
        "rows": [asdict(row) for row in rows],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return render(rows, args, load=(load_at_start, os.getloadavg()))


def render(
    rows: Sequence[Row], args: argparse.Namespace, *, load: tuple[tuple[float, ...], tuple[float, ...]]
) -> Group:
    table = Table(
        title=(
            f"Scoring cycle: {args.lookback_hours:g} h look-back at {STEP_S:g} s steps, shipped model, "
            f"1 scoring thread, {os.cpu_count()} CPUs"
        )
    )
    for column in (
        "nodes",
        "GPUs",
        "samples read",
        "queries",
        "cold s",
        "warm s",
        "peak MiB",
        "baseline queries",
        "baseline cold s",
        "baseline warm s",
        "ratio cold",
        "ratio warm",
    ):
        table.add_column(column, justify="right")
    where = Table(title="Where the time goes (s), and the backfill")
    for column in (
        "nodes",
        "cold read",
        "cold score",
        "warm read",
        "warm score",
        "warm samples",
        "backfill s",
        "history samples",
        "B/sample",
        "samples/s",
    ):
        where.add_column(column, justify="right")
    for row in rows:
        mark = "~" if row.scaled else ""
        table.add_row(
            f"{row.nodes:,}",
            f"{row.gpus:,}",
            f"{row.cold['samples']:,}",
            str(row.cold["queries"]),
            f"{row.cold['seconds']:.1f}",
            f"{row.warm['seconds']:.1f}",
            f"{row.warm['peak_mib']:.0f}",
            f"{mark}{row.baseline_queries:,}",
            f"{mark}{row.baseline_cold_s:.1f}",
            f"{mark}{row.baseline_warm_s:.1f}",
            f"{mark}{row.baseline_cold_s / row.cold['seconds']:.1f}x",
            f"{mark}{row.baseline_warm_s / row.warm['seconds']:.1f}x",
        )
        where.add_row(
            f"{row.nodes:,}",
            f"{row.cold['read_s']:.1f}",
            f"{row.cold['score_s']:.1f}",
            f"{row.warm['read_s']:.1f}",
            f"{row.warm['score_s']:.1f}",
            f"{row.warm['samples']:,}",
            f"{row.backfill_s:.1f}",
            f"{row.history_samples:,}",
            f"{row.bytes_per_sample:.0f}",
            f"{row.history_samples / row.backfill_s:,.0f}",
        )
    lines = [
        Text(
            "cold: a fresh window reads the whole look-back (one range query per metric for the fleet); warm: the "
            "next cycle reads one new step and scores the window kept in memory; read = Prometheus + parsing + "
            "the window's regridding; peak: the process' max RSS over both cycles (Python, pandas, the model "
            "and the window)."
        ),
        Text(
            "baseline: the same cycle with one query per metric per node; ratio = baseline / fleet-wide, "
            f"> 1 means the fleet-wide queries win. ~ = per-node reads timed on {args.baseline_nodes} random "
            "nodes and scaled to the fleet, plus the same scoring time."
        ),
    ]
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        growth = last.nodes / first.nodes
        lines.append(
            Text(
                f"{first.nodes:,} → {last.nodes:,} nodes (x{growth:g}): cold x"
                f"{last.cold['seconds'] / first.cold['seconds']:.2f}, warm x"
                f"{last.warm['seconds'] / first.warm['seconds']:.2f}, peak x"
                f"{last.warm['peak_mib'] / first.warm['peak_mib']:.2f}"
            )
        )
    lines.append(
        Text(
            "With the look-back: a cold cycle reads GPUs x look-back/step x 24 samples (linear); a warm one reads "
            "one step, paying per series (GPUs x 24) whatever the look-back, then regrids and featurises the "
            "whole window (linear).",
            style="dim",
        )
    )
    lines.append(
        Text(
            f"load average {load[0][0]:.1f} at start, {load[1][0]:.1f} at end: other processes share the CPUs.",
            style="dim",
        )
    )
    lines.append(Text(f"written to {args.out}", style="dim"))
    return Group(table, where, *lines)


if __name__ == "__main__":
    _args = parse_args(sys.argv[1:])
    if _args.child:
        child_main(_args)
    else:
        (Console() if sys.stdout.isatty() else Console(width=160)).print(main(sys.argv[1:]))
