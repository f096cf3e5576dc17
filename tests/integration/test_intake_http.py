"""The webhook over real HTTP: accepted payloads land once; a body invalid as a whole is a 4xx that changes
nothing; each invalid alert or agent event is refused alone, kept in the dead-letter list with its reason,
and never costs the valid ones of its body."""

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
from app.service.runtime import SERVICES, build_app
from app.store import deadletter
from tests.payloads import alert, webhook

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}
# Each caller its own credential (issue 16): the agents' static token (no cluster here) and the operators'.
AGENT_TOKEN = "agent-token"
OPERATOR_TOKEN = "operator-token"
AGENT = {"Authorization": f"Bearer {AGENT_TOKEN}"}
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    fields: dict[str, Any] = {
        "auth": {
            "mode": "bearer",
            "token": TOKEN,
            "agents": {"mode": "token", "token": AGENT_TOKEN},
            "operator": {"token": OPERATOR_TOKEN},
        },
        "inbox": {"path": tmp_path / "inbox.db"},
    }
    return load_settings(**{**fields, **overrides})


@pytest.fixture
async def client(tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]) -> TestClient[Any, Any]:
    return await aiohttp_client(build_app(make_settings(tmp_path)))


async def rows(client: TestClient[Any, Any]) -> int:
    inbox = client.app[SERVICES].inbox
    assert inbox is not None
    return sum((await inbox.counts()).values())


async def dead_letters(client: TestClient[Any, Any]) -> list[dict[str, Any]]:
    response = await client.get("/api/v1/rejected")
    assert response.status == 200
    return list((await response.json())["items"])


async def post(client: TestClient[Any, Any], body: bytes | str, **headers: str) -> tuple[int, dict[str, Any]]:
    data = body.encode() if isinstance(body, str) else body
    response = await client.post(
        "/api/v1/alerts", data=data, headers={"Content-Type": "application/json", **AUTH, **headers}
    )
    return response.status, await response.json()


async def test_accepts_and_deduplicates(client: TestClient[Any, Any]) -> None:
    payload = json.dumps(webhook(alert(fingerprint="f1"), alert(fingerprint="f2", node="gpu-node-2")))
    assert await post(client, payload) == (200, {"accepted": 2, "duplicates": 0, "rejected": 0})
    assert await post(client, payload) == (200, {"accepted": 0, "duplicates": 2, "rejected": 0})
    # Same alert, resolved: a different notification, so a new row. endsAt never takes part in the key.
    resolved = json.dumps(webhook(alert(fingerprint="f1", status="resolved"), status="resolved"))
    assert await post(client, resolved) == (200, {"accepted": 1, "duplicates": 0, "rejected": 0})
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
        "alerts not a list",
        json.dumps({**webhook(), "alerts": {"0": alert()}}).encode(),
        {},
        422,
        "invalid_payload",
    ),
    ("deep nesting", ('{"version": "4", "x": ' + _nested(1000) + "}").encode(), {}, 400, "too_deep"),
    ("absurd nesting", ("[" * 100_000 + "]" * 100_000).encode(), {}, 400, "too_deep"),
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
async def test_a_body_invalid_as_a_whole_is_a_4xx_that_changes_nothing(
    client: TestClient[Any, Any], case: str, body: bytes, headers: dict[str, str], status: int, error: str
) -> None:
    before = await rows(client)
    got_status, got = await post(client, body, **headers)
    assert (got_status, got["error"]) == (status, error), got
    assert got["message"]
    assert await rows(client) == before
    assert await dead_letters(client) == [], "nothing of a body unreadable as a whole is kept"


