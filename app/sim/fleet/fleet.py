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

import random
from dataclasses import dataclass
from datetime import UTC, datetime

from app.sim.fleet import injection
from app.sim.fleet.background import Background
from app.sim.fleet.build import build_fleet
from app.sim.fleet.failures import Failures
from app.sim.fleet.gpu import GpuState
from app.sim.fleet.nodes import NodeState
from app.sim.fleet.observe import NodeObservation, Observer
from app.sim.fleet.operations import NodeOperations
from app.sim.fleet.params import FailureMode, PrecursorShapes, SimConfig
from app.sim.fleet.process import FailureProcess
from app.sim.fleet.randomness import exponential_after, make_streams
from app.sim.fleet.recovery import RecoveredPrecursor
from app.sim.fleet.timers import Timers
from app.sim.fleet.truth import FailureRecord, GroundTruth, OpsRecord, PendingRecord, TruthLog
from app.sim.fleet.workloads import Scheduler

DEFAULT_START = datetime(2025, 3, 3, tzinfo=UTC).timestamp()


@dataclass(frozen=True, slots=True)
class NodeGpuCapacity:
    """What kube-state-metrics reports for a node's `nvidia.com/gpu` resource."""

    node: str
    capacity: int
    allocatable: int


class FleetSim:
    """A seeded GPU fleet on simulated time. Not thread-safe; one owner steps and reads it.

    Its failures (onsets, precursors, what a failure does) are `failures.Failures`'; this steps time,
    runs the fleet's own operations and timers, and answers reads and control calls.
    """

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
        active = {g.identity.serial: g for g in self._gpus if g.active}
        self._timers = Timers()
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
            # Late-bound: the failures are built after the background that calls them.
            on_recovered=lambda t: self.failures.start_recovered(t),  # noqa: PLW0108
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
        self.failures = Failures(
            config=self.config,
            seed=seed,
            start_s=self.start_s,
            streams=self._streams,
            variety=self._variety,
            nodes=self.nodes,
            gpus=self._gpus,
            active=active,
            truth=self._truth,
            background=self.background,
            scheduler=self.scheduler,
            timers=self._timers,
        )
        self.operations = NodeOperations(
            config=self.config,
            truth=self._truth,
            scheduler=self.scheduler,
            identity_rng=self._streams.identity,
            activate=self.failures.activate,
        )
        for gpu in self._gpus:
            gpu.set_power(self._t, self.config.hardware.idle_power_w)
        ops = self.config.ops
        self.failures.warm_up(self._t)
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
            self.failures.integrate(self._t, t)
            self._t = t
            self.failures.start_due(t)
            self._ops_events(t)
            self._run_timers(t)
            if t >= end:
                break
        self.scheduler.step(t0, end)

    def _next_event(self) -> float:
        """The time of the next thing that changes which GPUs can fail, or how."""
        return min(
            self.failures.next_change(), self._next_restart, self._next_maintenance, self._timers.next_time
        )

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
        return self.failures.begin(
            gpu,
            mode,
            onset=onset,
            fail_at=fail_at,
            xid=xid,
            category=category,
            recovery_action=recovery_action,
            shapes=shapes,
        )

    def fail_now(
        self, gpu: GpuState, process: FailureProcess, t: float, *, injected: bool = False
    ) -> FailureRecord:
        """Apply a process's failure at `t`: ground truth, device-plugin health, node and workloads."""
        return self.failures.fail_now(gpu, process, t, injected=injected)

    def fail_early(self, name: str, gpu: int) -> FailureRecord:
        """Let the failure under way on a GPU happen now rather than at its time (a demo cannot wait
        hours for it): the process's own precursor, XID and outcome; raises `InjectionError` without one."""
        state = self.node(name).gpus[gpu]
        process = state.process
        if process is None:
            raise injection.InjectionError(f"GPU {gpu} of {name} has no failure under way")
        return self.fail_now(state, process, self._t, injected=True)

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

    def _run_timers(self, t1: float) -> None:
        for timer in self._timers.due(t1):
            node = self.nodes[timer.node]
            if timer.kind == "vanish":
                gpu = node.gpus[timer.gpu]
                if gpu.identity.uuid == timer.uuid and gpu.failed:
                    gpu.present = False
            elif timer.kind == "repair" and node.repair_at == timer.time:
                self.operations.repair(node, timer.time)
