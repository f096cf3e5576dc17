"""The proactive ladder end to end: risk changes from the scoring job go through the inbox and the real
pipeline to the simulated API server, and are read back with the official client and kubectl.

The cluster is the remediation tests' (10 GPU nodes, a 4-rank JobSet on gpu-00..03, a solo pod on gpu-06),
so the default proactive budget (5%, never below one) lets exactly one node stop new work at a time.
The hand-made scores' model version ("test") is validated first, as an operator would (`VALIDATED`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from app import domain
from app.decide import footprint
from app.predict import score, service
from app.sim.kubeapi.registry import MERGE_PATCH
from app.sim.kubeapi.resources import NODES, Ref
from app.store import inbox
from tests.integration.remediation_world import World, eventually, open_world, write_policy

pytestmark = pytest.mark.slow

WARN, ACT = 0.3, 0.6
# The ladder acts only for a model validated on this fleet: these tests are about the acting ladder (the
# shadow ones are in test_shadow_mode.py), so their model is validated by the operator's path first.
VALIDATED = ("test",)
T0 = datetime.now(UTC)


class Risks:
    """The scoring job's signal side (hysteresis included) fed with hand-made node scores."""

    def __init__(self, world: World) -> None:
        self._world = world
        self._job = service.ScoringService(
            models_dir=Path("/nonexistent"), read_recent=lambda now: pd.DataFrame(), clear_after=2
        )
        self._step = 0

    async def score(self, **by_node: float) -> list[domain.Signal]:
        self._step += 1
        at = T0 + timedelta(minutes=5 * self._step)
        risks = tuple(
            domain.Risk(
                node=name.replace("_", "-"),
                score=value,
                level=score.level_of(value, warn=WARN, act=ACT),
                model_version="test",
                at=at,
                gpu=3,
                drivers=(("gpu3:sbe_rate_1h", 1.2),),
            )
            for name, value in by_node.items()
        )
        cycle = service.Cycle(
            service.CycleStatus.SCORED,
            at,
            scores=score.Scores(at=at, model_version="test", gpus=risks, nodes=risks),
            thresholds=(WARN, ACT),
        )
        signals = self._job.signals(cycle)
        box = self._world.services.inbox
        assert box is not None
        if signals:
            await box.append([inbox.record_of(s) for s in signals])
        return signals


def at_risk(node: Any) -> tuple[str, str] | None:
    found = [(t.value, t.effect) for t in node.spec.taints or () if t.key == footprint.AT_RISK]
    return found[0] if found else None


async def taint_becomes(world: World, name: str, expected: tuple[str, str] | None) -> None:
    async def check() -> bool:
        return at_risk(await world.node(name)) == expected

    await eventually(check, what=f"{name}'s at-risk taint to be {expected}")


async def settled(world: World) -> None:
    """Wait until the inbox is empty and every plan's actions have been carried out."""
    box = world.services.inbox
    assert box is not None

    async def empty() -> bool:
        return await box.depth() == 0

    await eventually(empty, what="the inbox to drain")


