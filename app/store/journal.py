"""The journal: faults and the plans made for them, in the same SQLite file as the inbox.

It is the memory behind escalation windows, classification context, `explain`, the status page and
training labels. Writes are idempotent per inbox row, so a row replayed after a crash is journaled once.
One class for its callers, one module per table: `faults`, `outcomes`, `risks`, `recheck_queue`,
`restart_queue`, and the small key-value table here; the connection and locks they share are `journal_db`'s.
"""

from __future__ import annotations

import asyncio

import aiosqlite

from app.store.faults import FAULTS_SCHEMA, FaultLog
from app.store.outcomes import OUTCOMES_SCHEMA, OutcomeLog
from app.store.recheck_queue import RECHECKS_SCHEMA, RecheckQueue
from app.store.restart_queue import RESTARTS_SCHEMA, RestartQueue
from app.store.risks import RISKS_SCHEMA, RiskLog

KV_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    key          TEXT PRIMARY KEY,
    value        TEXT NOT NULL
);
"""
SCHEMA = FAULTS_SCHEMA + OUTCOMES_SCHEMA + KV_SCHEMA + RISKS_SCHEMA + RECHECKS_SCHEMA + RESTARTS_SCHEMA


class Journal(FaultLog, OutcomeLog, RiskLog, RecheckQueue, RestartQueue):
    """The journal's tables on one connection (see the module docstring)."""

    @classmethod
    async def open(cls, db: aiosqlite.Connection, *, write_lock: asyncio.Lock | None = None) -> Journal:
        await db.executescript(SCHEMA)
        return cls(db, write_lock=write_lock)

    async def get(self, key: str) -> str | None:
        async with self._lock, self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)) as cursor:
            row = await cursor.fetchone()
        return str(row[0]) if row else None

    async def put(self, key: str, value: str) -> None:
        async def write(db: aiosqlite.Connection) -> None:
            await db.execute(
                "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

        await self._group.run(write)
