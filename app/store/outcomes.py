"""The journal's outcomes: what each action of a plan did (applied, blocked, failed, dry-run), by node.

The quarantine attempts among them are what the weekly attempt cap and the quarantine rate limit count.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import aiosqlite

from app.domain import Outcome
from app.store.journal_db import JournalDb

OUTCOMES_SCHEMA = """
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
CREATE INDEX IF NOT EXISTS outcomes_by_kind ON outcomes (kind, at);
CREATE INDEX IF NOT EXISTS outcomes_by_time ON outcomes (at);
-- One node's applied quarantines, read for every hardware fault planned (the weekly attempt cap): a few
-- rows per node in a table of every action ever taken.
CREATE INDEX IF NOT EXISTS outcomes_quarantines ON outcomes (node, at) WHERE kind = 'quarantine' AND status = 'applied';
"""


class OutcomeLog(JournalDb):
    """Outcomes of executed actions, newest last."""

    async def record_outcomes(self, fault_id: int | None, outcomes: Sequence[Outcome]) -> None:
        if not outcomes:
            return
        rows = [
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
        ]

        async def write(db: aiosqlite.Connection) -> None:
            await db.executemany(
                "INSERT INTO outcomes (fault_id, at, kind, track, node, pod, status, detail, attempts) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

        await self._group.run(write)

    async def outcomes(self, *, node: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        # Two texts, not `(? IS NULL OR node = ?)`: that one cannot use an index, and one node's outcomes
        # would be looked for by scanning the whole table backwards.
        where, params = ("WHERE node = ? ", (node, limit)) if node is not None else ("", (limit,))
        async with (
            self._lock,
            self._db.execute(
                "SELECT fault_id, at, kind, track, node, pod, status, detail, attempts FROM outcomes "  # noqa: S608 - fixed fragments only
                f"{where}ORDER BY id DESC LIMIT ?",
                params,
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        keys = ("fault_id", "at", "kind", "track", "node", "pod", "status", "detail", "attempts")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    async def quarantine_times(self, *, node: str, since: datetime) -> list[datetime]:
        """When `node` was quarantined (applied, not dry-run) since `since`: the weekly attempt cap."""
        async with self._lock:  # one trip to SQLite's thread: every hardware fault reads this
            rows = await self._db.execute_fetchall(
                "SELECT at FROM outcomes WHERE node = ? AND kind = 'quarantine' AND status = 'applied' AND at >= ?",
                (node, since.isoformat()),
            )
        return [datetime.fromisoformat(at) for (at,) in rows]

    async def quarantines_since(self, since: datetime, *, limit: int) -> list[tuple[str, datetime]]:
        """Every node's quarantines (applied, not dry-run) since `since`, with when, the latest `limit`:
        the rate limit, which needs no more than its own limit of them to refuse."""
        async with (
            self._lock,
            self._db.execute(
                "SELECT node, at FROM outcomes WHERE kind = 'quarantine' AND status = 'applied' AND at >= ? "
                "AND node IS NOT NULL ORDER BY at DESC LIMIT ?",
                (since.isoformat(), limit),
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        return [(str(node), datetime.fromisoformat(at)) for node, at in rows]
