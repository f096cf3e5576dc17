"""Scoring at fleet scale, full 7-day look-back: the recording rules' path vs the raw path, and the rules' cost.

Real Prometheus, real TSDB blocks (promtool), the shipped model (`models/`), and each Sickbay cycle in its own
process (`ScoringService` with `recorded_reader.FeatureReader`, as `sickbay serve` builds it; one scoring
thread), so its peak RSS is its own (`VmHWM`: a child's `ru_maxrss` starts at its parent's, see `_peak_rss_mib`). A cold cycle at `now`, then a warm one a step later.

- **Raw path** (`--raw-nodes`, default 5 and 10 nodes x 8 GPUs): a synthetic history (`bench_scoring.
  synthesise`, no exporter gaps) of the whole week plus what the rules reach back, backfilled; Prometheus has no
  recorded series, so the reader reads the 7-day look-back raw. At the same sizes every rule's expression is
  evaluated at `now` as an instant query with `stats=all` (the engine's time and samples: what one rule
  evaluation costs), then the rules' series over the instants Sickbay reads are made (`record_on_grid`: each
  expression as a range query on the 5-minute grid, a level at a time, written as blocks), Prometheus restarts
  with them, and the same fleet is scored on the recorded path: recorded vs raw at the same size; the smaller sizes only score the raw path (its growth). At the first
  size, with `--promtool-rules`, `promtool tsdb create-blocks-from rules` (the rules as Prometheus schedules
  them, at the group's hashed offset) is run first and scored too (see `record_on_grid`).
- **Recorded path** (`--nodes`, default 1,000 / 2,000 / 5,000 / 10,000): the fleet is copies of the largest
  raw-path fleet (`scoring_scale_fleet`), and Prometheus holds what the recorded path reads at `now`: the
  exporter's fields at the instants read (from as far back as a rule reading them reaches, so the hourly
  rules' cost is measured at that size) and the recorded series over the instants read (the hourly ones
  over the 6 hours before them). No raw window: the recorded path reads instant vectors only. The
  recorded series are NOT evaluated by Prometheus at these sizes: they are the base fleet's, evaluated over the base's raw week and copied to each renamed GPU (the rules are per GPU, so the values are
  the ones the rules would give; `--verify` checks that at the smallest size against the rules evaluated over
  the copied fleet's own raw week, and `tests/unit` runs it in `--quick`). A rule whose inputs Prometheus
  holds at that size (the level that reads the exporter's last hour) is evaluated there too; one that reads
  other rules' series further back than the instants held is reported from the raw-path sizes (a line
  through them, marked `~`), since its cost grows with the GPUs it reads.

Every GPU is regular (a full week, no resets, no gaps): the recorded path's case. A host that is not is read
raw over the look-back on the recorded path (`recorded_reader`), at the raw path's per-host cost.

    python -m tests.perf scoring_scale                         # via the runner, like `make bench`
    python -m tests.perf.bench_scoring_scale --quick --verify  # 2-node base, 4 nodes: a smoke run
    python -m tests.perf.bench_scoring_scale --raw-nodes 5 --raw-nodes 25 --nodes 100 --budget-s 900
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console, Group

from app.config.settings import PredictionSettings
from app.demo.processes import free_port
from app.predict import features, prometheus, recorded_reader, service
from app.predict import recorded_rules as rr
from app.sim.fleet import backfill
from tests.perf import bench_scoring, machine
from tests.perf import scoring_scale_fleet as fleet
from tests.perf import scoring_scale_rules as rules
from tests.perf.scoring_scale_report import render
from tests.prom import EMPTY_CONFIG, instant_query, lookback_delta, running_prometheus

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "out" / "bench" / "scoring_scale.json"
SIZES = (1000, 2000, 5000, 10000)
RAW_SIZES = (5, 10)
QUICK_SIZES, QUICK_RAW = (4,), (2,)
STEP_S = bench_scoring.STEP_S
START = bench_scoring.START
LOOKBACK_S = 7 * 86400.0
GPUS = bench_scoring.GPUS_PER_NODE
# Nodes' recorded series per OpenMetrics file at the copied sizes: a file's text stays a few GB at 10,000
# nodes. Each file's blocks overlap the others' in time, as they overlap the raw blocks of the same span
# (one file did already); the TSDB merges overlapping blocks at query time (prometheus/tsdb#370).
COPIES_PER_FILE = 1000


# -- one measured process -------------------------------------------------------------------------------


def child_main(args: argparse.Namespace) -> None:
    """A cold then a warm cycle in this process; one JSON line with the figures."""
    settings = prometheus.ReaderSettings(
        url=args.url,
        step_s=STEP_S,
        lookback_s=LOOKBACK_S,
        mmap_threshold_bytes=PredictionSettings().mmap_threshold_bytes,  # as `sickbay serve` reads
    )
    queries = [0]

    def counting(ask: Any) -> Any:
        def counted(self: prometheus.Reader, *a: Any, **k: Any) -> Any:
            queries[0] += 1
            return ask(self, *a, **k)

        return counted

    # Every reader the path makes, both kinds of range query.
    prometheus.Reader.query_range = counting(prometheus.Reader.query_range)  # type: ignore[method-assign]
    prometheus.Reader.range_samples = counting(prometheus.Reader.range_samples)  # type: ignore[method-assign]
    reader = recorded_reader.FeatureReader(prometheus.Reader(settings))
    seen: list[recorded_reader.FeatureRead] = []
    read_s = [0.0]

    def read(now: datetime, tail_s: float) -> recorded_reader.FeatureRead:
        started = time.perf_counter()
        out = reader.read(now, tail_s)
        read_s[0] += time.perf_counter() - started
        seen.append(out)
        return out

    scoring = service.ScoringService(models_dir=args.models, read_features=read, threads=1)
    if scoring.reload() is None:
        raise SystemExit(f"no usable model in {args.models}")
    out: dict[str, Any] = {}
    high_water = 0.0  # the process' peak before the last reset of the kernel's mark
    for name, at in (("cold", args.now), ("warm", args.now + STEP_S)):
        queries[0], read_s[0] = 0, 0.0
        seen.clear()  # the last cycle's read is the service's to keep or let go, not the benchmark's
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        prometheus_cpu = _prometheus_cpu_s(args.url)
        high_water = max(high_water, _peak_rss_mib())
        own_peak = _reset_peak_rss()
        started = time.perf_counter()
        cycle = scoring.run_once(datetime.fromtimestamp(at, UTC))
        seconds = time.perf_counter() - started
        used = resource.getrusage(resource.RUSAGE_SELF)
        prometheus_used = _prometheus_cpu_s(args.url) - prometheus_cpu
        if cycle.status is not service.CycleStatus.SCORED or cycle.scores is None:
            raise SystemExit(f"{name} cycle not scored: {cycle.status} {cycle.reason}")
        got = seen[-1]
        metrics = [m for m in got.frame.columns if m in set(features.SOURCE_METRICS) | set(features.ALIASES)]
        out[name] = {
            "seconds": seconds,
            "read_s": read_s[0],
            "score_s": seconds - read_s[0],
            # Sickbay's own CPU for the cycle (user + system), apart from Prometheus' answering.
            "cpu_s": used.ru_utime - cpu.ru_utime + used.ru_stime - cpu.ru_stime,
            # Prometheus' CPU over the cycle (its own process_cpu_seconds_total, read before and after): what
            # answering the cycle's queries costs it, apart from Sickbay's, so the cycle's floor with
            # Prometheus on cores of its own can be told from this machine's, where both share two.
            "prometheus_cpu_s": prometheus_used,
            "queries": queries[0],
            "path": got.path,
            "raw_hosts": got.raw_hosts,
            "window_samples": int(got.frame[metrics].notna().to_numpy().sum()) if metrics else 0,
            "gpus": len(cycle.scores.gpus),
            "nodes": len(cycle.scores.nodes),
            # The process' high-water mark over every cycle so far (the kernel's mark is reset before each).
            "peak_mib": max(high_water, _peak_rss_mib()),
            # This cycle's own peak (the mark reset before it), NaN where the kernel would not reset it.
            "cycle_peak_mib": _peak_rss_mib() if own_peak else math.nan,
            "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    print(json.dumps(out))


def _prometheus_cpu_s(url: str) -> float:
    """Prometheus' own `process_cpu_seconds_total` (NaN when it cannot be read)."""
    try:
        return prometheus_own(url, "process_cpu_seconds_total", timeout_s=10)
    except OSError:
        return math.nan


