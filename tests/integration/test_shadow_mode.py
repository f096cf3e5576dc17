"""Shadow mode end to end, against the simulated API server over real HTTP: a model that is miscalibrated
for this fleet stays in shadow (its plans are journaled with what they would have done, no taint and no
Event is written), and the runtime guard sends an acting ladder back to shadow, loudly, removing the
taints it set.

Scores are hand-made cycles handed to the real scoring job's `handle` (the path every scored cycle
takes: gauges, journal, guard, signals), so the test needs no Prometheus and no trained model.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiosqlite
import pytest

from app import domain
from app.act.shadowing import ShadowKeeper
from app.config import rules
from app.config.settings import RULES_DIR, load_settings
from app.decide import shadow
from app.obs.metrics import create_metrics
from app.predict import costs, fleetcheck, score, service
from app.service import validation
from app.service.runtime import build_app
from app.store import journal
from app.store.validation import ValidationLog
from tests.integration.remediation_world import World, eventually, open_world
from tests.integration.test_proactive_ladder import at_risk, settled, taint_becomes
from tests.predict.test_fleetcheck import replay

pytestmark = pytest.mark.slow

WARN, ACT = 0.3, 0.6
NODES = [f"gpu-{i:02d}" for i in range(10)]
MODEL = "m1"  # the hand-built replay's model version


def scoring_on(tmp: Path) -> dict[str, Any]:
    """The scoring job without a model (rules-only: nothing to load) and without Prometheus (never run)."""
    return {"enabled": True, "models_dir": tmp / "models"}


def cycle(at: datetime, **flagged: float) -> service.Cycle:
    """One scored cycle: every node's GPU 3, at the given scores (the rest at 0.01)."""
    risks = tuple(
        domain.Risk(
            node=name,
            score=flagged.get(name.replace("-", "_"), 0.01),
            level=score.level_of(flagged.get(name.replace("-", "_"), 0.01), warn=WARN, act=ACT),
            model_version=MODEL,
            at=at,
            gpu=3,
            drivers=(("gpu3:pcie_replay_rate_24h", 2.1),),
        )
        for name in NODES
    )
    ranked = tuple(sorted(risks, key=lambda r: -r.score))
    scores = score.Scores(at=at, model_version=MODEL, gpus=ranked, nodes=ranked)
    return service.Cycle(service.CycleStatus.SCORED, at, scores=scores, thresholds=(WARN, ACT))


async def handle(world: World, scored: service.Cycle) -> None:
    scoring = world.services.scoring
    assert scoring is not None
    await scoring.handle(scored)
    await settled(world)


async def metrics(world: World) -> str:
    return await (await world.client.get("/metrics")).text()


async def test_a_model_miscalibrated_for_this_fleet_stays_in_shadow_and_writes_nothing(
    tmp_path: Path,
) -> None:
    async with open_world(tmp_path, prediction=scoring_on(tmp_path)) as world:
        keeper = world.services.shadow
        assert keeper is not None
        assert not (await keeper.model_loaded(MODEL)).acting
        # The fleet's own backtest: 3 false alarms in 32 node-days, 94 per 1,000 (the limit is 1).
        job = validation.Validation(
            world.services.settings.prediction,
            keeper=keeper,
            policy=world.services.rules.policy,
            catalog=world.services.rules.catalog,
            journal_path=None,
            model=lambda: SimpleNamespace(card=SimpleNamespace(version=MODEL)),  # type: ignore[arg-type,return-value]
            check=lambda model, now: fleetcheck.judge(replay(), None, None, cost_model=costs.CostModel()),
        )
        ran = await job.run_once()
        assert ran is not None
        assert ran.figures is not None
        assert ran.standing.reason is shadow.Reason.BACKTEST_FAILED
        assert ran.figures["false_alarms"] == 3

        await handle(world, cycle(datetime.now(UTC), gpu_03=0.93))

        assert at_risk(await world.node("gpu-03")) is None
        assert await world.events("SickbayCheckpointRequested") == []
        items = (await (await world.client.get("/api/v1/actions")).json())["items"]
        plan = next(i["plan"] for i in items if i["class"] == "at-risk")
        assert plan["summary"].startswith("shadow: would taint gpu-03 sickbay.io/at-risk=act:NoSchedule")
        assert "backtest-failed" in plan["summary"]
        assert [a["kind"] for a in plan["actions"]] == ["record"]
        assert plan["shadowed"][0]["kind"] == "taint-at-risk"
        assert {a["kind"] for a in plan["shadowed"][1:]} == {"request-checkpoint"}
        text = await metrics(world)
        assert 'sickbay_predict_shadow{reason="backtest-failed"} 1.0' in text
        assert 'sickbay_gpu_risk{gpu="3",node="gpu-03"} 0.93' in text  # it still scores and exports
        model = await (await world.client.get("/api/v1/model")).json()
        assert model["history"][0]["evidence"]["verdict"] == "backtest-failed"
        page = await (await world.client.get("/")).text()
        assert "SHADOW" in page
        assert "backtest-failed" in page


