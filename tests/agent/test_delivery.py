"""Events survive a service outage: spooled, retried with backoff, delivered once, bounded on disk."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.agent.model import EventKind, GpuEvent, GpuIdentity, PodRef
from app.agent.pusher import Outcome, Pusher, TokenSource, delivery_backoff
from app.agent.recorder import Recorder
from app.agent.selfmetrics import AgentMetrics, create_metrics
from app.agent.spool import Spool
from app.agent.state import GpuStates
from app.config.settings import load_settings
from app.service.runtime import build_app
from tests.agent.conftest import TOKEN, Receiver, eventually

GPU = GpuIdentity(index=3, uuid="GPU-3", pci_bus_id="00000000:1B:00.0", model="NVIDIA H100 80GB HBM3")
POD = PodRef(namespace="ml", name="trainer-0", container="main")
WHEN = datetime(2025, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)


def xid_event(xid: int = 13) -> GpuEvent:
    return GpuEvent(kind=EventKind.XID, gpu=GPU, occurred_at=WHEN, message=f"XID {xid}", xid=xid)


@dataclass
class Pipeline:
    spool: Spool
    recorder: Recorder
    pusher: Pusher
    metrics: AgentMetrics


@pytest.fixture
async def pipeline(tmp_path: Path, receiver: Receiver) -> AsyncIterator[Pipeline]:
    async with aiohttp.ClientSession() as session:
        yield build(tmp_path, receiver, session)


def build(
    tmp_path: Path,
    receiver: Receiver,
    session: aiohttp.ClientSession,
    *,
    max_events: int = 10_000,
    max_bytes: int = 1 << 24,
    tokens: TokenSource | None = None,
) -> Pipeline:
    metrics = create_metrics()
    spool = Spool(tmp_path / "spool" / "events.sqlite", max_events=max_events, max_bytes=max_bytes)
    pusher = Pusher(
        session=session,
        url=receiver.base_url + "/api/v1/gpu-events",
        node="node-a",
        spool=spool,
        metrics=metrics,
        tokens=tokens or TokenSource(token=TOKEN),
        backoff=delivery_backoff(initial_s=0.01, max_s=0.05),
        rng=random.Random(7),
        timeout_s=2,
    )
    recorder = Recorder(
        node="node-a",
        states=GpuStates(),
        pod_for=lambda gpu: POD,
        spool=spool,
        metrics=metrics,
        on_stored=pusher.notify,
    )
    return Pipeline(spool, recorder, pusher, metrics)


def metric(metrics: AgentMetrics, name: str) -> float:
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise KeyError(name)


async def test_a_burst_during_an_outage_is_delivered_exactly_once(
    pipeline: Pipeline, receiver: Receiver
) -> None:
    task = asyncio.create_task(pipeline.pusher.run())
    try:
        # The service is not listening at all: every push is a connection error.
        await pipeline.recorder.record([xid_event(i % 200) for i in range(100)])
        assert pipeline.spool.depth().events == 100
        await asyncio.sleep(0.2)
        assert not receiver.requests
        # It comes back as a follower for a while (503), then as the leader.
        receiver.answers = [503, 503, 503]
        await receiver.start()
        await eventually(lambda: len(receiver.accepted) == 100, what="100 events accepted")
        await eventually(lambda: pipeline.spool.depth().events == 0, what="spool drained")
    finally:
        task.cancel()

    assert sum(receiver.seen.values()) == 100  # nothing sent twice once accepted
    assert len(receiver.requests) == 4  # three refused attempts at the same batch, then one delivery
    assert all(len(body["events"]) <= 100 for body in receiver.requests)
    assert receiver.requests[0] == receiver.requests[-1]  # the retried batch is byte-identical
    assert set(receiver.auth) == {f"Bearer {TOKEN}"}
    assert metric(pipeline.metrics, "sickbay_agent_events_delivered_total") == 100


async def test_the_wire_format_is_the_contract(pipeline: Pipeline, live_receiver: Receiver) -> None:
    await pipeline.recorder.record(
        [
            xid_event(79),
            GpuEvent(
                kind=EventKind.RECOVERY_ACTION,
                gpu=GPU,
                occurred_at=WHEN,
                message="reboot please",
                recovery_action=2,
            ),
        ]
    )
    assert (await pipeline.pusher.push_once()).outcome is Outcome.DELIVERED

    body = live_receiver.requests[0]
    assert body["version"] == "1"
    assert body["agent"] == "node-a"
    first, second = body["events"]
    assert first["id"].startswith("node-a-")
    assert first["id"] != second["id"]
    assert {k: v for k, v in first.items() if k != "id"} == {
        "node": "node-a",
        "gpu": 3,
        "uuid": "GPU-3",
        "pci_bus_id": "00000000:1B:00.0",
        "kind": "xid",
        "xid": 79,
        "recovery_action": None,
        "occurred_at": "2025-03-01T12:00:00.123Z",
        "pod": {"namespace": "ml", "name": "trainer-0", "container": "main"},
        "message": "XID 79",
    }
    assert (second["kind"], second["xid"], second["recovery_action"]) == ("recovery-action", None, 2)


async def test_batches_hold_at_most_100_events(pipeline: Pipeline, live_receiver: Receiver) -> None:
    await pipeline.recorder.record([xid_event() for _ in range(250)])
    while (await pipeline.pusher.push_once()).outcome is not Outcome.IDLE:
        pass

    assert [len(body["events"]) for body in live_receiver.requests] == [100, 100, 50]
    assert len(live_receiver.accepted) == 250


async def test_a_permanent_rejection_is_logged_and_dropped(
    pipeline: Pipeline, live_receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    live_receiver.answers = [422]
    await pipeline.recorder.record([xid_event(), xid_event()])

    assert (await pipeline.pusher.push_once()).outcome is Outcome.REJECTED
    assert pipeline.spool.depth().events == 0
    assert metric(pipeline.metrics, "sickbay_agent_events_rejected_total") == 2
    assert "HTTP 422" in caplog.text


async def test_events_the_service_refuses_one_by_one_are_counted_and_not_resent(
    pipeline: Pipeline, receiver: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Against the real service: an event it refuses (XID out of range) costs neither its batch nor a retry."""
    # The agents' own static token (no cluster to review a ServiceAccount token with), not the webhook's.
    auth = {"mode": "bearer", "token": "webhook-token", "agents": {"mode": "token", "token": TOKEN}}
    settings = load_settings(auth=auth, inbox={"path": tmp_path / "sb.db"})
    server = TestServer(build_app(settings), host="127.0.0.1", port=receiver.port)
    await server.start_server()
    try:
        await pipeline.recorder.record([xid_event(13), xid_event(70000), xid_event(31)])
        result = await pipeline.pusher.push_once()
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{receiver.base_url}/api/v1/rejected?source=agent") as response,
        ):
            kept = (await response.json())["items"]
    finally:
        await server.close()

    assert (result.outcome, result.refused) == (Outcome.DELIVERED, 1)
    assert pipeline.spool.depth().events == 0
    assert metric(pipeline.metrics, "sickbay_agent_events_delivered_total") == 2
    assert metric(pipeline.metrics, "sickbay_agent_events_rejected_total") == 1
    assert "refused 1 of 3 events" in caplog.text
    assert [(k["loc"], k["raw"]["xid"]) for k in kept] == [("events.1.xid", 70000)]


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_throttling_and_server_errors_are_retried(
    pipeline: Pipeline, live_receiver: Receiver, status: int
) -> None:
    live_receiver.answers = [status]
    await pipeline.recorder.record([xid_event()])

    assert (await pipeline.pusher.push_once()).outcome is Outcome.RETRY
    assert pipeline.spool.depth().events == 1
    assert (await pipeline.pusher.push_once()).outcome is Outcome.DELIVERED
    assert pipeline.spool.depth().events == 0


