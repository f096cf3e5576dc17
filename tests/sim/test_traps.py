"""Things that look sick and are not: they never fail, and their signatures stay benign."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from app.dcgm_fields import THROTTLE_HW_THERMAL, THROTTLE_SW_THERMAL
from app.sim.fleet import FleetSim, SimConfig
from app.sim.fleet.exposition import render_node
from app.sim.fleet.metrics import Field
from tests.sim.helpers import quiet_config, run

DAY = 86400.0


def _trappy(rate_multiplier: float) -> SimConfig:
    base = SimConfig()
    return replace(
        base,
        rates=replace(base.rates, rate_multiplier=rate_multiplier),
        traps=replace(
            base.traps, stable_sbe_fraction=0.08, noisy_nvlink_fraction=0.05, hot_rack_fraction=0.5
        ),
    )


def test_trap_gpus_never_fail_even_when_everything_else_does() -> None:
    sim = FleetSim(nodes=24, seed=11, config=_trappy(rate_multiplier=400.0))
    run(sim, seconds=5 * DAY, step=1800)
    truth = sim.truth()
    trap_uuids = {t.uuid for t in truth.traps if t.uuid}
    assert len(trap_uuids) >= 10
    assert len(truth.failures) >= 20, "the multiplier makes failures common"
    assert not trap_uuids & {f.uuid for f in truth.failures}
    kinds = {t.kind for t in truth.traps}
    assert {"stable-high-sbe", "noisy-nvlink", "hot-rack"} <= kinds


def test_stable_high_sbe_stays_steady_and_never_pends_a_remap() -> None:
    sim = FleetSim(nodes=24, seed=11, config=quiet_config(_trappy(1.0)))
    trap = next(t for t in sim.truth().traps if t.kind == "stable-high-sbe")
    assert trap.node is not None
    assert trap.gpu is not None
    gpu = sim.node(trap.node).gpus[trap.gpu]
    counts = []
    for _ in range(4):
        before = gpu.sbe_agg
        run(sim, seconds=DAY / 4, step=600)
        counts.append(gpu.sbe_agg - before)
    assert min(counts) > 0
    assert max(counts) < 2.0 * min(counts) + 10, f"a steady rate, not an accelerating one: {counts}"
    assert gpu.remap_pending == 0
    assert gpu.dbe_agg == 0


def test_hot_racks_are_hot_but_never_throttle_for_ten_minutes() -> None:
    sim = FleetSim(nodes=24, seed=11, config=quiet_config(_trappy(1.0)))
    hot = [n for n in sim.nodes if n.hot]
    cool = [n for n in sim.nodes if not n.hot]
    assert hot
    assert cool
    streak: dict[str, int] = defaultdict(int)
    longest = 0
    hot_temps: list[float] = []
    cool_temps: list[float] = []
    for _ in range(720):
        sim.step(60)
        for node in sim.nodes:
            for gpu in sim.observe_node(node.name).gpus:
                key = gpu.identity.uuid
                mask = int(gpu.values[Field.CLOCK_THROTTLE_REASONS])
                (hot_temps if node.hot else cool_temps).append(gpu.values[Field.GPU_TEMP])
                streak[key] = streak[key] + 1 if mask & (THROTTLE_SW_THERMAL | THROTTLE_HW_THERMAL) else 0
                longest = max(longest, streak[key])
    assert longest < 10
    assert sum(hot_temps) / len(hot_temps) > sum(cool_temps) / len(cool_temps) + 5
    assert not sim.truth().failures


def test_application_xids_follow_the_job_across_nodes() -> None:
    base = quiet_config()
    config = replace(
        base,
        traps=replace(base.traps, buggy_job_fraction=1.0),
        workloads=replace(base.workloads, app_xid_buggy_per_day=200.0, app_xid_reschedule_p=1.0),
    )
    sim = FleetSim(nodes=16, seed=5, config=config)
    run(sim, seconds=DAY / 2)
    truth = sim.truth()
    assert truth.app_xids
    assert not truth.failures, "application XIDs are not GPU failures"
    assert all(x.xid in (13, 31, 43) and x.job for x in truth.app_xids)
    nodes_per_job: dict[str, set[str]] = defaultdict(set)
    for record in truth.app_xids:
        nodes_per_job[str(record.job)].add(record.node)
    assert max(len(nodes) for nodes in nodes_per_job.values()) >= 2
    assert {t.job for t in truth.traps if t.kind == "app-xid-job"} >= set(nodes_per_job)
    assert any(i.cause.startswith("app-xid:") for i in truth.interruptions)


def test_an_injected_app_xid_is_labelled_with_the_pod_on_the_gpu() -> None:
    sim = FleetSim(nodes=4, seed=3, config=quiet_config())
    node, gpu = next((n.name, g.identity.index) for n in sim.nodes for g in n.gpus if g.pod is not None)
    pod = sim.node(node).gpus[gpu].pod
    assert pod is not None
    sim.inject(node, gpu, "app-xid", xid=31)
    (record,) = sim.truth().app_xids
    assert record.pod == pod.name
    assert record.job
    assert record.fault_class == "restart-workload"
    text = render_node(sim.observe_node(node))
    line = next(ln for ln in text.splitlines() if ln.startswith(f'DCGM_FI_DEV_XID_ERRORS{{gpu="{gpu}"'))
    assert f'pod="{pod.name}"' in line
    assert line.endswith(" 31")
    assert not sim.truth().failures
