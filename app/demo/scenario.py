"""The scripted faults of the demo, played against a running `Stack`, recorded by a `Recorder`.

0. Prediction (with a `Forecast`: the fleet has a simulated past, `app.demo.prediction`): a GPU's HBM has
   been degrading for hours, single-bit errors accelerating, no rule firing. The trained model is promoted
   into the running Sickbay; its next scoring cycle flags the GPU hours before it fails, and the proactive
   ladder acts: `sickbay.io/at-risk=act:NoSchedule`, a checkpoint request (Event) on each running GPU pod
   and its owner, nothing drained. Later (before the storm) the predicted failure is brought forward: a
   double-bit error, XID 48, on a node that had already taken no new work since it was flagged.
1. A fatal XID 79 (the GPU fell off the bus) on a node running a rank of a training gang: quarantine
   (`reboot-node`), drain, and the gang's other ranks restarted so they do not hang on a collective.
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
6. The remediator reports the XID 79 node done (rebooted, GPU back): its alerts resolve and Sickbay
   releases it after the healthy delay. The driver node gets its pool's driver back and is released too.
7. A storm: four nodes fault at once. The blast-radius budget allows a few quarantines; past it the
   breaker opens and the rest are recorded, not acted on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from app.demo import prediction
from app.demo.configs import REPO, USER_ALERT
from app.demo.stack import Stack
from app.demo.timeline import AT_RISK, Recorder, Scene, parse_time

HBM_LEAD_S = 30.0
# From the model's promotion to the at-risk taint: the next scoring cycle, then its first read of the
# whole look-back (a few seconds on two cores), then the ladder.
PREDICTION_WITHIN_S = 60.0
CHECKPOINT_REASON = "SickbayCheckpointRequested"
VALIDATION_NOTE = "the demo fleet is the simulator the model was trained on (validated by the demo)"


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
    risk_node: str | None = None  # the GPU the model will flag (planted in the fleet's past)
    risk_gpu: int | None = None
    soft_node: str | None = None  # a team's own soft alert (HW power brake) on a busy GPU
    soft_gpu: int | None = None


class CastingError(RuntimeError):
    """The fleet's workloads do not offer what the scenario needs (another seed or size will)."""


def cast(stack: Stack, *, storm: int = 4, avoid: Collection[str] = ()) -> Cast:
    """Parts for every scene, from the fleet's own workloads; nodes in `avoid` play none (nor do gangs
    with a rank on them)."""
    sim = stack.fleet
    if len(sim.nodes) < 6 + storm + len(avoid):
        raise CastingError(f"the demo needs at least {6 + storm + len(avoid)} nodes")
    jobs = sorted(sim.scheduler.running.values(), key=lambda j: j.name)
    gangs = [
        j
        for j in jobs
        if j.gang
        and len(j.placements) >= 2
        and not any(sim.nodes[p.node].name in avoid for p in j.placements)
    ]
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
        and sim.nodes[p.node].name not in avoid
        # the app XID's pod must be named on its alert (an exporter that maps no pods names none)
        and stack.maps_pods(sim.nodes[p.node].name)
    ]
    if not singles:  # every GPU went to gangs: a single-GPU job lands on a free GPU (or takes one)
        free = [
            (n.name, g.identity.index)
            for n in sim.nodes
            if n.name != gang_node and n.name not in avoid and stack.maps_pods(n.name)
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
    used = {gang_node, app_node, *avoid}
    others = [n for n in sim.nodes if n.name not in used]
    others.sort(key=lambda n: (n.name in gang_nodes, not any(g.pod for g in n.gpus)))

    def busy_gpu(name: str) -> int:
        node = sim.node(name)
        return next((g.identity.index for g in node.gpus if g.pod is not None), 0)

    names = [n.name for n in others]
    hbm_node, driver_node, *rest = names
    soft = next((name for name in rest[storm:] if any(g.pod for g in sim.node(name).gpus)), None)
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
        soft_node=soft,
        soft_gpu=busy_gpu(soft) if soft is not None else None,
    )


