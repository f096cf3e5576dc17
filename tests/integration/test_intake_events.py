"""Agent events and the intake's answers over real HTTP: a re-posted event is a duplicate, not a second
fault; a follower, a closed inbox or a wrong content type get the status a sender can act on."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from app.config.settings import Settings, load_settings
from app.service.runtime import SERVICES, build_app
from tests.payloads import alert, webhook

TOKEN = "s3cret-token"
AGENT_TOKEN = "agent-s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
# Relative to now (the intake refuses a time before 2000 or more than a day ahead), and one value for the
# module: an event's identity includes its time, so a resend must carry the same one.
OCCURRED = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
AGENT = {"Authorization": f"Bearer {AGENT_TOKEN}", "Content-Type": "application/json"}


def make_settings(tmp_path: Path) -> Settings:
    # Agents post with a credential of their own (a static one: no cluster to review tokens here).
    return load_settings(
        auth={"mode": "bearer", "token": TOKEN, "agents": {"mode": "token", "token": AGENT_TOKEN}},
        inbox={"path": tmp_path / "inbox.db"},
    )


@pytest.fixture
async def client(tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]) -> TestClient[Any, Any]:
    return await aiohttp_client(build_app(make_settings(tmp_path)))


def gpu_event(event_id: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": event_id,
        "node": "gpu-node-1",
        "gpu": 3,
        "kind": "xid",
        "xid": 79,
        "occurred_at": OCCURRED,
    }
    return {**base, **fields}


async def post_events(client: TestClient[Any, Any], *events: Any) -> tuple[int, dict[str, Any]]:
    body = {"version": "1", "agent": "gpu-node-1", "events": list(events)}
    response = await client.post("/api/v1/gpu-events", data=json.dumps(body), headers=AGENT)
    return response.status, await response.json()


async def metric(client: TestClient[Any, Any], line: str) -> bool:
    return line in await (await client.get("/metrics")).text()


async def stored(client: TestClient[Any, Any]) -> int:
    inbox = client.app[SERVICES].inbox
    assert inbox is not None
    return sum((await inbox.counts()).values())


async def test_the_same_agent_event_posted_twice_is_stored_once(client: TestClient[Any, Any]) -> None:
    """The agent re-sends a batch it got no answer for: the event's id makes the resend a duplicate."""
    assert await post_events(client, gpu_event("e1")) == (
        200,
        {"accepted": 1, "duplicates": 0, "rejected": 0},
    )
    assert await post_events(client, gpu_event("e1"), gpu_event("e2")) == (
        200,
        {"accepted": 1, "duplicates": 1, "rejected": 0},
    )
    assert await post_events(client, gpu_event("e3"), gpu_event("e3")) == (
        200,
        {"accepted": 1, "duplicates": 1, "rejected": 0},
    )
    assert await stored(client) == 3
    assert await metric(client, 'sickbay_alerts_received_total{source="agent"} 3.0')
    assert await metric(client, 'sickbay_alerts_duplicate_total{source="agent"} 2.0')


async def test_a_follower_answers_503_so_the_sender_retries(client: TestClient[Any, Any]) -> None:
    client.app[SERVICES].leader = False
    status, got = await post_events(client, gpu_event("e1"))
    assert (status, got["error"]) == (503, "not_leader")
    response = await client.post("/api/v1/alerts", data=json.dumps(webhook(alert())), headers=AUTH)
    assert response.status == 503
    assert await stored(client) == 0


async def test_a_closed_inbox_answers_503_and_keeps_no_refusal(client: TestClient[Any, Any]) -> None:
    inbox = client.app[SERVICES].inbox
    assert inbox is not None
    await inbox.close()
    status, got = await post_events(client, gpu_event("e1"), gpu_event("bad", gpu=-1))
    assert status == 503
    assert got["error"] == "unavailable"
    assert got["message"] == "inbox is not accepting writes; retry"
    items = (await (await client.get("/api/v1/rejected")).json())["items"]
    assert items == []


