"""The journal's risks: each scoring cycle's GPUs at warn or above, kept `RISK_RETENTION`.

What the model saw, for audits, retraining reviews and `explain`, whether or not the level changed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from app.domain import Risk, RiskLevel
from app.store.journal_db import JournalDb

RISKS_SCHEMA = """
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
"""

RISK_RETENTION = timedelta(days=30)


class RiskLog(JournalDb):
    """Elevated risks by scoring cycle, pruned as they are written."""

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
        async with self._transaction():
            if rows:
                await self._db.executemany("INSERT INTO risks VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            await self._db.execute("DELETE FROM risks WHERE at < ?", ((at - RISK_RETENTION).isoformat(),))
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