async def test_warn_then_act_asks_to_checkpoint_the_budget_holds_the_next_and_clearing_removes_it(
    tmp_path: Path,
) -> None:
    async with open_world(tmp_path, validated=VALIDATED) as world:
        risks = Risks(world)
        rank0 = (await world.pods("training", field_selector="spec.nodeName=gpu-00"))[0]
        job = next(o for o in rank0.metadata.owner_references if o.controller)

        # warn: new work steers away, nobody is asked anything.
        await risks.score(gpu_00=0.4)
        await taint_becomes(world, "gpu-00", ("warn", "PreferNoSchedule"))
        node = await world.node("gpu-00")
        assert node.metadata.labels[footprint.STATE] == "at-risk"
        assert (
            "predicted hardware-fault risk at warn (score 0.4" in node.metadata.annotations[footprint.REASON]
        )
        assert not node.spec.unschedulable, "the ladder never cordons"
        assert await world.events("SickbayAtRisk")
        assert not await world.events("SickbayCheckpointRequested")

        # act: no new work, and the running GPU pod and its owner are asked to checkpoint.
        await risks.score(gpu_00=0.8)
        await taint_becomes(world, "gpu-00", ("act", "NoSchedule"))
        await settled(world)

        async def asked() -> set[tuple[str, str, str]]:
            return {
                (e.involved_object.kind, e.involved_object.name, e.involved_object.uid or "")
                for e in await world.events("SickbayCheckpointRequested")
            }

        await eventually(lambda: _has(asked, 2), what="two checkpoint requests")
        assert await asked() == {
            ("Pod", rank0.metadata.name, rank0.metadata.uid),
            (job.kind, job.name, job.uid),
        }
        on_owner = [
            e for e in await world.events("SickbayCheckpointRequested") if e.involved_object.kind == job.kind
        ]
        assert on_owner[0].involved_object.api_version == job.api_version, (
            "the ownerReference's own apiVersion"
        )
        message = (await world.events("SickbayCheckpointRequested"))[0].message
        assert "score 0.8" in message
        assert "gpu3:sbe_rate_1h" in message
        assert "checkpoint now" in message
        assert [
            p.metadata.name for p in await world.pods("training", field_selector="spec.nodeName=gpu-00")
        ] == [rank0.metadata.name], "no drain unless the policy enables it"
        described = await world.kubectl("describe", "node", "gpu-00")
        assert "sickbay.io/at-risk=act:NoSchedule" in described

        # A second node at act: the budget (1 of 10 GPU nodes) is taken, so it stays at warn, unasked.
        await risks.score(gpu_00=0.8, gpu_06=0.9)
        await taint_becomes(world, "gpu-06", ("warn", "PreferNoSchedule"))
        await settled(world)
        assert len(await asked()) == 2, "a node held at warn asks nobody to checkpoint"
        metrics = await (await world.client.get("/metrics")).text()
        assert "sickbay_proactive_budget_refusals_total 1.0" in metrics
        assert 'sickbay_proactive_nodes{level="act"} 1.0' in metrics

        # Down from act: held for one cycle (hysteresis, clear_after=2), then back to PreferNoSchedule.
        assert await risks.score(gpu_00=0.4, gpu_06=0.9) == []
        assert await risks.score(gpu_00=0.4, gpu_06=0.9) != []
        await taint_becomes(world, "gpu-00", ("warn", "PreferNoSchedule"))

        # The risk clears: the taint, the state label and the reason go; an Event says so.
        await risks.score(gpu_00=0.05, gpu_06=0.9)
        await risks.score(gpu_00=0.05, gpu_06=0.9)
        await taint_becomes(world, "gpu-00", None)
        node = await world.node("gpu-00")
        assert footprint.STATE not in (node.metadata.labels or {})
        assert footprint.REASON not in (node.metadata.annotations or {})
        assert await world.events("SickbayAtRiskCleared")


async def test_a_node_quarantined_for_a_hardware_fault_is_never_touched_by_the_ladder(tmp_path: Path) -> None:
    async with open_world(tmp_path, validated=VALIDATED) as world:
        risks = Risks(world)
        await world.post_alert(node="gpu-08", xid="79", gpu="3")
        await eventually(lambda: _cordoned(world, "gpu-08"), what="gpu-08 quarantined")
        await risks.score(gpu_08=0.9)
        await settled(world)
        after = await world.node("gpu-08")
        assert at_risk(after) is None
        assert [t.key for t in after.spec.taints if t.key.startswith("sickbay.io/")] == [footprint.UNHEALTHY]
        assert after.metadata.labels[footprint.STATE] != "at-risk"
        actions = (await (await world.client.get("/api/v1/actions")).json())["items"]
        at_risk_plan = next(a for a in actions if a["class"] == "at-risk")
        assert "quarantined for reboot-node" in at_risk_plan["plan"]["summary"]

        # The risk clearing later does not touch it either: its release is the hardware track's.
        await risks.score(gpu_08=0.05)
        await risks.score(gpu_08=0.05)
        await settled(world)
        assert [
            t.key for t in (await world.node("gpu-08")).spec.taints if t.key.startswith("sickbay.io/")
        ] == [footprint.UNHEALTHY]


