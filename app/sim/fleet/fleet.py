"""`FleetSim`: N nodes x G GPUs on simulated time, with failures, workloads and ground truth.

Time is simulated: `step(dt)` advances it, so a fleet can run far faster than real time (datasets) or
be stepped by a clock (the server). Within a step, events (failure onsets and failures, exporter
restarts, reboots, repairs, lost GPUs) are handled in time order, and randomness comes from separate
seeded streams — the fleet-wide failure process (a Poisson process at the published rate, each event
starting one failure mode's precursor) has its own, and each failure draws its outcome from its own —
so which GPUs fail, how and when does not depend on the step size. Workloads are placed at step ends.
The simulation never reads the wall clock.

What the fleet does on its own, besides failing: jobs come and go; a node with a hardware fault is
cordoned, its jobs move, and it is repaired (rebooted, a GPU replaced if it must be) after
`OpsParams.auto_repair_after_s`; exporters restart now and then; nodes get maintenance reboots.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime

from app.sim.fleet import catalog, injection
from app.sim.fleet.background import BACKGROUND_TRAPS, Background
from app.sim.fleet.build import build_fleet
from app.sim.fleet.gpu import GpuState
from app.sim.fleet.modes import lead_time, start_process
from app.sim.fleet.nodes import NodeState
from app.sim.fleet.observe import NodeObservation, Observer
from app.sim.fleet.operations import NodeOperations
from app.sim.fleet.params import FailureMode, PrecursorShapes, SimConfig
from app.sim.fleet.process import FailureProcess, ProcessSpec
from app.sim.fleet.randomness import choose_weighted, exponential_after, make_streams, poisson
from app.sim.fleet.recovery import TRAP_RECOVERED, RecoveredPrecursor
from app.sim.fleet.strength import PRECURSOR_MODES, classic_strength, weakened
from app.sim.fleet.truth import FailureRecord, GroundTruth, OpsRecord, PendingRecord, TrapRecord, TruthLog
from app.sim.fleet.workloads import Scheduler

DEFAULT_START = datetime(2025, 3, 3, tzinfo=UTC).timestamp()
# Failure processes are started this long before the simulation begins, so it opens in steady state
# (some precursors already under way) rather than with a fleet of perfectly healthy GPUs.
WARMUP_S = 3 * 86400.0
_PICK_TRIES = 64


@dataclass(frozen=True, slots=True)
class NodeGpuCapacity:
    """What kube-state-metrics reports for a node's `nvidia.com/gpu` resource."""

    node: str
    capacity: int
    allocatable: int


@dataclass(frozen=True, slots=True, order=True)
class _Timer:
    time: float
    seq: int
    kind: str
    node: int
    gpu: int = -1
    uuid: str = ""


