"""Fault injection: start a named failure or fleet event now, on a chosen node and GPU.

Injected failures run the same state machines as random ones; their precursor starts now and the
failure follows after `lead_time_s` (default: the mode's median lead time, an ASSUMPTION). A sudden XID
fails at once. Injecting a failure on a trap GPU makes it an ordinary GPU: it leaves the trap list.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from app.sim.fleet import catalog
from app.sim.fleet.modes import DEFAULT_XIDS, lead_time
from app.sim.fleet.params import GPU_FAILURE_MODES, FailureMode
from app.sim.fleet.truth import AppXidRecord, OpsRecord, iso

if TYPE_CHECKING:
    from app.sim.fleet.fleet import FleetSim

NODE_MODES = frozenset({FailureMode.EXPORTER_RESTART, FailureMode.REBOOT, FailureMode.DRIVER_MISMATCH})


class InjectionError(ValueError):
    """The injection names something that does not exist or cannot be done."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Injected:
    """What an injection started: the failure time is when the failure will happen (if any)."""

    mode: str
    node: str
    gpu: int | None
    uuid: str | None
    time: float
    failure_time: float | None = None
    xid: int | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["time"] = iso(self.time)
        out["failure_time"] = iso(self.failure_time)
        return out


def inject(
    sim: FleetSim,
    node_name: str,
    gpu_index: int | None,
    mode: FailureMode,
    *,
    lead_time_s: float | None = None,
    xid: int | None = None,
    duration_s: float | None = None,
    version: str | None = None,
    recovery_action: int = 0,
) -> Injected:
    try:
        node = sim.node(node_name)
    except KeyError as exc:
        raise InjectionError(str(exc.args[0])) from None
    t = sim.time_s
    if mode in NODE_MODES:
        return _inject_node_event(sim, node_name, mode, duration_s=duration_s, version=version)
    if gpu_index is None or not 0 <= gpu_index < len(node.gpus):
        raise InjectionError(f"mode {mode.value} needs a GPU index of node {node_name}")
    gpu = node.gpus[gpu_index]
    base = Injected(mode=mode.value, node=node_name, gpu=gpu_index, uuid=gpu.identity.uuid, time=t)
    if mode is FailureMode.APP_XID:
        chosen = xid or 13
        gpu.last_xid = chosen
        job = sim.scheduler.job_of(gpu.pod)
        sim.truth_log.app_xids.append(
            AppXidRecord(
                time=t,
                node=node_name,
                gpu=gpu_index,
                uuid=gpu.identity.uuid,
                xid=chosen,
                fault_class=catalog.xid_class(chosen).value,
                job=job.name if job else None,
                namespace=job.namespace if job else None,
                pod=gpu.pod.name if gpu.pod else None,
                buggy_job=bool(job and job.buggy),
                injected=True,
            )
        )
        return replace(base, xid=chosen)
    if mode is FailureMode.POWER_BRAKE:
        duration = duration_s if duration_s is not None else 600.0
        gpu.brake_until = t + duration
        sim.record_ops(
            OpsRecord(
                time=t,
                node=node_name,
                kind="power-brake",
                gpu=gpu_index,
                uuid=gpu.identity.uuid,
                until=t + duration,
                injected=True,
            )
        )
        return base
    if mode is FailureMode.GPU_VANISH:
        gpu.present = False
        gpu.unhealthy = True
        sim.scheduler.interrupt_gpu(node, gpu_index, t, "gpu-vanish")
        sim.record_ops(
            OpsRecord(
                time=t,
                node=node_name,
                kind="gpu-vanish",
                gpu=gpu_index,
                uuid=gpu.identity.uuid,
                injected=True,
            )
        )
        return base
    if mode not in GPU_FAILURE_MODES:
        raise InjectionError(f"unknown mode {mode.value}")
    if gpu.trap is not None:
        sim.truth_log.drop_trap(gpu.identity.uuid)
        gpu.trap = None
    chosen = xid or DEFAULT_XIDS[mode]
    distribution = lead_time(mode, sim.config.lead_times)
    if mode is FailureMode.SUDDEN_XID:
        lead = 0.0
    elif lead_time_s is not None:
        lead = max(0.0, lead_time_s)
    else:
        lead = distribution.median_s if distribution else 0.0
    process = sim.begin(
        gpu, mode, onset=t, fail_at=t + lead, xid=chosen, category="injected", recovery_action=recovery_action
    )
    if lead == 0.0:
        record = sim.fail_now(gpu, process, t, injected=True)
        return replace(base, failure_time=t, xid=chosen, detail=record.id)
    return replace(base, failure_time=t + lead, xid=chosen)


def _inject_node_event(
    sim: FleetSim, node_name: str, mode: FailureMode, *, duration_s: float | None, version: str | None
) -> Injected:
    node = sim.node(node_name)
    t = sim.time_s
    if mode is FailureMode.EXPORTER_RESTART:
        low, high = sim.config.ops.exporter_restart_s
        duration = duration_s if duration_s is not None else (low + high) / 2
        sim.operations.restart_exporter(node, t, duration, injected=True)
        return Injected(mode=mode.value, node=node_name, gpu=None, uuid=None, time=t)
    if mode is FailureMode.REBOOT:
        sim.operations.reboot(node, t, cause="injected", injected=True)
        return Injected(mode=mode.value, node=node_name, gpu=None, uuid=None, time=t)
    chosen = version or sim.config.hardware.mismatched_driver_version
    node.driver_version = chosen
    sim.record_ops(OpsRecord(time=t, node=node_name, kind="driver-mismatch", detail=chosen, injected=True))
    return Injected(mode=mode.value, node=node_name, gpu=None, uuid=None, time=t, detail=chosen)
