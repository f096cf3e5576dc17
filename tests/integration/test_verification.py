"""Verify before release, end to end: the real service against the simulated API server.

A remediated node (`verifying`) gets a verification Job pinned to it; the simulator's Job controller
ends each Job as the test queued (`/_sim/job-outcomes`). A Job that fails once is followed by a second;
when that one succeeds the node is released after the healthy delay. `max_failures` failed Jobs hand the
node to the `replace` remediator instead. Everything is read back through the official client.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes.aio import client as aclient

from app.config.settings import RULES_DIR
from app.decide import footprint
from tests.integration.remediation_world import World, eventually, open_world, write_policy

pytestmark = pytest.mark.slow

NODE = "gpu-08"
NAMESPACE = "sickbay"


def verifying_policy(tmp: Path) -> Path:
    return write_policy(
        tmp,
        release={"healthy_delay": "10m"},
        verification={
            "enabled": True,
            "level": 1,
            "deadline": "5m",
            "max_failures": 2,
            "namespace": NAMESPACE,
            "template": str(RULES_DIR / "verification-job.yaml"),
        },
    )


async def annotations(world: World) -> dict[str, str]:
    return dict((await world.node(NODE)).metadata.annotations or {})


async def state_is(world: World, state: str) -> bool:
    return ((await world.node(NODE)).metadata.labels or {}).get(footprint.STATE) == state


async def queue_outcomes(world: World, *outcomes: str) -> None:
    body = {"run_s": 0.05, "outcomes": [{"node": NODE, "outcome": o} for o in outcomes]}
    url = f"{world.sim.url}/_sim/job-outcomes"
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        assert response.status == 200, await response.text()


async def remediated(world: World) -> None:
    """Quarantine, drain and hand off NODE; its remediator reports done and its alert resolves."""
    await world.core.create_namespace({"metadata": {"name": NAMESPACE}})
    await world.post_alert(node=NODE, xid="95", gpu="2", sickbay_class="reset-gpu", fingerprint="v1")
    await eventually(lambda: state_is(world, "remediating"), what="remediation requested")
    await world.core.patch_node(
        NODE, {"metadata": {"annotations": {footprint.REMEDIATION_DONE: "reset-gpu"}}}
    )
    await world.post_alert(
        node=NODE, xid="95", gpu="2", sickbay_class="reset-gpu", fingerprint="v1", status="resolved"
    )

    async def resolved() -> bool:
        journal = world.services.journal
        assert journal is not None
        return not await journal.active_alerts(node=NODE)

    await eventually(resolved, what="the resolved notification journaled")
    await world.reconcile()
    assert await state_is(world, "verifying")


async def job_ended(world: World, name: str) -> Any:
    batch = aclient.BatchV1Api(world.core.api_client)
    found: list[Any] = []

    async def ended() -> bool:
        job = await batch.read_namespaced_job(name, NAMESPACE)
        found[:] = [job]
        return any(
            c.type in ("Complete", "Failed") and c.status == "True" for c in job.status.conditions or []
        )

    await eventually(ended, what=f"job {name} finished")
    return found[0]


async def started_job(world: World) -> str:
    """Run a round; the node then names a verification Job, which exists."""
    await world.reconcile()
    name = (await annotations(world)).get(footprint.VERIFICATION_JOB)
    assert name, "no verification Job named on the node"
    return name


async def test_a_verification_that_fails_once_then_passes_releases_the_node(tmp_path: Path) -> None:
    async with open_world(tmp_path, policy=verifying_policy(tmp_path)) as world:
        await queue_outcomes(world, "fail")  # the first Job fails; the next succeeds (the default)
        await remediated(world)
        first = await started_job(world)
        batch = aclient.BatchV1Api(world.core.api_client)
        job = await batch.read_namespaced_job(first, NAMESPACE)
        pod = job.spec.template.spec
        assert pod.node_name == NODE
        assert pod.restart_policy == "Never"
        assert job.spec.backoff_limit == 0
        assert job.spec.active_deadline_seconds == 300
        assert pod.containers[0].resources.limits == {"nvidia.com/gpu": "8"}
        assert "dcgmi diag -r 1" in " ".join(pod.containers[0].args)
        assert {t.key for t in pod.tolerations} >= {footprint.UNHEALTHY, "node.kubernetes.io/unschedulable"}
        failed = await job_ended(world, first)
        assert failed.status.failed == 1

        second = await started_job(world)
        assert second != first
        marks = await annotations(world)
        assert marks[footprint.VERIFICATION_FAILURES] == "1"
        assert await world.events("SickbayVerificationFailed")
        assert (await world.node(NODE)).spec.unschedulable, "a failed verification releases nothing"
        passed = await job_ended(world, second)
        assert passed.status.succeeded == 1

        await world.reconcile()
        assert (await annotations(world))[footprint.VERIFIED] == second
        assert await world.events("SickbayVerified")
        await world.reconcile()  # healthy now: the healthy delay starts
        assert footprint.HEALTHY_SINCE in await annotations(world)
        assert (await world.node(NODE)).spec.unschedulable, "still within the healthy delay"
        world.clock.advance(timedelta(minutes=11))
        await world.reconcile()
        after = await world.node(NODE)
        assert not after.spec.unschedulable
        assert not [k for k in (after.metadata.annotations or {}) if k.startswith("sickbay.io/")]


async def test_max_failures_failed_verifications_escalate_to_replace(tmp_path: Path) -> None:
    async with open_world(tmp_path, policy=verifying_policy(tmp_path)) as world:
        await queue_outcomes(world, "fail", "fail")
        await remediated(world)
        first = await started_job(world)
        await job_ended(world, first)
        second = await started_job(world)
        await job_ended(world, second)
        await world.reconcile()  # the second failure: max_failures (2) reached
        assert await state_is(world, "remediating")
        marks = await annotations(world)
        assert marks[footprint.REMEDIATION_REQUESTED] == "replace"
        assert footprint.REMEDIATION_DONE not in marks, (
            "the replacement is not done until its remediator says so"
        )
        assert not set(marks) & set(footprint.VERIFICATION_MARKS)
        assert (await world.node(NODE)).spec.unschedulable
        failed = await world.events("SickbayVerificationFailed")
        assert any("escalating to replace" in e.message for e in failed)
        await world.reconcile()  # replace waits for a human: no new Job, still held
        assert await state_is(world, "remediating")
        assert footprint.VERIFICATION_JOB not in await annotations(world)


async def test_a_new_leader_follows_the_job_the_old_one_started_and_its_failure_count(tmp_path: Path) -> None:
    policy = verifying_policy(tmp_path)
    async with open_world(tmp_path, policy=policy) as a:
        await queue_outcomes(a, "hang")  # replica A's Job is still running when A stops
        await remediated(a)
        first = await started_job(a)
        await a.client.close()  # replica A stops, and whatever it kept in memory with it

        (tmp_path / "b").mkdir()
        async with open_world(tmp_path / "b", policy=policy, cluster=a.sim, identity="sickbay-test-1") as b:
            await b.reconcile()
            assert (await annotations(b))[footprint.VERIFICATION_JOB] == first, "B waits on A's Job"
            batch = aclient.BatchV1Api(b.core.api_client)
            jobs = await batch.list_namespaced_job(NAMESPACE)
            assert [j.metadata.name for j in jobs.items] == [first], "no second Job for the same attempt"
            # A's Job runs past its deadline (5 m, plus the minute's grace) on B's clock: it counts as
            # failed, and B starts verification 2 with the count A's node carries.
            b.clock.advance(timedelta(minutes=7))
            second = await started_job(b)
            assert second != first
            assert (await annotations(b))[footprint.VERIFICATION_FAILURES] == "1"