def prometheus_own(url: str, name: str, *, timeout_s: float) -> float:
    """One of Prometheus' own metrics, from its /metrics (NaN when it has none of that name)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=timeout_s) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
    return math.nan


def _reset_peak_rss() -> bool:
    """Reset this process' `VmHWM` to its current RSS (proc(5), /proc/PID/clear_refs: "5 (since Linux
    4.0) Reset the peak resident set size"), so the next reading is one cycle's peak; False where the
    kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_rss_mib() -> float:
    """This process' peak RSS: `VmHWM`, the high-water mark of its own address space. Not `ru_maxrss`,
    which Linux carries across `execve` from the process that forked it ("resource usage metrics are
    preserved across an execve", getrusage(2)), so a child's would start at the benchmark's own size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(url: str, *, now: float, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, "-m", "tests.perf.bench_scoring_scale", "--child", "--url", url]
    command += ["--now", repr(now), "--models", str(args.models)]
    done = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, check=False, timeout=args.child_timeout_s
    )
    if done.returncode != 0:
        raise RuntimeError(f"measurement failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- Prometheus over a TSDB -----------------------------------------------------------------------------


class Served:
    """Prometheus over `tsdb`, restartable (to load blocks written while it ran), with its peak RSS."""

    def __init__(self, tsdb: Path, *, args: argparse.Namespace, at: float) -> None:
        self.tsdb, self.args, self.at = tsdb, args, at
        self.config = tsdb.parent / "prometheus.yml"
        self.config.write_text(EMPTY_CONFIG)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.peak_rss_mib = 0.0
        self.loaded: list[str] = []
        self._context: Any = None

    def __enter__(self) -> Served:
        flags = (f"--query.lookback-delta={lookback_delta(STEP_S)}", "--storage.tsdb.max-block-duration=2h")
        self._context = running_prometheus(
            self.args.prometheus, data=self.tsdb, config=self.config, port=self.port, extra=flags
        )
        self.url = self._context.__enter__()
        probe = f"count({features.GPU_TEMP})"
        deadline = time.monotonic() + 60
        while not instant_query(self.url, probe, at=self.at):
            if time.monotonic() > deadline:
                raise TimeoutError("the backfilled blocks never became queryable")
            time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self.sample_rss()
        self._context.__exit__(None, None, None)

    def sample_rss(self) -> float:
        """Prometheus' own resident memory now (`process_resident_memory_bytes`), kept as the peak."""
        rss = prometheus_own(self.url, "process_resident_memory_bytes", timeout_s=30)
        if not math.isnan(rss):
            self.peak_rss_mib = max(self.peak_rss_mib, rss / 2**20)
        return self.peak_rss_mib

    def settle(self, *, quiet_s: float = 10.0, poll_s: float = 5.0, timeout_s: float = 1200.0) -> float:
        """Wait until Prometheus has compacted what was backfilled, as a running Prometheus keeps its
        history: the copies' blocks overlap one another in time, and merging overlapping blocks at query
        time cost it ~40% more CPU a 10,000-node cycle (45-48 s against 29-35 s once compacted,
        `docs/benchmarks.md`). Its compaction timer fires every minute; done once that has fired and its
        CPU has then stayed idle for `quiet_s`. Returns the seconds waited."""
        started = time.monotonic()
        last = _prometheus_cpu_s(self.url)
        idle_since: float | None = None
        while time.monotonic() - started < timeout_s:
            time.sleep(poll_s)
            now_cpu = _prometheus_cpu_s(self.url)
            busy = now_cpu - last > 0.1 * poll_s
            last = now_cpu
            fired = prometheus_own(self.url, "prometheus_tsdb_compactions_triggered_total", timeout_s=30) >= 1
            if busy or not fired:
                idle_since = None
                continue
            idle_since = idle_since if idle_since is not None else time.monotonic() - poll_s
            if time.monotonic() - idle_since >= quiet_s:
                break
        return time.monotonic() - started

    def load(self, blocks: Path) -> None:
        """Move promtool's blocks into the TSDB and restart, so they are queried."""
        self.__exit__()
        for block in blocks.iterdir():
            if block.is_dir():
                shutil.move(str(block), self.tsdb / block.name)
                self.loaded.append(block.name)
        self.__enter__()

    def unload(self) -> None:
        """Remove every block `load` moved in, and restart."""
        self.__exit__()
        for name in self.loaded:
            shutil.rmtree(self.tsdb / name)
        self.loaded.clear()
        self.__enter__()


