"""The demo's Kueue scene against the whole stack: `sickbay serve` on the simulated cluster, a Job Kueue
admitted on a node whose GPU falls off the bus (XID 79). The node is quarantined, and the job goes back
through its queue: its Workload deactivated and reactivated by Sickbay (Kueue's stand-in in the
simulated API server evicts it, releases its quota, requeues and re-admits it), and its pod is back on a
healthy node."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from app.demo import main, queued_job
from app.demo.scenario import Scenario
from app.demo.timeline import Recorder
from app.sim.kubeapi.resources import WORKLOADS
from tests.e2e.stack import STACK_MARKS, Stack

pytestmark = STACK_MARKS


async def test_a_queued_job_is_requeued_through_kueue_when_its_node_faults(tmp_path: Path) -> None:
    config = replace(main.stack_config(12, 7), probe=False)
    async with Stack(tmp_path, config) as stack:
        recorder = Recorder(stack, datetime.now(UTC))
        scenario = Scenario(stack, recorder, budget_nodes=main.BUDGET_NODES)
        scene = scenario.queued
        assert scene is not None
        recorder.start()
        try:
            await queued_job.play(stack, recorder, scene)
        finally:
            await recorder.stop()
        (workload,) = stack.kube.store.items(WORKLOADS, namespace=queued_job.NAMESPACE)
        labels = workload["metadata"].get("labels") or {}

    assert scene.status == "done", scene.note
    assert scene.fault_class == "reboot-node"
    assert scene.note.startswith("requeued through Kueue onto ")
    assert scene.note.removeprefix("requeued through Kueue onto ") != scene.node
    assert workload["spec"]["active"] is True
    assert "sickbay.io/requeued" not in labels  # Sickbay's hold on it is gone