@pytest.mark.parametrize(
    ("headers", "status", "problem"),
    [
        ({}, 401, "missing Authorization header: expected an operator's Bearer token"),
        ({"Authorization": "Bearer nope"}, 401, "bad token"),
        (AUTH, 403, "the webhook's credentials may post alerts only, not update breakers.sickbay.io"),
        (AGENT, 403, "the agent's credential may not update breakers.sickbay.io"),
    ],
)
async def test_resetting_the_breaker_needs_an_operators_credentials(
    client: TestClient[Any, Any], headers: dict[str, str], status: int, problem: str
) -> None:
    """The webhook's token (or an agent's) cannot reset the breaker (issue 16): only an operator's can."""
    response = await client.post("/api/v1/breaker/reset", headers={**headers, **JSON})
    assert response.status == status
    assert response.content_type == "application/json"
    error = "unauthorized" if status == 401 else "forbidden"
    assert await response.json() == {"error": error, "message": problem}
    allowed = await client.post("/api/v1/breaker/reset", headers={**OPERATOR, **JSON})
    assert allowed.status == 404, "past the credentials: no cluster configured here"


async def test_unknown_fields_are_ignored_even_nested(client: TestClient[Any, Any]) -> None:
    """A newer Alertmanager may add fields: they are ignored, however they nest (within the parser's cap)."""
    body = {**webhook(alert(fingerprint="new1")), "futureField": json.loads(_nested(50))}
    assert await post(client, json.dumps(body)) == (200, {"accepted": 1, "duplicates": 0, "rejected": 0})


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
    ok = await client.post("/api/v1/alerts", data=body, headers={"Authorization": "Basic YW06cHc=", **JSON})
    assert ok.status == 200
    wrong = await client.post(
        "/api/v1/alerts", data=body, headers={"Authorization": "Basic YW06eHg=", **JSON}
    )
    assert wrong.status == 401


async def test_health_ready_and_metrics(client: TestClient[Any, Any]) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    await post(client, json.dumps(webhook(alert(fingerprint="m1"))))
    await post(client, b"{", **{})
    text = await (await client.get("/metrics")).text()
    assert 'sickbay_alerts_received_total{source="alertmanager"} 1.0' in text
    assert 'sickbay_requests_rejected_total{reason="malformed_json",source="alertmanager"} 1.0' in text
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


# --- per-alert admission -----------------------------------------------------------------------------


def _without(item: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != key}


# One invalid alert, and the reason it is refused for. Alone in a body, it makes the whole body a 422.
INVALID_ALERTS: list[tuple[str, Any, str, str]] = [
    (
        "status pending",
        {**alert(fingerprint="bad"), "status": "pending"},
        "invalid_schema",
        "alerts.0.status",
    ),
    ("labels missing", _without(alert(fingerprint="bad"), "labels"), "invalid_schema", "alerts.0.labels"),
    ("fingerprint missing", _without(alert(), "fingerprint"), "invalid_schema", "alerts.0.fingerprint"),
    ("bad fingerprint", alert(fingerprint="<script>"), "invalid_schema", "alerts.0.fingerprint"),
    (
        "label value not a string",
        {**alert(fingerprint="bad"), "labels": {"node": 7}},
        "invalid_schema",
        "alerts.0.labels.node",
    ),
    ("not an object", 42, "invalid_schema", "alerts.0"),
    (
        "startsAt a number",
        {**alert(fingerprint="bad"), "startsAt": 1764407643},
        "invalid_timestamp",
        "alerts.0.startsAt",
    ),
    (
        "startsAt a word",
        {**alert(fingerprint="bad"), "startsAt": "yesterday"},
        "invalid_timestamp",
        "alerts.0.startsAt",
    ),
    (
        "startsAt without an offset",
        {**alert(fingerprint="bad"), "startsAt": "2026-11-29T09:14:03"},
        "invalid_timestamp",
        "alerts.0.startsAt",
    ),
    ("endsAt a number", {**alert(fingerprint="bad"), "endsAt": 0}, "invalid_timestamp", "alerts.0.endsAt"),
    ("node ../x", alert(fingerprint="bad", node="../x"), "invalid_alert", "alerts.0.labels.node"),
    (
        "node of 300 characters",
        alert(fingerprint="bad", node="a" * 300),
        "invalid_alert",
        "alerts.0.labels.node",
    ),
    (
        "node with control bytes",
        alert(fingerprint="bad", node="gpu\x00node\x1b[31m"),
        "invalid_alert",
        "alerts.0.labels.node",
    ),
    ("uppercase node", alert(fingerprint="bad", node="GPU-NODE"), "invalid_alert", "alerts.0.labels.node"),
    (
        "XID not an integer",
        alert(fingerprint="bad", xid="seventy-nine"),
        "invalid_alert",
        "alerts.0.labels.xid",
    ),
    ("XID a float", alert(fingerprint="bad", xid="79.5"), "invalid_alert", "alerts.0.labels.xid"),
    ("XID negative", alert(fingerprint="bad", xid="-79"), "invalid_alert", "alerts.0.labels.xid"),
    ("GPU not an integer", alert(fingerprint="bad", gpu="three"), "invalid_alert", "alerts.0.labels.gpu"),
]
_IDS = [c[0] for c in INVALID_ALERTS]


