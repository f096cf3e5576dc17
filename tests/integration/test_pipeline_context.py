"""Classification context through the real intake and pipeline: a signal sees the ones journaled before it
on its GPU, whether they were processed in an earlier drain or earlier in the same one (the pipeline keeps
recent signals per GPU in memory, loaded from the journal once)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from app.config.settings import load_settings
from app.service.runtime import SERVICES, build_app
from tests.payloads import alert, webhook

JSON = {"Content-Type": "application/json"}


def _ago(minutes: int) -> str:
    return (datetime.now(UTC) - timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


@pytest.fixture
async def client(tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]) -> TestClient[Any, Any]:
    settings = load_settings(auth={"mode": "none"}, inbox={"path": tmp_path / "inbox.db"})
    return cast(TestClient[Any, Any], await aiohttp_client(build_app(settings)))


async def _deliver(client: TestClient[Any, Any], *alerts: dict[str, Any]) -> None:
    response = await client.post("/api/v1/alerts", data=json.dumps(webhook(*alerts)), headers=JSON)
    assert response.status == 200, await response.text()
    pipeline = client.app[SERVICES].pipeline
    assert pipeline is not None
    await pipeline.drain_once()


def _xid(fingerprint: str, xid: str, *, minutes_ago: int, gpu: str = "3") -> dict[str, Any]:
    return alert(
        fingerprint=fingerprint,
        starts_at=_ago(minutes_ago),
        node="gpu-node-1",
        gpu=gpu,
        xid=xid,
        alertname="GpuXid",
        sickbay_class="depends" if xid == "45" else "restart-workload",
    )


async def _class_of(client: TestClient[Any, Any], xid: int) -> str:
    items = (await (await client.get("/api/v1/actions")).json())["items"]
    (item,) = [i for i in items if i["xid"] == xid]
    return str(item["class"])


async def test_a_signal_in_a_later_drain_sees_the_earlier_one_on_its_gpu(
    client: TestClient[Any, Any],
) -> None:
    await _deliver(client, _xid("app", "13", minutes_ago=2))
    # XID 45 alone is cleanup (ignore); beside XID 13 on the same GPU it takes 13's class.
    await _deliver(client, _xid("cleanup", "45", minutes_ago=1))
    assert await _class_of(client, 45) == "restart-workload"


async def test_a_signal_later_in_the_same_drain_sees_the_earlier_one(client: TestClient[Any, Any]) -> None:
    await _deliver(client, _xid("app", "13", minutes_ago=2), _xid("cleanup", "45", minutes_ago=1))
    assert await _class_of(client, 45) == "restart-workload"


async def test_another_gpus_signal_is_no_context(client: TestClient[Any, Any]) -> None:
    await _deliver(client, _xid("app", "13", minutes_ago=2, gpu="1"))
    await _deliver(client, _xid("cleanup", "45", minutes_ago=1, gpu="2"))
    assert await _class_of(client, 45) == "ignore"  # alone on its GPU: cleanup after an aborted job
