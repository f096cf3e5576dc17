"""Property: whatever arrives, the webhook answers 2xx or a 4xx with a JSON error — never 5xx, never a
traceback in the log — and a rejected request stores nothing in the inbox (an invalid alert is kept in
the dead-letter list only). Headers and every other route: `test_hostile_http`."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.config.settings import load_settings
from app.service.runtime import build_app
from tests.payloads import alert, webhook

TOKEN = "fuzz-token"


@dataclass
class Server:
    url: str
    db: Path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    db = tmp_path_factory.mktemp("fuzz") / "inbox.db"
    # Prediction off here too: the module-scoped server starts before the autouse fixture that turns it
    # off, and a model loading in the server's thread races hypothesis's own lazy imports.
    settings = load_settings(
        auth={"mode": "bearer", "token": TOKEN}, inbox={"path": db}, prediction={"enabled": False}
    )
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(build_app(settings))
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield Server(url=f"http://127.0.0.1:{port}/api/v1/alerts", db=db)
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def post(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def count(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM inbox").fetchone()[0])


json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=40)
)
json_value = st.recursive(
    json_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
alert_keys = st.sampled_from(
    ["status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"]
)
top_keys = st.sampled_from(
    ["version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels", "alerts"]
)
label_text = st.text(min_size=0, max_size=30)


@st.composite
def mutated_payloads(draw: st.DrawFn) -> dict[str, Any]:
    """A valid payload with a few of its fields replaced, removed, or its labels made hostile."""
    fingerprint = draw(st.text(alphabet="0123456789abcdef", min_size=8, max_size=16))
    payload = webhook(
        alert(
            fingerprint=fingerprint,
            node=draw(st.one_of(st.just("gpu-node-1"), label_text)),
            xid=draw(st.one_of(st.just("79"), label_text)),
            gpu=draw(st.one_of(st.just("0"), label_text)),
        )
    )
    first_alert = payload["alerts"][0]
    for _ in range(draw(st.integers(0, 3))):
        target = draw(st.sampled_from(["top", "alert"]))
        obj = payload if target == "top" else first_alert
        key = draw(top_keys if target == "top" else alert_keys)
        if draw(st.booleans()):
            obj.pop(key, None)
        else:
            obj[key] = draw(json_value)
    return payload


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=mutated_payloads())
def test_fuzzed_payloads_never_5xx_and_rejections_store_nothing(
    server: Server, caplog: pytest.LogCaptureFixture, payload: dict[str, Any]
) -> None:
    caplog.clear()
    before = count(server.db)
    status, body = post(server.url, json.dumps(payload).encode())
    assert status < 500, body
    if status == 200:
        assert body["accepted"] + body["duplicates"] + body["rejected"] == len(payload["alerts"])
        assert count(server.db) == before + body["accepted"]
    else:
        assert 400 <= status < 500
        assert body["error"]
        assert body["message"]
        assert count(server.db) == before
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=300))
def test_arbitrary_bytes_never_5xx(server: Server, body: bytes) -> None:
    before = count(server.db)
    status, got = post(server.url, body)
    assert 400 <= status < 500, got
    assert count(server.db) == before