@pytest.mark.parametrize(("case", "bad", "reason", "loc"), INVALID_ALERTS, ids=_IDS)
async def test_an_invalid_alert_alone_is_a_422_and_is_kept(
    client: TestClient[Any, Any], case: str, bad: Any, reason: str, loc: str
) -> None:
    status, got = await post(client, json.dumps(webhook(bad)))
    assert (status, got["error"]) == (422, "no_valid_alerts"), got
    assert got["details"] == [{"loc": loc, "reason": reason, "msg": got["details"][0]["msg"]}]
    assert got["details"][0]["msg"]
    assert loc in got["message"]
    assert await rows(client) == 0
    kept = await dead_letters(client)
    assert [(k["reason"], k["loc"], k["raw"]) for k in kept] == [(reason, loc, bad)]


@pytest.mark.parametrize(("case", "bad", "reason", "loc"), INVALID_ALERTS, ids=_IDS)
async def test_an_invalid_alert_among_valid_ones_costs_only_itself(
    client: TestClient[Any, Any], tmp_path: Path, case: str, bad: Any, reason: str, loc: str
) -> None:
    body = webhook(
        alert(fingerprint="ok1", node="gpu-node-1"), bad, alert(fingerprint="ok2", node="gpu-node-2")
    )
    status, got = await post(client, json.dumps(body))
    where = loc.replace("alerts.0", "alerts.1", 1)
    assert status == 200, got
    assert {k: got[k] for k in ("accepted", "duplicates", "rejected")} == {
        "accepted": 2,
        "duplicates": 0,
        "rejected": 1,
    }
    assert [(r["loc"], r["reason"]) for r in got["rejections"]] == [(where, reason)]
    with sqlite3.connect(tmp_path / "inbox.db") as db:
        stored = dict(db.execute("SELECT fingerprint, node FROM inbox").fetchall())
    assert stored == {"ok1": "gpu-node-1", "ok2": "gpu-node-2"}
    kept = await dead_letters(client)
    assert len(kept) == 1
    assert (kept[0]["source"], kept[0]["reason"], kept[0]["loc"], kept[0]["raw"]) == (
        "alertmanager",
        reason,
        where,
        bad,
    )
    assert kept[0]["labels"] == (bad.get("labels") if isinstance(bad, dict) else None), "raw labels, as sent"
    assert kept[0]["count"] == 1


async def test_every_alert_invalid_is_a_422_naming_each_and_keeping_each(
    client: TestClient[Any, Any],
) -> None:
    bad = [
        alert(fingerprint="b1", node="../etc"),
        {**alert(fingerprint="b2"), "startsAt": 1764407643.5},
        {**alert(fingerprint="b3"), "status": "pending"},
    ]
    status, got = await post(client, json.dumps(webhook(*bad)))
    assert (status, got["error"]) == (422, "no_valid_alerts")
    assert [(d["loc"], d["reason"]) for d in got["details"]] == [
        ("alerts.0.labels.node", "invalid_alert"),
        ("alerts.1.startsAt", "invalid_timestamp"),
        ("alerts.2.status", "invalid_schema"),
    ]
    assert await rows(client) == 0
    kept = await dead_letters(client)
    assert sorted(k["fingerprint"] for k in kept) == ["b1", "b2", "b3"]


