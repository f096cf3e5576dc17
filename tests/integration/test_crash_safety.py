"""SIGKILL `sickbay serve` in the middle of a burst: every alert that got a 2xx survives and is processed.

The contract (ARCHITECTURE.md, Persistence): a 2xx is sent only after the alert is durably committed, and
unprocessed rows resume on restart. A re-send of the whole burst afterwards (what Alertmanager does for the
requests it saw fail) stores nothing twice: alerts already in the inbox come back as duplicates.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from tests.payloads import ZERO_TIME, iso

pytestmark = [pytest.mark.slow, pytest.mark.timeout(280)]

REQUESTS = 300
PER_REQUEST = 10
CONNECTIONS = 24  # at least 16 concurrent connections
KILL_AT_ACKS = int(REQUESTS * 0.4)  # SIGKILL once this many requests got their 2xx
NODES = 12
XIDS = (79, 13, 64, 94, 31, 119, 62, 8)
TOKEN = "crash-safety-token"
# Relative to now and fixed for the whole test, so the re-sent burst carries the same startsAt (the inbox's
# dedup key) and every alert is as recent, for the service's clock, on any date.
BURST_START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)

T = TypeVar("T")


def fingerprint(request: int, index: int) -> str:
    return f"crash-{request:04d}-{index:02d}"


def body(request: int) -> bytes:
    alerts = []
    for index in range(PER_REQUEST):
        n = request * PER_REQUEST + index
        node = f"gpu-node-{n % NODES}"
        alerts.append(
            {
                "status": "firing",
                "labels": {
                    "alertname": "GpuXidBurst",
                    "node": node,
                    "gpu": str(n % 8),
                    "xid": str(XIDS[n % len(XIDS)]),
                },
                "annotations": {"summary": f"burst alert {n}"},
                # One second apart (50 minutes in all), so classification context windows stay small.
                "startsAt": iso(BURST_START + timedelta(seconds=n)),
                "endsAt": ZERO_TIME,
                "generatorURL": "",
                "fingerprint": fingerprint(request, index),
            }
        )
    payload = {
        "version": "4",
        "groupKey": f'{{}}:{{burst="{request}"}}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "sickbay",
        "groupLabels": {},
        "commonLabels": {"alertname": "GpuXidBurst"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": alerts,
    }
    return json.dumps(payload).encode()


@dataclass
class Burst:
    """What each request of a burst got back: a 2xx body, or the error that ended it."""

    acked: dict[int, dict[str, Any]] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    max_in_flight: int = 0
    in_flight: int = 0


async def send_burst(
    url: str,
    bodies: list[bytes],
    *,
    on_ack: Callable[[Burst], None] | None = None,
    connections: int = CONNECTIONS,
) -> Burst:
    burst = Burst()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for request in range(len(bodies)):
        queue.put_nowait(request)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    async def worker(session: aiohttp.ClientSession) -> None:
        while not queue.empty():
            request = queue.get_nowait()
            burst.in_flight += 1
            burst.max_in_flight = max(burst.max_in_flight, burst.in_flight)
            try:
                async with session.post(url, data=bodies[request], headers=headers) as response:
                    text = await response.text()
                    if 200 <= response.status < 300:
                        burst.acked[request] = json.loads(text)
                        if on_ack is not None:
                            on_ack(burst)
                    else:
                        burst.failed[request] = f"HTTP {response.status}: {text}"
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                burst.failed[request] = f"{type(exc).__name__}: {exc}"
            finally:
                burst.in_flight -= 1

    connector = aiohttp.TCPConnector(limit=connections)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(connections)))
    return burst


def query(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db, timeout=10) as conn:
        return conn.execute(sql, args).fetchall()


def stored_fingerprints(db: Path) -> set[str]:
    return {row[0] for row in query(db, "SELECT fingerprint FROM inbox")}


def processing_state(db: Path) -> tuple[int, int, int]:
    """(inbox rows, rows marked done, done rows that have exactly their journal row)."""
    ((rows,),) = query(db, "SELECT count(*) FROM inbox")
    ((done,),) = query(db, "SELECT count(*) FROM inbox WHERE state = 'done'")
    ((journaled,),) = query(
        db, "SELECT count(*) FROM inbox i JOIN faults f ON f.inbox_seq = i.seq WHERE i.state = 'done'"
    )
    return rows, done, journaled


async def wait_until(
    what: str, probe: Callable[[], T] | Callable[[], Awaitable[T]], *, timeout: float = 120.0
) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last  # type: ignore[no-any-return]
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def all_processed(db: Path) -> bool:
    rows, done, journaled = processing_state(db)
    return rows == done == journaled


async def test_sigkill_mid_burst_loses_no_acknowledged_alert(sickbay_server):
    bodies = [body(request) for request in range(REQUESTS)]
    server = sickbay_server(token=TOKEN)
    url = f"{server.url}/api/v1/alerts"

    def kill_at_threshold(burst: Burst) -> None:
        if len(burst.acked) == KILL_AT_ACKS:
            server.proc.kill()  # SIGKILL, from inside the burst: requests are in flight right now

    burst = await send_burst(url, bodies, on_ack=kill_at_threshold)
    server.proc.wait(timeout=30)
    assert server.proc.returncode == -9, "the server must have died of SIGKILL"
    assert burst.max_in_flight >= 16
    assert len(burst.acked) + len(burst.failed) == REQUESTS
    # Killed mid-burst: some requests made it, many did not (the rest were refused or cut off).
    assert KILL_AT_ACKS <= len(burst.acked) < REQUESTS
    assert len(burst.failed) > 0
    for request, answer in burst.acked.items():
        assert answer == {"accepted": PER_REQUEST, "duplicates": 0, "rejected": 0}, (request, answer)
    acked_fps = {fingerprint(r, i) for r in burst.acked for i in range(PER_REQUEST)}

    # The file survived the kill intact, and every acknowledged alert is in it — before any restart.
    assert query(server.db, "PRAGMA integrity_check") == [("ok",)]
    before_restart = stored_fingerprints(server.db)
    missing = acked_fps - before_restart
    print(
        f"\nacked before SIGKILL: {len(burst.acked)} requests = {len(acked_fps)} alerts "
        f"(of {REQUESTS * PER_REQUEST}); {len(burst.failed)} requests failed; "
        f"{len(before_restart)} alerts in the inbox after the kill; "
        f"max {burst.max_in_flight} requests in flight"
    )
    assert not missing, f"{len(missing)} acknowledged alerts lost, e.g. {sorted(missing)[:5]}"

    # Restart on the same file: every stored row (acknowledged or not) is processed and journaled once.
    restarted = sickbay_server(db=server.db, token=TOKEN)
    await wait_until("every inbox row processed after restart", lambda: all_processed(server.db))
    done_fps = {
        row[0]
        for row in query(
            server.db,
            "SELECT i.fingerprint FROM inbox i JOIN faults f ON f.inbox_seq = i.seq WHERE i.state = 'done'",
        )
    }
    assert acked_fps <= done_fps
    assert query(server.db, "SELECT count(*) FROM inbox WHERE state = 'failed'") == [(0,)]

    # Alertmanager re-sends what it saw fail; here: everything. Stored alerts come back as duplicates.
    stored = stored_fingerprints(server.db)
    resend = await send_burst(f"{restarted.url}/api/v1/alerts", bodies)
    assert not resend.failed, list(resend.failed.items())[:3]
    for request, answer in resend.acked.items():
        already = sum(fingerprint(request, i) in stored for i in range(PER_REQUEST))
        assert answer == {"accepted": PER_REQUEST - already, "duplicates": already, "rejected": 0}, (
            request,
            answer,
        )
        if request in burst.acked:
            assert answer["duplicates"] == PER_REQUEST
    assert sum(a["duplicates"] for a in resend.acked.values()) == len(stored)

    # Exactly one row per alert, each processed and journaled exactly once.
    assert query(server.db, "SELECT count(*), count(DISTINCT fingerprint) FROM inbox") == [
        (REQUESTS * PER_REQUEST, REQUESTS * PER_REQUEST)
    ]
    await wait_until("every inbox row processed after the re-send", lambda: all_processed(server.db))
    assert query(server.db, "SELECT count(*), count(DISTINCT inbox_seq) FROM faults") == [
        (REQUESTS * PER_REQUEST, REQUESTS * PER_REQUEST)
    ]
    assert query(server.db, "SELECT fingerprint FROM faults GROUP BY fingerprint HAVING count(*) > 1") == []
    assert query(server.db, "SELECT count(*) FROM inbox WHERE state = 'failed'") == [(0,)]