async def test_retry_after_is_honoured_within_the_cap(pipeline: Pipeline, receiver: Receiver) -> None:
    async def busy(_request: web.Request) -> web.Response:
        return web.Response(status=503, headers={"Retry-After": "120"})

    app = web.Application()
    app.router.add_post("/api/v1/gpu-events", busy)
    server = TestServer(app, host="127.0.0.1", port=receiver.port)
    await server.start_server()
    try:
        await pipeline.recorder.record([xid_event()])
        result = await pipeline.pusher.push_once()
    finally:
        await server.close()

    assert result.outcome is Outcome.RETRY
    assert result.retry_after_s == 0.05  # capped at backoff_max_s


async def test_a_too_large_batch_is_split(pipeline: Pipeline, live_receiver: Receiver) -> None:
    live_receiver.answers = [413]
    await pipeline.recorder.record([xid_event() for _ in range(10)])

    assert (await pipeline.pusher.push_once()).outcome is Outcome.RETRY
    assert (await pipeline.pusher.push_once()).outcome is Outcome.DELIVERED
    assert [len(body["events"]) for body in live_receiver.requests] == [10, 5]


async def test_the_token_file_is_read_for_every_push(tmp_path: Path, live_receiver: Receiver) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    async with aiohttp.ClientSession() as session:
        pipe = build(tmp_path, live_receiver, session, tokens=TokenSource(token_file=token_file))
        await pipe.recorder.record([xid_event()])
        await pipe.pusher.push_once()
        token_file.write_text("rotated")
        await pipe.recorder.record([xid_event()])
        await pipe.pusher.push_once()

    assert live_receiver.auth == ["Bearer first", "Bearer rotated"]


