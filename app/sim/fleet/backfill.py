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

It reads a dataset and writes files and blocks; it never touches a running Prometheus. This module cuts
the windows and runs the backfill; reading them is `backfill_source`'s, the text `backfill_text`'s, the
blocks `promtool`'s, and the figures `backfill_results`'.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from pathlib import Path
from typing import get_args

from app.sim.fleet.backfill_results import BackfillError, BackfillStats
from app.sim.fleet.backfill_source import open_source, step_s
from app.sim.fleet.backfill_text import HostLabel, write_window
from app.sim.fleet.promtool import Promtool, find_promtool

# What the simulator's command line and the demo use, from here.
__all__ = ["BackfillError", "BackfillStats", "HostLabel", "backfill", "dataset_host_label", "find_promtool"]

BLOCK_BASE_S = 2 * 3600.0  # promtool's (and Prometheus') smallest block; larger ones are 3^k times it
BLOCK_LEVELS = 10
WINDOW_SAMPLES = 20_000_000  # per promtool run: ~2.5 GB of text, a block promtool holds in memory


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


def _windows(start: float, end: float, block_s: float) -> list[tuple[float, float]]:
    first = math.floor(start / block_s)
    last = math.floor(end / block_s)
    return [(k * block_s, (k + 1) * block_s) for k in range(first, last + 1)]


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
    runner = Promtool(promtool, tsdb_dir, block_s=block_s, jobs=jobs)
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
        step_s=step_s(source.timestamps),
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
