"""The webhook over real HTTP: accepted payloads land once; every kind of bad input is a 4xx that changes nothing."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from app.config.settings import Settings, load_settings
from app.runtime import SERVICES, build_app
from tests.payloads import alert, webhook

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    return load_settings(
        auth={"mode": "bearer", "token": TOKEN}, inbox={"path": tmp_path / "inbox.db"}, **overrides
    )


@pytest.fixture
async def client(tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]) -> TestClient[Any, Any]:
    return await aiohttp_client(build_app(make_settings(tmp_path)))


async def rows(client: TestClient[Any, Any]) -> int:
    inbox = client.app[SERVICES].inbox
    assert inbox is not None
    return sum((await inbox.counts()).values())


async def post(client: TestClient[Any, Any], body: bytes | str, **headers: str) -> tuple[int, dict[str, Any]]:
    data = body.encode() if isinstance(body, str) else body
    response = await client.post(
        "/api/v1/alerts", data=data, headers={"Content-Type": "application/json", **AUTH, **headers}
    )
    return response.status, await response.json()


async def test_accepts_and_deduplicates(client: TestClient[Any, Any]) -> None:
    payload = json.dumps(webhook(alert(fingerprint="f1"), alert(fingerprint="f2", node="gpu-node-2")))
    assert await post(client, payload) == (200, {"accepted": 2, "duplicates": 0})
    assert await post(client, payload) == (200, {"accepted": 0, "duplicates": 2})
    # Same alert, resolved: a different notification, so a new row. endsAt never takes part in the key.
    resolved = json.dumps(webhook(alert(fingerprint="f1", status="resolved"), status="resolved"))
    assert await post(client, resolved) == (200, {"accepted": 1, "duplicates": 0})
    assert await rows(client) == 3


async def test_each_alert_status_counts_not_the_groups(client: TestClient[Any, Any], tmp_path: Path) -> None:
    body = webhook(alert(fingerprint="f1"), alert(fingerprint="f2", status="resolved"), status="firing")
    assert (await post(client, json.dumps(body)))[0] == 200
    with sqlite3.connect(tmp_path / "inbox.db") as db:
        stored = dict(db.execute("SELECT fingerprint, status FROM inbox").fetchall())
    assert stored == {"f1": "firing", "f2": "resolved"}


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BAD_INPUTS: list[tuple[str, bytes, dict[str, str], int, str]] = [
    ("malformed JSON", b'{"version": "4", ', {}, 400, "malformed_json"),
    ("empty body", b"", {}, 400, "empty_body"),
    ("not UTF-8", b'{"version": "\xff"}', {}, 400, "bad_encoding"),
    ("top-level array", b"[]", {}, 422, "invalid_payload"),
    ("wrong version", json.dumps({**webhook(), "version": "3"}).encode(), {}, 422, "invalid_payload"),
    (
        "missing alerts",
        json.dumps({k: v for k, v in webhook().items() if k != "alerts"}).encode(),
        {},
        422,
        "invalid_payload",
    ),
    (
        "missing fingerprint",
        json.dumps(webhook({k: v for k, v in alert().items() if k != "fingerprint"})).encode(),
        {},
        422,
        "invalid_payload",
    ),
    (
        "label value not a string",
        json.dumps(webhook({**alert(), "labels": {"node": 7}})).encode(),
        {},
        422,
        "invalid_payload",
    ),
    (
        "bad alert status",
        json.dumps(webhook({**alert(), "status": "exploded"})).encode(),
        {},
        422,
        "invalid_payload",
    ),
    (
        "bad startsAt",
        json.dumps(webhook({**alert(), "startsAt": "yesterday"})).encode(),
        {},
        422,
        "invalid_payload",
    ),
    ("deep nesting", ('{"version": "4", "x": ' + _nested(1000) + "}").encode(), {}, 400, "too_deep"),
    ("absurd nesting", ("[" * 100_000 + "]" * 100_000).encode(), {}, 400, "too_deep"),
    ("node ../x", json.dumps(webhook(alert(node="../x"))).encode(), {}, 422, "invalid_alert"),
    ("node of 300 characters", json.dumps(webhook(alert(node="a" * 300))).encode(), {}, 422, "invalid_alert"),
    (
        "node with control bytes",
        json.dumps(webhook(alert(node="gpu\x00node\x1b[31m"))).encode(),
        {},
        422,
        "invalid_alert",
    ),
    ("uppercase node", json.dumps(webhook(alert(node="GPU-NODE"))).encode(), {}, 422, "invalid_alert"),
    ("XID not an integer", json.dumps(webhook(alert(xid="seventy-nine"))).encode(), {}, 422, "invalid_alert"),
    ("XID a float", json.dumps(webhook(alert(xid="79.5"))).encode(), {}, 422, "invalid_alert"),
    ("XID negative", json.dumps(webhook(alert(xid="-79"))).encode(), {}, 422, "invalid_alert"),
    ("GPU not an integer", json.dumps(webhook(alert(gpu="three"))).encode(), {}, 422, "invalid_alert"),
    (
        "bad fingerprint",
        json.dumps(webhook(alert(fingerprint="<script>"))).encode(),
        {},
        422,
        "invalid_payload",
    ),
    (
        "wrong content type",
        json.dumps(webhook()).encode(),
        {"Content-Type": "application/x-www-form-urlencoded"},
        415,
        "unsupported_media_type",
    ),
    ("no credentials", json.dumps(webhook()).encode(), {"Authorization": ""}, 401, "unauthorized"),
    ("wrong token", json.dumps(webhook()).encode(), {"Authorization": "Bearer nope"}, 401, "unauthorized"),
    (
        "basic instead of bearer",
        json.dumps(webhook()).encode(),
        {"Authorization": "Basic dTpw"},
        401,
        "unauthorized",
    ),
]


@pytest.mark.parametrize(
    ("case", "body", "headers", "status", "error"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS]
)
async def test_bad_input_is_a_4xx_that_changes_nothing(
    client: TestClient[Any, Any], case: str, body: bytes, headers: dict[str, str], status: int, error: str
) -> None:
    before = await rows(client)
    got_status, got = await post(client, body, **headers)
    assert (got_status, got["error"]) == (status, error), got
    assert got["message"]
    assert await rows(client) == before


async def test_unknown_fields_are_ignored_even_nested(client: TestClient[Any, Any]) -> None:
    """A newer Alertmanager may add fields: they are ignored, however they nest (within the parser's cap)."""
    body = {**webhook(alert(fingerprint="new1")), "futureField": json.loads(_nested(50))}
    assert await post(client, json.dumps(body)) == (200, {"accepted": 1, "duplicates": 0})


async def test_one_bad_alert_rejects_the_whole_request(client: TestClient[Any, Any]) -> None:
    body = json.dumps(webhook(alert(fingerprint="good"), alert(fingerprint="bad", node="../etc")))
    status, got = await post(client, body)
    assert status == 422
    assert got["details"][0]["loc"] == "alerts.1.labels.node"
    assert await rows(client) == 0


async def test_oversized_body_is_413_before_it_is_read(client: TestClient[Any, Any]) -> None:
    big = json.dumps(webhook(*[alert(fingerprint=f"f{i}", summary="x" * 2000) for i in range(600)]))
    assert len(big) > 1024 * 1024
    status, got = await post(client, big)
    assert (status, got["error"]) == (413, "body_too_large")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit is enforced while streaming
        for _ in range(40):
            yield b" " * 65536

    response = await client.post(
        "/api/v1/alerts", data=chunks(), headers={**AUTH, "Content-Type": "application/json"}
    )
    assert response.status == 413
    assert await rows(client) == 0


async def test_basic_auth(tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]) -> None:
    settings = load_settings(
        auth={"mode": "basic", "username": "am", "password": "pw"}, inbox={"path": tmp_path / "b.db"}
    )
    client = await aiohttp_client(build_app(settings))
    body = json.dumps(webhook()).encode()
    ok = await client.post("/api/v1/alerts", data=body, headers={"Authorization": "Basic YW06cHc="})
    assert ok.status == 200
    wrong = await client.post("/api/v1/alerts", data=body, headers={"Authorization": "Basic YW06eHg="})
    assert wrong.status == 401


async def test_health_ready_and_metrics(client: TestClient[Any, Any]) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    await post(client, json.dumps(webhook(alert(fingerprint="m1"))))
    await post(client, b"{", **{})
    text = await (await client.get("/metrics")).text()
    assert 'sickbay_alerts_received_total{source="alertmanager"} 1.0' in text
    assert 'sickbay_alerts_rejected_total{reason="malformed_json",source="alertmanager"} 1.0' in text
    assert "sickbay_inbox_depth" in text
    assert "sickbay_http_request_duration_seconds_bucket" in text


async def test_processed_rows_reach_the_journal(client: TestClient[Any, Any]) -> None:
    await post(
        client,
        json.dumps(
            webhook(
                alert(fingerprint="j1", xid="79"), alert(fingerprint="j2", xid="13", pod="p", namespace="n")
            )
        ),
    )
    pipeline = client.app[SERVICES].pipeline
    assert pipeline is not None
    await pipeline.drain_once()
    response = await client.get("/api/v1/actions")
    items = (await response.json())["items"]
    classes = {item["xid"]: item["class"] for item in items}
    assert classes == {79: "reboot-node", 13: "restart-workload"}
