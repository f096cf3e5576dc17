"""The scripted faults of the demo, played against a running `Stack`, recorded by a `Recorder`.

0. Prediction (with a `Forecast`: the fleet has a simulated past, `app.demo.prediction`): a GPU has been
   in a thermal runaway for hours, its memory creeping hotter than its own baseline and its peers, not yet
   throttled, no rule firing. The trained model is promoted into the running Sickbay; its next scoring
   cycle flags the GPU hours before it fails, and the proactive ladder acts:
   `sickbay.io/at-risk=act:NoSchedule`, a checkpoint request (Event) on each running GPU pod and its owner,
   nothing drained. Later (before the storm) the predicted failure is brought forward: the GPU falls off
   the bus (XID 79) on a node that had already taken no new work since it was flagged.
1. A fatal XID 79 (the GPU fell off the bus) on a node running a rank of a training gang: quarantine
   (`reboot-node`), drain, and the gang's other ranks restarted so they do not hang on a collective.
   Then the same fault under a job Kueue admitted: its Workload is deactivated and reactivated, so it goes
   back through its queue and is admitted again on a healthy node (`queued_job`).
2. HBM degradation: single-bit ECC errors accelerate and rows get remapped (XID 63, recorded as a feature)
   for half a minute, then a double-bit error with XID 48: quarantine (`reset-gpu`).
3. An application XID 13 in a training pod: that pod is restarted (the one its alert names in
   `exported_pod` or `pod`, never the exporter), the node stays in the pool.
4. The same GPU faults again (XID 31) under a different workload: the fault follows the GPU, not the job,
   so it escalates to the hardware track.
   Then a team's own alert that Sickbay has no rule for (the HW power brake holding a GPU's clocks):
   transient, so nothing is restarted or drained; it is re-checked while it fires and, once it lasts,
   the node shows `GpuSoftFault=True`.
5. A node boots a different driver than its pool: `NoSchedule` taint, no cordon, no drain.
6. The remediator reports the XID 79 node done (rebooted, GPU back): its alerts resolve, Sickbay runs
   the DCGM verification Job on it, which fails once (`verifying`), runs a second that passes, and
   releases it after the healthy delay. The driver node gets its pool's driver back and is released too.
   Then an uncontained ECC error (XID 95, `reset-gpu`) on one GPU of a node running two workloads: a
   partial drain (`partial_drain`) evicts the faulty GPU's pod only; the other keeps running, the node is
   tainted, not cordoned.
7. A storm: four nodes fault at once. The blast-radius budget allows a few quarantines; past it the
   breaker opens and the rest are recorded, not acted on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from app.demo import forecasting, partial_drain, prediction, queued_job, verifying
from app.demo.casting import CastingError, cast
from app.demo.configs import USER_ALERT
from app.demo.scenes import HBM_LEAD_S, STORM_FAULTS, add_scenes
from app.demo.stack import Stack
from app.demo.timeline import Recorder, Scene

__all__ = ["CastingError", "Scenario"]  # CastingError: the demo's entry point catches it from here


class Scenario:
    """The script: each scene's fault injected in turn, waited for, and recorded (see the module docstring).

    Who plays which part is `casting`'s, the scenes and what each expects `scenes`', and the prediction's
    scene `forecasting`'s.
    """

    def __init__(
        self,
        stack: Stack,
        recorder: Recorder,
        *,
        budget_nodes: int,
        forecast: prediction.Forecast | None = None,
    ) -> None:
        self.stack = stack
        self.rec = recorder
        self.forecast = forecast
        risk = forecast.precursor if forecast is not None else None
        if forecast is not None and stack.backfill is not None:
            forecast.history_samples = stack.backfill.samples
        self.cast = cast(stack, avoid=(risk.node,) if risk is not None else ())
        self.budget_nodes = budget_nodes
        self._background: list[asyncio.Task[None]] = []
        self.scenes = add_scenes(
            recorder, self.cast, budget_nodes=budget_nodes, risk=risk, sim_time_s=stack.fleet.time_s
        )
        c = self.cast
        taken = {c.gang_node, c.hbm_node, c.app_node, c.driver_node, *(n for n, _ in c.storm)}
        taken |= {n for n in (c.soft_node, risk.node if risk is not None else None) if n is not None}
        self.partial = partial_drain.cast_partial(stack, avoid={n for n in taken if n is not None})
        self.partial_scene = partial_drain.add_scene(recorder, self.partial) if self.partial else None
        if self.partial is not None:
            taken.add(self.partial.node)
        spot = queued_job.free_gpu(stack, taken={n for n in taken if n is not None})
        self.queued = queued_job.add_scene(recorder, *spot) if spot is not None else None

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

        # 0: the model flags a GPU hours before it fails; the proactive ladder acts
        await self.predict()

        # 1 and 2 (its precursor runs in the background while the rest plays)
        await self._inject(
            self.scenes.xid79, f"XID 79 on GPU {c.gang_gpu}", c.gang_node, c.gang_gpu, "sudden-xid", xid=79
        )
        rec.begin(self.scenes.hbm, "HBM precursor started", signal_now=False)
        await stack.inject(c.hbm_node, c.hbm_gpu, "hbm", lead_time_s=HBM_LEAD_S)
        self._background.append(asyncio.create_task(self._watch_hbm(), name="demo-hbm"))
        await rec.wait([self.scenes.xid79], within_s=20)

        # 1b: a Kueue-admitted job on a failing node goes back through its queue (`queued_job`)
        if self.queued is not None:
            await queued_job.play(stack, rec, self.queued)

        # 3: an application error restarts the pod only
        await self._inject(
            self.scenes.app,
            f"XID 13 on GPU {c.app_gpu} ({'/'.join(c.app_pod)})",
            c.app_node,
            c.app_gpu,
            "app-xid",
            xid=13,
        )
        await rec.wait([self.scenes.app], within_s=20)

        # 4: a different workload lands on the same GPU, and it faults again
        namespace = c.app_pod[0]
        newcomer = f"eval-{c.app_node.rsplit('-', 1)[-1]}-{c.app_gpu}-b"
        stack.attach_workload(c.app_node, c.app_gpu, namespace=namespace, name=newcomer)
        rec.note(c.app_node, f"new workload {namespace}/{newcomer} scheduled on GPU {c.app_gpu}")
        await asyncio.sleep(2.5)  # scraped a couple of times under its own pod label
        await self._inject(
            self.scenes.escalation,
            f"XID 31 on GPU {c.app_gpu} ({namespace}/{newcomer})",
            c.app_node,
            c.app_gpu,
            "app-xid",
            xid=31,
        )
        await rec.wait([self.scenes.escalation], within_s=20)

        # 4b: a soft signal restarts nothing; it becomes visible when it lasts
        if self.scenes.soft is not None and c.soft_node is not None:
            await self._inject(
                self.scenes.soft,
                f"HW power brake on GPU {c.soft_gpu} ({USER_ALERT}, the team's own rule)",
                c.soft_node,
                c.soft_gpu,
                "power-brake",
                duration_s=600,
            )
            await rec.wait([self.scenes.soft], within_s=30)

        # 5: driver mismatch
        await self._inject(
            self.scenes.driver,
            "driver 535.183.01, pool runs 550.90.07",
            c.driver_node,
            None,
            "driver-mismatch",
        )
        await rec.wait([self.scenes.driver], within_s=20)

        # 6: remediation reported done (XID 79 node), and the pool's driver back (driver node)
        await self._until(lambda: self._handed_off(c.gang_node), within_s=15)
        rec.begin(
            self.scenes.release, "remediator: node rebooted, GPU back; sets sickbay.io/remediation-done"
        )
        verifying.fail_first_verification(stack, c.gang_node)  # its first verification Job fails
        await stack.remediation_done(c.gang_node)
        default = stack.fleet.config.hardware.driver_version
        await self._inject(
            self.scenes.driver_back,
            f"driver {default} again",
            c.driver_node,
            None,
            "driver-mismatch",
            version=default,
        )
        await rec.wait([self.scenes.release, self.scenes.driver_back], within_s=45)

        # 6b: a GPU reset drains only the faulty GPU's pod; the node's healthy workload keeps running
        if self.partial is not None and self.partial_scene is not None:
            await partial_drain.play(stack, rec, self.partial_scene, self.partial)

        # 2 finishes: the double-bit error
        await rec.wait([self.scenes.hbm], within_s=HBM_LEAD_S + 20)

        # 0 finishes: the failure the model predicted
        await self.fail_predicted()

        # 7: a storm
        for scene, (_node, gpu), (what, _, _) in zip(self.scenes.storm, c.storm, STORM_FAULTS, strict=False):
            rec.begin(scene, f"{what} on GPU {gpu}")
        await asyncio.gather(
            *(
                stack.inject(node, gpu, mode, **fields)
                for (node, gpu), (_, mode, fields) in zip(c.storm, STORM_FAULTS, strict=False)
            )
        )
        await rec.wait(self.scenes.storm, within_s=20)

    async def predict(self) -> None:
        """Scene 0: promote the model, wait for the at-risk taint, read what Sickbay decided and did."""
        scene, forecast = self.scenes.predicted, self.forecast
        if scene is not None and forecast is not None:
            await forecasting.play_prediction(self.stack, self.rec, scene, forecast)

    async def fail_predicted(self) -> None:
        """Scene 0, later: the predicted failure happens now; wait for the quarantine."""
        scene, forecast = self.scenes.predicted_failure, self.forecast
        if scene is not None and forecast is not None:
            await forecasting.fail_predicted(self.stack, self.rec, scene, forecast)

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
                    self.scenes.hbm,
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