async def test_act_drains_the_gpu_pods_only_when_the_policy_enables_it(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, prediction={"drain": True})
    async with open_world(tmp_path, policy=policy, validated=VALIDATED) as world:
        await Risks(world).score(gpu_06=0.9)
        await taint_becomes(world, "gpu-06", ("act", "NoSchedule"))
        await eventually(lambda: _evicted(world, "solo-a"), what="solo-a evicted")
        left = {p.metadata.name for p in await world.pods("training", field_selector="spec.nodeName=gpu-06")}
        assert left == {"solo-b"}, "only GPU pods are drained"
        assert {e.involved_object.name for e in await world.events("SickbayCheckpointRequested")} == {
            "solo-a"
        }


async def test_dry_run_writes_nothing_and_journals_what_it_would_do(tmp_path: Path) -> None:
    async with open_world(tmp_path, dry_run=True, validated=VALIDATED) as world:
        await Risks(world).score(gpu_00=0.9)
        await settled(world)
        assert at_risk(await world.node("gpu-00")) is None
        assert not await world.events("SickbayCheckpointRequested")
        outcomes = (await (await world.client.get("/api/v1/actions")).json())["outcomes"]
        assert {(o["kind"], o["status"]) for o in outcomes} == {
            ("taint-at-risk", "dry-run"),
            ("request-checkpoint", "dry-run"),
        }


async def _evicted(world: World, name: str) -> bool:
    return any(e.involved_object.name == name for e in await world.events("SickbayEvicted"))


async def _has(read: Any, count: int) -> bool:
    return len(await read()) >= count


async def _cordoned(world: World, name: str) -> bool:
    return bool((await world.node(name)).spec.unschedulable)


async def test_a_node_held_at_warn_when_acting_stays_held_through_a_conflict(tmp_path: Path) -> None:
    """The plan saw a free slot; by the time the writer lists the fleet (under the proactive lock) another
    node took it, so the node is held at warn there. The write then meets a 409 (someone else changed the
    node): the retry re-reads the node and measures it against the same list, so it stays at warn."""
    async with open_world(tmp_path, validated=VALIDATED) as world:
        gates = world.services.gates
        assert gates is not None
        taken: list[str] = []
        conflicted: list[str] = []

        def interfere(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if method == "list_nodes" and gates.proactive_lock.locked() and not taken:
                taken.append("gpu-05")  # another node reaches act first
                world.sim.registry.patch(
                    Ref(NODES, name="gpu-05"),
                    {
                        "spec": {
                            "taints": [{"key": footprint.AT_RISK, "value": "act", "effect": "NoSchedule"}]
                        }
                    },
                    content_type=MERGE_PATCH,
                )
            if method == "patch_node" and getattr(args[0], "node", None) == "gpu-06" and not conflicted:
                conflicted.append("gpu-06")  # a concurrent writer bumps its resourceVersion first
                world.sim.registry.patch(
                    Ref(NODES, name="gpu-06"),
                    {"metadata": {"labels": {"team.example/tick": "1"}}},
                    content_type=MERGE_PATCH,
                )

        world.spy.hooks.append(interfere)
        await Risks(world).score(gpu_06=0.9)
        await taint_becomes(world, "gpu-06", ("warn", "PreferNoSchedule"))
        await settled(world)
        assert (taken, conflicted) == (["gpu-05"], ["gpu-06"]), "both interferences happened"
        node = await world.node("gpu-06")
        assert at_risk(node) == ("warn", "PreferNoSchedule"), "the retry did not promote it past the budget"
        assert node.metadata.labels["team.example/tick"] == "1", "the other writer's change stays"
        assert not await world.events("SickbayCheckpointRequested")
        outcomes = await world.services.journal.outcomes(node="gpu-06")  # type: ignore[union-attr]
        taint = next(o for o in outcomes if o["kind"] == "taint-at-risk")
        assert (taint["status"], taint["attempts"]) == ("applied", 2)
        assert "held at warn: the proactive budget is full" in taint["detail"]
        metrics = await (await world.client.get("/metrics")).text()
        assert "sickbay_proactive_budget_refusals_total 1.0" in metrics
