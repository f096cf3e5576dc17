"""Reconciliation's timers live on the Node, so a failover changes no decision.

A failover in the middle of the healthy delay: the new leader releases the node when the old one would
have, because the delay counts from the node's `sickbay.io/healthy-since`, not from a replica's memory.
Two in-process replicas, one after the other, on one simulated API server, each with its own inbox and its
own clock: replica A sees the node healthy at t0 and stops; replica B takes over at t0 + delay/2 and
releases it at t0 + delay (not at t0 + delay/2 + delay, as a timer kept in memory would). The remediation
timeout counts from `sickbay.io/remediation-requested-at` the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from app.decide import footprint
from tests.integration.remediation_world import Clock, World, eventually, open_world, write_policy

pytestmark = pytest.mark.slow

NODE = "gpu-08"
DELAY = timedelta(minutes=10)


async def held(world: World) -> bool:
    return bool((await world.node(NODE)).spec.unschedulable)


async def state_is(world: World, state: str) -> bool:
    return ((await world.node(NODE)).metadata.labels or {}).get(footprint.STATE) == state


async def healthy_since(world: World) -> str | None:
    return ((await world.node(NODE)).metadata.annotations or {}).get(footprint.HEALTHY_SINCE)


async def verifying(world: World) -> None:
    """Quarantine, drain and hand off NODE, then let its remediation finish and its alert resolve."""
    await world.post_alert(node=NODE, xid="95", gpu="2", sickbay_class="reset-gpu", fingerprint="hf1")
    await eventually(lambda: state_is(world, "remediating"), what="remediation requested")
    await world.core.patch_node(
        NODE, {"metadata": {"annotations": {footprint.REMEDIATION_DONE: "reset-gpu"}}}
    )
    await world.post_alert(
        node=NODE, xid="95", gpu="2", sickbay_class="reset-gpu", fingerprint="hf1", status="resolved"
    )

    async def resolved() -> bool:
        journal = world.services.journal
        assert journal is not None
        return not await journal.active_alerts(node=NODE)

    await eventually(resolved, what="the resolved notification journaled")
    await world.reconcile()
    assert await state_is(world, "verifying")


async def test_a_new_leader_mid_healthy_delay_releases_at_the_time_the_old_one_set(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, release={"healthy_delay": "10m"})
    async with open_world(tmp_path, policy=policy) as a:
        await verifying(a)
        assert await healthy_since(a) is None, "not counted before it is seen healthy"
        before = a.clock()
        await a.reconcile()
        mark = await healthy_since(a)
        assert mark is not None, "replica A writes when it first saw the node healthy"
        t0 = datetime.fromisoformat(mark)
        assert before <= t0 <= a.clock()
        assert await held(a)
        await a.client.close()  # replica A stops, and whatever it kept in memory with it

        b_clock = Clock()
        b_clock.set_to(t0 + DELAY / 2)
        (tmp_path / "b").mkdir()
        async with open_world(
            tmp_path / "b", policy=policy, cluster=a.sim, identity="sickbay-test-1", clock=b_clock
        ) as b:
            await b.reconcile()
            assert await held(b), "halfway through the delay"
            assert await healthy_since(b) == mark, (
                "the new leader counts from A's mark, it does not restart it"
            )

            b_clock.set_to(t0 + DELAY - timedelta(seconds=5))
            await b.reconcile()
            assert await held(b), "not before t0 + delay"

            b_clock.set_to(t0 + DELAY)
            await b.reconcile()
            node = await b.node(NODE)
            assert not node.spec.unschedulable, "released at t0 + delay, not at t0 + delay/2 + delay"
            assert not [k for k in node.metadata.annotations or {} if k.startswith("sickbay.io/")]
            assert len(await b.events("SickbayReleased")) == 1


async def test_the_healthy_delay_starts_over_when_the_node_stops_being_healthy(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, release={"healthy_delay": "10m"})
    async with open_world(tmp_path, policy=policy) as world:
        await verifying(world)
        await world.reconcile()
        assert await healthy_since(world) is not None
        # The device plugin hides a GPU again: not healthy, the mark goes.
        await world.core.patch_node_status(NODE, {"status": {"allocatable": {"nvidia.com/gpu": "7"}}})
        await world.reconcile()
        assert await healthy_since(world) is None
        world.clock.advance(DELAY + timedelta(minutes=1))
        await world.reconcile()
        assert await held(world), "unhealthy for the whole delay: kept"
        await world.core.patch_node_status(NODE, {"status": {"allocatable": {"nvidia.com/gpu": "8"}}})
        await world.reconcile()
        mark = await healthy_since(world)
        assert mark is not None
        assert datetime.fromisoformat(mark) >= world.clock() - timedelta(minutes=1), "counted from now"
        assert await held(world)
        world.clock.advance(DELAY)
        await world.reconcile()
        assert not await held(world)


async def test_a_remediation_past_its_timeout_escalates_to_replace_once(tmp_path: Path) -> None:
    async with open_world(tmp_path) as world:  # the shipped policy: reset-gpu times out after 1 h
        await world.post_alert(node=NODE, xid="95", gpu="2", sickbay_class="reset-gpu", fingerprint="to1")
        await eventually(lambda: state_is(world, "remediating"), what="remediation requested")
        await world.reconcile()
        assert not await world.events("SickbayRemediationTimedOut"), "within its timeout"
        world.clock.advance(timedelta(hours=1, minutes=1))
        await world.reconcile()
        await world.reconcile()
        annotations = (await world.node(NODE)).metadata.annotations
        assert annotations[footprint.REMEDIATION_REQUESTED] == "replace"
        timed_out = await world.events("SickbayRemediationTimedOut")
        assert len(timed_out) == 1, "escalated once, not again each round"
        assert "reset-gpu did not complete within 1:00:00" in timed_out[0].message
        assert await held(world)


@contextlib.asynccontextmanager
async def remediation_webhook() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A remediator's webhook: its URL and the requests it received, in order."""
    received: list[dict[str, Any]] = []

    async def remediate(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.json_response({"accepted": True})

    app = web.Application()
    app.router.add_post("/remediate", remediate)
    server = TestServer(app)
    await server.start_server()
    try:
        yield str(server.make_url("/remediate")), received
    finally:
        await server.close()


async def test_an_escalation_asks_the_replace_remediator_once(tmp_path: Path) -> None:
    async with remediation_webhook() as (url, received):
        hook = {"kind": "webhook", "url": url}
        policy = write_policy(tmp_path, remediation={"reset-gpu": {**hook, "timeout": "1h"}, "replace": hook})
        async with open_world(tmp_path, policy=policy) as world:
            await world.post_alert(node=NODE, xid="95", gpu="2", sickbay_class="reset-gpu", fingerprint="wh1")
            await eventually(lambda: state_is(world, "remediating"), what="remediation requested")
            assert [(r["node"], r["action"]) for r in received] == [(NODE, "reset-gpu")], "after the drain"
            await world.reconcile()
            assert len(received) == 1, "within its timeout"

            world.clock.advance(timedelta(hours=1, minutes=1))
            await world.reconcile()
            assert len(received) == 2, "the replace remediator is asked when the timeout passes"
            assert (received[1]["node"], received[1]["action"]) == (NODE, "replace")
            assert "reset-gpu did not complete within 1:00:00" in received[1]["reason"]
            annotations = (await world.node(NODE)).metadata.annotations
            assert annotations[footprint.REMEDIATION_REQUESTED] == "replace"
            asked_at = datetime.fromisoformat(annotations[footprint.REMEDIATION_REQUESTED_AT])
            assert asked_at >= world.clock() - timedelta(minutes=1), "the request's own time"
            assert await state_is(world, "remediating")

            world.clock.advance(timedelta(hours=5))
            await world.reconcile()
            await world.reconcile()
            assert len(received) == 2, "asked once, not again each round"
            assert len(await world.events("SickbayRemediationTimedOut")) == 1
            requested = [e.message for e in await world.events("SickbayRemediationRequested")]
            assert any(m.startswith("replace via webhook") for m in requested), requested
            outcomes = await world.services.journal.outcomes(node=NODE)  # type: ignore[union-attr]
            asks = [o for o in outcomes if o["kind"] == "request-remediation" and o["status"] == "applied"]
            assert len(asks) == 2, "the first hand-off and the escalation, each journaled"
            assert await held(world)


async def test_an_escalation_whose_remediator_fails_is_asked_again(tmp_path: Path) -> None:
    async with remediation_webhook() as (url, received):
        broken = url.replace("/remediate", "/gone")  # answers 404
        policy = write_policy(tmp_path, remediation={"replace": {"kind": "webhook", "url": broken}})
        async with open_world(tmp_path, policy=policy) as world:
            await world.post_alert(node=NODE, xid="95", gpu="2", sickbay_class="reset-gpu", fingerprint="wh2")
            await eventually(lambda: state_is(world, "remediating"), what="remediation requested")
            world.clock.advance(timedelta(hours=1, minutes=1))
            await world.reconcile()
            annotations = (await world.node(NODE)).metadata.annotations
            assert annotations[footprint.REMEDIATION_REQUESTED] == "reset-gpu", "not handed off: not marked"
            outcomes = await world.services.journal.outcomes(node=NODE)  # type: ignore[union-attr]
            failed = [o for o in outcomes if o["kind"] == "request-remediation" and o["status"] == "failed"]
            assert len(failed) == 1
            assert "404" in failed[0]["detail"]
            await world.reconcile()
            outcomes = await world.services.journal.outcomes(node=NODE)  # type: ignore[union-attr]
            failed = [o for o in outcomes if o["kind"] == "request-remediation" and o["status"] == "failed"]
            assert len(failed) == 2, "the next round asks again"
            assert received == []


async def test_a_new_leader_mid_allocatable_grace_signals_when_the_old_one_would_have(tmp_path: Path) -> None:
    """The allocatable grace counts from the node's `allocatable-short-since`, written by the replica that
    first saw the drop, so the new leader signals it at t0 + grace, not t0 + grace/2 + grace."""
    short = "gpu-07"  # no pods, not quarantined: only the drop itself can take it out
    async with open_world(tmp_path) as a:
        await a.core.patch_node_status(short, {"status": {"allocatable": {"nvidia.com/gpu": "7"}}})
        await a.reconcile()
        annotations = (await a.node(short)).metadata.annotations or {}
        mark = annotations.get(footprint.ALLOCATABLE_SHORT_SINCE)
        assert mark is not None, "replica A writes when it first saw the drop"
        t0 = datetime.fromisoformat(mark)
        await a.client.close()

        grace = timedelta(minutes=5)  # the shipped policy's allocatable_grace
        b_clock = Clock()
        b_clock.set_to(t0 + grace / 2)
        (tmp_path / "b").mkdir()
        async with open_world(tmp_path / "b", cluster=a.sim, identity="sickbay-test-1", clock=b_clock) as b:
            await b.reconcile()
            assert not (await b.node(short)).spec.unschedulable, "halfway through the grace"
            assert (await b.node(short)).metadata.annotations[footprint.ALLOCATABLE_SHORT_SINCE] == mark

            b_clock.set_to(t0 + grace)
            await b.reconcile()

            async def quarantined() -> bool:
                return bool((await b.node(short)).spec.unschedulable)

            await eventually(quarantined, what="the drop signalled at t0 + grace")
            node = await b.node(short)
            assert "allocatable 7 below capacity 8" in node.metadata.annotations[footprint.REASON]
            journal = b.services.journal
            assert journal is not None
            entries = await journal.entries(node=short)
            assert [(e.fault_class, e.source) for e in entries] == [("reset-gpu", "allocatable")], "once"

            await b.core.patch_node_status(short, {"status": {"allocatable": {"nvidia.com/gpu": "8"}}})
            await b.reconcile()
            await b.reconcile()  # the first round's writes (a healthy mark) may take the node's version
            after = (await b.node(short)).metadata.annotations or {}
            assert footprint.ALLOCATABLE_SHORT_SINCE not in after, "the mark goes when allocatable is back"


async def test_a_soft_condition_nothing_keeps_up_is_cleared_after_its_time_to_live(tmp_path: Path) -> None:
    """Agent events never resolve: GpuSoftFault=True goes once no soft signal fired for `condition_ttl`
    (the shipped 1 h), counted from the condition's own transition time, whoever leads."""
    async with open_world(tmp_path) as world:
        raised = (world.clock() - timedelta(minutes=59)).isoformat()
        condition = {
            "type": "GpuSoftFault",
            "status": "True",
            "reason": "PowerBrake",
            "lastTransitionTime": raised,
        }
        await world.core.patch_node_status("gpu-04", {"status": {"conditions": [condition]}})

        async def soft() -> str | None:
            conditions = (await world.node("gpu-04")).status.conditions or []
            return next((c.status for c in conditions if c.type == "GpuSoftFault"), None)

        await world.reconcile()
        assert await soft() == "True", "within its time to live"
        world.clock.advance(timedelta(minutes=2))
        await world.reconcile()
        assert await soft() == "False"
        [cleared] = await world.events("SickbaySoftFaultCleared")
        assert "no soft signal has fired on the node for 1:00:00" in cleared.message


async def test_a_dry_run_times_the_allocatable_grace_without_writing(tmp_path: Path) -> None:
    async with open_world(tmp_path, dry_run=True) as world:
        await world.core.patch_node_status("gpu-07", {"status": {"allocatable": {"nvidia.com/gpu": "7"}}})
        world.sim.reset_counters()
        await world.reconcile()
        world.clock.advance(timedelta(minutes=6))
        await world.reconcile()
        journal = world.services.journal
        assert journal is not None

        async def would_quarantine() -> bool:
            outcomes = await journal.outcomes(node="gpu-07")
            return any(o["kind"] == "quarantine" and o["status"] == "dry-run" for o in outcomes)

        await eventually(would_quarantine, what="the drop signalled and its quarantine dry-run")
        assert world.sim.counters()["writes"] == 0, world.sim.counters()
        assert footprint.ALLOCATABLE_SHORT_SINCE not in (
            (await world.node("gpu-07")).metadata.annotations or {}
        )
        await world.reconcile()
        assert len(await journal.entries(node="gpu-07")) == 1, "signalled once"
