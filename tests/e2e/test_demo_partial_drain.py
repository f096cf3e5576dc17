"""The demo's partial-drain scene against the whole stack (fleet, Prometheus, Alertmanager, the simulated
API server, `sickbay serve`): an uncontained ECC error on one GPU of a node running two workloads evicts
that GPU's pod only; the other keeps running on the tainted, uncordoned node."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from app.decide import footprint
from app.demo import main, partial_drain
from app.demo.timeline import Recorder
from tests.e2e.stack import STACK_MARKS, Stack, gpu_pods_on, official_client, sickbay_taints

pytestmark = STACK_MARKS


async def test_a_gpu_reset_leaves_the_healthy_workload_on_the_node(tmp_path: Path) -> None:
    config = replace(main.stack_config(12, 7), history_s=0.0, probe=False)
    async with Stack(tmp_path, config) as stack:
        part = partial_drain.cast_partial(stack, avoid=())
        assert part is not None, "a node whose exporter names pods runs two single-pod workloads"
        recorder = Recorder(stack, datetime.now(UTC))
        scene = partial_drain.add_scene(recorder, part)
        recorder.start()
        try:
            await partial_drain.play(stack, recorder, scene, part)
        finally:
            await recorder.stop()

        assert scene.status == "done", scene.effect_text or scene.note
        assert scene.fault_class == "reset-gpu"
        async with official_client(stack.kubeconfig) as core:
            node = await core.read_node(part.node)
            running = {(p.metadata.namespace, p.metadata.name) for p in await gpu_pods_on(core, part.node)}
        assert not node.spec.unschedulable
        assert (footprint.UNHEALTHY, "reset-gpu", "NoSchedule") in sickbay_taints(node)
        assert part.healthy in running
        assert part.faulty not in running
