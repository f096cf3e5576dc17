"""The scripted faults of the demo, played against a running `Stack`, recorded by a `Recorder`.

1. A fatal XID 79 (the GPU fell off the bus) on a node running a rank of a training gang: quarantine
   (`reboot-node`), drain, and the gang's other ranks restarted so they do not hang on a collective.
2. HBM degradation: single-bit ECC errors accelerate and rows get remapped (XID 63, recorded as a feature)
   for half a minute, then a double-bit error with XID 48: quarantine (`reset-gpu`).
3. An application XID 13 in a training pod: that pod is restarted, the node stays in the pool.
4. The same GPU faults again (XID 31) under a different workload: the fault follows the GPU, not the job,
   so it escalates to the hardware track.
5. A node boots a different driver than its pool: `NoSchedule` taint, no cordon, no drain.
6. The remediator reports the XID 79 node done (rebooted, GPU back): its alerts resolve and Sickbay
   releases it after the healthy delay. The driver node gets its pool's driver back and is released too.
7. A storm: four nodes fault at once. The blast-radius budget allows a few quarantines; past it the
   breaker opens and the rest are recorded, not acted on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.demo.stack import Stack
from app.demo.timeline import Recorder, Scene

HBM_LEAD_S = 30.0


@dataclass(frozen=True, slots=True)
class Cast:
    """Which nodes, GPUs and pods play which part (chosen from the fleet's own workloads)."""

    gang_node: str
    gang_gpu: int
    gang_job: str
    hbm_node: str
    hbm_gpu: int
    app_node: str
    app_gpu: int
    app_pod: tuple[str, str]
    driver_node: str
    storm: tuple[tuple[str, int], ...]


class CastingError(RuntimeError):
    """The fleet's workloads do not offer what the scenario needs (another seed or size will)."""


def cast(stack: Stack, *, storm: int = 4) -> Cast:
    sim = stack.fleet
    if len(sim.nodes) < 6 + storm:
        raise CastingError(f"the demo needs at least {6 + storm} nodes")
    jobs = sorted(sim.scheduler.running.values(), key=lambda j: j.name)
    gangs = [j for j in jobs if j.gang and len(j.placements) >= 2]
    if not gangs:
        raise CastingError("the fleet placed no gang; try another --seed")
    # The largest gang that spans at most half the fleet: big enough to show, small enough to leave room.
    gangs.sort(key=lambda j: (len(j.placements) > len(sim.nodes) // 2, -len(j.placements), j.name))
    gang = gangs[0]
    first = gang.placements[0]
    gang_node = sim.nodes[first.node].name
    gang_nodes = {sim.nodes[p.node].name for p in gang.placements}
    singles = [
        (sim.nodes[p.node].name, p.gpus[0], p.pod, j.namespace)
        for j in jobs
        if not j.gang
        for p in j.placements
        if sim.nodes[p.node].name != gang_node
    ]
    if not singles:  # every GPU went to gangs: a single-GPU job lands on a free GPU (or takes one)
        free = [
            (n.name, g.identity.index)
            for n in sim.nodes
            if n.name != gang_node
            for g in n.gpus
            if g.pod is None and g.present
        ]
        if not free:
            raise CastingError("no GPU is free for a single-pod job; try another --seed or more --nodes")
        node, gpu = free[0]
        pod = stack.attach_workload(node, gpu, namespace="training", name="finetune-demo-0")
        singles = [(node, gpu, pod, "training")]
    # A training pod if there is one, off the gang's nodes if possible.
    singles.sort(key=lambda s: (s[0] in gang_nodes, s[3] != "training"))
    app_node, app_gpu, app_pod, _ = singles[0]
    used = {gang_node, app_node}
    others = [n for n in sim.nodes if n.name not in used]
    others.sort(key=lambda n: (n.name in gang_nodes, not any(g.pod for g in n.gpus)))

    def busy_gpu(name: str) -> int:
        node = sim.node(name)
        return next((g.identity.index for g in node.gpus if g.pod is not None), 0)

    names = [n.name for n in others]
    hbm_node, driver_node, *rest = names
    return Cast(
        gang_node=gang_node,
        gang_gpu=first.gpus[0],
        gang_job=f"{gang.namespace}/{gang.name} ({len(gang.placements)} ranks)",
        hbm_node=hbm_node,
        hbm_gpu=busy_gpu(hbm_node),
        app_node=app_node,
        app_gpu=app_gpu,
        app_pod=(app_pod.namespace, app_pod.name),
        driver_node=driver_node,
        storm=tuple((name, busy_gpu(name)) for name in rest[:storm]),
    )


STORM_FAULTS: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("XID 79", "sudden-xid", {"xid": 79}),
    ("XID 95 (uncontained ECC)", "sudden-xid", {"xid": 95}),
    ("XID 119 (GSP)", "gsp", {"lead_time_s": 0}),
    ("XID 64 (ECC row remap)", "sudden-xid", {"xid": 64}),
)


class Scenario:
    def __init__(self, stack: Stack, recorder: Recorder, *, budget_nodes: int) -> None:
        self.stack = stack
        self.rec = recorder
        self.cast = cast(stack)
        self.budget_nodes = budget_nodes
        self._background: list[asyncio.Task[None]] = []
        c = self.cast
        add = recorder.add
        self.xid79 = add(
            Scene(
                key="xid79",
                title="Fatal XID 79: a GPU fell off the bus",
                label="XID 79, fell off the bus",
                node=c.gang_node,
                gpu=c.gang_gpu,
                expect=f"quarantine (reboot-node), drain, restart gang {c.gang_job}",
            )
        )
        self.hbm = add(
            Scene(
                key="hbm",
                title=f"HBM degradation, {HBM_LEAD_S:.0f}s of precursors, then a double-bit error",
                label="HBM precursors → DBE, XID 48",
                node=c.hbm_node,
                gpu=c.hbm_gpu,
                expect="precursors recorded; quarantine (reset-gpu) at the double-bit error",
            )
        )
        self.app = add(
            Scene(
                key="app-xid",
                title="Application XID 13 in a training pod",
                label="App XID 13 → restart pod",
                node=c.app_node,
                gpu=c.app_gpu,
                expect=f"restart pod {'/'.join(c.app_pod)}; the node stays in the pool",
                effect_kind="pod-gone",
                classes=frozenset({"restart-workload"}),
                pod=c.app_pod,
            )
        )
        self.escalation = add(
            Scene(
                key="escalation",
                title="Same GPU, another workload, XID 31: the fault follows the GPU",
                label="XID 31, 2nd workload → escalate",
                node=c.app_node,
                gpu=c.app_gpu,
                expect="escalate to the hardware track: quarantine (reset-gpu)",
                classes=frozenset({"reset-gpu"}),
            )
        )
        self.driver = add(
            Scene(
                key="driver",
                title="Driver differs from the pool's",
                label="Driver mismatch → taint",
                node=c.driver_node,
                expect="NoSchedule taint, no cordon, no drain",
                effect_kind="tainted",
                classes=frozenset({"driver-mismatch"}),
            )
        )
        self.release = add(
            Scene(
                key="release",
                title="Remediation done on the XID 79 node: rebooted, GPU back",
                label="Remediated → release",
                node=c.gang_node,
                expect="alerts resolve; released after the healthy delay",
                effect_kind="released",
                classes=frozenset(),
            )
        )
        self.driver_back = add(
            Scene(
                key="driver-back",
                title="The pool's driver is back on the driver node",
                label="Driver fixed → release",
                node=c.driver_node,
                expect="alert resolves; released after the healthy delay",
                effect_kind="released",
                classes=frozenset(),
            )
        )
        self.storm = [
            add(
                Scene(
                    key=f"storm-{i}",
                    title=f"Storm: {what}",
                    label=f"Storm: {what.split(' (')[0]}",
                    node=node,
                    gpu=gpu,
                    expect=f"quarantine while the budget ({budget_nodes} nodes) allows; then the breaker",
                )
            )
            for i, ((node, gpu), (what, _, _)) in enumerate(zip(c.storm, STORM_FAULTS, strict=False))
        ]

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            for task in self._background:
                task.cancel()
            for task in self._background:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _inject(
        self, scene: Scene, text: str, node: str, gpu: int | None, mode: str, **fields: object
    ) -> None:
        self.rec.begin(scene, text)
        await self.stack.inject(node, gpu, mode, **fields)

    async def _run(self) -> None:
        c, rec, stack = self.cast, self.rec, self.stack

        # 1 and 2 (its precursor runs in the background while the rest plays)
        await self._inject(
            self.xid79, f"XID 79 on GPU {c.gang_gpu}", c.gang_node, c.gang_gpu, "sudden-xid", xid=79
        )
        rec.begin(self.hbm, "HBM precursor started", signal_now=False)
        await stack.inject(c.hbm_node, c.hbm_gpu, "hbm", lead_time_s=HBM_LEAD_S)
        self._background.append(asyncio.create_task(self._watch_hbm(), name="demo-hbm"))
        await rec.wait([self.xid79], within_s=20)

        # 3: an application error restarts the pod only
        await self._inject(
            self.app,
            f"XID 13 on GPU {c.app_gpu} ({'/'.join(c.app_pod)})",
            c.app_node,
            c.app_gpu,
            "app-xid",
            xid=13,
        )
        await rec.wait([self.app], within_s=20)

        # 4: a different workload lands on the same GPU, and it faults again
        namespace = c.app_pod[0]
        newcomer = f"eval-{c.app_node.rsplit('-', 1)[-1]}-{c.app_gpu}-b"
        stack.attach_workload(c.app_node, c.app_gpu, namespace=namespace, name=newcomer)
        rec.note(c.app_node, f"new workload {namespace}/{newcomer} scheduled on GPU {c.app_gpu}")
        await asyncio.sleep(2.5)  # scraped a couple of times under its own pod label
        await self._inject(
            self.escalation,
            f"XID 31 on GPU {c.app_gpu} ({namespace}/{newcomer})",
            c.app_node,
            c.app_gpu,
            "app-xid",
            xid=31,
        )
        await rec.wait([self.escalation], within_s=20)

        # 5: driver mismatch
        await self._inject(
            self.driver, "driver 535.183.01, pool runs 550.90.07", c.driver_node, None, "driver-mismatch"
        )
        await rec.wait([self.driver], within_s=20)

        # 6: remediation reported done (XID 79 node), and the pool's driver back (driver node)
        await self._until(lambda: self._handed_off(c.gang_node), within_s=15)
        rec.begin(self.release, "remediator: node rebooted, GPU back; sets sickbay.io/remediation-done")
        await stack.remediation_done(c.gang_node)
        default = stack.fleet.config.hardware.driver_version
        await self._inject(
            self.driver_back,
            f"driver {default} again",
            c.driver_node,
            None,
            "driver-mismatch",
            version=default,
        )
        await rec.wait([self.release, self.driver_back], within_s=45)

        # 2 finishes: the double-bit error
        await rec.wait([self.hbm], within_s=HBM_LEAD_S + 20)

        # 7: a storm
        for scene, (_node, gpu), (what, _, _) in zip(self.storm, c.storm, STORM_FAULTS, strict=False):
            rec.begin(scene, f"{what} on GPU {gpu}")
        await asyncio.gather(
            *(
                stack.inject(node, gpu, mode, **fields)
                for (node, gpu), (_, mode, fields) in zip(c.storm, STORM_FAULTS, strict=False)
            )
        )
        await rec.wait(self.storm, within_s=20)

    async def _handed_off(self, node: str) -> bool:
        view = self.rec.nodes.get(node)
        return bool(view and view.remediation)

    async def _until(self, probe: Callable[[], Awaitable[bool]], *, within_s: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while loop.time() < deadline:
            if await probe():
                return True
            await asyncio.sleep(0.05)
        return False

    async def _watch_hbm(self) -> None:
        """Report the precursor as it grows, and catch the moment of the double-bit error (in process)."""
        c, rec = self.cast, self.rec
        gpu = self.stack.fleet.node(c.hbm_node).gpus[c.hbm_gpu]
        last_report = rec.now()
        remapped = False
        while True:
            if gpu.dbe_vol > 0:
                rec.signalled(
                    self.hbm,
                    f"double-bit ECC error, XID {gpu.last_xid} on GPU {c.hbm_gpu} after {gpu.sbe_vol} "
                    f"single-bit errors and {gpu.correctable_rows} remapped rows",
                )
                return
            now = rec.now()
            if gpu.remap_pending and not remapped:
                remapped = True
                rec.emit(
                    now,
                    c.hbm_node,
                    "precursor",
                    f"GPU {c.hbm_gpu}: first row remapped (XID 63), remap pending",
                )
            if now - last_report >= 6.0:
                last_report = now
                rec.emit(
                    now,
                    c.hbm_node,
                    "precursor",
                    f"GPU {c.hbm_gpu}: {gpu.sbe_vol} single-bit ECC errors, {gpu.correctable_rows} rows remapped",
                )
            await asyncio.sleep(0.02)