# -- the plan -------------------------------------------------------------------------------------------


class Plan:
    """The instants, windows and rules of a run (all from the model card and `recorded_rules`)."""

    def __init__(self, models: Path) -> None:
        card = json.loads((models / _current(models) / "card.json").read_text())
        self.tail_s = float(card["sustain_s"])
        self.rules = rules.specs()
        # The records the recorded path reads at its instants (`READ`; every record where the module has no
        # such list), from the first instant read (`now - tail`) on, a step back for margin; the hourly
        # ones (`READ_HOURLY`) from the 5 hours before it on.
        # The XID event count `recorded_xid` reads too; on copies it finds only the short window of the
        # raw XID gauge for the GPUs with an event (0.5% here).
        self.read = (
            *getattr(rr, "READ", rr.RECORDS),
            *((rr.XID_EVENTS,) if hasattr(rr, "XID_EVENTS") else ()),
        )
        self.hourly = tuple(getattr(rr, "READ_HOURLY", ()))
        self.read_from_rel = -(math.floor(self.tail_s / STEP_S) * STEP_S) - STEP_S
        self.hourly_from_rel = self.read_from_rel - (getattr(rr, "SHORT_HOURS", 1) - 1) * 3600.0
        starts = rules.needed_starts(self.rules, read=self._read_rel())
        self.starts_rel = {k: _grid(v) for k, v in starts.items() if k != rules.RAW}
        raw_from = min(starts.get(rules.RAW, 0.0), -LOOKBACK_S)
        self.steps = int(-raw_from // STEP_S) + 3  # from there to `now`, and the warm cycle's step
        self.now = START + STEP_S * (self.steps - 2)
        # A copied fleet holds the exporter's fields from the first instant read, or from as far back as a
        # rule reading them reaches at `now` (so their cost is measured at that size), a step back.
        reach = max((r.reach_s for r in self.rules if r.raw), default=0.0)
        self.raw_from = self.now + min(self.read_from_rel, -reach) - STEP_S

    def _read_rel(self) -> dict[str, float]:
        out = dict.fromkeys(self.read, self.read_from_rel)
        for name in self.hourly:
            out[name] = min(out.get(name, 0.0), self.hourly_from_rel)
        return out

    @property
    def end(self) -> float:
        return self.now + STEP_S

    def starts(self) -> dict[str, float]:
        """From when each record must be held for every rule feeding the read records to be evaluated."""
        return {k: self.now + v for k, v in self.starts_rel.items()}

    def read_starts(self) -> dict[str, float]:
        """The records Sickbay reads, over the instants it reads: what a copied fleet holds."""
        return {name: self.now + rel for name, rel in self._read_rel().items()}

    def read_instants(self) -> dict[str, frozenset[float]]:
        """The instants each record is read at by the cold cycle (at `now`) and the warm one (a step later):
        the recorded path's instants (`now` and `tail` before), the hourly records also 1..5 hours before."""
        tail = math.floor(self.tail_s / STEP_S) * STEP_S
        instants = {t for c in (self.now, self.end) for t in (c - tail, c)}
        hours = {t - k * 3600.0 for t in instants for k in range(getattr(rr, "SHORT_HOURS", 1))}
        out = dict.fromkeys(self.read, frozenset(instants))
        out.update(dict.fromkeys(self.hourly, frozenset(hours)))
        return out

    def export(self, url: str) -> list[fleet.Recorded]:
        """The records Sickbay reads, at the instants it reads them (`read_instants`)."""
        series = fleet.export(url, self.read_starts(), end=self.end, step_s=STEP_S)
        return fleet.thin(series, self.read_instants())


def _current(models: Path) -> str:
    return str(json.loads((models / "CURRENT.json").read_text())["current"])


def _grid(t: float) -> float:
    return math.floor(t / STEP_S) * STEP_S


def rule_costs(url: str, plan: Plan, *, held_raw_from: float, held: dict[str, float]) -> dict[str, Any]:
    """Each rule whose inputs Prometheus holds, evaluated at `now`; the others named, with why not."""
    costs, skipped = [], {}
    for rule in plan.rules:
        needs = plan.now - rule.reach_s
        if rule.raw and needs < held_raw_from:
            skipped[rule.record] = f"reads {rule.reach_s / 3600:g} h raw"
            continue
        short = [d for d in rule.deps if held.get(d, math.inf) > needs]
        if short:
            skipped[rule.record] = f"reads {', '.join(short)} further back than held"
            continue
        costs.append(asdict(rules.evaluate(url, rule, at=plan.now)))
    return {"rules": costs, "not_evaluated": skipped}


def record_levels(served: Served, plan: Plan, work: Path, args: argparse.Namespace) -> float:
    """promtool evaluates every rule over the instants needed, a level at a time; the seconds it took.

    The rule files are at the same path in every run: Prometheus (and promtool) evaluate a group at an
    offset within its interval hashed from the group's name and file (`Group.EvalTimestamp`,
    prometheus/prometheus rules/group.go), so the same path gives the same instants, hence equal values."""
    seconds = 0.0
    starts = plan.starts()
    args.rules_dir.mkdir(parents=True, exist_ok=True)
    for level in sorted({r.level for r in plan.rules}):
        members = [r for r in plan.rules if r.level == level]
        path = rules.rule_file(members, args.rules_dir / f"level{level}.yaml")
        out = work / f"recorded-level{level}"
        start = min(starts[r.record] for r in members)
        seconds += rules.backfill_level(
            args.promtool, url=served.url, rules_path=path, start=start, end=plan.end + 1, out_dir=out
        )
        served.load(out)
    return seconds


_OPENMETRICS = ("tsdb", "create-blocks-from", "openmetrics", "--quiet")


def _span_block_s(series: Sequence[fleet.Recorded]) -> int:
    """A block length promtool accepts (2 h x 3^k) covering the series' span wherever it falls."""
    times = [t for one in series for t, _ in one.points[:1] + one.points[-1:]] or [0.0]
    span, length = max(times) - min(times), 7200
    while length < 2 * span + 7200:
        length *= 3
    return length


def record_on_grid(served: Served, plan: Plan, work: Path, args: argparse.Namespace) -> float:
    """Every rule evaluated at the 5-minute grid's instants over the instants needed, a level at a time
    (each rule's expression as a range query at its interval, written under its record name as
    OpenMetrics, turned into blocks by promtool and loaded before the next level); the seconds it took.

    On the grid, not where `promtool tsdb create-blocks-from rules` puts them: promtool (like Prometheus)
    evaluates a group at an offset within its interval hashed from the group's file and name
    (`Group.EvalTimestamp`, prometheus/prometheus rules/group.go), which differs from run to run with the
    file's path; the grid makes the copied fleet's check exact. With `--promtool-rules` the first raw-week
    size also scores promtool's own series (`record_levels`), which the reader must read as well (slow:
    promtool evaluates every level at every step of the week)."""
    started = time.perf_counter()
    starts = plan.starts()
    for level in sorted({r.level for r in plan.rules}):
        series = []
        for rule in (r for r in plan.rules if r.level == level):
            series += fleet.evaluate_on_grid(
                served.url,
                rule.record,
                rule.expr,
                start=starts[rule.record],
                end=plan.end,
                step_s=rule.interval_s,
            )
        text, out = work / f"grid-level{level}.om", work / f"grid-level{level}"
        fleet.write_copies(series, text, copies=1, base=None)
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            # One block for the whole span: promtool parses the file once per block it makes.
            [
                str(args.promtool),
                *_OPENMETRICS,
                f"--max-block-duration={_span_block_s(series)}s",
                str(text),
                str(out),
            ],
            check=True,
            capture_output=True,
        )
        text.unlink()
        served.load(out)
    return time.perf_counter() - started


