"""The intake handlers against a real inbox and dead-letter list, with the caller check stubbed: an agent
bound to its node is refused (403, nothing stored) for events naming another node, and a store that cannot
take writes is a 503 the sender retries, counted as such."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from app.config.settings import load_settings
from app.ingest import callers, handlers
from app.obs.metrics import create_metrics
from app.store.deadletter import DeadLetters
from app.store.inbox import Inbox
from tests.payloads import alert, webhook

OCCURRED = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
JSON = {"Content-Type": "application/json", "Authorization": "Bearer agent"}


class Agents:
    """The caller check: a request without credentials is unknown (401); with any, an agent is the one
    bound to `node`, and Alertmanager passes."""

    def __init__(self, node: str | None) -> None:
        self.node = node

    def alertmanager(self, header: str | None) -> callers.Caller:
        if header is None:
            raise callers.Refused(401, "unauthorized", "who are you")
        return callers.Caller(role="alertmanager", name="alertmanager")

    async def agent(self, header: str | None) -> callers.Caller:
        if header is None:
            raise callers.Refused(401, "unauthorized", "who are you")
        return callers.Caller(role="agent", name="agent-x", node=self.node)


@dataclass
class World:
    client: TestClient[Any, Any]
    intake: handlers.Intake
    challenge: str | None = None  # the last answer's WWW-Authenticate header

    def rejected(self, source: str, reason: str) -> float:
        value = self.intake.metrics.registry.get_sample_value(
            "sickbay_requests_rejected_total", {"source": source, "reason": reason}
        )
        return value or 0.0

    async def rows(self) -> int:
        return sum((await self.intake.inbox.counts()).values())

    async def post(self, path: str, body: Any, headers: dict[str, str] = JSON) -> tuple[int, dict[str, Any]]:
        response = await self.client.post(path, data=json.dumps(body), headers=headers)
        self.challenge = response.headers.get("WWW-Authenticate")
        return response.status, await response.json()


@pytest.fixture
async def world(tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]) -> AsyncIterator[World]:
    settings = load_settings(auth={"mode": "none"}, inbox={"path": tmp_path / "i.db"})
    box = await Inbox.open(tmp_path / "i.db")
    letters = await DeadLetters.open(tmp_path / "i.db", max_rows=100)
    intake = handlers.Intake(
        settings=settings,
        inbox=box,
        dead_letters=letters,
        metrics=create_metrics(CollectorRegistry()),
        callers=Agents("gpu-00"),  # type: ignore[arg-type]
    )
    app = web.Application()

    async def alerts(request: web.Request) -> web.Response:
        return await handlers.handle_alerts(request, intake)

    async def events(request: web.Request) -> web.Response:
        return await handlers.handle_gpu_events(request, intake)

    app.router.add_post("/alerts", alerts)
    app.router.add_post("/events", events)
    client = await aiohttp_client(app)
    yield World(client=client, intake=intake)
    await letters.close()
    await box.close()


def events(*nodes: str) -> dict[str, Any]:
    return {
        "version": "1",
        "agent": "a",
        "events": [
            {"id": f"e{i}", "node": node, "gpu": 0, "kind": "xid", "xid": 79, "occurred_at": OCCURRED}
            for i, node in enumerate(nodes)
        ],
    }


async def test_an_agent_bound_to_its_node_posts_for_it(world: World) -> None:
    assert await world.post("/events", events("gpu-00", "gpu-00")) == (
        200,
        {"accepted": 2, "duplicates": 0, "rejected": 0},
    )


@pytest.mark.parametrize(
    ("nodes", "named"),
    [
        (("gpu-00", "gpu-01"), "'gpu-01'"),
        (("gpu-02", "gpu-01", "gpu-02"), "'gpu-02', 'gpu-01'"),
        (tuple(f"gpu-{i:02d}" for i in range(9)), "'gpu-01', 'gpu-02', 'gpu-03', 'gpu-04', 'gpu-05'"),
    ],
)
async def test_events_for_another_node_refuse_the_whole_body(
    world: World, nodes: tuple[str, ...], named: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert await world.post("/events", events(*nodes)) == (
        403,
        {
            "error": "forbidden",
            "message": f"an agent may report its own node only: this one runs on 'gpu-00', the body names {named}",
        },
    )
    assert world.challenge is None, "a 403 is no credential challenge"
    assert await world.rows() == 0
    assert await world.intake.dead_letters.count() == 0
    assert world.rejected("agent", "forbidden") == 1
    (line,) = [r for r in caplog.records if r.name == "app.ingest.handlers"]
    assert (line.levelname, line.getMessage()) == (
        "WARNING",
        f"refused agent events from 'agent-x' on node 'gpu-00' for other nodes [{named}]",
    )


@pytest.mark.parametrize("path", ["/alerts", "/events"])
async def test_a_caller_without_credentials_is_challenged(world: World, path: str) -> None:
    status, body = await world.post(path, events("gpu-00"), headers={"Content-Type": "application/json"})
    assert (status, body) == (401, {"error": "unauthorized", "message": "who are you"})
    assert world.challenge == 'Bearer realm="sickbay"'
    assert world.rejected("agent" if path == "/events" else "alertmanager", "unauthorized") == 1
    assert await world.rows() == 0


async def test_a_closed_inbox_is_a_counted_503(world: World) -> None:
    await world.intake.inbox.close()
    status, body = await world.post("/alerts", webhook(alert(fingerprint="a1", node="n1")))
    assert (status, body) == (
        503,
        {"error": "unavailable", "message": "inbox is not accepting writes; retry"},
    )
    assert world.rejected("alertmanager", "unavailable") == 1
    assert world.rejected("agent", "unavailable") == 0
    status, body = await world.post("/events", events("gpu-00"))
    assert status == 503
    assert world.rejected("agent", "unavailable") == 1


@pytest.mark.parametrize("with_valid", [True, False])
async def test_a_dead_letter_list_that_cannot_be_written_is_a_503(world: World, with_valid: bool) -> None:
    await world.intake.dead_letters.close()
    bad = {"id": "bad", "node": "gpu-00", "kind": "nonsense"}
    body = events("gpu-00") if with_valid else events()
    body["events"].append(bad)
    status, answer = await world.post("/events", body)
    assert (status, answer) == (
        503,
        {"error": "unavailable", "message": "the dead-letter list is unavailable; retry"},
    )
    assert world.rejected("agent", "unavailable") == 1
    # The valid event is committed all the same: the sender's resend finds it as a duplicate.
    assert await world.rows() == (1 if with_valid else 0)


@pytest.mark.parametrize(
    ("payload", "name"),
    [('{"labels": {"alertname": "GpuXid"}}', "GpuXid"), ('{"labels": {}}', "unnamed"), ("{}", "unnamed")],
)
def test_an_unattributed_alert_is_logged_by_its_name(payload: str, name: str) -> None:
    assert handlers._alertname(payload) == name