async def test_the_runtime_guard_sends_an_acting_ladder_back_to_shadow_loudly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_world(tmp_path, validated=(MODEL,), prediction=scoring_on(tmp_path)) as world:
        t0 = datetime.now(UTC)
        await handle(world, cycle(t0, gpu_03=0.93))
        await taint_becomes(world, "gpu-03", ("act", "NoSchedule"))
        assert await world.events("SickbayCheckpointRequested")

        # The model now flags 6 of the 10 GPUs scored: more than 2% and more than 3 of them.
        with caplog.at_level(logging.ERROR, logger="app.act"):
            wave = {f"gpu_0{i}": 0.9 for i in (3, 4, 5, 7, 8)} | {"gpu_09": 0.4}
            await handle(world, cycle(t0 + timedelta(minutes=5), **wave))
        await taint_becomes(world, "gpu-03", None)  # the taint it set goes, in the same cycle
        for name in NODES:
            assert at_risk(await world.node(name)) is None

        assert any("RUNTIME GUARD TRIPPED" in r.getMessage() for r in caplog.records)
        text = await metrics(world)
        assert 'sickbay_predict_shadow{reason="guard-flagged"} 1.0' in text
        assert 'sickbay_predict_shadow_trips_total{reason="guard-flagged"} 1.0' in text

        async def event() -> bool:
            return bool(await world.events("SickbayPredictionShadowed"))

        await eventually(event, what="the SickbayPredictionShadowed Event")
        (shadowed,) = await world.events("SickbayPredictionShadowed")
        assert (shadowed.involved_object.kind, shadowed.involved_object.name) == ("Pod", "sickbay-test-0")
        assert shadowed.type == "Warning"
        assert "6 of 10 GPUs flagged" in shadowed.message
        model = await (await world.client.get("/api/v1/model")).json()
        assert (model["mode"], model["reason"], model["held"]) == ("shadow", "guard-flagged", True)
        page = await (await world.client.get("/")).text()
        assert "guard-flagged" in page
        assert "only an operator lifts it" in page

        # Held: the next cycle plans in shadow and writes nothing, until an operator validates again.
        await handle(world, cycle(t0 + timedelta(minutes=10), gpu_03=0.93))
        assert at_risk(await world.node("gpu-03")) is None


async def test_the_standing_survives_a_restart_and_a_new_version_starts_in_shadow(tmp_path: Path) -> None:
    policy = rules.load_policy(RULES_DIR / "policy.yaml")
    now = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)

    async def keeper(db: aiosqlite.Connection) -> ShadowKeeper:
        made = ShadowKeeper(
            validation_log=await ValidationLog.open(db),
            journal=await journal.Journal.open(db),
            policy=policy,
            fleet="f",
            metrics=create_metrics(),
            clock=lambda: now,
        )
        await made.load()
        return made

    async with aiosqlite.connect(tmp_path / "j.db") as db:
        first = await keeper(db)
        await first.model_loaded("v1")
        await first.operator("v1", validate=True, who="ops")
    async with aiosqlite.connect(tmp_path / "j.db") as db:
        again = await keeper(db)
        assert again.standing("v1").reason is shadow.Reason.OPERATOR_VALIDATED
        assert (await again.model_loaded("v2")).reason is shadow.Reason.UNVALIDATED
        assert again.note_for("v1") is None
        assert again.note_for("v2") is not None
        history: list[dict[str, Any]] = await again.history()
        assert [(h["version"], h["reason"]) for h in history] == [
            ("v2", "unvalidated"),
            ("v1", "operator-validated"),
            ("v1", "unvalidated"),
        ]


async def test_the_operator_endpoints_need_credentials_and_say_what_they_did(
    tmp_path: Path, aiohttp_client: Any
) -> None:
    given = {"mode": "bearer", "token": "t0ken", "operator": {"token": "op-t0ken"}}
    settings = load_settings(auth=given, inbox={"path": tmp_path / "i.db"})
    client = await aiohttp_client(build_app(settings))
    auth = {"Authorization": "Bearer op-t0ken"}
    assert (await client.post("/api/v1/model/validate", json={"force": True})).status == 401
    assert (await client.post("/api/v1/model/shadow", json={})).status == 401
    # The webhook's token is known, and may post alerts only.
    webhook = {"Authorization": "Bearer t0ken"}
    assert (await client.post("/api/v1/model/validate", json={"force": True}, headers=webhook)).status == 403

    # No Prometheus: only the operator's word can validate.
    refused = await client.post("/api/v1/model/validate", json={}, headers=auth)
    assert refused.status == 409
    assert (await refused.json())["error"] == "no_backtest"
    done = await client.post(
        "/api/v1/model/validate", json={"version": "v7", "force": True, "who": "ops"}, headers=auth
    )
    view = await done.json()
    assert (view["version"], view["mode"], view["reason"], view["by"]) == (
        "v7",
        "acting",
        "operator-validated",
        "operator:ops",
    )
    back = await (await client.post("/api/v1/model/shadow", json={"version": "v7"}, headers=auth)).json()
    assert (back["mode"], back["reason"], back["held"]) == ("shadow", "operator", True)
    bad = await client.post(
        "/api/v1/model/shadow", data=b"[1]", headers={**auth, "Content-Type": "application/json"}
    )
    assert bad.status == 400
