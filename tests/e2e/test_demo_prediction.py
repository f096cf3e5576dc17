"""The demo's prediction scene against the whole stack: a degrading GPU flagged hours before it fails.

The fleet runs through 26 h of simulated past (one GPU in a thermal runaway for the last 6 h of it), backfilled
into Prometheus; `sickbay serve` starts rules-only and scores from that Prometheus. The scene promotes
the trained model (models/): the next scoring cycle must flag that GPU, and only it, and the proactive
ladder must taint the node `sickbay.io/at-risk=act:NoSchedule` without a cordon, write a
`SickbayCheckpointRequested` Event on each running GPU pod of the node and on each pod's owner, and
evict nothing. When the failure is then brought forward, the hardware track quarantines the node.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from app.decide import footprint
from app.demo import main, prediction, report
from app.demo.forecasting import CHECKPOINT_REASON
from app.demo.scenario import Scenario
from app.demo.timeline import Recorder
from tests.e2e.stack import STACK_MARKS, Stack, gpu_pods_on, official_client, sickbay_taints

pytestmark = STACK_MARKS

HOUR = 3600.0


async def test_the_model_flags_a_degrading_gpu_hours_ahead_and_the_ladder_acts(tmp_path: Path) -> None:
    config = replace(main.stack_config(12, 7), prediction_interval_s=2.0, probe=False)
    fleet, forecast = main.demo_fleet(config)
    risk = forecast.precursor
    async with Stack(tmp_path, config, fleet=fleet) as stack:
        assert stack.backfill is not None
        assert stack.backfill.samples > 0
        recorder = Recorder(stack, datetime.now(UTC))
        scenario = Scenario(stack, recorder, budget_nodes=main.BUDGET_NODES, forecast=forecast)
        assert scenario.scenes.predicted is not None
        assert scenario.scenes.predicted_failure is not None
        assert risk.node not in {scenario.cast.gang_node, scenario.cast.app_node, scenario.cast.hbm_node}
        recorder.start()
        try:
            await scenario.predict()
            risks = prediction.parse_gpu_risks(await stack.sickbay_metrics())
            async with official_client(stack.kubeconfig) as core:
                node = await core.read_node(risk.node)
                pods = await gpu_pods_on(core, risk.node)
            running = {f"{p.metadata.namespace}/{p.metadata.name}" for p in pods}
            owners = {
                f"{p.metadata.namespace}/{ref.name}"
                for p in pods
                for ref in p.metadata.owner_references or []
            }
            await scenario.fail_predicted()
        finally:
            await recorder.stop()

        # Flagged, with its score and what drove it, hours before the failure was due; no other GPU.
        assert scenario.scenes.predicted.status == "done"
        assert forecast.model is not None
        assert forecast.score is not None
        assert forecast.score >= forecast.model.act
        assert forecast.others_max is not None
        top = sorted(risks.items(), key=lambda kv: -kv[1])[:5]
        assert forecast.others_max < forecast.model.warn, f"another GPU at warn or above: {top}"
        assert forecast.gpus_scored == 12 * 8
        assert forecast.drivers
        assert "temp" in forecast.drivers[0][0]
        assert forecast.due_at_score_s is not None
        assert forecast.due_at_score_s > 5 * HOUR
        assert forecast.running_at_score_s is not None
        assert forecast.running_at_score_s > 5 * HOUR

        # The ladder: taint at act, no cordon; an Event on every running GPU pod and its owner; no drain.
        assert not node.spec.unschedulable
        assert (footprint.AT_RISK, "act", "NoSchedule") in sickbay_taints(node)
        assert running, "the flagged node runs GPU pods"
        events = {(kind, name) for kind, name, _ in forecast.events}
        assert owners, "the demo's workload pods have owners"
        assert events == {("Pod", name) for name in running} | {("Job", name) for name in owners}
        assert len(stack.events(reason=CHECKPOINT_REASON)) == len(events)
        assert forecast.evictions == 0
        assert set(forecast.pods_kept) == running, "nothing drained while the node was only at risk"

        # The failure: quarantined by the hardware track, on a node already closed to new work.
        assert scenario.scenes.predicted_failure.status == "done"
        assert scenario.scenes.predicted_failure.fault_class == "reboot-node"
        assert forecast.closed_s is not None
        assert forecast.closed_s > 0
        (failure,) = [f for f in stack.fleet.truth().failures if f.node == risk.node]
        assert failure.precursor_start == risk.onset
        assert failure.xid == 79

        page = report.render(report_info(stack), recorder.scenes, recorder.events, forecast=forecast)
        assert f"{forecast.score:.3f}" in page
        assert risk.node in page


def report_info(stack: Stack) -> report.RunInfo:
    return report.RunInfo(
        started=datetime.now(UTC),
        nodes=len(stack.fleet.nodes),
        gpus_per_node=8,
        ready_s=0.0,
        scenario_s=0.0,
        total_s=0.0,
        kubeconfig=stack.kubeconfig,
        workdir=stack.workdir,
    )
