"""The validation log: every change of the proactive ladder's standing per (model version, fleet), and
every backtest that judged one, with its figures.

Append-only, in the journal's SQLite file and on its connection, so a restart, a failover or a new
replica reads the same standing: the latest row of a (version, fleet) is its standing now. A version
with no row has never been seen on this fleet, which is what puts a new model in shadow. It records; the
decisions are `decide.shadow`'s.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiosqlite

from app.store import codec

SCHEMA = """
CREATE TABLE IF NOT EXISTS model_validation (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at        TEXT NOT NULL,
    version   TEXT NOT NULL,
    fleet     TEXT NOT NULL,
    reason    TEXT NOT NULL,
    acting    INTEGER NOT NULL,
    detail    TEXT NOT NULL,
    by        TEXT NOT NULL,
    evidence  TEXT
);
CREATE INDEX IF NOT EXISTS model_validation_by_key ON model_validation (fleet, version, id);
"""


@dataclass(frozen=True, slots=True)
class Row:
    """One standing as journaled (`decide.shadow.Standing`'s fields; `act.shadowing` converts)."""

    at: datetime
    version: str
    fleet: str
    reason: str
    acting: bool
    detail: str
    by: str
    evidence: dict[str, Any] | None = None
    id: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "version": self.version,
            "fleet": self.fleet,
            "mode": "acting" if self.acting else "shadow",
            "reason": self.reason,
            "detail": self.detail,
            "by": self.by,
            "evidence": self.evidence,
        }


_COLUMNS = "id, at, version, fleet, reason, acting, detail, by, evidence"


class ValidationLog:
    def __init__(self, db: aiosqlite.Connection, *, write_lock: asyncio.Lock) -> None:
        self._db = db
        self._write_lock = write_lock

    @classmethod
    async def open(cls, db: aiosqlite.Connection, *, write_lock: asyncio.Lock | None = None) -> ValidationLog:
        await db.executescript(SCHEMA)
        return cls(db, write_lock=write_lock or asyncio.Lock())

    async def append(self, row: Row) -> None:
        async with self._write_lock:
            await self._db.execute(
                "INSERT INTO model_validation (at, version, fleet, reason, acting, detail, by, evidence) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.at.isoformat(),
                    row.version,
                    row.fleet,
                    row.reason,
                    1 if row.acting else 0,
                    row.detail,
                    row.by,
                    codec.dumps(row.evidence) if row.evidence is not None else None,
                ),
            )
            await self._db.commit()

    async def latest(self, *, fleet: str) -> list[Row]:
        """Each version's latest row on `fleet`: its standing now."""
        query = (
            f"SELECT {_COLUMNS} FROM model_validation "  # noqa: S608 - constant column list
            "WHERE id IN (SELECT max(id) FROM model_validation WHERE fleet = ? GROUP BY version)"
        )
        async with self._db.execute(query, (fleet,)) as cursor:
            return [_row(r) for r in await cursor.fetchall()]

    async def recent(self, *, fleet: str, limit: int = 20) -> list[Row]:
        """The newest rows first: the standing's history and the backtests' figures."""
        async with self._db.execute(
            f"SELECT {_COLUMNS} FROM model_validation WHERE fleet = ? ORDER BY id DESC LIMIT ?",  # noqa: S608
            (fleet, limit),
        ) as cursor:
            return [_row(r) for r in await cursor.fetchall()]


def _row(row: Any) -> Row:
    id_, at, version, fleet, reason, acting, detail, by, evidence = row
    return Row(
        id=int(id_),
        at=datetime.fromisoformat(str(at)),
        version=str(version),
        fleet=str(fleet),
        reason=str(reason),
        acting=bool(acting),
        detail=str(detail),
        by=str(by),
        evidence=json.loads(evidence) if evidence else None,
    )