# -- the sizes ------------------------------------------------------------------------------------------


def run_raw_size(nodes: int, *, plan: Plan, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The raw week at `nodes`: raw cycle, the recorded series, the rules' cost, recorded cycle."""
    dataset = work / "dataset"
    bench_scoring.synthesise(dataset, nodes=nodes, steps=plan.steps, seed=0, gap_share=0.0)
    fill = backfill.backfill(dataset, work / "tsdb", promtool=args.promtool)
    row: dict[str, Any] = {"nodes": nodes, "gpus": nodes * GPUS, "kind": "raw week", "backfill": _fill(fill)}
    phases = row["phases_s"] = {}
    clock = [time.perf_counter()]

    def done(phase: str) -> None:
        now = time.perf_counter()
        phases[phase] = now - clock[0]
        clock[0] = now
        print(f"    {nodes} nodes: {phase} {phases[phase]:.0f}s", file=sys.stderr, flush=True)

    with Served(work / "tsdb", args=args, at=plan.now) as served:
        row["raw"] = run_child(served.url, now=plan.now, args=args)
        done("raw cycle")
        if work.name != "base":
            return row  # the raw path's growth; the rules are evaluated at the base (the largest) only
        if args.promtool_rules and nodes == args.raw_nodes[0]:
            # The rules as promtool (and Prometheus) schedule them, at the group's offset; then removed.
            row["promtool_rules_s"] = record_levels(served, plan, work, args)
            row["recorded_promtool"] = run_child(served.url, now=plan.now, args=args)
            served.unload()
            done("promtool rules")
        row["grid_rules_s"] = record_on_grid(served, plan, work, args)
        done("recording on the grid")
        # After the recorded series exist, so a rule that reads another rule's series finds them.
        row["prometheus"] = rule_costs(served.url, plan, held_raw_from=fill.start, held=plan.starts())
        done("rule costs")
        row["recorded"] = run_child(served.url, now=plan.now, args=args)
        row["export"] = plan.export(served.url)
        row["prometheus_rss_mib"] = served.sample_rss()
        done("recorded cycle")
    return row


def run_recorded_size(
    nodes: int, *, base: dict[str, Any], plan: Plan, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    """Copies of the base fleet holding what the recorded path reads: recorded cycle, what rules it can."""
    copies = nodes // base["nodes"]
    rows = fleet.tile_dataset(
        work.parent / "base" / "dataset",
        work / "dataset",
        copies=copies,
        base=base["nodes"],
        since=plan.raw_from,
    )
    jobs = 1 if rows * len(features.SOURCE_METRICS) / (plan.now - plan.raw_from) * 7200 > 20e6 else 2
    fill = backfill.backfill(work / "dataset", work / "tsdb", promtool=args.promtool, jobs=jobs)
    shutil.rmtree(work / "dataset")
    started = time.perf_counter()
    text = work / "recorded.om"
    recorded = 0
    per_file = max(1, COPIES_PER_FILE // base["nodes"])
    # One block per file: promtool parses a file once per block it cuts.
    block = f"--max-block-duration={_span_block_s(base['export'])}s"
    for first in range(0, copies, per_file):
        recorded += fleet.write_copies(
            base["export"], text, copies=min(copies, first + per_file), base=base["nodes"], first=first
        )
        subprocess.run(
            [str(args.promtool), *_OPENMETRICS, block, str(text), str(work / "tsdb")],
            check=True,
            capture_output=True,
        )
        text.unlink()
    row: dict[str, Any] = {
        "nodes": nodes,
        "gpus": nodes * GPUS,
        "kind": f"{copies} copies of {base['nodes']}",
        "backfill": {
            **_fill(fill),
            "recorded_samples": recorded,
            "recorded_s": time.perf_counter() - started,
        },
    }
    held = plan.read_starts()
    with Served(work / "tsdb", args=args, at=plan.now) as served:
        if args.settle:
            row["settle_s"] = served.settle()
        row["recorded"] = run_child(served.url, now=plan.now, args=args)
        if nodes <= args.rule_costs_up_to:
            row["prometheus"] = rule_costs(served.url, plan, held_raw_from=fill.start, held=held)
        else:
            why = f"not evaluated above {args.rule_costs_up_to:,} nodes (--rule-costs-up-to)"
            row["prometheus"] = {"rules": [], "not_evaluated": {r.record: why for r in plan.rules}}
        if args.verify and copies > 1 and nodes == args.nodes[0]:  # it holds this fleet's whole week
            row["verify"] = verify(served.url, nodes, base=base, plan=plan, args=args, work=work)
        row["prometheus_rss_mib"] = served.sample_rss()
    return row


def verify(
    url: str, nodes: int, *, base: dict[str, Any], plan: Plan, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    """The copied recorded series against the rules evaluated over the copied fleet's own raw week."""
    copied = plan.export(url)
    check = work / "verify"
    fleet.tile_dataset(
        work.parent / "base" / "dataset",
        check / "dataset",
        copies=nodes // base["nodes"],
        base=base["nodes"],
        since=-math.inf,
    )
    backfill.backfill(check / "dataset", check / "tsdb", promtool=args.promtool)
    with Served(check / "tsdb", args=args, at=plan.now) as served:
        record_on_grid(served, plan, check, args)
        evaluated = plan.export(served.url)
    shutil.rmtree(check)
    return {**fleet.compare(evaluated, copied), "series": len(evaluated)}


def _fill(fill: backfill.BackfillStats) -> dict[str, Any]:
    return {
        "samples": fill.samples,
        "seconds": fill.elapsed_s,
        "bytes_per_sample": fill.bytes_per_sample,
        "start": fill.start,
        "end": fill.end,
    }


# -- the run --------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_scoring_scale", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, action="append", help="recorded-path size (repeatable)")
    parser.add_argument("--raw-nodes", type=int, action="append", help="raw-week size (repeatable)")
    parser.add_argument("--quick", action="store_true", help="a 2-node base and 4 nodes: a smoke run")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="check the copied recorded series at the smallest size (backfills its whole week)",
    )
    parser.add_argument(
        "--promtool-rules",
        action="store_true",
        help="also score promtool's rule backfill (at the group's offset) at the first size: slow, every level over the week",
    )
    parser.add_argument("--budget-s", type=float, default=math.inf, help="start no size after this long")
    parser.add_argument(
        "--rule-costs-up-to",
        type=int,
        default=sys.maxsize,
        help="evaluate the rules' cost on copied fleets up to this many nodes (minutes per size beyond)",
    )
    parser.add_argument("--child-timeout-s", type=float, default=3600.0)
    parser.add_argument("--keep", type=Path, help="keep each recorded size's TSDB under this folder")
    parser.add_argument(
        "--settle",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="before a recorded size's cycles, wait for Prometheus to compact the backfilled blocks "
        "(default: on, off with --quick)",
    )
    bench_scoring.add_common_options(parser, out=OUT)
    args = parser.parse_args(list(argv))
    if args.quick:
        args.nodes = args.nodes or list(QUICK_SIZES)
        args.raw_nodes = args.raw_nodes or list(QUICK_RAW)
    args.nodes = sorted(args.nodes or SIZES)
    args.settle = not args.quick if args.settle is None else args.settle
    args.raw_nodes = sorted(args.raw_nodes or RAW_SIZES)
    args.promtool = backfill.find_promtool(args.promtool)
    base = args.raw_nodes[-1]
    if not args.child and any(n % base for n in args.nodes):
        parser.error(f"every --nodes must be a multiple of the largest --raw-nodes ({base})")
    return args


def main(argv: Sequence[str] | None = None) -> Group:
    args = parse_args(argv or [])
    if not args.prometheus.exists():
        raise SystemExit(f"{args.prometheus} is missing (Debian package `prometheus`)")
    load_at_start = os.getloadavg()
    plan = Plan(args.models)
    started = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "scoring_scale",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine.describe(load_at_start),
        "config": {
            "lookback_s": LOOKBACK_S,
            "step_s": STEP_S,
            "gpus_per_node": GPUS,
            "tail_s": plan.tail_s,
            "history_steps": plan.steps,
            "raw_held_s": plan.now - plan.raw_from,
            "rules": len(plan.rules),
            "levels": len({r.level for r in plan.rules}),
        },
        "rows": [],
        "not_run": [],
    }
    base: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="sickbay-bench-scale-") as tmp:
        args.rules_dir = Path(tmp) / "rules"
        sizes = [("raw", n) for n in args.raw_nodes] + [("recorded", n) for n in args.nodes]
        last: tuple[int, float] | None = None  # (nodes, seconds) of the last recorded-path size
        for kind, nodes in sizes:
            left = args.budget_s - (time.perf_counter() - started)
            # A recorded-path size costs about its GPUs' share of the last one's time (backfill, reads).
            guess = last[1] * nodes / last[0] if kind == "recorded" and last else 0.0
            if left <= 0 or guess > left:
                why = f"time budget: {left:.0f} s of {args.budget_s:g} s left"
                why += f", about {guess:.0f} s needed (the last size's time per node)" if guess else ""
                report["not_run"].append({"kind": kind, "nodes": nodes, "why": why})
                continue
            size_started = time.perf_counter()
            work = Path(tmp) / (
                "base" if kind == "raw" and nodes == args.raw_nodes[-1] else f"{kind}-{nodes}"
            )
            try:
                if kind == "raw":
                    row = run_raw_size(nodes, plan=plan, args=args, work=work)
                    base = row if work.name == "base" else base
                else:
                    assert base is not None
                    row = run_recorded_size(nodes, base=base, plan=plan, args=args, work=work)
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                report["not_run"].append({"kind": kind, "nodes": nodes, "why": f"failed: {exc}"[:600]})
                print(f"  {kind} {nodes}: failed: {exc}", file=sys.stderr)
                continue
            finally:
                if args.keep is not None and kind == "recorded" and (work / "tsdb").exists():
                    args.keep.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(work / "tsdb"), args.keep / f"{kind}-{nodes}")  # to profile reads on
                if work.name != "base":
                    shutil.rmtree(work, ignore_errors=True)
            row["seconds"] = time.perf_counter() - size_started
            report["rows"].append({k: v for k, v in row.items() if k != "export"})
            last = (nodes, row["seconds"]) if kind == "recorded" else last
            print(f"  {kind} {nodes:,} nodes done at {time.perf_counter() - started:.0f}s", file=sys.stderr)
            _write(args.out, report)
    report["load_at_end"] = os.getloadavg()
    _write(args.out, report)
    return render(report, out=args.out)


def _write(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")


if __name__ == "__main__":
    _args = parse_args(sys.argv[1:])
    if _args.child:
        child_main(_args)
    else:
        (Console() if sys.stdout.isatty() else Console(width=180)).print(main(sys.argv[1:]))
