"""The journal: faults and the plans made for them, in the same SQLite file as the inbox.

It is the memory behind escalation windows, classification context, `explain`, the status page and
training labels. Writes are idempotent per inbox row, so a row replayed after a crash is journaled once.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiosqlite

from app.domain import Fault, Plan, Signal
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
    plan         TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS faults_by_gpu ON faults (node, gpu, at);
CREATE INDEX IF NOT EXISTS faults_by_time ON faults (at);
"""


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
    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, db: aiosqlite.Connection) -> Journal:
        await db.executescript(SCHEMA)
        return cls(db)

    async def record(self, *, inbox_seq: int | None, fault: Fault, plan: Plan) -> bool:
        """Journal a fault and its plan; False when this inbox row was already journaled (a replay)."""
        signal = fault.signal
        async with self._lock:
            await self._db.execute("BEGIN IMMEDIATE")
            try:
                cursor = await self._db.execute(
                    "INSERT OR IGNORE INTO faults (inbox_seq, at, node, gpu, xid, class, rule, status, source, "
                    "fingerprint, reason, signal, plan) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    ),
                )
                await self._db.commit()
            except BaseException:
                await self._db.rollback()
                raise
        return (cursor.rowcount or 0) > 0

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
