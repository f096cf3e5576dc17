"""The shipped default model in the service, on a fleet it was never validated on: it loads, it scores,
and the proactive ladder starts in shadow — every at-risk plan is journaled with what it would have
done, and nothing acts. Written against whatever models/CURRENT.json names."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from app.config.settings import RULES_DIR, load_settings
from app.decide import shadow
from app.predict import dataset
from app.service.runtime import SERVICES, build_app
from tests.predict.conftest import SHIPPED_MODELS

NODES = 4


async def test_the_shipped_model_loads_scores_and_starts_in_shadow(
    tmp_path: Path, aiohttp_client: Any, heldout_dataset: Path
) -> None:
    current = json.loads((SHIPPED_MODELS / "CURRENT.json").read_text())["current"]
    nodes = [f"gpu-node-{i:03d}" for i in range(NODES)]
    end = dataset.read_truth(heldout_dataset).end
    # The last day is enough to score (longer windows read as missing), and keeps this test fast.
    recent = pd.read_parquet(
        dataset.timeseries_path(heldout_dataset),
        filters=[("node", "in", nodes), ("timestamp", ">", end - 86400.0)],
    )
    # Thresholds low enough that some node is flagged whatever the model scores it.
    policy = yaml.safe_load((RULES_DIR / "policy.yaml").read_text())
    policy["prediction"] |= {"warn": 1e-6, "act": 2e-6}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    settings = load_settings(
        auth={"mode": "none"},
        inbox={"path": tmp_path / "inbox.db"},
        policy_file=tmp_path / "policy.yaml",
        prediction={"enabled": True, "models_dir": SHIPPED_MODELS},
    )
    client = await aiohttp_client(build_app(settings, clock=lambda: datetime.fromtimestamp(end, UTC)))
    services = client.app[SERVICES]
    await services.prediction_started()
    scoring, keeper, pipeline = services.scoring, services.shadow, services.pipeline
    assert scoring is not None
    assert keeper is not None
    assert pipeline is not None
    await scoring.loaded()
    assert scoring.service.model is not None
    assert scoring.service.model.card.version == current

    standing = keeper.standing()
    assert (standing.version, standing.reason) == (current, shadow.Reason.UNVALIDATED)
    metrics = await (await client.get("/metrics")).text()
    assert 'sickbay_predict_shadow{reason="unvalidated"} 1.0' in metrics

    # The raw path, fed from the held-out fleet's last day instead of a Prometheus.
    scoring.service.read_features = None
    scoring.service.read_recent = lambda now: pd.DataFrame(recent)
    await scoring.score_once()
    assert scoring.last is not None
    assert scoring.last.scores is not None
    assert len(scoring.last.scores.nodes) == NODES
    await pipeline.drain_once()
    items = (await (await client.get("/api/v1/actions")).json())["items"]
    at_risk = [i for i in items if i["class"] == "at-risk"]
    assert at_risk, "the low thresholds flag some node"
    for item in at_risk:
        assert item["plan"]["summary"].startswith("shadow: would taint "), item["plan"]["summary"]
        assert [a["kind"] for a in item["plan"]["actions"]] == ["record"]
        assert item["plan"]["shadowed"][0]["kind"] == "taint-at-risk"
