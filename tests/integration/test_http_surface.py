"""The HTTP surface every route shares: POSTs must be JSON, responses carry security headers, `auth.mode:
none` is refused off loopback unless forced, and the node routes read through their own budget."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from app.cli import main as cli_main
from app.config.errors import ConfigError
from app.config.settings import Settings, load_settings
from app.domain import NodeState
from app.service.runtime import SERVICES, build_app, listener

OPEN = {"mode": "none"}


def open_settings(tmp_path: Path, **more: Any) -> Settings:
    return load_settings(auth=OPEN, inbox={"path": tmp_path / "s.db"}, **more)


@pytest.fixture
async def open_client(
    tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]
) -> TestClient[Any, Any]:
    return await aiohttp_client(build_app(open_settings(tmp_path)))


def post_paths(app: web.Application) -> list[str]:
    return sorted(
        route.resource.canonical for route in app.router.routes() if route.method == "POST" and route.resource
    )


async def test_every_post_route_refuses_a_body_a_web_page_could_send(
    open_client: TestClient[Any, Any],
) -> None:
    """With auth off, a cross-site form or a no-body fetch is the CSRF: only JSON gets past, on every POST."""
    paths = post_paths(open_client.app)
    assert {"/api/v1/alerts", "/api/v1/gpu-events", "/api/v1/breaker/reset"} <= set(paths)
    for path in paths:
        for headers, data in (
            ({"Content-Type": "text/plain"}, b'{"alerts": []}'),
            ({"Content-Type": "application/x-www-form-urlencoded"}, b"a=b"),
            ({"Content-Type": "multipart/form-data; boundary=x"}, b"--x--"),
            ({}, None),
        ):
            response = await open_client.post(
                path, data=data, headers=headers, skip_auto_headers={"Content-Type"}
            )
            assert response.status == 415, (path, headers)
            body = await response.json()
            assert body["error"] == "unsupported_media_type"
    inbox = open_client.app[SERVICES].inbox
    assert inbox is not None
    assert await inbox.depth() == 0, "nothing refused reached the inbox"
    # The same POST as JSON is let through to its handler (an empty webhook is a 4xx of its own kind).
    answered = await open_client.post("/api/v1/alerts", json={"version": "4", "alerts": []})
    assert answered.status != 415


async def test_html_forbids_scripts_framing_and_referrers_and_everything_says_nosniff(
    open_client: TestClient[Any, Any],
) -> None:
    page = await open_client.get("/")
    assert page.status == 200
    assert page.content_type == "text/html"
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    assert "script-src" not in policy  # no script source is allowed at all (default-src 'none')
    assert "frame-ancestors 'none'" in policy
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    for path in ("/healthz", "/metrics", "/no-such-route"):
        response = await open_client.get(path)
        assert response.headers["X-Content-Type-Options"] == "nosniff", path
        assert "Content-Security-Policy" not in response.headers, path


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "sickbay.example"])
def test_auth_none_is_refused_on_a_public_bind(tmp_path: Path, host: str) -> None:
    with pytest.raises(ConfigError, match="allow_none_on_public_bind"):
        listener.check_exposure(open_settings(tmp_path, listen_host=host))


@pytest.mark.parametrize(
    ("host", "auth"),
    [
        ("127.0.0.1", OPEN),
        ("::1", OPEN),
        ("localhost", OPEN),
        ("0.0.0.0", {**OPEN, "allow_none_on_public_bind": True}),
    ],
)
def test_auth_none_where_allowed_still_warns_loudly(
    tmp_path: Path, host: str, auth: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings(auth=auth, listen_host=host, inbox={"path": tmp_path / "s.db"})
    with caplog.at_level(logging.WARNING):
        listener.check_exposure(settings)
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "AUTHENTICATION IS OFF" in warning.getMessage()


def test_credentials_set_start_silently(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = load_settings(auth={"mode": "bearer", "token": "t"}, inbox={"path": tmp_path / "s.db"})
    with caplog.at_level(logging.WARNING):
        listener.check_exposure(settings)
    assert not caplog.records


def test_sickbay_serve_refuses_auth_none_on_the_default_bind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SICKBAY_AUTH__MODE", "none")
    code = cli_main(["serve", "--port", "0", "--db", str(tmp_path / "s.db")])
    assert code == 2
    assert "allow_none_on_public_bind" in capsys.readouterr().err


def test_tls_files_that_do_not_load_fail_start_up_naming_them(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    settings = load_settings(auth={"mode": "bearer", "token": "t"}, tls={"cert_file": cert, "key_file": key})
    with pytest.raises(ConfigError, match=str(cert)):
        listener.tls_context(settings.tls)
    with pytest.raises(ConfigError, match="both cert_file and key_file"):
        load_settings(auth={"mode": "bearer", "token": "t"}, tls={"cert_file": cert})


class CountingPort:
    """Enough of a `KubePort` for the read routes."""

    async def list_nodes(self, *, label_selector: str | None = None) -> list[NodeState]:
        return [NodeState(name="gpu-a-00")]

    async def get_node(self, name: str) -> NodeState:
        return NodeState(name=name)

    def __getattr__(self, name: str) -> Any:  # the write calls: never used by reads
        raise AttributeError(name)


async def test_read_routes_spend_their_own_budget_and_say_429_past_it(
    tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]
) -> None:
    port = CountingPort()
    settings = open_settings(tmp_path, reads={"cache_ttl_s": 60, "qps": 0.001, "burst": 3})
    client = await aiohttp_client(build_app(settings, kube=port))  # type: ignore[arg-type]
    reads = client.app[SERVICES].reads
    assert reads is not None
    # Forty reads of the list (the API and the page share it) cost one token of the three: the next two
    # nodes get theirs, and a fourth key finds the budget spent.
    for _ in range(20):
        assert (await client.get("/api/v1/nodes")).status == 200
        assert (await client.get("/")).status == 200
    assert (await client.get("/api/v1/nodes/gpu-a-01")).status == 200
    assert (await client.get("/api/v1/nodes/gpu-a-02")).status == 200
    busy = await client.get("/api/v1/nodes/gpu-a-03")
    assert busy.status == 429
    assert int(busy.headers["Retry-After"]) >= 1
    assert (await busy.json())["error"] == "busy"
    assert reads.counts.refused == 1
    # The page renders once per TTL for every reader: the same bytes, even though its clock moved on.
    assert await (await client.get("/")).read() == await (await client.get("/")).read()
    assert (await client.get("/api/v1/nodes/gpu-a-01")).status == 200  # cached keys still answer


async def test_read_routes_wait_while_the_pipeline_acts(
    tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]
) -> None:
    client = await aiohttp_client(build_app(open_settings(tmp_path), kube=CountingPort()))  # type: ignore[arg-type]
    urgency = client.app[SERVICES].urgency
    assert urgency is not None
    async with urgency.urgent():  # a signal being turned into actions
        reading = asyncio.create_task(client.get("/api/v1/nodes"))
        for _ in range(50):
            await asyncio.sleep(0)
        assert not reading.done(), "a read was answered while urgent work ran"
        assert (await client.get("/healthz")).status == 200  # health and metrics never wait
    response = await asyncio.wait_for(reading, 30)
    assert response.status == 200


async def test_readers_past_the_request_rate_wait_their_turn_then_are_told_to_come_back(
    tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]
) -> None:
    settings = open_settings(tmp_path, reads={"requests_per_s": 0.001, "requests_burst": 2, "max_wait_s": 0})
    client = await aiohttp_client(build_app(settings, kube=CountingPort()))  # type: ignore[arg-type]
    assert (await client.get("/")).status == 200
    assert (await client.get("/api/v1/actions")).status == 200
    for path in ("/api/v1/nodes/gpu-a-00", "/api/v1/actions", "/api/v1/rejected", "/api/v1/breaker", "/"):
        refused = await client.get(path)  # the line is longer than max_wait_s
        assert refused.status == 429, path
        assert refused.headers["Retry-After"] == "1"
    for path in ("/healthz", "/readyz", "/metrics"):  # only the read routes are paced
        assert (await client.get(path)).status == 200, path
