"""The journal's re-check queue: transient signals to look at again while they fire.

One row per firing (fingerprint and startsAt), durable, so a restart or a failover keeps re-checking; the
re-check job (`app.service.rechecks`) moves due rows to the inbox.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from app.domain import Signal
from app.store import codec
from app.store.journal_db import JournalDb

RECHECKS_SCHEMA = """
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
"""


class RecheckQueue(JournalDb):
    """Firings due for a re-check, by due time."""

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
