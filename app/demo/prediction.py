"""The prediction scene's setting: a past for the demo fleet, one GPU degrading in it, and the model.

The risk model reads hours to days of DCGM history (rates over 1 h, 6 h and 24 h, held for 30 minutes);
the demo runs for a minute. So before Prometheus starts, the demo's own `FleetSim` — the very object the
live exporters then serve, same seed, UUIDs and counters — runs forward over `span` of simulated time
ending now, and that history is backfilled into the TSDB Prometheus starts on (`app.sim.fleet.backfill`:
the predictor's source metrics, every 300 s, the card's step). The live fleet then carries on from the
same state, scraped every second. The scoring job's range reads (every 300 s, the latest sample within
Prometheus' 5 min look-back) find the backfilled series (lean labels) up to the hand-over and the live
ones (the exporter's labels) after it; its reader joins them by host, GPU and UUID.

In that past one GPU's HBM starts degrading (`plant_precursor`): single-bit ECC errors accelerating,
hours before a double-bit error. ASSUMPTIONS, stated in the report: the simulator's own HBM precursor
shape (not the demo's half-minute compression), an instance of median strength, and no row remapped yet —
a remapped row sets ROW_REMAP_PENDING, and the rule bundle's `GpuRowRemapPending` would quarantine the GPU
from the alert path before any model saw it. That is the case prediction is for: errors that the rules
rightly do not page on (the correctable rate alone is a poor predictor), in a pattern the model learned.

Sickbay starts without a model (rules-only) and `promote_model` installs the trained one from `models/`
while it runs, as a retraining promotion would, so the scene starts when the demo says so. This module
writes files; it never talks to a running Prometheus or Sickbay, and imports no scikit-learn.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.sim.fleet import FleetSim, backfill, datasets
from app.sim.fleet.memory import HbmDegradation
from app.sim.fleet.params import FailureMode, PrecursorShapes
from app.sim.fleet.workloads import PodRef

HOUR = 3600.0
# The 24 h windows, full, and the 30 min sustain before them; counters then look a day or more old, as
# everywhere in the model's training rows (their first day is warm-up).
HISTORY_S = 26 * HOUR
STEP_S = 300.0  # the model card's scoring step
# Where the precursor stands when the live demo begins: running for this long, failing this much later.
PRECURSOR_RUNNING_S = 9 * HOUR
PRECURSOR_REMAINING_S = 6 * HOUR
STRENGTH_BAND = (0.8, 1.25)  # end rate / the shape's median end rate: a typical instance, not a lucky one
HBM_XID = 48


@dataclass(frozen=True, slots=True, kw_only=True)
class Precursor:
    """A GPU degrading in the simulated past: what, where, since when and until when (Unix seconds)."""

    node: str
    gpu: int
    uuid: str
    pod: PodRef | None
    onset: float
    fail_at: float
    start_per_h: float
    end_per_h: float  # single-bit errors per hour at the failure (this instance's)

    def running_s(self, at: float) -> float:
        return at - self.onset

    def due_in_s(self, at: float) -> float:
        return self.fail_at - at


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelInfo:
    """What the promoted model's card says, for the report (read from JSON, no scikit-learn)."""

    version: str
    warn: float
    act: float
    horizon_s: float
    sustain_s: float
    step_s: float
    precision: float | None
    recall: float | None
    lead_median_h: float | None


def hours(seconds: float) -> str:
    """A duration of hours as `9 h 05 min` (minutes alone under an hour)."""
    minutes = round(max(seconds, 0.0) / 60.0)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def history_start(*, span_s: float = HISTORY_S, step_s: float = STEP_S, now: float | None = None) -> float:
    """When the simulated past begins: `span_s` before the last step boundary, so its samples land on
    the scoring job's step grid and the last one is at most a step old when the live fleet takes over."""
    wall = time.time() if now is None else now
    return math.floor(wall / step_s) * step_s - span_s


def degrading_shapes() -> PrecursorShapes:
    """The simulator's own HBM precursor (not the demo's compressed one): never weak, no row remapped."""
    return replace(
        PrecursorShapes(), hbm_weak_fraction=0.0, hbm_remap_per_sbe=0.0, hbm_row_remap_failure_p=0.0
    )


