"""The demo's scenes: each scripted fault, the node and GPU it strikes, and what Sickbay should make of it.

Declared once, before the scenario plays, on the `Recorder` that fills in their milestones; the script
(`scenario.Scenario`) begins them, and the recorder sees them through.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.demo import prediction
from app.demo.casting import Cast
from app.demo.timeline import AT_RISK, Recorder, Scene

HBM_LEAD_S = 30.0
STORM_FAULTS: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("XID 79", "sudden-xid", {"xid": 79}),
    ("XID 95 (uncontained ECC)", "sudden-xid", {"xid": 95}),
    ("XID 119 (GSP)", "gsp", {"lead_time_s": 0}),
    ("XID 64 (ECC row remap)", "sudden-xid", {"xid": 64}),
)


@dataclass(frozen=True, slots=True)
class Scenes:
    """Every scene of one run (the prediction's and the soft alert's only when the run has them)."""

    predicted: Scene | None
    predicted_failure: Scene | None
    xid79: Scene
    hbm: Scene
    app: Scene
    escalation: Scene
    soft: Scene | None
    driver: Scene
    release: Scene
    driver_back: Scene
    storm: list[Scene]


def add_scenes(
    recorder: Recorder,
    c: Cast,
    *,
    budget_nodes: int,
    risk: prediction.Precursor | None,
    sim_time_s: float,
) -> Scenes:
    """Declare the run's scenes on `recorder`, in the order they play; `risk` is the GPU the model will
    flag (planted in the fleet's past), `sim_time_s` the fleet's time now."""
    add = recorder.add
    predicted: Scene | None = None
    predicted_failure: Scene | None = None
    if risk is not None:
        predicted = add(
            Scene(
                key="predicted",
                title=f"Risk model flags GPU {risk.gpu}: running hotter for "
                f"{prediction.hours(risk.running_s(sim_time_s))}, "
                f"failure due in {prediction.hours(risk.due_in_s(sim_time_s))}",
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
        predicted_failure = add(
            Scene(
                key="predicted-failure",
                title="The predicted failure, brought forward: the GPU falls off the bus, XID 79",
                label="Predicted XID 79 → quarantine",
                node=risk.node,
                gpu=risk.gpu,
                expect="quarantine (reboot-node) of a node that already took no new work",
            )
        )
    xid79 = add(
        Scene(
            key="xid79",
            title="Fatal XID 79: a GPU fell off the bus",
            label="XID 79, fell off the bus",
            node=c.gang_node,
            gpu=c.gang_gpu,
            expect=f"quarantine (reboot-node), drain, restart gang {c.gang_job}",
        )
    )
    hbm = add(
        Scene(
            key="hbm",
            title=f"HBM degradation, {HBM_LEAD_S:.0f}s of precursors, then a double-bit error",
            label="HBM precursors → DBE, XID 48",
            node=c.hbm_node,
            gpu=c.hbm_gpu,
            expect="precursors recorded; quarantine (reset-gpu) at the double-bit error",
        )
    )
    app = add(
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
    escalation = add(
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
    soft: Scene | None = None
    if c.soft_node is not None:
        soft = add(
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
    driver = add(
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
    release = add(
        Scene(
            key="release",
            title="Remediation done on the XID 79 node: rebooted, GPU back",
            label="Remediated → release",
            node=c.gang_node,
            expect="alerts resolve; the first verification Job (DCGM diag) fails, a second one passes; "
            "released after the healthy delay",
            effect_kind="released",
            classes=frozenset(),
        )
    )
    driver_back = add(
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
    storm = [
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

    return Scenes(
        predicted=predicted,
        predicted_failure=predicted_failure,
        xid79=xid79,
        hbm=hbm,
        app=app,
        escalation=escalation,
        soft=soft,
        driver=driver,
        release=release,
        driver_back=driver_back,
        storm=storm,
    )
