"""The shape every failure mode shares: a precursor window [onset, fail_at], then a failure.

A `FailureProcess` is a small state machine attached to one GPU. `advance` integrates its precursor's
counters over a slice of simulated time (Poisson draws from the shared precursor stream), `effects` says what it
does to the gauges at an instant (a pure function of time, so observing never changes the simulation),
and `fail` applies the failure to the GPU's state and says what happened. Counters are integrated over
the slice clipped to the precursor window, so any step size gives the same expected counts.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from app.sim.fleet import metrics
from app.sim.fleet.gpu import NO_EFFECTS, Effects, GpuState
from app.sim.fleet.params import FailureMode, PrecursorShapes


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What a failure did, for the ground truth and for the fleet's reaction."""

    xid: int
    row_remap_failure: bool = False
    vanish: bool = False
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessSpec:
    """Everything needed to start a failure process on a GPU."""

    onset: float
    fail_at: float
    xid: int
    category: str
    seed: int
    serial: int
    shapes: PrecursorShapes
    has_precursor: bool = True

    @property
    def rng_key(self) -> str:
        """Seeds the process's own stream: its draws never depend on the step size or other GPUs."""
        return f"{self.seed}:{self.serial}:{self.onset!r}:{self.fail_at!r}:{self.xid}"


class FailureProcess(ABC):
    """A failure under way on one GPU."""

    mode: ClassVar[FailureMode]

    def __init__(self, spec: ProcessSpec) -> None:
        self.onset = spec.onset
        self.fail_at = spec.fail_at
        self.xid = spec.xid
        self.category = spec.category
        self.seed = spec.seed
        self.serial = spec.serial
        self.shapes = spec.shapes
        self.has_precursor = spec.has_precursor
        # "strong", "weak" or "none" when the fleet's personality chose it; "" leaves the mode's own rule.
        self.strength = ""
        # Per-instance parameters and the failure's outcome come from this stream.
        self.rng = random.Random(spec.rng_key)  # noqa: S311 - simulation, not cryptography

    @property
    def precursor_start(self) -> float | None:
        return self.onset if self.has_precursor and self.onset < self.fail_at else None

    def progress(self, t: float) -> float:
        span = self.fail_at - self.onset
        if span <= 0.0:
            return 1.0
        return min(1.0, max(0.0, (t - self.onset) / span))

    def window(self, t0: float, t1: float) -> tuple[float, float, float] | None:
        """The slice of [t0, t1] inside the precursor window, and the progress at its midpoint."""
        start, end = max(t0, self.onset), min(t1, self.fail_at)
        if end <= start or not self.has_precursor:
            return None
        return start, end, self.progress((start + end) / 2.0)

    def advance(self, gpu: GpuState, t0: float, t1: float, rng: random.Random) -> None:
        """Integrate precursor counters over [t0, t1]; the default precursor changes no counter."""
        del gpu, t0, t1, rng

    def effects(self, t: float) -> Effects:
        del t
        return NO_EFFECTS

    def finished(self, t: float) -> bool:
        """Whether the process has ended without a failure by `t` (a precursor that recovered)."""
        del t
        return False

    @abstractmethod
    def fail(self, gpu: GpuState, t: float) -> Outcome:
        """Apply the failure to the GPU's state (random outcomes from `self.rng`)."""


def xid_incident(xid: int) -> tuple[str, int, str]:
    """The DCGM health watch an XID fails, and its error code (DCGM fails health on these XIDs)."""
    if xid in (48, 94, 95, 140):
        code = "DCGM_FR_UNCONTAINED_ERROR" if xid == 95 else "DCGM_FR_VOLATILE_DBE_DETECTED"
        return "MEM", metrics.HEALTH_FAIL, code
    if xid == 74:
        return "NVLINK", metrics.HEALTH_FAIL, "DCGM_FR_NVLINK_ERROR_CRITICAL"
    if xid == 79:
        return "PCIE", metrics.HEALTH_FAIL, "DCGM_FR_XID_ERROR"
    return "SM", metrics.HEALTH_FAIL, "DCGM_FR_XID_ERROR"


def apply_xid(gpu: GpuState, xid: int) -> None:
    """Record an XID as DCGM does: the last-XID field takes its value, health records an incident."""
    gpu.last_xid = xid
    watch, status, code = xid_incident(xid)
    gpu.incidents[watch] = (status, code)


def apply_uncorrectable(gpu: GpuState, rng: random.Random, *, hbm: bool, remap_failure_p: float) -> bool:
    """A double-bit (uncorrectable) ECC error; in HBM it also remaps the row. True if remapping failed."""
    gpu.add_dbe(1 + (1 if rng.random() < 0.2 else 0))
    if not hbm:
        return False
    gpu.uncorrectable_rows += 1
    gpu.remap_pending = 1
    if rng.random() < remap_failure_p:
        gpu.remap_failure = 1
        gpu.needs_replacement = True
        return True
    return False
