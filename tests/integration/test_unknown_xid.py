"""An XID the catalog does not list is classified by policy and never silently: through the real intake and
pipeline, each such fault carries rule `xid-unknown` and a reason naming the XID, counts in
`sickbay_unknown_xids_total{xid}`, and is logged as a warning once per node and XID."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from app.config.settings import load_settings
from app.service.runtime import SERVICES, build_app
from tests.payloads import alert, webhook

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
UNKNOWN_XID = "250"  # above the last XID NVIDIA's catalog documents (172)


def _recent(minutes: int) -> str:
    return (datetime.now(UTC) - timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


@pytest.fixture
async def client(tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]) -> TestClient[Any, Any]:
    settings = load_settings(auth={"mode": "bearer", "token": TOKEN}, inbox={"path": tmp_path / "inbox.db"})
    return await aiohttp_client(build_app(settings))


async def _deliver(client: TestClient[Any, Any], *alerts: dict[str, Any]) -> None:
    response = await client.post("/api/v1/alerts", data=json.dumps(webhook(*alerts)), headers=AUTH)
    assert response.status == 200, await response.text()
    pipeline = client.app[SERVICES].pipeline
    assert pipeline is not None
    await pipeline.drain_once()


def _unknown_xid_alert(fingerprint: str, *, node: str, minutes_ago: int, **labels: str) -> dict[str, Any]:
    return alert(
        fingerprint=fingerprint,
        starts_at=_recent(minutes_ago),
        node=node,
        xid=UNKNOWN_XID,
        alertname="GpuXidUnclassified",
        sickbay_class="transient",
        **labels,
    )


async def test_unknown_xid_is_classified_by_policy_counted_and_warned_once_per_node(
    client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="app.service.pipeline")
    await _deliver(
        client,
        _unknown_xid_alert("u1", node="gpu-node-1", minutes_ago=3),
        _unknown_xid_alert("u2", node="gpu-node-1", minutes_ago=2, gpu="5"),
        _unknown_xid_alert("u3", node="gpu-node-2", minutes_ago=1),
        # A catalogued XID on the same node is neither counted nor warned about.
        alert(fingerprint="k1", starts_at=_recent(1), node="gpu-node-1", xid="79"),
    )

    items = (await (await client.get("/api/v1/actions", headers=AUTH)).json())["items"]
    unknown = [item for item in items if item["xid"] == int(UNKNOWN_XID)]
    assert len(unknown) == 3
    for item in unknown:
        assert item["rule"] == "xid-unknown"
        assert item["class"] == "transient"  # the shipped classification.unknown_xid
        assert f"XID {UNKNOWN_XID} is not in the catalog" in item["reason"]
        assert "classification.unknown_xid" in item["reason"]
    (known,) = [item for item in items if item["xid"] == 79]
    assert known["rule"] == "xid"

    metrics = await (await client.get("/metrics")).text()
    assert f'sickbay_unknown_xids_total{{xid="{UNKNOWN_XID}"}} 3.0' in metrics
    assert 'sickbay_unknown_xids_total{xid="79"}' not in metrics

    warnings = [r.getMessage() for r in caplog.records if "is not in the XID catalog" in r.getMessage()]
    assert len(warnings) == 2, warnings  # one per node, though gpu-node-1 reported it twice
    assert any("on node gpu-node-1" in w for w in warnings)
    assert any("on node gpu-node-2" in w for w in warnings)
    assert all("add it" in w and "xid_catalog_file" in w for w in warnings)


async def test_a_resolved_unknown_xid_is_not_counted_again(
    client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="app.service.pipeline")
    firing = _unknown_xid_alert("r1", node="gpu-node-3", minutes_ago=5)
    await _deliver(client, firing)
    await _deliver(client, {**firing, "status": "resolved", "endsAt": _recent(1)})
    metrics = await (await client.get("/metrics")).text()
    assert f'sickbay_unknown_xids_total{{xid="{UNKNOWN_XID}"}} 1.0' in metrics
    assert sum("is not in the XID catalog" in r.getMessage() for r in caplog.records) == 1