async def test_an_unreadable_token_file_keeps_events(tmp_path: Path, live_receiver: Receiver) -> None:
    async with aiohttp.ClientSession() as session:
        pipe = build(tmp_path, live_receiver, session, tokens=TokenSource(token_file=tmp_path / "missing"))
        await pipe.recorder.record([xid_event()])
        result = await pipe.pusher.push_once()

    assert result.outcome is Outcome.RETRY
    assert pipe.spool.depth().events == 1
    assert not live_receiver.requests


async def test_a_full_spool_drops_the_oldest_and_counts_them(tmp_path: Path, live_receiver: Receiver) -> None:
    async with aiohttp.ClientSession() as session:
        pipe = build(tmp_path, live_receiver, session, max_events=10)
        await pipe.recorder.record([xid_event(i) for i in range(15)])

        kept = [json.loads(row.body)["xid"] for row in pipe.spool.peek(100)]
        assert kept == list(range(5, 15))
        assert metric(pipe.metrics, "sickbay_agent_spool_dropped_total") == 5
        assert metric(pipe.metrics, "sickbay_agent_spool_events") == 10


async def test_undelivered_events_survive_a_restart(tmp_path: Path, live_receiver: Receiver) -> None:
    async with aiohttp.ClientSession() as session:
        first = build(tmp_path, live_receiver, session)
        await first.recorder.record([xid_event(1), xid_event(2)])
        first.spool.close()
        second = build(tmp_path, live_receiver, session)
        while (await second.pusher.push_once()).outcome is not Outcome.IDLE:
            pass

    assert [event["xid"] for event in live_receiver.accepted] == [1, 2]


def test_the_spool_is_bounded_by_bytes_too(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.sqlite", max_events=1000, max_bytes=1000)
    dropped = spool.append([(f"id-{i}", "x" * 300) for i in range(5)])

    assert dropped == 2
    assert [row.event_id for row in spool.peek(10)] == ["id-2", "id-3", "id-4"]
    assert spool.depth().bytes == 900


def test_the_spool_ignores_an_id_it_already_holds(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.sqlite", max_events=10, max_bytes=10_000)
    spool.append([("same", "{}")])
    spool.append([("same", "{}")])

    assert spool.depth().events == 1


@pytest.mark.parametrize("attempt", range(12))
def test_backoff_is_capped_and_jittered(attempt: int) -> None:
    backoff = delivery_backoff(initial_s=0.5, max_s=30.0)
    ceiling = min(30.0, 0.5 * 2**attempt)
    delays = {backoff.delay(attempt + 1, rand=random.Random(seed).random()) for seed in range(20)}

    assert all(ceiling / 2 <= d <= ceiling for d in delays)
    assert len(delays) > 1
