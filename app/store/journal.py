"""The journal: faults and the plans made for them, in the same SQLite file as the inbox.

It is the memory behind escalation windows, classification context, `explain`, the status page and
training labels. Writes are idempotent per inbox row, so a row replayed after a crash is journaled once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import aiosqlite

from app.domain import Fault, FaultClass, Outcome, PastFault, Plan, Risk, RiskLevel, Signal
from app.store import codec

SCHEMA = """
CREATE TABLE IF NOT EXISTS faults (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    inbox_seq    INTEGER UNIQUE,
    at           TEXT NOT NULL,
    node         TEXT,
    gpu          INTEGER,
    xid          INTEGER,
    class        TEXT NOT NULL,
    rule         TEXT NOT NULL,
    status       TEXT NOT NULL,
    source       TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    reason       TEXT NOT NULL,
    signal       TEXT NOT NULL,
    plan         TEXT NOT NULL,
    workload     TEXT
);
CREATE TABLE IF NOT EXISTS outcomes (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    fault_id     INTEGER,
    at           TEXT NOT NULL,
    kind         TEXT NOT NULL,
    track        TEXT NOT NULL,
    node         TEXT,
    pod          TEXT,
    status       TEXT NOT NULL,
    detail       TEXT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS outcomes_by_node ON outcomes (node, at);
CREATE TABLE IF NOT EXISTS kv (
    key          TEXT PRIMARY KEY,
    value        TEXT NOT NULL
);
-- Each scoring cycle's elevated risks (GPUs at warn or above): what the model saw, for audits, retraining
-- reviews and `explain`, whether or not the level changed. Pruned after RISK_RETENTION.
CREATE TABLE IF NOT EXISTS risks (
    at            TEXT NOT NULL,
    node          TEXT NOT NULL,
    gpu           INTEGER,
    score         REAL NOT NULL,
    level         TEXT NOT NULL,
    model_version TEXT NOT NULL,
    drivers       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS risks_by_node ON risks (node, at);
-- Transient signals to look at again while they fire (one row per firing: fingerprint and startsAt).
-- Durable, so a restart or a failover keeps re-checking; the re-check loop moves due rows to the inbox.
CREATE TABLE IF NOT EXISTS rechecks (
    fingerprint  TEXT NOT NULL,
    starts_at    TEXT NOT NULL,
    node         TEXT,
    due_at       TEXT NOT NULL,
    check_no     INTEGER NOT NULL,
    signal       TEXT NOT NULL,
    PRIMARY KEY (fingerprint, starts_at)
);
CREATE INDEX IF NOT EXISTS rechecks_due ON rechecks (due_at);
CREATE INDEX IF NOT EXISTS faults_by_gpu ON faults (node, gpu, at);
CREATE INDEX IF NOT EXISTS faults_by_time ON faults (at);
CREATE INDEX IF NOT EXISTS faults_by_fingerprint ON faults (fingerprint, id);
"""


RISK_RETENTION = timedelta(days=30)


@dataclass(frozen=True, slots=True)
class Entry:
    id: int
    at: str
    node: str | None
    gpu: int | None
    xid: int | None
    fault_class: str
    rule: str
    status: str
    source: str
    reason: str
    plan: dict[str, Any]


class Journal:
    def __init__(self, db: aiosqlite.Connection, *, write_lock: asyncio.Lock | None = None) -> None:
        self._db = db
        self._lock = asyncio.Lock()
        self._write_lock = write_lock or asyncio.Lock()  # shared with the inbox: see Inbox

    @classmethod
    async def open(cls, db: aiosqlite.Connection, *, write_lock: asyncio.Lock | None = None) -> Journal:
        await db.executescript(SCHEMA)
        return cls(db, write_lock=write_lock)

    async def record(
        self, *, inbox_seq: int | None, fault: Fault, plan: Plan, workload: str | None = None
    ) -> tuple[int, bool]:
        """Journal a fault and its plan; returns its id and False when this row was journaled before (a replay)."""
        signal = fault.signal
        # One autocommitted statement: the shared write lock is held for a single round trip.
        async with self._write_lock, self._lock:
            cursor = await self._db.execute(
                "INSERT OR IGNORE INTO faults (inbox_seq, at, node, gpu, xid, class, rule, status, source, "
                "fingerprint, reason, signal, plan, workload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    inbox_seq,
                    signal.starts_at.isoformat(),
                    signal.node,
                    signal.gpu,
                    signal.xid,
                    fault.fault_class.value,
                    fault.rule,
                    signal.status.value,
                    signal.source.value,
                    signal.fingerprint,
                    fault.reason,
                    codec.dumps(codec.signal_to_dict(signal)),
                    codec.dumps(codec.plan_to_dict(plan)),
                    workload,
                ),
            )
            fresh = (cursor.rowcount or 0) > 0
            fault_id = cursor.lastrowid if fresh else None
        if fault_id is None:  # a replayed row: find the id it was journaled under
            async with (
                self._lock,
                self._db.execute("SELECT id FROM faults WHERE inbox_seq = ?", (inbox_seq,)) as found,
            ):
                row = await found.fetchone()
            fault_id = int(row[0]) if row else 0
        return int(fault_id), fresh

    async def record_outcomes(self, fault_id: int | None, outcomes: Sequence[Outcome]) -> None:
        if not outcomes:
            return
        async with self._write_lock, self._lock:
            await self._db.execute("BEGIN IMMEDIATE")
            try:
                await self._db.executemany(
                    "INSERT INTO outcomes (fault_id, at, kind, track, node, pod, status, detail, attempts) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            fault_id,
                            o.at.isoformat(),
                            o.action.kind.value,
                            o.action.track.value,
                            o.action.node,
                            str(o.action.pod) if o.action.pod else None,
                            o.status.value,
                            o.detail,
                            o.attempts,
                        )
                        for o in outcomes
                    ],
                )
                await self._db.commit()
            except BaseException:
                await self._db.rollback()
                raise

    async def outcomes(self, *, node: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        async with (
            self._lock,
            self._db.execute(
                "SELECT fault_id, at, kind, track, node, pod, status, detail, attempts FROM outcomes "
                "WHERE (? IS NULL OR node = ?) ORDER BY id DESC LIMIT ?",
                (node, node, limit),
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        keys = ("fault_id", "at", "kind", "track", "node", "pod", "status", "detail", "attempts")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    async def history(self, *, node: str, since: datetime) -> list[PastFault]:
        """Faults journaled on `node` since `since`: escalation and backoff read these."""
        async with (
            self._lock,
            self._db.execute(
                "SELECT at, class, gpu, xid, workload, fingerprint, json_extract(signal, '$.name') "
                "FROM faults WHERE node = ? AND at >= ? AND status = 'firing' ORDER BY at, id",
                (node, since.isoformat()),
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        return [
            PastFault(
                at=datetime.fromisoformat(at),
                fault_class=FaultClass(cls),
                gpu=gpu,
                xid=xid,
                workload=workload,
                fingerprint=fingerprint,
                name=name or "",
            )
            for at, cls, gpu, xid, workload, fingerprint, name in rows
        ]

    async def active_alerts(self, *, node: str) -> list[tuple[str, str]]:
        """(fingerprint, class) of Alertmanager alerts on `node` whose latest notification is firing."""
        async with (
            self._lock,
            self._db.execute(
                "SELECT fingerprint, class, status FROM faults WHERE node = ? AND source = 'alertmanager' "
                "AND id IN (SELECT max(id) FROM faults WHERE node = ? AND source = 'alertmanager' GROUP BY fingerprint)",
                (node, node),
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        return [(fp, cls) for fp, cls, status in rows if status == "firing"]

    async def quarantine_times(self, *, node: str, since: datetime) -> list[datetime]:
        """When `node` was quarantined (applied, not dry-run) since `since`: the weekly attempt cap."""
        async with (
            self._lock,
            self._db.execute(
                "SELECT at FROM outcomes WHERE node = ? AND kind = 'quarantine' AND status = 'applied' AND at >= ?",
                (node, since.isoformat()),
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        return [datetime.fromisoformat(at) for (at,) in rows]

    async def firing_alerts(self) -> list[tuple[str, dict[str, Any]]]:
        """(fingerprint, signal) of every Alertmanager alert whose latest journaled notification is firing."""
        async with (
            self._lock,
            self._db.execute(
                "SELECT fingerprint, status, signal FROM faults WHERE id IN "
                "(SELECT max(id) FROM faults WHERE source = 'alertmanager' GROUP BY fingerprint)"
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        return [(fp, json.loads(signal)) for fp, status, signal in rows if status == "firing"]

    async def record_risks(self, at: datetime, risks: Sequence[Risk]) -> int:
        """Journal a scoring cycle's GPUs at warn or above (one multi-row insert); prunes old cycles."""
        rows = [
            (
                at.isoformat(),
                r.node,
                r.gpu,
                r.score,
                r.level.value,
                r.model_version,
                json.dumps([list(d) for d in r.drivers]),
            )
            for r in risks
            if r.level is not RiskLevel.NONE
        ]
        async with self._write_lock, self._lock:
            await self._db.execute("BEGIN IMMEDIATE")
            try:
                if rows:
                    await self._db.executemany("INSERT INTO risks VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                await self._db.execute("DELETE FROM risks WHERE at < ?", ((at - RISK_RETENTION).isoformat(),))
                await self._db.commit()
            except BaseException:
                await self._db.rollback()
                raise
        return len(rows)

    async def risks(self, *, node: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """The latest journaled risks, newest first (optionally one node's)."""
        query = (
            "SELECT at, node, gpu, score, level, model_version, drivers FROM risks"
            " WHERE (? IS NULL OR node = ?) ORDER BY at DESC LIMIT ?"
        )
        async with self._lock, self._db.execute(query, (node, node, limit)) as cursor:
            rows = await cursor.fetchall()
        return [
            {
                "at": at,
                "node": n,
                "gpu": gpu,
                "score": score,
                "level": level,
                "model_version": version,
                "drivers": json.loads(drivers),
            }
            for at, n, gpu, score, level, version, drivers in rows
        ]

    async def schedule_recheck(self, signal: Signal, *, due: datetime, check: int) -> None:
        """Look at this firing again at `due` (replaces an earlier schedule for the same firing)."""
        async with self._write_lock, self._lock:
            await self._db.execute(
                "INSERT INTO rechecks (fingerprint, starts_at, node, due_at, check_no, signal) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (fingerprint, starts_at) DO UPDATE SET "
                "due_at = excluded.due_at, check_no = excluded.check_no, signal = excluded.signal",
                (
                    signal.fingerprint,
                    signal.starts_at.isoformat(),
                    signal.node,
                    due.isoformat(),
                    check,
                    codec.signal_json(signal),
                ),
            )

    async def due_rechecks(self, now: datetime, *, limit: int = 1000) -> list[tuple[Signal, int]]:
        """Firings whose re-check is due, oldest first, with the check number; `done_rechecks` removes them."""
        async with (
            self._lock,
            self._db.execute(
                "SELECT signal, check_no FROM rechecks WHERE due_at <= ? ORDER BY due_at LIMIT ?",
                (now.isoformat(), limit),
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        return [(codec.signal_from_dict(json.loads(raw)), int(check)) for raw, check in rows]

    async def done_rechecks(self, done: Sequence[tuple[Signal, int]]) -> None:
        """Forget re-checks handed to the inbox (only the ones still at that check number)."""
        if not done:
            return
        async with self._write_lock, self._lock:
            await self._db.executemany(
                "DELETE FROM rechecks WHERE fingerprint = ? AND starts_at = ? AND check_no = ?",
                [(s.fingerprint, s.starts_at.isoformat(), check) for s, check in done],
            )

    async def latest_firing(self, fingerprint: str) -> datetime | None:
        """The startsAt of this alert's newest journaled row when that row is firing, else None."""
        async with (
            self._lock,
            self._db.execute(
                "SELECT at, status FROM faults WHERE fingerprint = ? ORDER BY id DESC LIMIT 1",
                (fingerprint,),
            ) as cursor,
        ):
            row = await cursor.fetchone()
        if row is None or row[1] != "firing":
            return None
        return datetime.fromisoformat(row[0])

    async def get(self, key: str) -> str | None:
        async with self._lock, self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)) as cursor:
            row = await cursor.fetchone()
        return str(row[0]) if row else None

    async def put(self, key: str, value: str) -> None:
        async with self._write_lock, self._lock:
            await self._db.execute("BEGIN IMMEDIATE")
            try:
                await self._db.execute(
                    "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )
                await self._db.commit()
            except BaseException:
                await self._db.rollback()
                raise

    async def recent_signals(self, *, node: str, gpu: int | None, since: datetime) -> list[Signal]:
        """Signals journaled for this node and GPU since `since`, oldest first: classification context."""
        async with (
            self._lock,
            self._db.execute(
                "SELECT signal FROM faults WHERE node = ? AND gpu IS ? AND at >= ? ORDER BY at, id",
                (node, gpu, since.isoformat()),
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        return [codec.signal_from_dict(json.loads(row[0])) for row in rows]

    async def entries(self, *, limit: int = 100, node: str | None = None) -> list[Entry]:
        # `node IS NULL OR` keeps one constant query text whether or not a node filter is given.
        async with (
            self._lock,
            self._db.execute(
                "SELECT id, at, node, gpu, xid, class, rule, status, source, reason, plan FROM faults "
                "WHERE (? IS NULL OR node = ?) ORDER BY id DESC LIMIT ?",
                (node, node, limit),
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        return [
            Entry(
                id=row[0],
                at=row[1],
                node=row[2],
                gpu=row[3],
                xid=row[4],
                fault_class=row[5],
                rule=row[6],
                status=row[7],
                source=row[8],
                reason=row[9],
                plan=json.loads(row[10]),
            )
            for row in rows
        ]

    async def count(self) -> int:
        async with self._lock, self._db.execute("SELECT count(*) FROM faults") as cursor:
            row = await cursor.fetchone()
        return int(row[0]) if row else 0
