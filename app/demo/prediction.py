"""The prediction scene's setting: a past for the demo fleet, one GPU degrading in it, and the model.

The risk model reads hours to days of DCGM history (rates over 1 h, 6 h and 24 h, held for 30 minutes);
the demo runs for a minute. So before Prometheus starts, the demo's own `FleetSim` — the very object the
live exporters then serve, same seed, UUIDs and counters — runs forward over `span` of simulated time
ending now, and that history is backfilled into the TSDB Prometheus starts on (`app.sim.fleet.backfill`:
the predictor's source metrics, every 300 s, the card's step). The live fleet then carries on from the
same state, scraped every second. The scoring job's range reads (every 300 s, the latest sample within
Prometheus' 5 min look-back) find the backfilled series (lean labels) up to the hand-over and the live
ones (the exporter's labels) after it; its reader joins them by host, GPU and UUID.

In that past one GPU starts a thermal runaway (`plant_precursor`): its memory and core temperature creep up
against its own baseline and its node's other GPUs, hours before it falls off the bus (XID 79). ASSUMPTIONS,
stated in the report: the simulator's own thermal precursor at its full strength (`ThermalRunaway`), and the
live demo beginning while SW-thermal slowdown comes and goes (past `thermal_sw_throttle_at`, in about half
of the minutes) and before HW slowdown — so no rule takes the node out (`GpuThermalThrottling`, when
slowdown holds 10 minutes, is a transient soft signal) and the GPU looks hot, not broken. That is the case prediction is for. Why not an HBM precursor, as the first version of this scene
had: single-bit errors alone are a poor predictor (the ATC'24 HBM study in TELEMETRY.md: the total
correctable rate does not predict uncorrectable errors), the protocol's model rightly scores them at `warn`
at most, and once a row is remapped ROW_REMAP_PENDING makes the rule bundle quarantine the GPU without any
model.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.sim.fleet import FleetSim, backfill, datasets
from app.sim.fleet.params import FailureMode, PrecursorShapes
from app.sim.fleet.thermal import ThermalRunaway
from app.sim.fleet.workloads import PodRef

HOUR = 3600.0
# The 24 h windows, full, and the 30 min sustain before them; counters then look a day or more old, as
# everywhere in the model's training rows (their first day is warm-up).
HISTORY_S = 26 * HOUR
STEP_S = 300.0  # the model card's scoring step
# Where the precursor stands when the live demo begins: running for this long, failing this much later —
# 15 h in all, within the simulator's thermal lead times (median 8 h, 1 h to 3 days), and 60% of the way,
# where SW-thermal slowdown comes and goes (from 45%) and HW slowdown (75%) has not begun. Measured with
# the model of 2026-12-01, offline, on the demo's 12-node fleet at five history start times: 0.62-0.68
# against act 0.247, every other GPU under 0.04; at 48% it scored 0.31-0.69 and in a loaded live stack once
# only warn, at 40% 0.06-0.08. The model of 2026-12-02 (count-aware SBE change), offline, 32 nodes: 0.66
# against act 0.172, every other GPU under 0.04 (warn 0.118).
PRECURSOR_RUNNING_S = 9 * HOUR
PRECURSOR_REMAINING_S = 6 * HOUR
THERMAL_XID = 79  # the GPU falls off the bus


@dataclass(frozen=True, slots=True, kw_only=True)
class Precursor:
    """A GPU degrading in the simulated past: what, where, since when and until when (Unix seconds)."""

    node: str
    gpu: int
    uuid: str
    pod: PodRef | None
    onset: float
    fail_at: float
    mem_rise_c: float  # memory temperature above its baseline at the failure (this instance's)
    gpu_rise_c: float
    throttle_from: float  # the share of the precursor after which SW-thermal throttling begins

    def running_s(self, at: float) -> float:
        return at - self.onset

    def progress(self, at: float) -> float:
        return min(max((at - self.onset) / (self.fail_at - self.onset), 0.0), 1.0)

    def mem_rise_at(self, at: float) -> float:
        """Degrees over the baseline at `at`: the runaway's rise grows with the square of its progress."""
        return self.mem_rise_c * self.progress(at) ** 2

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
    """The simulator's own thermal precursor, at full strength (a weak one rises less and throttles late)."""
    return PrecursorShapes()


def plant_precursor(
    sim: FleetSim,
    *,
    history_end: float,
    running_s: float = PRECURSOR_RUNNING_S,
    remaining_s: float = PRECURSOR_REMAINING_S,
    avoid: Collection[str] = (),
) -> Precursor:
    """Start a thermal runaway on a busy GPU of a node that runs only single-node jobs, beginning
    `running_s` before `history_end` and failing `remaining_s` after it (the sim is at the history's start)."""
    node, gpu = _busy_single_job_gpu(sim, avoid=avoid)
    state = sim.node(node).gpus[gpu]
    shapes = degrading_shapes()
    process = sim.begin(
        state,
        FailureMode.THERMAL,
        onset=history_end - running_s,
        fail_at=history_end + remaining_s,
        xid=THERMAL_XID,
        category="injected",
        shapes=shapes,
    )
    if not isinstance(process, ThermalRunaway):
        raise TypeError(f"a thermal failure runs {type(process).__name__}")
    return Precursor(
        node=node,
        gpu=gpu,
        uuid=state.identity.uuid,
        pod=state.pod,
        onset=process.onset,
        fail_at=process.fail_at,
        mem_rise_c=shapes.thermal_mem_rise_c,
        gpu_rise_c=shapes.thermal_gpu_rise_c,
        throttle_from=shapes.thermal_sw_throttle_at,
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