async def test_an_empty_alert_list_is_not_an_error(client: TestClient[Any, Any]) -> None:
    body = {**webhook(), "alerts": []}
    assert await post(client, json.dumps(body)) == (200, {"accepted": 0, "duplicates": 0, "rejected": 0})


async def test_timestamps_keep_their_offset_and_precision(
    client: TestClient[Any, Any], tmp_path: Path
) -> None:
    """An offset is honoured (stored in UTC) and nanoseconds, as Go writes them, parse; no number slips in."""
    body = webhook(
        alert(fingerprint="tz", starts_at="2026-11-29T11:14:03.512345678+02:00"),
        alert(fingerprint="lower", starts_at="2026-11-29t09:14:03z"),
    )
    assert (await post(client, json.dumps(body)))[1]["accepted"] == 2
    with sqlite3.connect(tmp_path / "inbox.db") as db:
        stored = dict(db.execute("SELECT fingerprint, starts_at FROM inbox").fetchall())
    assert stored == {"tz": "2026-11-29T09:14:03.512345+00:00", "lower": "2026-11-29T09:14:03+00:00"}


async def test_resends_of_a_refused_alert_count_on_one_row(client: TestClient[Any, Any]) -> None:
    """Alertmanager re-sends the group every group_interval/repeat_interval: the list must not grow."""
    bad = alert(fingerprint="again", node="../x")
    for resend in range(3):
        body = webhook(alert(fingerprint="fine"), {**bad, "endsAt": f"2026-11-29T10:0{resend}:00Z"})
        status, got = await post(client, json.dumps(body))
        assert (status, got["rejected"]) == (200, 1)
    kept = await dead_letters(client)
    assert [(k["fingerprint"], k["count"]) for k in kept] == [("again", 3)]
    assert kept[0]["first_seen"] <= kept[0]["last_seen"]
    text = await (await client.get("/metrics")).text()
    assert 'sickbay_alerts_rejected_total{reason="invalid_alert",source="alertmanager"} 3.0' in text


async def test_the_list_keeps_the_newest_rows_only(
    tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]
) -> None:
    settings = make_settings(tmp_path, inbox={"path": tmp_path / "inbox.db", "dead_letter_rows": 3})
    client = await aiohttp_client(build_app(settings))
    for i in range(5):
        body = webhook(alert(fingerprint=f"ok{i}"), alert(fingerprint=f"bad{i}", xid="x"))
        assert (await post(client, json.dumps(body)))[0] == 200
    # A resend of an old one makes it the newest again, so it stays and the oldest other goes.
    await post(client, json.dumps(webhook(alert(fingerprint="ok9"), alert(fingerprint="bad2", xid="x"))))
    response = await client.get("/api/v1/rejected")
    listed = await response.json()
    assert [k["fingerprint"] for k in listed["items"]] == ["bad2", "bad4", "bad3"]
    assert (listed["total"], listed["max_rows"]) == (3, 3)
    assert await rows(client) == 6, "every valid alert was stored"


async def test_the_list_survives_a_restart(
    tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]
) -> None:
    first = await aiohttp_client(build_app(make_settings(tmp_path)))
    await post(first, json.dumps(webhook(alert(fingerprint="ok"), alert(fingerprint="lost", gpu="g"))))
    await first.close()
    second = await aiohttp_client(build_app(make_settings(tmp_path)))
    kept = await dead_letters(second)
    assert [(k["fingerprint"], k["reason"], k["loc"]) for k in kept] == [
        ("lost", "invalid_alert", "alerts.1.labels.gpu")
    ]


