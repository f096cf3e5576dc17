"""A queued job on a faulty node goes back through its Kueue queue: planned from the cluster as read through
`KubeClient`, carried out by `act.requeue` against the simulated API server and its Kueue stand-in.

The Workload is deactivated (Kueue evicts it, the job's pods stop, the quota is released), then reactivated
(Requeued, admitted again), and its pod comes back on the healthy node, never on the tainted one; an
operator's own deactivation is left alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.act.recorder import Recorder
from app.act.requeue import Requeuer
from app.config import rules
from app.config.settings import RULES_DIR
from app.decide import plans
from app.decide.situation import Situation
from app.domain import (
    Action,
    ActionKind,
    Fault,
    FaultClass,
    NodePatch,
    OutcomeStatus,
    Signal,
    SignalSource,
    SignalStatus,
    Taint,
)
from app.kube.client import KubeClient, connect
from app.kube.retries import RetryPolicy
from app.obs.metrics import create_metrics
from app.sim.kubeapi import KubeApiServer
from app.store import inbox
from app.store.journal import Journal
from tests.contract.conftest import eventually

pytestmark = pytest.mark.slow

SICK, HEALTHY = "gpu-0", "gpu-1"
SEED = {
    "nodes": [{"name": "gpu-{i}", "count": 2, "gpus": 8}],
    "jobs": [
        {
            "name": "llm",
            "namespace": "train",
            "nodes": [SICK],
            "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
        }
    ],
}
POLICY = rules.load_policy(RULES_DIR / "policy.yaml")


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with KubeApiServer(seed=SEED, grace_scale=0.01) as sim:  # 30 s of grace: 0.3 s
        client = await connect(
            kubeconfig=str(sim.write_kubeconfig(tmp_path / "kubeconfig")),
            retry=RetryPolicy(attempts=2, base=0.01, cap=0.01, timeout=2),
        )
        async with client:
            yield client


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[Journal]:
    db = await inbox.connect(tmp_path / "journal.db")
    yield await Journal.open(db)
    await db.close()


def requeuer(kube: KubeClient, journal: Journal) -> Requeuer:
    recorder = Recorder(kube=kube, metrics=create_metrics(), clock=lambda: datetime.now(UTC))
    return Requeuer(queue=kube, recorder=recorder, journal=journal, dry_run=False, poll_s=0.02, wait_s=10)


async def planned_requeue(kube: KubeClient) -> Action:
    now = datetime.now(UTC)
    signal = Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint="xid-79",
        status=SignalStatus.FIRING,
        name="GpuXidFallenOffBus",
        starts_at=now,
        received_at=now,
        node=SICK,
        gpu=0,
    )
    fault = Fault(fault_class=FaultClass.REBOOT_NODE, signal=signal, reason="XID 79", rule="test")
    situation = Situation(node=await kube.get_node(SICK), pods_on_node=tuple(await kube.list_pods(node=SICK)))
    plan = plans.plan_for(fault, policy=POLICY, now=now, situation=situation)
    (action,) = [a for a in plan.actions if a.kind is ActionKind.REQUEUE_WORKLOAD]
    return action


async def _one_pod_on(kube: KubeClient, node: str) -> bool:
    return [p.node for p in await kube.list_pods(namespace="train")] == [node]


async def quarantine(kube: KubeClient) -> None:
    node = await kube.get_node(SICK)
    taint = Taint("sickbay.io/unhealthy", "reboot-node", "NoSchedule")
    await kube.patch_node(NodePatch(SICK, node.resource_version, taints=(taint,), unschedulable=True))


async def test_a_queued_job_is_requeued_through_kueue_onto_a_healthy_node(
    kube: KubeClient, journal: Journal
) -> None:
    action = await planned_requeue(kube)
    (before,) = await kube.list_pods(namespace="train")
    await quarantine(kube)

    outcome = await requeuer(kube, journal).requeue(action)

    assert outcome.status is OutcomeStatus.APPLIED, outcome.detail
    assert "goes back through its queue" in outcome.detail
    (workload,) = await kube.list_workloads("train", job_uid=before.owners[0].uid)
    assert workload.active
    assert workload.requeued_from == ""  # Sickbay's mark is gone with the requeue
    requeued = workload.condition("Requeued")
    assert requeued is not None
    assert (requeued.status, requeued.reason) == ("True", "Reactivated")
    assert workload.holds_quota
    await eventually(lambda: _one_pod_on(kube, HEALTHY))
    (after,) = await kube.list_pods(namespace="train")
    assert after.uid != before.uid
    assert after.node == HEALTHY


async def test_the_requeue_runs_in_the_background_and_is_journaled(
    kube: KubeClient, journal: Journal
) -> None:
    action = await planned_requeue(kube)
    await quarantine(kube)
    started = requeuer(kube, journal).start(action, fault_id=None)
    assert started.status is OutcomeStatus.RECORDED

    async def journaled() -> bool:
        rows = await journal.outcomes(node=SICK)
        return any(r["kind"] == "requeue-workload" and r["status"] == "applied" for r in rows)

    await eventually(journaled)
    await eventually(lambda: _one_pod_on(kube, HEALTHY))


async def test_a_workload_an_operator_deactivated_is_left_inactive(
    kube: KubeClient, journal: Journal
) -> None:
    action = await planned_requeue(kube)
    (pod,) = await kube.list_pods(namespace="train")
    (workload,) = await kube.list_workloads("train", job_uid=pod.owners[0].uid)
    await kube.set_workload_active(workload, active=False, requeued_from=None)  # by hand, not Sickbay

    outcome = await requeuer(kube, journal).requeue(action)

    assert outcome.status is OutcomeStatus.SKIPPED
    assert "deactivated by someone else" in outcome.detail
    (still,) = await kube.list_workloads("train", job_uid=pod.owners[0].uid)
    assert not still.active


async def test_a_requeue_a_previous_leader_left_half_done_is_carried_on(
    kube: KubeClient, journal: Journal
) -> None:
    (pod,) = await kube.list_pods(namespace="train")
    await quarantine(kube)
    (workload,) = await kube.list_workloads("train", job_uid=pod.owners[0].uid)
    await kube.set_workload_active(workload, active=False, requeued_from=SICK)  # then that leader stopped

    assert await requeuer(kube, journal).resume() == 1

    async def done() -> bool:
        rows = await journal.outcomes(node=SICK)
        return any(r["kind"] == "requeue-workload" and r["status"] == "applied" for r in rows)

    await eventually(done)
    assert (await kube.get_workload("train", workload.name)).active
    assert await kube.list_requeued_workloads() == []

    async def back_on_a_healthy_node() -> bool:
        return [p.node for p in await kube.list_pods(namespace="train")] == [HEALTHY]

    await eventually(back_on_a_healthy_node)


async def test_a_pod_the_drain_evicted_first_still_comes_back_after_the_requeue(
    kube: KubeClient, journal: Journal
) -> None:
    action = await planned_requeue(kube)
    (pod,) = await kube.list_pods(namespace="train")
    await quarantine(kube)
    await kube.evict_pod("train", pod.name, uid=pod.uid)  # the hardware track's drain ran first

    async def gone() -> bool:
        return await kube.list_pods(namespace="train") == []

    await eventually(gone)
    outcome = await requeuer(kube, journal).requeue(action)

    assert outcome.status is OutcomeStatus.APPLIED, outcome.detail
    await eventually(lambda: _one_pod_on(kube, HEALTHY))
