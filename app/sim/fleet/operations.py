"""What happens to whole nodes: exporter restarts, reboots, repairs, GPU replacements, drains.

Each operation changes node and GPU state, stops the workloads it must, and appends to the ground
truth. `FleetSim` triggers them from its random processes (exporter restarts, maintenance reboots,
auto-repair) and from injections or the control API.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from app.sim.fleet.build import new_identity
from app.sim.fleet.gpu import GpuState
from app.sim.fleet.nodes import NodeState
from app.sim.fleet.params import SimConfig
from app.sim.fleet.truth import OpsRecord, TruthLog
from app.sim.fleet.workloads import Scheduler


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeOperations:
    config: SimConfig
    truth: TruthLog
    scheduler: Scheduler
    identity_rng: random.Random
    # Called for each GPU that has something to integrate again after a reboot.
    activate: Callable[[GpuState], None]

    def restart_exporter(
        self, node: NodeState, t: float, duration_s: float, *, injected: bool = False
    ) -> None:
        """The exporter goes away for a while; its embedded DCGM forgets the last XIDs and incidents."""
        until = max(node.exporter_down_until, t + duration_s)
        node.exporter_down_until = until
        for gpu in node.gpus:
            gpu.last_xid = 0
            gpu.incidents.clear()
        self.truth.ops.append(
            OpsRecord(time=t, node=node.name, kind="exporter-restart", until=until, injected=injected)
        )

    def reboot(self, node: NodeState, t: float, *, cause: str, injected: bool = False) -> None:
        """Jobs stop, volatile counters reset, lost GPUs come back, the node's fault is cleared.

        A precursor still under way continues after the reboot: degrading hardware stays degraded.
        """
        self.scheduler.interrupt_node(node, t, f"reboot:{cause}")
        for gpu in node.gpus:
            gpu.reboot(t)
            if gpu.active:
                self.activate(gpu)
        node.rebooting_until = t + self.config.ops.reboot_s
        node.faulted = False
        node.repair_at = None
        detail = cause if not node.open_failures else f"{cause} ({', '.join(node.open_failures)})"
        node.open_failures = []
        self.truth.ops.append(
            OpsRecord(
                time=t,
                node=node.name,
                kind="reboot",
                until=node.rebooting_until,
                detail=detail,
                injected=injected,
            )
        )

    def repair(self, node: NodeState, t: float, *, injected: bool = False) -> None:
        """The remediation: replace the GPUs that need it (row-remap failure), then reboot."""
        for gpu in node.gpus:
            if gpu.needs_replacement:
                self.replace_gpu(node, gpu.identity.index, t, injected=injected)
        self.reboot(node, t, cause="repair", injected=injected)

    def replace_gpu(self, node: NodeState, index: int, t: float, *, injected: bool = False) -> None:
        """A new board in the slot: a new UUID and fresh counters."""
        gpu = node.gpus[index]
        old = gpu.identity.uuid
        identity = new_identity(
            self.config, self.identity_rng, node=node.name, index=index, serial=gpu.identity.serial
        )
        self.truth.drop_trap(old)
        gpu.replace_with(identity, t)
        self.truth.ops.append(
            OpsRecord(
                time=t,
                node=node.name,
                kind="replace",
                gpu=index,
                uuid=identity.uuid,
                detail=f"was {old}",
                injected=injected,
            )
        )

    def drain(self, node: NodeState, t: float) -> list[str]:
        """Cordon and move the node's jobs elsewhere (what `kubectl drain` does); returns the jobs."""
        node.cordoned = True
        self.truth.ops.append(OpsRecord(time=t, node=node.name, kind="drain", injected=True))
        return self.scheduler.interrupt_node(node, t, "drain")

    def uncordon(self, node: NodeState, t: float) -> None:
        node.cordoned = False
        self.truth.ops.append(OpsRecord(time=t, node=node.name, kind="uncordon", injected=True))