class FleetSim:
    """A seeded GPU fleet on simulated time. Not thread-safe; one owner steps and reads it."""

    def __init__(
        self,
        *,
        nodes: int = 8,
        seed: int = 0,
        config: SimConfig | None = None,
        start: float | datetime = DEFAULT_START,
    ) -> None:
        if nodes < 1:
            raise ValueError("a fleet needs at least one node")
        self.seed = seed
        self.config = config or SimConfig()
        self.start_s = start.timestamp() if isinstance(start, datetime) else float(start)
        self._t = self.start_s
        self._streams = make_streams(seed)
        self._truth = TruthLog()
        # Streams only a personality uses (the classic simulator never draws from them).
        self._variety = random.Random(f"{seed}:variety")  # noqa: S311 - simulation, not cryptography
        built = build_fleet(self.config, nodes=nodes, rng=self._streams.identity, variety=self._variety)
        self.nodes: list[NodeState] = built.nodes
        self._truth.traps.extend(built.traps)
        self._by_name = {node.name: node for node in self.nodes}
        self._gpus: list[GpuState] = [gpu for node in self.nodes for gpu in node.gpus]
        self._active: dict[int, GpuState] = {g.identity.serial: g for g in self._gpus if g.active}
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self.observer = Observer(
            seed=seed,
            hardware=self.config.hardware,
            traps=self.config.traps,
            rack_offsets=built.rack_offsets,
            background=self.config.background,
            scrape_gap_p=self.config.exporter.scrape_gap_p,
        )
        self.background = Background(
            params=self.config.background,
            gpus=self._gpus,
            rng=random.Random(f"{seed}:background"),  # noqa: S311 - simulation, not cryptography
            start=self._t,
            on_recovered=self._start_recovered,
        )
        self._truth.traps.extend(self.background.traps)
        self.scheduler = Scheduler(
            params=self.config.workloads,
            traps=self.config.traps,
            hardware=self.config.hardware,
            rng=self._streams.workloads,
            nodes=self.nodes,
            truth=self._truth,
        )
        self.operations = NodeOperations(
            config=self.config,
            truth=self._truth,
            scheduler=self.scheduler,
            identity_rng=self._streams.identity,
            activate=self._activate,
        )
        for gpu in self._gpus:
            gpu.set_power(self._t, self.config.hardware.idle_power_w)
        ops = self.config.ops
        self._failure_rate = self.config.rates.per_gpu_second() * len(self._gpus)
        self._next_onset = exponential_after(self._streams.failures, self._t - WARMUP_S, self._failure_rate)
        self._start_failures(self._t)  # the warm-up: precursors already under way at the start
        per_s = len(self.nodes) / 86400.0
        self._next_restart = exponential_after(
            self._streams.ops, self._t, ops.exporter_restarts_per_node_day * per_s
        )
        self._next_maintenance = exponential_after(
            self._streams.ops, self._t, ops.maintenance_reboots_per_node_day * per_s
        )
        self.scheduler.step(self._t, self._t)

    # -- time ----------------------------------------------------------------------------------------

    @property
    def time_s(self) -> float:
        """Simulated time as Unix seconds."""
        return self._t

    @property
    def now(self) -> datetime:
        return datetime.fromtimestamp(self._t, UTC)

    @property
    def elapsed_s(self) -> float:
        return self._t - self.start_s

    def step(self, dt_seconds: float) -> None:
        """Advance simulated time by `dt_seconds` (any size; larger steps are coarser, not wrong)."""
        if dt_seconds < 0:
            raise ValueError("time only moves forward")
        t0 = self._t
        end = t0 + dt_seconds
        while True:
            t = min(self._next_event(), end)
            self._integrate(self._t, t)
            self._t = t
            self._start_failures(t)
            self._ops_events(t)
            self._run_timers(t)
            if t >= end:
                break
        self.scheduler.step(t0, end)

    def _next_event(self) -> float:
        """The time of the next thing that changes which GPUs can fail, or how."""
        failing = min(
            (g.process.fail_at for g in self._active.values() if g.process is not None), default=math.inf
        )
        timer = self._timers[0].time if self._timers else math.inf
        return min(self._next_onset, self._next_restart, self._next_maintenance, timer, failing)

    # -- reading -------------------------------------------------------------------------------------

    def node(self, name: str) -> NodeState:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no node {name!r}") from None

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes)

    def observe_node(self, name: str) -> NodeObservation:
        return self.observer.node(self.node(name), self._t)

    def observe(self) -> tuple[NodeObservation, ...]:
        return tuple(self.observer.node(node, self._t) for node in self.nodes)

    def gpu_capacity(self) -> tuple[NodeGpuCapacity, ...]:
        per_node = self.config.hardware.gpus_per_node
        return tuple(NodeGpuCapacity(n.name, per_node, n.allocatable(self._t)) for n in self.nodes)

    def truth(self, *, include_pending: bool = False) -> GroundTruth:
        pending: tuple[PendingRecord, ...] = ()
        if include_pending:
            pending = tuple(
                PendingRecord(
                    node=gpu.identity.node,
                    gpu=gpu.identity.index,
                    uuid=gpu.identity.uuid,
                    mode=gpu.process.mode.value,
                    precursor_start=gpu.process.precursor_start,
                    failure_time=gpu.process.fail_at,
                    xid=gpu.process.xid,
                    precursor_strength=gpu.process.strength,
                )
                for gpu in self._gpus
                if gpu.process is not None and not isinstance(gpu.process, RecoveredPrecursor)
            )
        return self._truth.snapshot(
            start=self.start_s, now=self._t, pending=pending, personality=self.config.personality
        )

    # -- control -------------------------------------------------------------------------------------

    def inject(
        self,
        node: str,
        gpu: int | None,
        mode: FailureMode | str,
        *,
        lead_time_s: float | None = None,
        xid: int | None = None,
        duration_s: float | None = None,
        version: str | None = None,
        recovery_action: int = 0,
    ) -> injection.Injected:
        """Start a named failure or event now (see `injection.inject`); raises `InjectionError`."""
        try:
            chosen = FailureMode(mode)
        except ValueError:
            raise injection.InjectionError(f"unknown mode {mode!r}") from None
        return injection.inject(
            self,
            node,
            gpu,
            chosen,
            lead_time_s=lead_time_s,
            xid=xid,
            duration_s=duration_s,
            version=version,
            recovery_action=recovery_action,
        )

    def drain(self, name: str) -> list[str]:
        """Cordon a node and move its jobs elsewhere (what `kubectl drain` does); returns the jobs."""
        return self.operations.drain(self.node(name), self._t)

    def uncordon(self, name: str) -> None:
        self.operations.uncordon(self.node(name), self._t)

    def reboot(self, name: str) -> None:
        """Reboot a node now (a remediation): volatile counters reset, lost GPUs return."""
        self.operations.reboot(self.node(name), self._t, cause="requested", injected=True)

    def repair(self, name: str) -> None:
        """Repair a node now: replace GPUs that need it, then reboot."""
        self.operations.repair(self.node(name), self._t, injected=True)

    # -- failures ------------------------------------------------------------------------------------

    def _start_failures(self, t1: float) -> None:
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

    def _start_recovered(self, t: float) -> None:
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
        self._activate(gpu)
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
        self._activate(gpu)
        return process

    def fail_early(self, name: str, gpu: int) -> FailureRecord:
        """Let the failure under way on a GPU happen now rather than at its time (a demo cannot wait
        hours for it): the process's own precursor, XID and outcome; raises `InjectionError` without one."""
        state = self.node(name).gpus[gpu]
        process = state.process
        if process is None:
            raise injection.InjectionError(f"GPU {gpu} of {name} has no failure under way")
        return self.fail_now(state, process, self._t, injected=True)

    def _activate(self, gpu: GpuState) -> None:
        self._active[gpu.identity.serial] = gpu

    def _integrate(self, t0: float, t1: float) -> None:
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
            self._push(
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
                self._push(node.repair_at, "repair", node.index)
        else:
            self.scheduler.interrupt_gpu(node, identity.index, t, cause)
        return record

    def _node_index(self, gpu: GpuState) -> int:
        return self._by_name[gpu.identity.node].index

    # -- operations ----------------------------------------------------------------------------------

    def _ops_events(self, t1: float) -> None:
        rng, ops = self._streams.ops, self.config.ops
        per_s = len(self.nodes) / 86400.0
        while self._next_restart <= t1:
            t = self._next_restart
            self._next_restart = exponential_after(rng, t, ops.exporter_restarts_per_node_day * per_s)
            node = self.nodes[rng.randrange(len(self.nodes))]
            self.operations.restart_exporter(node, t, rng.uniform(*ops.exporter_restart_s))
        while self._next_maintenance <= t1:
            t = self._next_maintenance
            self._next_maintenance = exponential_after(rng, t, ops.maintenance_reboots_per_node_day * per_s)
            node = self.nodes[rng.randrange(len(self.nodes))]
            if not node.faulted:
                self.operations.reboot(node, t, cause="maintenance")

    def record_ops(self, record: OpsRecord) -> None:
        self._truth.ops.append(record)

    @property
    def truth_log(self) -> TruthLog:
        return self._truth

    # -- timers --------------------------------------------------------------------------------------

    def _push(self, time: float, kind: str, node: int, gpu: int = -1, uuid: str = "") -> None:
        heapq.heappush(self._timers, _Timer(time, next(self._seq), kind, node, gpu, uuid))

    def _run_timers(self, t1: float) -> None:
        while self._timers and self._timers[0].time <= t1:
            timer = heapq.heappop(self._timers)
            node = self.nodes[timer.node]
            if timer.kind == "vanish":
                gpu = node.gpus[timer.gpu]
                if gpu.identity.uuid == timer.uuid and gpu.failed:
                    gpu.present = False
            elif timer.kind == "repair" and node.repair_at == timer.time:
                self.operations.repair(node, timer.time)
