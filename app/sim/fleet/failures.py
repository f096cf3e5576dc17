"""The fleet's failures: the fleet-wide process that starts them, the precursors they grow, and what a
failure does when it happens.

Failure onsets are a Poisson process at the published rate over the whole fleet, each starting one failure
mode's precursor on an eligible GPU (its own seeded stream, so which GPUs fail, how and when does not
depend on the step size); a precursor strength comes from the personality's mix. A failure writes ground
truth, marks the device plugin's health, and interrupts the node's or the GPU's workloads; a hardware
fault faults the node and, with `OpsParams.auto_repair_after_s`, sets its repair timer. `FleetSim` owns
time and asks this for its part of each step.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from app.sim.fleet import catalog
from app.sim.fleet.background import BACKGROUND_TRAPS, Background
from app.sim.fleet.gpu import GpuState
from app.sim.fleet.modes import lead_time, start_process
from app.sim.fleet.nodes import NodeState
from app.sim.fleet.params import FailureMode, PrecursorShapes, SimConfig
from app.sim.fleet.process import FailureProcess, ProcessSpec
from app.sim.fleet.randomness import Streams, choose_weighted, exponential_after, poisson
from app.sim.fleet.recovery import TRAP_RECOVERED, RecoveredPrecursor
from app.sim.fleet.strength import PRECURSOR_MODES, classic_strength, weakened
from app.sim.fleet.timers import Timers
from app.sim.fleet.truth import FailureRecord, TrapRecord, TruthLog
from app.sim.fleet.workloads import Scheduler

# Failure processes are started this long before the simulation begins, so it opens in steady state
# (some precursors already under way) rather than with a fleet of perfectly healthy GPUs.
WARMUP_S = 3 * 86400.0
_PICK_TRIES = 64


class Failures:
    """Not thread-safe; the fleet that owns it steps it."""

    def __init__(
        self,
        *,
        config: SimConfig,
        seed: int,
        start_s: float,
        streams: Streams,
        variety: random.Random,
        nodes: Sequence[NodeState],
        gpus: Sequence[GpuState],
        active: dict[int, GpuState],
        truth: TruthLog,
        background: Background,
        scheduler: Scheduler,
        timers: Timers,
    ) -> None:
        self.config = config
        self.seed = seed
        self.start_s = start_s
        self._streams = streams
        self._variety = variety
        self.nodes = nodes
        self._by_name = {node.name: node for node in nodes}
        self._gpus = gpus
        self._active = active  # the GPUs `integrate` looks at, by serial
        self._truth = truth
        self.background = background
        self.scheduler = scheduler
        self._timers = timers
        self._failure_rate = config.rates.per_gpu_second() * len(gpus)
        self._next_onset = math.inf

    def warm_up(self, t: float) -> None:
        """Start the process `WARMUP_S` before `t`: precursors already under way at the start."""
        self._next_onset = exponential_after(self._streams.failures, t - WARMUP_S, self._failure_rate)
        self.start_due(t)

    def next_change(self) -> float:
        """The time of the next failure onset or failure: what changes which GPUs can fail, or how."""
        failing = min(
            (g.process.fail_at for g in self._active.values() if g.process is not None), default=math.inf
        )
        return min(self._next_onset, failing)

    def start_due(self, t1: float) -> None:
        """Start every failure of the fleet-wide Poisson process due by `t1`."""
        rng = self._streams.failures
        while self._next_onset <= t1:
            onset = self._next_onset
            self._next_onset = exponential_after(rng, onset, self._failure_rate)
            entry = rng.choices(self.config.rates.mix, weights=[e.weight for e in self.config.rates.mix])[0]
            xid = choose_weighted(rng, entry.xids)
            distribution = lead_time(entry.mode, self.config.lead_times)
            lead = distribution.from_normal(rng.gauss(0.0, 1.0)) if distribution else 0.0
            gpu = self._pick_gpu(rng.randrange(len(self._gpus)), rng.randrange(1 << 30))
            if gpu is None or onset + lead < self.start_s:
                continue  # no eligible GPU, or (during warm-up) it would have failed before the start
            strength, shapes = self._strength(entry.mode)
            start = onset + lead if strength == "none" else onset
            process = self.begin(
                gpu,
                entry.mode,
                onset=start,
                fail_at=onset + lead,
                xid=xid,
                category=entry.category,
                shapes=shapes,
            )
            process.strength = strength

    def _strength(self, mode: FailureMode) -> tuple[str, PrecursorShapes | None]:
        """The personality's precursor strength for a new failure, and the shapes it needs (classic: the
        mode's own rule, nothing drawn)."""
        mix = self.config.precursors
        if mix.shares is None or mode not in PRECURSOR_MODES:
            return "", None
        strength = self._variety.choices(("strong", "weak", "none"), weights=mix.shares)[0]
        if strength == "weak":
            return strength, weakened(self.config.shapes, mix.weak_factor)
        return strength, None

    def _pick_gpu(self, first: int, stride_seed: int) -> GpuState | None:
        count = len(self._gpus)
        for attempt in range(_PICK_TRIES):
            gpu = self._gpus[(first + attempt * (stride_seed | 1)) % count]
            eligible = gpu.trap is None or gpu.trap in BACKGROUND_TRAPS
            if eligible and gpu.process is None and gpu.present and not gpu.failed:
                return gpu
        return None

    def start_recovered(self, t: float) -> None:
        """A precursor on a healthy GPU that stops partway and never fails (a `recovered-precursor` trap)."""
        rng = self._variety
        gpu = self._pick_gpu(rng.randrange(len(self._gpus)), rng.randrange(1 << 30))
        if gpu is None:
            return
        entries = [e for e in self.config.rates.mix if e.mode in PRECURSOR_MODES]
        entry = rng.choices(entries, weights=[e.weight for e in entries])[0]
        distribution = lead_time(entry.mode, self.config.lead_times)
        lead = distribution.from_normal(rng.gauss(0.0, 1.0)) if distribution else 3600.0
        stop_at = t + lead * rng.uniform(0.2, 0.8)
        spec = ProcessSpec(
            onset=t,
            fail_at=t + lead,
            xid=choose_weighted(rng, entry.xids),
            category="recovered",
            seed=self.seed,
            serial=gpu.identity.serial,
            shapes=self.config.shapes,
        )
        inner = start_process(entry.mode, spec, hardware=self.config.hardware)
        self._drop_background_trap(gpu)
        gpu.trap = TRAP_RECOVERED
        gpu.process = RecoveredPrecursor(spec, inner, stop_at=stop_at)
        self.activate(gpu)
        identity = gpu.identity
        self._truth.traps.append(
            TrapRecord(
                kind=TRAP_RECOVERED,
                node=identity.node,
                gpu=identity.index,
                uuid=identity.uuid,
                detail=entry.mode.value,
                time=t,
                until=stop_at,
            )
        )

    def _drop_background_trap(self, gpu: GpuState) -> None:
        """A GPU with background noise that starts a real precursor (or a recovered one) is a trap no more."""
        if gpu.trap in BACKGROUND_TRAPS:
            self._truth.drop_trap(gpu.identity.uuid)
            gpu.trap = None

    def begin(
        self,
        gpu: GpuState,
        mode: FailureMode,
        *,
        onset: float,
        fail_at: float,
        xid: int,
        category: str,
        recovery_action: int = 0,
        shapes: PrecursorShapes | None = None,
    ) -> FailureProcess:
        """Attach a failure process to a GPU (replacing any under way); `shapes` overrides the fleet's
        precursor shapes for this process only."""
        spec = ProcessSpec(
            onset=onset,
            fail_at=fail_at,
            xid=xid,
            category=category,
            seed=self.seed,
            serial=gpu.identity.serial,
            shapes=self.config.shapes if shapes is None else shapes,
        )
        process = start_process(mode, spec, hardware=self.config.hardware, recovery_action=recovery_action)
        self._drop_background_trap(gpu)
        gpu.process = process
        self.activate(gpu)
        return process

    def activate(self, gpu: GpuState) -> None:
        self._active[gpu.identity.serial] = gpu

    def integrate(self, t0: float, t1: float) -> None:
        rng = self._streams.precursors
        dt = t1 - t0
        if dt <= 0.0 and not self._active:
            return
        self.background.advance(t1)
        for serial, gpu in list(self._active.items()):
            if gpu.sbe_per_s > 0.0:
                gpu.add_sbe(poisson(rng, gpu.sbe_per_s * dt))
            if gpu.nvlink_noise_per_s > 0.0:
                crc = poisson(rng, gpu.nvlink_noise_per_s * dt)
                gpu.nvlink_flit += crc // 2
                gpu.nvlink_data += crc - crc // 2
            process = gpu.process
            if process is not None:
                process.advance(gpu, t0, t1, rng)
                if process.fail_at <= t1:
                    self.fail_now(gpu, process, max(process.fail_at, t0))
                elif process.finished(t1):
                    gpu.process = None
            if not gpu.active:
                del self._active[serial]

    def fail_now(
        self, gpu: GpuState, process: FailureProcess, t: float, *, injected: bool = False
    ) -> FailureRecord:
        """Apply a process's failure at `t`: ground truth, device-plugin health, node and workloads."""
        node = self.nodes[self._node_index(gpu)]
        outcome = process.fail(gpu, t)
        gpu.process = None
        cls = catalog.expected_class(outcome.xid, row_remap_failure=outcome.row_remap_failure)
        gpu.failed = cls.is_hardware
        gpu.unhealthy = gpu.unhealthy or catalog.marks_unhealthy(outcome.xid)
        identity = gpu.identity
        start = process.precursor_start
        record = FailureRecord(
            id=self._truth.next_failure_id(),
            node=node.name,
            gpu=identity.index,
            uuid=identity.uuid,
            mode=process.mode.value,
            category=process.category,
            precursor_start=start,
            failure_time=t,
            lead_time_s=None if start is None else t - start,
            xid=outcome.xid,
            fault_class=catalog.xid_class(outcome.xid).value,
            expected_class=cls.value,
            row_remap_failure=outcome.row_remap_failure,
            vanished=outcome.vanish,
            injected=injected or process.category == "injected",
            detail=outcome.detail,
            precursor_strength=process.strength or classic_strength(start, outcome.detail),
        )
        self._truth.failures.append(record)
        if outcome.vanish:
            self._timers.push(
                t + self.config.shapes.vanish_delay_s, "vanish", node.index, identity.index, identity.uuid
            )
        cause = f"failure:{record.id}"
        if cls.is_hardware:
            node.faulted = True
            node.open_failures.append(record.id)
            self.scheduler.interrupt_node(node, t, cause)
            delay = self.config.ops.auto_repair_after_s
            if delay is not None and node.repair_at is None:
                node.repair_at = t + delay
                self._timers.push(node.repair_at, "repair", node.index)
        else:
            self.scheduler.interrupt_gpu(node, identity.index, t, cause)
        return record

    def _node_index(self, gpu: GpuState) -> int:
        return self._by_name[gpu.identity.node].index
