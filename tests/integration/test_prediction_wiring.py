"""The service with a deliberately corrupted model file starts, says so, and keeps remediating from alerts."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from app.config.settings import RULES_DIR, load_settings
from app.service.runtime import SERVICES, build_app
from tests.payloads import alert, webhook

MODELS = RULES_DIR.parent / "models"


def _corrupt_copy(tmp_path: Path) -> Path:
    models = tmp_path / "models"
    shutil.copytree(MODELS, models)
    current = json.loads((models / "CURRENT.json").read_text())["current"]
    target = models / current / "model.skops"
    data = bytearray(target.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\x00" * 64
    target.write_bytes(bytes(data))
    return models


async def test_corrupted_model_starts_rules_only_and_keeps_remediating(
    tmp_path: Path, aiohttp_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings(
        auth={"mode": "none"},
        inbox={"path": tmp_path / "inbox.db"},
        prediction={"enabled": True, "models_dir": _corrupt_copy(tmp_path)},
    )
    with caplog.at_level(logging.ERROR):
        client = await aiohttp_client(build_app(settings))
        await client.app[SERVICES].prediction_started()
        scoring = client.app[SERVICES].scoring
        assert scoring is not None
        await scoring.loaded()
    assert any("rules-only" in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]
    app: web.Application = client.app
    assert scoring.service.model is None
    metrics = await (await client.get("/metrics")).text()
    assert "sickbay_predict_model_loaded 0.0" in metrics
    response = await client.post("/api/v1/alerts", json=webhook(alert(fingerprint="c1", xid="79")))
    assert response.status == 200
    pipeline = app[SERVICES].pipeline
    assert pipeline is not None
    await pipeline.drain_once()
    items = (await (await client.get("/api/v1/actions")).json())["items"]
    assert [i["class"] for i in items] == ["reboot-node"]


async def test_the_shipped_model_loads_in_the_service(tmp_path: Path, aiohttp_client: Any) -> None:
    settings = load_settings(
        auth={"mode": "none"}, inbox={"path": tmp_path / "inbox.db"}, prediction={"enabled": True}
    )
    client = await aiohttp_client(build_app(settings))
    await client.app[SERVICES].prediction_started()
    scoring = client.app[SERVICES].scoring
    assert scoring is not None
    await scoring.loaded()
    assert scoring.service.model is not None
    text = await (await client.get("/metrics")).text()
    assert "sickbay_predict_model_loaded 1.0" in text
    assert f'sickbay_model_info{{version="{scoring.service.model.card.version}"}} 1.0' in text
    # The gauge carries the card's holdout precision, whatever the shipped model's is.
    precision = float(scoring.service.model.card.metrics["holdout"]["precision"])
    (line,) = [x for x in text.splitlines() if x.startswith("sickbay_model_precision ")]
    assert float(line.split()[1]) == pytest.approx(precision)
    assert 0.0 < precision <= 1.0
