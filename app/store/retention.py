"""Deleting what `app.decide.retention` says may go: in batches, then giving the space back.

Each batch is one short transaction under the store's shared write lock (`transactions.transaction`), so
the inbox's group commits take turns with it and intake never waits more than one batch. On its own
connection to the file, so its temporary table and its statements never meet the journal's. What to
keep is decided elsewhere (`app.decide.retention`); this only turns cutoffs into statements.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import aiosqlite

from app.store import space, transactions

# Rows naming a held node stay (a NULL node names none); `json_each` takes the whole set as one parameter.
_NOT_HELD = "(node IS NULL OR node NOT IN (SELECT value FROM json_each(?)))"
# Per table: the rows past the cutoff (its one parameter) that may go, and whether its rows name a node
# (then `_NOT_HELD` is added, with the held nodes as its parameter).
_PRUNABLE = {
    # Processed only; an Alertmanager firing with no resolved notification stays (a resend of it must stay
    # a duplicate). Uses inbox_by_received, and the dedup key's index for the resolved lookup.
    "inbox": (
        "received_at < ? AND state != 'pending' AND NOT (source = 'alertmanager' AND status = 'firing' "
        "AND NOT EXISTS (SELECT 1 FROM inbox AS r WHERE r.source = inbox.source "
        "AND r.fingerprint = inbox.fingerprint AND r.starts_at = inbox.starts_at AND r.status = 'resolved'))",
        True,
    ),
    # The latest row of an alert still firing stays: `_keep_firing` lists them once per pass.
    "faults": ("at < ? AND id NOT IN (SELECT id FROM temp.keep_faults)", True),
    "outcomes": ("at < ?", True),
    # Each (fleet, version)'s latest row is its standing now; a small table, so the subquery is cheap.
    "model_validation": (
        "at < ? AND id NOT IN (SELECT max(id) FROM model_validation GROUP BY fleet, version)",
        False,
    ),
}
_KEY = {"inbox": "seq", "faults": "id", "outcomes": "id", "model_validation": "id"}


@dataclass(frozen=True, slots=True)
class Pruned:
    """What one pass did: rows deleted per table, pages given back, the file's size after."""

    rows: dict[str, int] = field(default_factory=dict)
    pages_reclaimed: int = 0
    size: space.Size | None = None

    @property
    def total(self) -> int:
        return sum(self.rows.values())


class Pruner:
    def __init__(
        self, db: aiosqlite.Connection, *, write_lock: asyncio.Lock, batch_rows: int, vacuum_pages: int
    ) -> None:
        self._db = db
        self._write_lock = write_lock  # shared with the inbox and the journal: see `transactions`
        self._lock = asyncio.Lock()
        self._batch = batch_rows
        self._pages = vacuum_pages

    @classmethod
    async def open(
        cls, path: Path, *, write_lock: asyncio.Lock, batch_rows: int, vacuum_pages: int
    ) -> Pruner:
        db = await space.connect(path, durable=False)
        return cls(db, write_lock=write_lock, batch_rows=batch_rows, vacuum_pages=vacuum_pages)

    async def close(self) -> None:
        await self._db.close()

    async def prune(self, cutoffs: Mapping[str, datetime], *, held: frozenset[str]) -> Pruned:
        """Delete every named table's prunable rows older than its cutoff, in batches, then reclaim the
        free pages. `held`: the nodes whose rows all stay."""
        present = await self._tables()
        names = json.dumps(sorted(held))
        rows: dict[str, int] = {}
        for table, cutoff in cutoffs.items():
            if table not in _PRUNABLE:
                raise ValueError(f"no retention rule for table {table!r}")
            if table not in present:
                continue
            if table == "faults":
                await self._keep_firing(cutoff.isoformat())
            rows[table] = await self._delete(table, cutoff=cutoff.isoformat(), held=names)
        reclaimed = await space.reclaim(self._db, pages=self._pages, write_lock=self._write_lock)
        return Pruned(rows=rows, pages_reclaimed=reclaimed, size=await space.size(self._db))

    async def size(self) -> space.Size:
        return await space.size(self._db)

    async def _tables(self) -> set[str]:
        async with self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'") as cursor:
            return {str(name) for (name,) in await cursor.fetchall()}

    async def _keep_firing(self, cutoff: str) -> None:
        """The faults rows past the cutoff that are their alert's latest and firing, listed once per pass
        (the `max(id)` per fingerprint reads faults_by_fingerprint; per batch it would be read again)."""
        async with self._lock:
            await self._db.execute("DROP TABLE IF EXISTS temp.keep_faults")
            await self._db.execute(
                "CREATE TEMP TABLE keep_faults AS SELECT id FROM faults WHERE at < ? AND status = 'firing' "
                "AND source = 'alertmanager' AND id IN (SELECT max(id) FROM faults "
                "WHERE source = 'alertmanager' GROUP BY fingerprint)",
                (cutoff,),
            )

    async def _delete(self, table: str, *, cutoff: str, held: str) -> int:
        """Delete in batches of `batch_rows`, one transaction each, yielding between them."""
        (where, names_node), key = _PRUNABLE[table], _KEY[table]
        params = (cutoff, held) if names_node else (cutoff,)
        if names_node:
            where = f"{where} AND {_NOT_HELD}"
        statement = (
            f"DELETE FROM {table} WHERE {key} IN "  # noqa: S608 - fixed fragments only
            f"(SELECT {key} FROM {table} WHERE {where} LIMIT ?)"
        )
        total = 0
        while True:
            async with transactions.transaction(self._db, write_lock=self._write_lock, lock=self._lock):
                cursor = await self._db.execute(statement, (*params, self._batch))
                deleted = max(cursor.rowcount, 0)
            total += deleted
            if deleted < self._batch:
                return total
            await asyncio.sleep(0)  # the intake's commit waiting on the write lock goes first