async def test_rejections_are_counted_by_reason(client: TestClient[Any, Any]) -> None:
    body = webhook(
        alert(fingerprint="ok"),
        alert(fingerprint="n", node="../x"),
        {**alert(fingerprint="t1"), "startsAt": 1},
        {**alert(fingerprint="t2"), "endsAt": "soon"},
        {**alert(fingerprint="s"), "status": "pending"},
    )
    assert (await post(client, json.dumps(body)))[1]["rejected"] == 4
    await post(client, b"{")
    text = await (await client.get("/metrics")).text()
    assert 'sickbay_alerts_rejected_total{reason="invalid_alert",source="alertmanager"} 1.0' in text
    assert 'sickbay_alerts_rejected_total{reason="invalid_timestamp",source="alertmanager"} 2.0' in text
    assert 'sickbay_alerts_rejected_total{reason="invalid_schema",source="alertmanager"} 1.0' in text
    assert 'sickbay_alerts_received_total{source="alertmanager"} 1.0' in text
    # A body unreadable as a whole is one refused request, not a refused alert.
    assert 'sickbay_requests_rejected_total{reason="malformed_json",source="alertmanager"} 1.0' in text
    assert 'sickbay_alerts_rejected_total{reason="malformed_json"' not in text


async def test_a_failing_dead_letter_list_answers_503_and_loses_nothing(
    client: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    letters = client.app[SERVICES].dead_letters
    assert letters is not None
    real_keep = letters.keep
    failures = [deadletter.DeadLetterError("disk I/O error")]

    async def keep(batch: Any, *, seen_at: Any) -> None:
        if failures:
            raise failures.pop()
        await real_keep(batch, seen_at=seen_at)

    monkeypatch.setattr(letters, "keep", keep)
    body = json.dumps(webhook(alert(fingerprint="good"), alert(fingerprint="bad", node="../x")))
    status, got = await post(client, body)
    assert (status, got["error"]) == (503, "unavailable")
    assert await rows(client) == 1, "the valid alert is committed before the list is written"
    # Alertmanager retries the 503: the valid alert is a duplicate now, the invalid one is kept.
    status, got = await post(client, body)
    assert (status, got["accepted"], got["duplicates"], got["rejected"]) == (200, 0, 1, 1)
    assert [k["fingerprint"] for k in await dead_letters(client)] == ["bad"]


async def test_rejected_api_filters_and_validates_its_query(client: TestClient[Any, Any]) -> None:
    await post(client, json.dumps(webhook(alert(fingerprint="ok"), alert(fingerprint="bad", node="../x"))))
    assert len((await (await client.get("/api/v1/rejected?source=alertmanager")).json())["items"]) == 1
    assert (await (await client.get("/api/v1/rejected?source=agent")).json())["items"] == []
    assert (await client.get("/api/v1/rejected?source=mail")).status == 400
    assert (await client.get("/api/v1/rejected?limit=x")).status == 400


# --- alerts that name no node ------------------------------------------------------------------------


async def test_an_alert_naming_no_node_is_recorded_as_unattributed_and_surfaced(
    client: TestClient[Any, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # An empty label is an absent label, as in Prometheus: `node=""` names no node.
    nameless = alert(fingerprint="nobody", node="", xid="79", alertname="GpuXidFatal")
    body = json.dumps(webhook(nameless, alert(fingerprint="somebody")))
    with caplog.at_level("WARNING", logger="app.ingest.handlers"):
        assert await post(client, body) == (200, {"accepted": 2, "duplicates": 0, "rejected": 0})
    with sqlite3.connect(tmp_path / "inbox.db") as db:
        stored = dict(db.execute("SELECT fingerprint, node FROM inbox").fetchall())
    assert stored == {"nobody": None, "somebody": "gpu-node-1"}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "GpuXidFatal" in warnings[0]
    assert "fingerprint nobody" in warnings[0]
    assert "names no node" in warnings[0]

    await post(client, body)  # a resend is a duplicate: counted and logged once per stored alert
    text = await (await client.get("/metrics")).text()
    assert "sickbay_alerts_unattributed_total 1.0" in text

    html = await (await client.get("/")).text()
    section = html[html.index("Alerts that reached no node") :]
    assert "1 unattributed" in section
    assert "GpuXidFatal (XID 79)" in section
    assert "<td>nobody</td>" in section
    assert await dead_letters(client) == [], "unattributed is accepted, not refused"


async def test_the_status_page_lists_refused_alerts_escaped(client: TestClient[Any, Any]) -> None:
    hostile = alert(fingerprint="bad", node="<script>alert(1)</script>")
    await post(client, json.dumps(webhook(alert(fingerprint="ok"), hostile)))
    html = await (await client.get("/")).text()
    section = html[html.index("Alerts that reached no node") :]
    assert "1 refused" in section
    assert "invalid_alert" in section
    assert "alerts.1.labels.node" in section
    assert "<script>" not in html
    assert "&lt;script&gt;" in section


async def test_the_status_page_says_when_nothing_was_refused(client: TestClient[Any, Any]) -> None:
    await post(client, json.dumps(webhook(alert(fingerprint="ok"))))
    html = await (await client.get("/")).text()
    assert "None: every alert received named a valid node." in html


# --- agent events: the same per-item admission ---------------------------------------------------------


def gpu_event(event_id: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": event_id,
        "node": "gpu-node-1",
        "gpu": 3,
        "uuid": "GPU-0a1b2c3d",
        "pci_bus_id": "00000000:3B:00.0",
        "kind": "xid",
        "xid": 79,
        "occurred_at": "2026-11-29T09:14:03.512Z",
        "message": "XID 79",
    }
    return {**base, **fields}


async def post_events(client: TestClient[Any, Any], *events: Any) -> tuple[int, dict[str, Any]]:
    body = {"version": "1", "agent": "gpu-node-1", "events": list(events)}
    response = await client.post(
        "/api/v1/gpu-events", data=json.dumps(body), headers={"Content-Type": "application/json", **AGENT}
    )
    return response.status, await response.json()


async def test_one_bad_agent_event_costs_only_itself(client: TestClient[Any, Any], tmp_path: Path) -> None:
    status, got = await post_events(
        client,
        gpu_event("e1"),
        gpu_event("e2", node="../x"),
        gpu_event("e3", occurred_at=1764407643),
        gpu_event("e4", kind="meltdown"),
        gpu_event("e5", gpu=4),
    )
    assert status == 200, got
    assert (got["accepted"], got["duplicates"], got["rejected"]) == (2, 0, 3)
    assert [(r["loc"], r["reason"]) for r in got["rejections"]] == [
        ("events.1.node", "invalid_event"),
        ("events.2.occurred_at", "invalid_timestamp"),
        ("events.3.kind", "invalid_schema"),
    ]
    with sqlite3.connect(tmp_path / "inbox.db") as db:
        stored = sorted(db.execute("SELECT source, fingerprint, node FROM inbox").fetchall())
    assert stored == [("agent", "e1", "gpu-node-1"), ("agent", "e5", "gpu-node-1")]
    response = await client.get("/api/v1/rejected?source=agent")
    kept = (await response.json())["items"]
    assert sorted(k["fingerprint"] for k in kept) == ["e2", "e3", "e4"]
    assert {k["source"] for k in kept} == {"agent"}
    text = await (await client.get("/metrics")).text()
    assert 'sickbay_alerts_rejected_total{reason="invalid_event",source="agent"} 1.0' in text


async def test_a_batch_of_only_bad_agent_events_is_a_422(client: TestClient[Any, Any]) -> None:
    status, got = await post_events(client, gpu_event("e1", gpu=-1), gpu_event("e2", node=""))
    assert (status, got["error"]) == (422, "no_valid_events")
    assert [d["reason"] for d in got["details"]] == ["invalid_schema", "invalid_event"]
    assert await rows(client) == 0