STORM_FAULTS: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("XID 79", "sudden-xid", {"xid": 79}),
    ("XID 95 (uncontained ECC)", "sudden-xid", {"xid": 95}),
    ("XID 119 (GSP)", "gsp", {"lead_time_s": 0}),
    ("XID 64 (ECC row remap)", "sudden-xid", {"xid": 64}),
)


class Scenario:
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
        c = self.cast
        add = recorder.add
        self.predicted: Scene | None = None
        self.predicted_failure: Scene | None = None
        if risk is not None:
            sim = stack.fleet
            self.predicted = add(
                Scene(
                    key="predicted",
                    title=f"Risk model flags GPU {risk.gpu}: running hotter for "
                    f"{prediction.hours(risk.running_s(sim.time_s))}, "
                    f"failure due in {prediction.hours(risk.due_in_s(sim.time_s))}",
                    label="Model: thermal risk → at-risk",
                    node=risk.node,
                    gpu=risk.gpu,
                    expect="taint sickbay.io/at-risk=act:NoSchedule; checkpoint Events on its GPU pods and "
                    "their owners; nothing drained",
                    effect_kind="at-risk",
                    classes=frozenset({AT_RISK}),
                    slack_s=10.0,
                )
            )
            self.predicted_failure = add(
                Scene(
                    key="predicted-failure",
                    title="The predicted failure, brought forward: the GPU falls off the bus, XID 79",
                    label="Predicted XID 79 → quarantine",
                    node=risk.node,
                    gpu=risk.gpu,
                    expect="quarantine (reboot-node) of a node that already took no new work",
                )
            )
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
        self.soft: Scene | None = None
        if c.soft_node is not None:
            self.soft = add(
                Scene(
                    key="soft",
                    title="A team's own alert, unknown to Sickbay: the GPU's HW power brake holds",
                    label="Soft alert → visible, no restart",
                    node=c.soft_node,
                    gpu=c.soft_gpu,
                    expect="recorded and re-checked while it fires; GpuSoftFault=True once it lasts; "
                    "nothing restarted, the node stays in the pool",
                    effect_kind="soft-condition",
                    classes=frozenset({"transient"}),
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

        # 0: the model flags a GPU hours before it fails; the proactive ladder acts
        await self.predict()

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

        # 4b: a soft signal restarts nothing; it becomes visible when it lasts
        if self.soft is not None and c.soft_node is not None:
            await self._inject(
                self.soft,
                f"HW power brake on GPU {c.soft_gpu} ({USER_ALERT}, the team's own rule)",
                c.soft_node,
                c.soft_gpu,
                "power-brake",
                duration_s=600,
            )
            await rec.wait([self.soft], within_s=30)

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

        # 0 finishes: the failure the model predicted
        await self.fail_predicted()

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

    # -- prediction --------------------------------------------------------------------------------------

    async def predict(self) -> None:
        """Scene 0: promote the model, wait for the at-risk taint, read what Sickbay decided and did."""
        scene, forecast = self.predicted, self.forecast
        if scene is None or forecast is None:
            return
        risk, sim, rec = forecast.precursor, self.stack.fleet, self.rec
        rec.begin(
            scene,
            f"trained model promoted into Sickbay; GPU {risk.gpu}'s memory has run "
            f"{risk.mem_rise_at(sim.time_s):.1f} °C over its own baseline for "
            f"{prediction.hours(risk.running_s(sim.time_s))}, rising, not throttled, no alert",
        )
        # Sickbay's ladder runs in shadow for a model not validated on this fleet. The demo's fleet is the
        # simulator the model was trained on, so the demo validates it first, the operator's way, and says so.
        version = prediction.current_version(REPO / "models")
        await self.stack.validate_model(version, VALIDATION_NOTE)
        rec.note(
            risk.node,
            f"model {version} validated on this fleet by the operator path (sickbay model validate --force): "
            "without it the proactive ladder would run in shadow, journal what it would do and taint nothing",
        )
        forecast.model = self.stack.promote_model()
        forecast.promoted_at = scene.signal
        await rec.wait([scene], within_s=PREDICTION_WITHIN_S)
        await rec.settle()  # the plan's outcomes (the checkpoint requests) land right after the taint
        await self._read_forecast(scene, forecast)

    async def _read_forecast(self, scene: Scene, forecast: prediction.Forecast) -> None:
        """What Sickbay decided and did, from its journal, its metrics and the cluster."""
        risk, stack, rec = forecast.precursor, self.stack, self.rec
        journal = await stack.actions()
        item = next((i for i in journal.get("items", []) if i.get("id") == scene.fault_id), None)
        taint = next(
            (
                a
                for a in ((item or {}).get("plan") or {}).get("actions", [])
                if a.get("kind") == "taint-at-risk"
            ),
            None,
        )
        if taint is not None:
            forecast.reason = str(taint.get("reason", ""))
            forecast.score, forecast.drivers = prediction.parse_reason(forecast.reason)
            params = taint.get("params") or {}
            forecast.level = str(params.get("level", "")) if isinstance(params, dict) else ""
        outcomes = [o for o in journal.get("outcomes", []) if o.get("fault_id") == scene.fault_id]
        forecast.evictions = sum(1 for o in outcomes if o.get("kind") in ("evict-pod", "drain"))
        forecast.scored_at, forecast.decided_at = scene.alert, scene.decision
        forecast.taint_at, forecast.taint = scene.effect, scene.effect_text
        if scene.alert is not None:  # the fleet runs on the wall clock since its past: sim time then
            then = stack.fleet.time_s - (rec.now() - scene.alert)
            forecast.running_at_score_s = risk.running_s(then)
            forecast.due_at_score_s = risk.due_in_s(then)
        scores = prediction.parse_gpu_risks(await stack.sickbay_metrics())
        forecast.gpus_scored = len(scores)
        others = [v for key, v in scores.items() if key != (risk.node, risk.gpu)]
        forecast.others_max = max(others, default=None)
        asked = [parse_time(o.get("at")) for o in outcomes if o.get("kind") == "request-checkpoint"]
        times = [rec.rel(t) for t in asked if t is not None]
        forecast.checkpoints_at = min(times, default=None)
        for event in stack.events(reason=CHECKPOINT_REASON):  # the Events as the cluster has them
            involved = event.get("involvedObject") or {}
            forecast.events.append(
                (
                    str(involved.get("kind")),
                    f"{involved.get('namespace')}/{involved.get('name')}",
                    str(event.get("type", "")),
                )
            )
        pods = sum(1 for e in forecast.events if e[0] == "Pod")
        rec.note(
            risk.node,
            f"{CHECKPOINT_REASON} Events on {pods} pod(s) and {len(forecast.events) - pods} owner(s); "
            f"{forecast.evictions} evictions (prediction.drain is off)",
        )

    async def fail_predicted(self) -> None:
        """Scene 0, later: the predicted failure happens now; wait for the quarantine."""
        scene, forecast = self.predicted_failure, self.forecast
        if scene is None or forecast is None:
            return
        risk, stack = forecast.precursor, self.stack
        pods = await stack.cluster.list_pods(node=risk.node)
        forecast.pods_kept = tuple(
            f"{p.namespace}/{p.name}" for p in pods if p.gpu_request > 0 and p.phase == "Running"
        )
        due = risk.due_in_s(stack.fleet.time_s)
        self.rec.begin(
            scene,
            f"XID {prediction.THERMAL_XID}, GPU {risk.gpu} fell off the bus: the failure the model "
            f"predicted, brought forward {prediction.hours(due)}",
        )
        stack.fleet.fail_early(risk.node, risk.gpu)
        forecast.failed_at, forecast.brought_forward_s = scene.signal, due
        await self.rec.wait([scene], within_s=20)
        await self.rec.settle()  # the journal's item for it, if the cluster showed the effect first
        forecast.quarantined_at = scene.effect
        closed = forecast.closed_s
        if closed is not None:
            self.rec.note(
                risk.node,
                f"when GPU {risk.gpu} failed, the node had taken no new work for {closed:.0f}s (since the "
                f"model flagged it, {prediction.hours(forecast.due_at_score_s or 0.0)} before the failure "
                "was due)",
            )

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
