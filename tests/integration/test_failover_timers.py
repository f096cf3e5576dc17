"""The drain deadline, the quarantine rate limit and a deferred restart survive a failover.

Each timer lives in observed state, so a new leader acts at the time the old one set, not at a time
counted afresh from its own start: the drain deadline counts from the node's `sickbay.io/draining-since`,
the rate limit's minute from the quarantines on the nodes and in the journal, a deferred restart's time is
a row of the journal. Two (or three) in-process replicas, one after the other, on one simulated API server,
each with its own clock; where the timer is in the journal they share the journal's file, as a restarted
replica on the `persistent-journal` volume does.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from app.decide import footprint
from tests.integration.remediation_world import Clock, World, eventually, open_world, write_policy

pytestmark = pytest.mark.slow

BLOCKED = "gpu-05"  # its inference pod's PodDisruptionBudget allows no disruption: every eviction is a 429


async def annotations(world: World, node: str) -> dict[str, str]:
    return dict((await world.node(node)).metadata.annotations or {})


async def state_of(world: World, node: str) -> str | None:
    return ((await world.node(node)).metadata.labels or {}).get(footprint.STATE)


def refused(world: World) -> int:
    return int(world.sim.counters()["evictions"].get("refused", 0))


async def test_a_new_leader_resumes_a_drain_with_the_deadline_the_old_one_set(tmp_path: Path) -> None:
    deadline = timedelta(minutes=10)
    policy = write_policy(tmp_path, drain={"deadline": "10m", "on_deadline": "leave"})
    async with open_world(tmp_path, policy=policy) as a:
        await a.post_alert(node=BLOCKED, xid="95", gpu="0", sickbay_class="reset-gpu", fingerprint="dr1")

        async def refused_once() -> bool:
            return refused(a) >= 1

        await eventually(refused_once, what="the first eviction refused")
        assert await state_of(a, BLOCKED) == "draining"
        mark = (await annotations(a, BLOCKED)).get(footprint.DRAINING_SINCE)
        assert mark is not None, "replica A writes when the drain started"
        t0 = datetime.fromisoformat(mark)
        assert t0 <= a.clock()
        await a.client.close()  # replica A stops, its drain with it: the node stays `draining`

        halfway = Clock()
        halfway.set_to(t0 + deadline / 2)
        (tmp_path / "b").mkdir()
        async with open_world(
            tmp_path / "b", policy=policy, cluster=a.sim, identity="sickbay-test-1", clock=halfway
        ) as b:
            before = refused(b)
            await b.reconcile()  # taking the lead ran one round already; this one finds the drain running

            async def refused_again() -> bool:
                return refused(b) > before

            await eventually(refused_again, what="the resumed drain's eviction refused")
            assert (await annotations(b, BLOCKED))[footprint.DRAINING_SINCE] == mark, "A's start, not B's"
            assert await state_of(b, BLOCKED) == "draining", "half the deadline is left: it keeps trying"
            await b.client.close()

        past = Clock()
        past.set_to(t0 + deadline + timedelta(seconds=1))
        (tmp_path / "c").mkdir()
        async with open_world(
            tmp_path / "c", policy=policy, cluster=a.sim, identity="sickbay-test-2", clock=past
        ) as c:

            async def drain_failed() -> bool:
                return await state_of(c, BLOCKED) == "drain-failed"

            # A deadline counted from C's own start would keep it trying for ten more minutes.
            await eventually(drain_failed, what="the drain given up at t0 + deadline")
            after = await annotations(c, BLOCKED)
            assert "blocked" in after[footprint.DRAIN_FAILED]
            assert footprint.DRAINING_SINCE not in after, "the start goes with the `draining` label"
            journal = c.services.journal
            assert journal is not None
            outcomes = await journal.outcomes(node=BLOCKED)
            left = [o for o in outcomes if o["kind"] == "evict-pod" and o["status"] == "blocked"]
            assert [o["detail"] for o in left] == ["left in place after the drain deadline (policy: leave)"]
            assert len(await c.pods("inference")) == 1, "the pod its budget protects stays"


RATE = {
    "max_fraction": 1.0,
    "per_pool_max_fraction": 1.0,
    "quarantines_per_minute": 2,
}


async def quarantine_outcomes(world: World, node: str) -> list[dict[str, object]]:
    journal = world.services.journal
    assert journal is not None
    # The quarantine's own outcome; the drain it starts is journaled under the same action, `recorded`.
    return [
        o
        for o in await journal.outcomes(node=node)
        if o["kind"] == "quarantine" and o["status"] != "recorded"
    ]


async def test_a_new_leader_keeps_the_rate_limit_of_the_minute_the_old_one_started(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, budgets=RATE)
    async with open_world(tmp_path, policy=policy) as a:
        for node in ("gpu-07", "gpu-08"):
            await a.post_alert(
                node=node, xid="95", gpu="0", sickbay_class="reset-gpu", fingerprint=f"rl-{node}"
            )

            async def held(node: str = node) -> bool:
                return [o["status"] for o in await quarantine_outcomes(a, node)].count("applied") == 1

            await eventually(held, what=f"{node} quarantined by A")
        t0 = a.clock()
        await a.client.close()  # two quarantines this minute, and A's memory of them, gone with A

        async def refused(world: World, node: str) -> None:
            async def blocked() -> bool:
                return any(o["status"] == "blocked" for o in await quarantine_outcomes(world, node))

            await world.reconcile()  # the node list the gates measure, as after taking the lead
            fingerprint = f"rl-{node}"
            await world.post_alert(
                node=node, xid="95", gpu="0", sickbay_class="reset-gpu", fingerprint=fingerprint
            )
            await eventually(blocked, what=f"{node}'s quarantine refused")
            outcomes = await quarantine_outcomes(world, node)
            assert [o["detail"] for o in outcomes] == ["rate limit: 2 quarantines in the last minute"]
            refused_node = await world.node(node)
            assert not refused_node.spec.unschedulable
            assert not any(t.key == footprint.UNHEALTHY for t in refused_node.spec.taints or [])

        # B restarts on A's journal (the persistent-journal volume): the journal and the nodes both say it.
        b_clock = Clock()
        b_clock.set_to(t0 + timedelta(seconds=5))
        async with open_world(
            tmp_path, policy=policy, cluster=a.sim, identity="sickbay-test-1", clock=b_clock
        ) as b:
            await refused(b, "gpu-09")
            await b.client.close()

        # C takes over with a journal of its own (each replica's emptyDir): the nodes' marks say it.
        c_clock = Clock()
        c_clock.set_to(t0 + timedelta(seconds=10))
        (tmp_path / "c").mkdir()
        async with open_world(
            tmp_path / "c", policy=policy, cluster=a.sim, identity="sickbay-test-2", clock=c_clock
        ) as c:
            await refused(c, "gpu-06")
            # The minute A started ends at t0 + 1 min, on C's clock as on A's.
            c_clock.set_to(t0 + timedelta(minutes=1, seconds=1))
            await c.post_alert(
                node="gpu-06", xid="95", gpu="0", sickbay_class="reset-gpu", fingerprint="rl-again"
            )

            async def quarantined() -> bool:  # tainted (a reset-gpu quarantine drains partially: no cordon)
                taints = (await c.node("gpu-06")).spec.taints or []
                return any(t.key == footprint.UNHEALTHY for t in taints)

            await eventually(quarantined, what="gpu-06 quarantined once the minute passed")


async def test_a_new_leader_runs_a_deferred_restart_at_the_time_the_old_one_set(tmp_path: Path) -> None:
    """A second application XID under the same pod is restarted after the backoff (10 min here): the
    restart waits in the journal, so B, on A's journal, restarts the pod when A would have."""
    policy = write_policy(tmp_path, retry={"initial": "10m"})
    solo = {
        "name": "solo-a",
        "namespace": "training",
        "node": "gpu-06",
        "gpus": 8,
        "labels": {"app": "solo-a"},
    }
    xid = {"node": "gpu-06", "xid": "13", "gpu": "1", "sickbay_class": "restart-workload"}
    where = {"namespace": "training", "pod": "solo-a"}

    async def solo_uid(world: World) -> str | None:
        found = await world.pods("training", field_selector="metadata.name=solo-a")
        return found[0].metadata.uid if found else None

    async with open_world(tmp_path, policy=policy) as a:
        await a.post_alert(fingerprint="rs1", **xid, **where)

        async def restarted() -> bool:
            return len(await a.events("SickbayRestarted")) == 1

        await eventually(restarted, what="the first restart, at once")

        async def gone() -> bool:
            return not await a.pods("training", terminating=True, field_selector="metadata.name=solo-a")

        await eventually(gone, what="the first solo-a gone after its grace period")
        a.sim.load({"pods": [solo]})  # its controller's replacement, under the same name
        replacement = await solo_uid(a)
        assert replacement is not None
        await a.post_alert(fingerprint="rs2", **xid, **where)
        journal = a.services.journal
        assert journal is not None

        async def deferred() -> bool:
            return bool(await journal.deferred_restarts())

        await eventually(deferred, what="the second restart deferred by the backoff")
        [waiting] = await journal.deferred_restarts()
        due = waiting.action.not_before
        assert due is not None
        assert due > a.clock() + timedelta(minutes=5), "the backoff: 10 minutes after the first fault"
        await a.client.close()  # replica A stops, and its wake-up for the restart with it
        assert await solo_uid(a) == replacement

        b_clock = Clock()
        b_clock.set_to(due - timedelta(minutes=5))
        async with open_world(
            tmp_path, policy=policy, cluster=a.sim, identity="sickbay-test-1", clock=b_clock
        ) as b:
            await b.reconcile()
            assert await solo_uid(b) == replacement, "not before the time A set"

            b_clock.set_to(due + timedelta(seconds=1))
            await b.reconcile()
            assert await solo_uid(b) is None, "B restarts it at A's time"
            assert len(await b.events("SickbayRestarted")) == 2
            b_journal = b.services.journal
            assert b_journal is not None
            assert not await b_journal.deferred_restarts(), "run once, and gone from the journal"
            outcomes = [o for o in await b_journal.outcomes(node="gpu-06") if o["kind"] == "restart-pod"]
            assert [o["status"] for o in outcomes].count("applied") == 2, "both restarts journaled"
            await b.reconcile()
            assert len(await b.events("SickbayRestarted")) == 2, "not again"