async def test_json_is_the_only_content_type_a_post_takes(client: TestClient[Any, Any]) -> None:
    """`text/plain` is what a cross-site form or `fetch` may send without a preflight: refused (415)."""
    body = {"version": "1", "agent": "gpu-node-1", "events": [gpu_event("e1")]}
    for ctype, status in [("application/json", 200), ("text/plain", 415), ("application/octet-stream", 415)]:
        response = await client.post(
            "/api/v1/gpu-events", data=json.dumps(body), headers={**AGENT, "Content-Type": ctype}
        )
        assert response.status == status, ctype


async def test_another_content_type_is_415_naming_it(client: TestClient[Any, Any]) -> None:
    response = await client.post(
        "/api/v1/gpu-events", data="<x/>", headers={**AGENT, "Content-Type": "application/xml"}
    )
    assert response.status == 415
    got = await response.json()
    assert got["error"] == "unsupported_media_type"
    assert "application/xml" in got["message"]


async def test_a_missing_token_is_401_with_the_challenge(client: TestClient[Any, Any]) -> None:
    response = await client.post(
        "/api/v1/gpu-events", data="{}", headers={"Content-Type": "application/json"}
    )
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="sickbay"'
    assert (await response.json())["error"] == "unauthorized"
    assert await metric(client, 'sickbay_requests_rejected_total{reason="unauthorized",source="agent"} 1.0')


async def test_an_answer_names_at_most_twenty_refusals_and_keeps_them_all(
    client: TestClient[Any, Any],
) -> None:
    bad = [gpu_event(f"b{i}", gpu=4096) for i in range(25)]
    status, got = await post_events(client, gpu_event("ok"), *bad)
    assert status == 200
    assert got["rejected"] == 25
    assert len(got["rejections"]) == 20
    assert got["rejections"][0] == {
        "loc": "events.1.gpu",
        "reason": "invalid_schema",
        "msg": got["rejections"][0]["msg"],
    }
    assert "1023" in got["rejections"][0]["msg"]
    items = (await (await client.get("/api/v1/rejected?limit=100")).json())["items"]
    assert len(items) == 25


async def test_an_all_refused_body_says_how_many_and_the_first(client: TestClient[Any, Any]) -> None:
    status, got = await post_events(client, gpu_event("b1", node="../x"), gpu_event("b2", node="../y"))
    assert status == 422
    assert got["error"] == "no_valid_events"
    assert got["message"].startswith("no valid events in the body (2 refused); events.0.node: ")
    assert await metric(
        client, 'sickbay_requests_rejected_total{reason="no_valid_events",source="agent"} 1.0'
    )


async def test_each_new_unattributed_alert_is_counted_and_logged_whole(
    client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    named = alert(fingerprint="named")
    first = alert(fingerprint="nobody-1", node="", alertname="GpuHot")
    second = alert(fingerprint="nobody-2", node="")
    del second["labels"]["alertname"]
    with caplog.at_level("WARNING", logger="app.ingest.handlers"):
        response = await client.post(
            "/api/v1/alerts", data=json.dumps(webhook(named, first, second)), headers=AUTH
        )
    assert response.status == 200
    assert await metric(client, "sickbay_alerts_unattributed_total 2.0")
    warnings = [r.getMessage() for r in caplog.records if "names no node" in r.getMessage()]
    keys = ", ".join(make_settings(Path("unused")).node_label_keys)
    assert warnings == [
        f"alert 'GpuHot' (firing, fingerprint nobody-1) names no node: none of the labels {keys} is set; it is "
        "recorded as unattributed and no node will be acted on",
        f"alert 'unnamed' (firing, fingerprint nobody-2) names no node: none of the labels {keys} is set; it is "
        "recorded as unattributed and no node will be acted on",
    ]


async def test_only_a_401_carries_the_challenge(client: TestClient[Any, Any]) -> None:
    response = await client.post(
        "/api/v1/gpu-events", data="<x/>", headers={**AGENT, "Content-Type": "application/xml"}
    )
    assert response.status == 415
    assert "WWW-Authenticate" not in response.headers


async def test_refusals_are_logged_once_per_request_with_the_first(
    client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="app.ingest.handlers"):
        await post_events(client, gpu_event("ok"), gpu_event("b1", node="../x"), gpu_event("b2", gpu=-1))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused")]
    assert len(lines) == 1
    assert lines[0].startswith(
        "refused 2 of 3 events (kept in GET /api/v1/rejected); first at 'events.1.node' (invalid_event): "
    )
