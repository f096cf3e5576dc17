"""Jobs on the fleet: single-node pods and multi-node gangs that move when their nodes go bad.

A small scheduler keeps the fleet near a target utilisation with jobs drawn from `WorkloadParams`
(ASSUMPTIONS: sizes, durations, namespaces). A job is interrupted and requeued when a node it uses faults,
reboots or is drained — a gang restarts whole, on any nodes with room — and it may land elsewhere, which
is what makes application XIDs (13, 31, 43) follow the job rather than a GPU. Gang pods keep their names
across restarts (as training operators name ranks); single pods get a new suffix, as a Job's pods do.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from app.sim.fleet import catalog
from app.sim.fleet.nodes import NodeState
from app.sim.fleet.params import HardwareSpec, TrapParams, WorkloadParams
from app.sim.fleet.randomness import choose_weighted, exponential_after
from app.sim.fleet.truth import AppXidRecord, InterruptionRecord, TrapRecord, TruthLog

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_GANG_PREFIXES = ("pretrain-llm", "train-vision", "train-moe")
_SINGLE_PREFIXES = ("finetune", "eval", "infer", "sweep", "notebook")
_MAX_NEW_JOBS_PER_STEP = 64
_MAX_MISSES = 4


@dataclass(frozen=True, slots=True)
class PodRef:
    """The pod (and container) dcgm-exporter attributes a GPU to."""

    namespace: str
    name: str
    container: str


@dataclass(frozen=True, slots=True)
class Placement:
    node: int
    gpus: tuple[int, ...]
    pod: PodRef


@dataclass(slots=True, kw_only=True)
class Job:
    name: str
    namespace: str
    gang: bool
    pods: int
    gpus_per_pod: int
    remaining_s: float
    buggy: bool
    app_xid_per_s: float
    util: float
    fb_fraction: float
    placements: list[Placement] = field(default_factory=list)
    started_at: float = 0.0
    next_app_xid: float = math.inf
    restarts: int = 0

    @property
    def running(self) -> bool:
        return bool(self.placements)

    def ends_at(self) -> float:
        return self.started_at + self.remaining_s


def nominal_power(hardware: HardwareSpec, util: float) -> float:
    return hardware.idle_power_w + (hardware.tdp_w - hardware.idle_power_w) * util / 100.0 * 0.92


class Scheduler:
    """Places, finishes, interrupts and requeues jobs; raises the jobs' application XIDs."""

    def __init__(
        self,
        *,
        params: WorkloadParams,
        traps: TrapParams,
        hardware: HardwareSpec,
        rng: random.Random,
        nodes: list[NodeState],
        truth: TruthLog,
    ) -> None:
        self.params = params
        self.traps = traps
        self.hardware = hardware
        self.rng = rng
        self.nodes = nodes
        self.truth = truth
        self.running: dict[str, Job] = {}
        self.pending: deque[Job] = deque()
        self._count = 0

    # -- the step ------------------------------------------------------------------------------------

    def step(self, t0: float, t1: float) -> None:
        del t0
        for job in [job for job in self.running.values() if job.ends_at() <= t1]:
            self._unplace(job, job.ends_at())
            del self.running[job.name]
        for job in list(self.running.values()):
            while job.running and job.next_app_xid <= t1:
                self._app_xid(job, job.next_app_xid)
        self._place_pending(t1)
        self._fill(t1)

    def interrupt_node(self, node: NodeState, t: float, cause: str) -> list[str]:
        """Stop every job with a pod on this node and requeue it; returns the job names."""
        hit = [job for job in self.running.values() if any(p.node == node.index for p in job.placements)]
        for job in hit:
            self._interrupt(job, t, cause)
        return [job.name for job in hit]

    def interrupt_gpu(self, node: NodeState, gpu: int, t: float, cause: str) -> str | None:
        pod = node.gpus[gpu].pod
        if pod is None:
            return None
        for job in list(self.running.values()):
            if any(p.node == node.index and gpu in p.gpus for p in job.placements):
                self._interrupt(job, t, cause)
                return job.name
        return None

    def job_of(self, pod: PodRef | None) -> Job | None:
        if pod is None:
            return None
        for job in self.running.values():
            if any(p.pod == pod for p in job.placements):
                return job
        return None

    # -- jobs ----------------------------------------------------------------------------------------

    def _new_job(self, t: float) -> Job:
        p, rng = self.params, self.rng
        self._count += 1
        sizes = [size for size in p.gang_nodes if size <= len(self.nodes)]
        gang = rng.random() < p.gang_fraction and bool(sizes)
        prefix = rng.choice(_GANG_PREFIXES if gang else _SINGLE_PREFIXES)
        median = p.gang_median_s if gang else p.single_median_s
        low, high = p.duration_clip_s
        duration = min(high, max(low, median * math.exp(p.duration_sigma * rng.gauss(0.0, 1.0))))
        buggy = rng.random() < self.traps.buggy_job_fraction
        per_day = p.app_xid_buggy_per_day if buggy else p.app_xid_normal_per_day
        job = Job(
            name=f"{prefix}-{self._count:05d}",
            namespace=rng.choice(p.namespaces),
            gang=gang,
            pods=rng.choice(sizes) if gang else 1,
            gpus_per_pod=self.hardware.gpus_per_node if gang else rng.choice(p.single_gpus),
            remaining_s=duration,
            buggy=buggy,
            app_xid_per_s=per_day / 86400.0,
            util=rng.uniform(85.0, 99.0) if gang else rng.uniform(40.0, 98.0),
            fb_fraction=rng.uniform(0.5, 0.95),
        )
        if buggy:
            self.truth.traps.append(
                TrapRecord(
                    kind="app-xid-job", job=job.name, namespace=job.namespace, detail=f"created {t:.0f}"
                )
            )
        return job

    def _fill(self, t: float) -> None:
        capacity = sum(len(n.gpus) for n in self.nodes if n.schedulable(t))
        used = sum(1 for n in self.nodes for g in n.gpus if g.pod is not None)
        misses = 0
        for _ in range(_MAX_NEW_JOBS_PER_STEP):
            if used >= self.params.target_utilization * capacity or misses >= _MAX_MISSES:
                return
            job = self._new_job(t)
            if not self._place(job, t):
                misses += 1  # a job that does not fit now is dropped; a smaller one may
                continue
            self.running[job.name] = job
            used += job.pods * job.gpus_per_pod

    def _place_pending(self, t: float) -> None:
        waiting = len(self.pending)
        for _ in range(waiting):
            job = self.pending.popleft()
            if self._place(job, t):
                self.running[job.name] = job
            else:
                self.pending.append(job)

    def _place(self, job: Job, t: float) -> bool:
        candidates = [n for n in self.nodes if n.schedulable(t)]
        self.rng.shuffle(candidates)
        chosen: list[tuple[NodeState, list[int]]] = []
        for node in candidates:
            free = node.usable_gpus()
            if len(free) >= job.gpus_per_pod:
                chosen.append((node, free[: job.gpus_per_pod]))
                if len(chosen) == job.pods:
                    break
        if len(chosen) < job.pods:
            return False
        for rank, (node, gpus) in enumerate(chosen):
            pod = PodRef(job.namespace, self._pod_name(job, rank), "pytorch" if job.gang else "main")
            job.placements.append(Placement(node.index, tuple(gpus), pod))
            for index in gpus:
                gpu = node.gpus[index]
                gpu.pod = pod
                gpu.util = job.util
                gpu.fb_used_mib = int(self.hardware.fb_total_mib * job.fb_fraction)
                gpu.set_power(t, nominal_power(self.hardware, job.util))
        job.started_at = t
        job.next_app_xid = exponential_after(self.rng, t, job.app_xid_per_s)
        return True

    def _pod_name(self, job: Job, rank: int) -> str:
        if job.gang:
            return f"{job.name}-worker-{rank}"
        suffix = "".join(self.rng.choice(_SUFFIX_ALPHABET) for _ in range(5))
        return f"{job.name}-{suffix}"

    def _unplace(self, job: Job, t: float) -> None:
        for placement in job.placements:
            node = self.nodes[placement.node]
            for index in placement.gpus:
                gpu = node.gpus[index]
                if gpu.pod == placement.pod:
                    gpu.pod = None
                    gpu.util = 0.0
                    gpu.fb_used_mib = 0
                    gpu.set_power(t, self.hardware.idle_power_w)
        job.placements = []
        job.next_app_xid = math.inf

    def _interrupt(self, job: Job, t: float, cause: str) -> None:
        nodes = tuple(sorted({self.nodes[p.node].name for p in job.placements}))
        job.remaining_s = max(60.0, job.ends_at() - t)
        self._unplace(job, t)
        job.restarts += 1
        self.running.pop(job.name, None)
        self.pending.appendleft(job)
        self.truth.interruptions.append(
            InterruptionRecord(time=t, job=job.name, namespace=job.namespace, nodes=nodes, cause=cause)
        )

    def _app_xid(self, job: Job, t: float) -> None:
        placement = self.rng.choice(job.placements)
        index = self.rng.choice(placement.gpus)
        node = self.nodes[placement.node]
        gpu = node.gpus[index]
        xid = choose_weighted(self.rng, self.params.app_xids)
        gpu.last_xid = xid
        self.truth.app_xids.append(
            AppXidRecord(
                time=t,
                node=node.name,
                gpu=index,
                uuid=gpu.identity.uuid,
                xid=xid,
                fault_class=catalog.xid_class(xid).value,
                job=job.name,
                namespace=job.namespace,
                pod=placement.pod.name,
                buggy_job=job.buggy,
            )
        )
        job.next_app_xid = exponential_after(self.rng, t, job.app_xid_per_s)
        if xid in (13, 31) and self.rng.random() < self.params.app_xid_reschedule_p:
            self._interrupt(job, t, f"app-xid:{xid}")
