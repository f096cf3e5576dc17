"""Fatal first and poison rows aside, through the real inbox, journal, dead-letter list and pipeline.

No wall-clock timing: "within one processing slot" is counted in rows started and finished, and retry
waits run on a timer the test moves.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from app.classify.classifier import Rules
from app.config import rules
from app.config.settings import RULES_DIR, PipelineSettings, load_settings
from app.domain import Lane
from app.ingest import signals
from app.obs.metrics import Metrics, create_metrics
from app.service import lanes, pipeline, row_retries
from app.service.runtime import SERVICES, build_app
from app.store import deadletter
from app.store.inbox import Inbox, Record, Row, RowState, connect
from app.store.journal import Journal
from tests.payloads import alert, webhook

SOFT = {"alertname": "GpuThermalThrottle", "xid": "", "sickbay_class": "transient"}
YEAR_ONE = "0001-01-01T00:00:00Z"


class Timer:
    """Monotonic seconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recording(pipeline.Pipeline):
    """The real pipeline, with a log of each row's start and end and a hook run as a row starts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[tuple[str, int]] = []
        self.on_start: Callable[[Row], Awaitable[None]] | None = None
        self.fail: Callable[[Row], bool] = lambda row: False

    async def process(self, row: Row) -> pipeline.Processed:
        self.events.append(("start", row.seq))
        try:
            if self.on_start is not None:
                await self.on_start(row)
            if self.fail(row):
                raise RuntimeError("boom")
            return await super().process(row)
        finally:
            self.events.append(("end", row.seq))


@dataclass
class World:
    inbox: Inbox
    journal: Journal
    letters: deadletter.DeadLetters
    pipeline: Recording
    metrics: Metrics
    timer: Timer

    async def append(self, *items: dict[str, Any]) -> list[int]:
        """Store alerts as the intake does, and return their inbox seqs."""
        now = datetime.now(UTC).isoformat()
        records = [
            Record(
                "alertmanager",
                item["fingerprint"],
                item["startsAt"],
                item["status"],
                item["labels"].get("node"),
                json.dumps(item),
                now,
            )
            for item in items
        ]
        await self.inbox.append(records)
        wanted = {r.fingerprint for r in records}
        rows = await self.inbox.pending(after_seq=0, limit=1_000_000)
        return [row.seq for row in rows if row.fingerprint in wanted]

    async def state(self, seq: int) -> tuple[str, int]:
        async with self.inbox._db.execute("SELECT state, attempts FROM inbox WHERE seq = ?", (seq,)) as cur:
            row = await cur.fetchone()
        assert row is not None
        return str(row[0]), int(row[1])

    def dead_lettered(self, *, reason: str, source: str = "alertmanager") -> float:
        value = self.metrics.registry.get_sample_value(
            "sickbay_inbox_dead_lettered_total", {"source": source, "reason": reason}
        )
        return value or 0.0


@pytest.fixture(scope="module")
def shipped() -> Rules:
    return Rules(
        catalog=rules.load_catalog(RULES_DIR / "xid-catalog.yaml"),
        policy=rules.load_policy(RULES_DIR / "policy.yaml"),
    )


@pytest.fixture
async def world(tmp_path: Path, shipped: Rules) -> AsyncIterator[World]:
    path = tmp_path / "inbox.db"
    lock = asyncio.Lock()
    inbox = await Inbox.open(path, write_lock=lock, lane_of=functools.partial(lanes.lane_of, rules=shipped))
    journal_db = await connect(path, durable=False)
    journal = await Journal.open(journal_db, write_lock=lock)
    letters = await deadletter.DeadLetters.open(path, max_rows=100, write_lock=lock)
    metrics = create_metrics()
    timer = Timer()
    consumer = Recording(
        inbox=inbox,
        journal=journal,
        rules=shipped,
        settings=PipelineSettings(node_concurrency=4),
        node_keys=signals.NodeKeys.of(load_settings(auth={"mode": "none"})),
        metrics=metrics,
        dead_letters=letters,
        timer=timer,
    )
    yield World(inbox, journal, letters, consumer, metrics, timer)
    await inbox.close()
    await letters.close()
    await journal_db.close()


def soft(i: int, *, node: str | None = None) -> dict[str, Any]:
    return alert(fingerprint=f"s{i:05d}", node=node or f"gpu-node-{i % 500}", **SOFT)


async def test_a_fatal_alert_behind_5000_soft_ones_waits_one_processing_slot(world: World) -> None:
    """It arrives while the soft backlog is being worked: no soft row starts after it is committed, and
    it is journaled after only the rows already in hand (at most one per slot) finish."""
    backlog = await world.append(*(soft(i) for i in range(5000)))
    assert len(backlog) == 5000
    fatal: list[int] = []
    journaled = asyncio.Event()
    starts = 0

    async def deliver_the_fatal_alert(row: Row) -> None:
        nonlocal starts
        starts += 1
        if starts == 100:  # the 100th soft row is in hand when the XID 79 arrives
            fatal.extend(await world.append(alert(fingerprint="fatal", node="gpu-node-7", xid="79")))
            world.pipeline.events.append(("committed", fatal[0]))

    world.pipeline.on_start = deliver_the_fatal_alert
    original = world.pipeline.process

    async def process(row: Row) -> pipeline.Processed:
        done = await original(row)
        if fatal and row.seq == fatal[0]:
            journaled.set()
        return done

    world.pipeline.process = process  # type: ignore[method-assign]
    drain = asyncio.create_task(world.pipeline.drain_once())
    waiting = asyncio.create_task(journaled.wait())
    await asyncio.wait({drain, waiting}, return_when=asyncio.FIRST_COMPLETED)
    assert journaled.is_set(), "the pass ended with the fatal row still pending"
    drain.cancel()
    with pytest.raises(asyncio.CancelledError):
        await drain

    events = world.pipeline.events
    committed = events.index(("committed", fatal[0]))
    started = events.index(("start", fatal[0]))
    between = events[committed + 1 : started]
    assert not [e for e in between if e[0] == "start"], "a soft row started after the fatal one arrived"
    finished = [e for e in between if e[0] == "end"]
    assert len(finished) <= 4  # node_concurrency: the rows in hand, one per slot
    # The 100th soft row, and those the other three slots took while the XID 79 was being committed.
    assert sum(1 for kind, _ in events[:committed] if kind == "start") <= 100 + 3
    assert await world.inbox.depth() > 4800  # the backlog is still there: the fatal row overtook it
    entries = await world.journal.entries(node="gpu-node-7")
    assert [(e.xid, e.fault_class) for e in entries if e.xid is not None] == [(79, "reboot-node")]


async def test_pending_fatal_rows_go_first_in_their_order_and_overtake_their_nodes_soft_rows(
    world: World,
) -> None:
    early = await world.append(*(soft(i, node="gpu-node-1" if i % 3 == 0 else None) for i in range(60)))
    reboot, reset = await world.append(
        alert(fingerprint="f-79", node="gpu-node-1", xid="79"),
        alert(fingerprint="f-64", node="gpu-node-1", xid="64", sickbay_class="reset-gpu"),
    )
    taken = await world.pipeline.drain_once()
    assert taken == 62
    starts = [seq for kind, seq in world.pipeline.events if kind == "start"]
    assert starts[:2] == [reboot, reset]
    assert sorted(starts[2:]) == early
    assert (await world.inbox.counts()) == {"done": 62}
    classes = [e.fault_class for e in reversed(await world.journal.entries(node="gpu-node-1", limit=100))]
    assert classes[:2] == ["reboot-node", "reset-gpu"]


async def test_a_poison_row_never_delays_another_row_and_ends_in_the_dead_letter_list(world: World) -> None:
    """An alert from year 1 (accepted by an intake without date bounds) fails in the pipeline: the rows
    after it, of its node and of another, are journaled in the same pass, and it ends dead-lettered."""
    poison, same_node, other_node = await world.append(
        alert(
            fingerprint="poison",
            node="gpu-node-1",
            xid="",
            starts_at=YEAR_ONE,
            **{"sickbay_class": "transient"},
        ),
        soft(2, node="gpu-node-1"),
        soft(1, node="gpu-node-2"),
    )
    await world.pipeline.drain_once()
    assert (await world.state(same_node))[0] == "done"
    assert (await world.state(other_node))[0] == "done"
    for _ in range(row_retries.MAX_ATTEMPTS):
        if (await world.state(poison))[0] != "pending":
            break
        world.timer.now += 3600
        await world.pipeline.drain_once()
    assert (await world.state(poison))[0] == "failed"
    letters = await world.letters.recent(limit=10)
    assert [(k.source, k.fingerprint, k.where) for k in letters] == [
        ("alertmanager", "poison", f"inbox.{poison}")
    ]
    assert letters[0].reason in (pipeline.UNPROCESSABLE, pipeline.RETRIES_EXHAUSTED)
    assert letters[0].item["startsAt"] == YEAR_ONE
    assert world.dead_lettered(reason=letters[0].reason) == 1


async def test_a_failing_row_is_retried_alone_with_backoff_then_dead_lettered(world: World) -> None:
    world.pipeline.fail = lambda row: row.fingerprint == "flaky"
    flaky, after = await world.append(
        alert(fingerprint="flaky", node="gpu-node-1", xid="79"),
        alert(fingerprint="next", node="gpu-node-1", xid="64"),
    )
    await world.pipeline.drain_once()
    assert await world.state(flaky) == ("pending", 1)
    assert (await world.state(after))[0] == "done"  # a fatal row of the same node went on
    for attempt in range(1, row_retries.MAX_ATTEMPTS):
        delay = row_retries.BACKOFF.delay(attempt)
        world.timer.now += delay - 0.5
        await world.pipeline.drain_once()  # not yet due: untouched, and the soft lane does not spin on it
        assert await world.state(flaky) == ("pending", attempt)
        world.timer.now += 0.5
        await world.pipeline.drain_once()
    assert await world.state(flaky) == ("failed", row_retries.MAX_ATTEMPTS)
    (letter,) = await world.letters.recent(limit=10)
    assert (letter.reason, letter.message) == (pipeline.RETRIES_EXHAUSTED, "RuntimeError: boom")
    assert world.dead_lettered(reason=pipeline.RETRIES_EXHAUSTED) == 1


async def test_a_row_that_no_longer_validates_is_dead_lettered_at_once(world: World) -> None:
    now = datetime.now(UTC).isoformat()
    await world.inbox.append(
        [Record("alertmanager", "gone", now, "firing", "gpu-node-1", '{"labels": {}}', now)]
    )
    await world.pipeline.drain_once()
    (letter,) = await world.letters.recent(limit=10)
    assert letter.reason == pipeline.UNPROCESSABLE
    assert "no longer validates" in letter.message
    assert world.dead_lettered(reason=pipeline.UNPROCESSABLE) == 1
    assert (await world.inbox.counts()) == {"failed": 1}


OLD_SCHEMA = """
CREATE TABLE inbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, fingerprint TEXT NOT NULL,
    starts_at TEXT NOT NULL, status TEXT NOT NULL, node TEXT, payload TEXT NOT NULL, received_at TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0, error TEXT,
    UNIQUE (source, fingerprint, starts_at, status)
);
CREATE INDEX inbox_pending ON inbox (state, seq);
"""


async def test_an_inbox_from_before_lanes_is_migrated_and_its_pending_rows_sorted(
    tmp_path: Path, shipped: Rules
) -> None:
    path = tmp_path / "old.db"
    now = datetime.now(UTC).isoformat()
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
        for fingerprint, item, state in [
            ("s", soft(1), "pending"),
            ("f", alert(fingerprint="f", xid="79"), "pending"),
            ("d", alert(fingerprint="d", xid="79"), "done"),
        ]:
            db.execute(
                "INSERT INTO inbox (source, fingerprint, starts_at, status, node, payload, received_at, state) "
                "VALUES ('alertmanager', ?, ?, 'firing', 'gpu-node-1', ?, ?, ?)",
                (fingerprint, now, json.dumps(item), now, state),
            )
    inbox = await Inbox.open(path, lane_of=functools.partial(lanes.lane_of, rules=shipped))
    try:
        assert [r.fingerprint for r in await inbox.pending(after_seq=0, limit=10, lane=Lane.FATAL)] == ["f"]
        assert [r.fingerprint for r in await inbox.pending(after_seq=0, limit=10, lane=Lane.SOFT)] == ["s"]
        await inbox.mark([1, 2], RowState.DONE)
        assert await inbox.depth() == 0
    finally:
        await inbox.close()
    with sqlite3.connect(path) as db:
        indexes = {row[1] for row in db.execute("PRAGMA index_list(inbox)")}
        lanes_kept = dict(db.execute("SELECT fingerprint, lane FROM inbox"))
    assert "inbox_lane_pending" in indexes
    assert "inbox_pending" not in indexes
    assert lanes_kept == {"s": "soft", "f": "fatal", "d": "soft"}  # a done row is not looked at again
    reopened = await Inbox.open(path)  # and opening a migrated inbox again changes nothing
    await reopened.close()


async def test_without_a_lane_function_every_row_is_soft(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "plain.db")
    now = datetime.now(UTC).isoformat()
    try:
        item = alert(fingerprint="f", xid="79")
        await inbox.append([Record("alertmanager", "f", now, "firing", "gpu-node-1", json.dumps(item), now)])
        assert not inbox.fatal_arrived.is_set()
        assert [r.fingerprint for r in await inbox.pending(after_seq=0, limit=10, lane=Lane.SOFT)] == ["f"]
    finally:
        await inbox.close()


async def test_the_service_lanes_its_intake_and_shows_rows_it_gave_up_on(
    tmp_path: Path, aiohttp_client: Callable[[web.Application], Any]
) -> None:
    """Wired together: an XID 79 posted to the webhook waits in the fatal lane, a soft alert in the soft
    one; a row the pipeline can never process is in `GET /api/v1/rejected`, on the status page and counted."""
    settings = load_settings(auth={"mode": "none"}, inbox={"path": tmp_path / "inbox.db"})
    client = await aiohttp_client(build_app(settings))
    body = webhook(alert(fingerprint="f79", xid="79"), soft(1))
    response = await client.post("/api/v1/alerts", json=body)
    assert response.status == 200, await response.text()
    with sqlite3.connect(tmp_path / "inbox.db") as db:
        assert dict(db.execute("SELECT fingerprint, lane FROM inbox")) == {"f79": "fatal", "s00001": "soft"}
    services = client.app[SERVICES]
    assert services.inbox is not None
    now = datetime.now(UTC).isoformat()
    await services.inbox.append(
        [Record("alertmanager", "gone", now, "firing", "gpu-node-1", '{"labels": {}}', now)]
    )
    items: list[dict[str, Any]] = []
    for _ in range(400):  # the service's own consumer takes it; wait for it, whatever the machine's speed
        items = (await (await client.get("/api/v1/rejected")).json())["items"]
        if items:
            break
        await asyncio.sleep(0.05)
    assert [(i["fingerprint"], i["reason"], i["source"]) for i in items] == [
        ("gone", pipeline.UNPROCESSABLE, "alertmanager")
    ]
    assert "no longer validates" in items[0]["message"]
    metrics = await (await client.get("/metrics")).text()
    assert 'sickbay_inbox_dead_lettered_total{reason="unprocessable",source="alertmanager"} 1.0' in metrics
    page = await (await client.get("/")).text()
    assert "inbox rows the pipeline gave up on" in page
    assert pipeline.UNPROCESSABLE in page


async def test_the_soft_lane_resumes_where_it_yielded_taking_every_row_once(world: World) -> None:
    backlog = await world.append(*(soft(i, node=f"gpu-node-{i % 7}") for i in range(300)))
    fatal: list[int] = []

    async def deliver(row: Row) -> None:
        if len([e for e in world.pipeline.events if e[0] == "start"]) in (50, 120) and len(fatal) < 2:
            fatal.extend(
                await world.append(alert(fingerprint=f"fatal{len(fatal)}", node="gpu-node-3", xid="79"))
            )

    world.pipeline.on_start = deliver
    taken = await world.pipeline.drain_once()
    starts = [seq for kind, seq in world.pipeline.events if kind == "start"]
    assert len(fatal) == 2
    assert taken == len(starts) == 302
    assert sorted(starts) == sorted([*backlog, *fatal])  # each once: none lost, none taken twice
    assert (await world.inbox.counts()) == {"done": 302}
    for node in range(7):  # each node's soft rows still in their order
        seqs = [seq for seq in starts if seq in backlog and (seq - backlog[0]) % 7 == node]
        assert seqs == sorted(seqs)