def plant_precursor(
    sim: FleetSim,
    *,
    history_end: float,
    running_s: float = PRECURSOR_RUNNING_S,
    remaining_s: float = PRECURSOR_REMAINING_S,
    avoid: Collection[str] = (),
) -> Precursor:
    """Start an HBM degradation on a busy GPU of a node that runs only single-node jobs, beginning
    `running_s` before `history_end` and failing `remaining_s` after it (the sim is at the history's start).

    The instance's strength is drawn from the failure's own random stream, keyed on its times; the onset
    moves by whole seconds until the strength is typical (`STRENGTH_BAND`), so every run tells one story.
    """
    node, gpu = _busy_single_job_gpu(sim, avoid=avoid)
    state = sim.node(node).gpus[gpu]
    shapes = degrading_shapes()
    low, high = STRENGTH_BAND
    degrading: HbmDegradation | None = None
    for shift in range(600):
        process = sim.begin(
            state,
            FailureMode.HBM,
            onset=history_end - running_s + shift,
            fail_at=history_end + remaining_s + shift,
            xid=HBM_XID,
            category="injected",
            shapes=shapes,
        )
        if not isinstance(process, HbmDegradation):
            raise TypeError(f"an HBM failure runs {type(process).__name__}")
        degrading = process
        if low <= process.end_per_h / shapes.hbm_sbe_end_per_h <= high:
            break
    if degrading is None:
        raise ValueError("no HBM degradation could be started")
    return Precursor(
        node=node,
        gpu=gpu,
        uuid=state.identity.uuid,
        pod=state.pod,
        onset=degrading.onset,
        fail_at=degrading.fail_at,
        start_per_h=degrading.start_per_h,
        end_per_h=degrading.end_per_h,
    )


def _busy_single_job_gpu(sim: FleetSim, *, avoid: Collection[str]) -> tuple[str, int]:
    """The first node (by name) that runs at least one job and no rank of a gang, and its first busy GPU."""
    gang_nodes = {p.node for job in sim.scheduler.running.values() if job.gang for p in job.placements}
    for node in sorted(sim.nodes, key=lambda n: n.name):
        if node.name in avoid or node.index in gang_nodes:
            continue
        busy = [g.identity.index for g in node.gpus if g.pod is not None and g.present]
        if busy:
            return node.name, busy[0]
    raise ValueError("no node runs a single-node job: try another --seed or more --nodes")


# -- the past, written and backfilled ----------------------------------------------------------------


def write_history(sim: FleetSim, directory: Path, *, span_s: float, step_s: float) -> datasets.DatasetReport:
    """Run the fleet forward `span_s`, one sample of every GPU every `step_s`, into a Parquet dataset."""
    return datasets.write_dataset(
        directory,
        nodes=len(sim.nodes),
        duration_s=span_s,
        step_s=step_s,
        formats=("parquet",),
        sim=sim,
    )


def backfill_history(dataset: Path, tsdb: Path) -> backfill.BackfillStats:
    """The dataset's predictor metrics as TSDB blocks in `tsdb` (Prometheus' `--storage.tsdb.path`)."""
    return backfill.backfill(dataset, tsdb, promtool=backfill.find_promtool(), host_label="Hostname")


# -- the model ------------------------------------------------------------------------------------------

POINTER = "CURRENT.json"
CARD = "card.json"


def current_version(source: Path) -> str:
    """The version `source`'s CURRENT.json names (what `promote_model` installs)."""
    return str(json.loads((source / POINTER).read_text(encoding="utf-8"))["current"])


def promote_model(source: Path, target: Path) -> ModelInfo:
    """Install `source`'s current model in `target` as the registry lays it out: the version directory
    copied under a temporary name and renamed, then CURRENT.json replaced atomically (a scoring cycle
    reading `target` meanwhile sees no model or the whole model, never half of one)."""
    version = str(json.loads((source / POINTER).read_text(encoding="utf-8"))["current"])
    target.mkdir(parents=True, exist_ok=True)
    staging = target / f".{version}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source / version, staging)
    staging.rename(target / version)
    pointer = target / f".{POINTER}.tmp"
    pointer.write_text(json.dumps({"current": version, "previous": None}, indent=2) + "\n", encoding="utf-8")
    os.replace(pointer, target / POINTER)
    return read_card(target / version / CARD)


def read_card(path: Path) -> ModelInfo:
    card: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    holdout: Mapping[str, Any] = (card.get("metrics") or {}).get("holdout") or {}
    lead: Mapping[str, Any] = holdout.get("lead_time_h") or {}
    thresholds: Mapping[str, Any] = card.get("thresholds") or {}
    return ModelInfo(
        version=str(card.get("version")),
        warn=float(thresholds.get("warn", 0.0)),
        act=float(thresholds.get("act", 0.0)),
        horizon_s=float(card.get("horizon_s", 0.0)),
        sustain_s=float(card.get("sustain_s", 0.0)),
        step_s=float(card.get("step_s", STEP_S)),
        precision=_number(holdout.get("precision")),
        recall=_number(holdout.get("recall")),
        lead_median_h=_number(lead.get("median")),
    )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


# -- what the scene found, for the report ---------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class Forecast:
    """The prediction scenes' findings. Times `*_at` are seconds since the scenario started, like a
    `Scene`'s; `*_s` are durations; simulated-past figures come from the fleet's ground truth."""

    precursor: Precursor
    model: ModelInfo | None = None
    history_s: float = 0.0
    history_samples: int = 0
    promoted_at: float | None = None
    scored_at: float | None = None  # the scoring cycle that found it began
    decided_at: float | None = None  # Sickbay took its risk signal up
    score: float | None = None
    level: str = ""
    drivers: tuple[tuple[str, float], ...] = ()
    reason: str = ""  # the taint's reason, as Sickbay wrote it
    running_at_score_s: float | None = None  # how long the GPU had been degrading when it was scored
    due_at_score_s: float | None = None  # how long before its failure was due
    others_max: float | None = None  # the highest score of every other GPU in that cycle
    gpus_scored: int = 0
    taint: str = ""
    taint_at: float | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)  # in the cluster: (kind, ns/name, type)
    checkpoints_at: float | None = None  # when Sickbay journaled the first checkpoint request
    pods_kept: tuple[str, ...] = ()  # GPU pods still running on the node while it was at risk
    evictions: int = 0  # evictions or drains in the at-risk plan's outcomes (the policy says none)
    failed_at: float | None = None
    brought_forward_s: float | None = None
    quarantined_at: float | None = None

    @property
    def closed_s(self) -> float | None:
        """How long the node had taken no new work when its GPU failed."""
        if self.failed_at is None or self.taint_at is None:
            return None
        return self.failed_at - self.taint_at


_SCORE = re.compile(r"\(score ([0-9.]+)\)")
_DRIVER = re.compile(r"([A-Za-z0-9_:]+) \+([0-9.]+)")


def parse_reason(reason: str) -> tuple[float | None, tuple[tuple[str, float], ...]]:
    """The score and drivers in an at-risk reason ("... (score 0.8470), driven by gpu0:f +1.23, ...")."""
    score = _SCORE.search(reason)
    drivers_text = reason.split("driven by", 1)[1] if "driven by" in reason else ""
    drivers = tuple((name, float(weight)) for name, weight in _DRIVER.findall(drivers_text))
    return (float(score.group(1)) if score else None), drivers


_GPU_RISK = re.compile(r"^sickbay_gpu_risk\{([^}]*)\} ([0-9.eE+-]+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def parse_gpu_risks(metrics_text: str) -> dict[tuple[str, int], float]:
    """Every GPU's last score from Sickbay's `/metrics` (`sickbay_gpu_risk{node, gpu}`)."""
    out: dict[tuple[str, int], float] = {}
    for labels, value in _GPU_RISK.findall(metrics_text):
        found = dict(_LABEL.findall(labels))
        if "node" in found and found.get("gpu", "").isdigit():
            out[(found["node"], int(found["gpu"]))] = float(value)
    return out
