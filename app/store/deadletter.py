"""The dead-letter list: alerts and agent events refused one by one, kept with their reason and labels, and
inbox rows the pipeline gave up on (`app.service.pipeline`: a row it can never process, or one that failed
every retry), kept with their error, so that neither a refusal nor a poison row is lost unseen.

Alertmanager retries a webhook only on a 5xx (its `notify.Retrier.Check`, prometheus/alertmanager
notify/util.go), so an alert the webhook refuses is gone for good unless it is kept here where an
operator can see it (`GET /api/v1/rejected`, the status page). The list is bounded: the `max_rows` most
recently seen distinct letters are kept, older ones are deleted in the same transaction. A resend of a
letter already kept (Alertmanager re-sends a group every `group_interval` while it changes and every
`repeat_interval` while it fires) adds to that row's count instead of adding a row; two letters are the
same when the item as sent is the same apart from `endsAt`, which Alertmanager zeroes for a firing alert
and moves on each resend of a resolved one (`types.Alerts`, prometheus/alertmanager types/types.go).

Same SQLite file as the inbox, its own connection, its schema created at open. It records; it never
decides anything about what it keeps.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from app.store import codec, inbox, transactions

# A kept item or label set is cut to this many characters of JSON (and marked so): with the row bound,
# the table can never hold more than about max_rows x 2 x 8 KiB.
MAX_TEXT = 8192
_MAX_FIELD = 512  # fingerprint, where, message

SCHEMA = """
CREATE TABLE IF NOT EXISTS dead_letter (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    source       TEXT NOT NULL,
    digest       TEXT NOT NULL,
    reason       TEXT NOT NULL,
    loc          TEXT NOT NULL,
    message      TEXT NOT NULL,
    fingerprint  TEXT,
    labels       TEXT,
    item         TEXT NOT NULL,
    first_seen   TEXT NOT NULL,
    last_seen    TEXT NOT NULL,
    seen         INTEGER NOT NULL DEFAULT 1,
    touched      INTEGER NOT NULL,
    UNIQUE (source, digest)
);
CREATE INDEX IF NOT EXISTS dead_letter_touched ON dead_letter (touched);
"""


class DeadLetterError(RuntimeError):
    """The list could not be written or read (disk, closed connection); the caller answers 503."""


@dataclass(frozen=True, slots=True)
class Letter:
    """One refused item: `item` is the JSON value exactly as it arrived (it may not even be an object);
    `fingerprint`, when known apart from the item (an inbox row's), else read from the item."""

    source: str
    reason: str
    where: str
    message: str
    item: Any
    fingerprint: str | None = None


@dataclass(frozen=True, slots=True)
class Kept:
    """A letter as stored: `labels` and `item` are JSON values (cut ones say `{"truncated": ...}`)."""

    id: int
    source: str
    reason: str
    where: str
    message: str
    fingerprint: str | None
    labels: Any
    item: Any
    first_seen: str
    last_seen: str
    seen: int


def digest(source: str, item: Any) -> str:
    """Identity of a letter: the item as sent, keys sorted, less `endsAt` (see the module docstring)."""
    if isinstance(item, dict):
        item = {k: v for k, v in item.items() if k != "endsAt"}
    text = json.dumps([source, item], sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _bounded(value: Any) -> str:
    text = codec.dumps(value)
    if len(text) <= MAX_TEXT:
        return text
    return codec.dumps({"truncated": True, "chars": len(text), "head": text[:MAX_TEXT]})


def _fingerprint(item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    value = item.get("fingerprint", item.get("id"))
    return value[:_MAX_FIELD] if isinstance(value, str) else None


def _labels(item: Any) -> str | None:
    return _bounded(item["labels"]) if isinstance(item, dict) and "labels" in item else None


class DeadLetters:
    """The `dead_letter` table: `keep` refused items, read the newest back."""

    def __init__(self, db: aiosqlite.Connection, *, max_rows: int, write_lock: asyncio.Lock) -> None:
        self._db = db
        self.max_rows = max_rows
        # Shared with the inbox and the journal: SQLite has one writer; the FIFO lock takes turns fairly.
        self._write_lock = write_lock
        self._lock = asyncio.Lock()  # one statement sequence at a time on this connection

    @classmethod
    async def open(cls, path: Path, *, max_rows: int, write_lock: asyncio.Lock | None = None) -> DeadLetters:
        db = await inbox.connect(path)
        await db.executescript(SCHEMA)
        return cls(db, max_rows=max_rows, write_lock=write_lock or asyncio.Lock())

    async def close(self) -> None:
        await self._db.close()

    async def keep(self, letters: Sequence[Letter], *, seen_at: datetime) -> None:
        """Record `letters` durably (one transaction), then trim the table to `max_rows`."""
        if not letters:
            return
        at = seen_at.isoformat()
        try:
            async with transactions.transaction(self._db, write_lock=self._write_lock, lock=self._lock):
                async with self._db.execute("SELECT coalesce(max(touched), 0) FROM dead_letter") as cur:
                    row = await cur.fetchone()
                touched = int(row[0]) if row else 0
                rows = []
                for offset, letter in enumerate(letters, start=1):
                    rows.append(
                        (
                            letter.source,
                            digest(letter.source, letter.item),
                            letter.reason,
                            letter.where[:_MAX_FIELD],
                            letter.message[:_MAX_FIELD],
                            (letter.fingerprint or "")[:_MAX_FIELD] or _fingerprint(letter.item),
                            _labels(letter.item),
                            _bounded(letter.item),
                            at,
                            at,
                            touched + offset,
                        )
                    )
                await self._db.executemany(
                    "INSERT INTO dead_letter (source, digest, reason, loc, message, fingerprint, labels, "
                    "item, first_seen, last_seen, touched) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (source, digest) DO UPDATE SET seen = seen + 1, "
                    "last_seen = excluded.last_seen, touched = excluded.touched, "
                    "reason = excluded.reason, loc = excluded.loc, message = excluded.message",
                    rows,
                )
                # The newest max_rows by last sighting stay; NULL (fewer rows than that) deletes nothing.
                await self._db.execute(
                    "DELETE FROM dead_letter WHERE touched <= "
                    "(SELECT touched FROM dead_letter ORDER BY touched DESC LIMIT 1 OFFSET ?)",
                    (self.max_rows,),
                )
        except (sqlite3.Error, ValueError) as exc:  # aiosqlite raises ValueError on a closed connection
            raise DeadLetterError(f"cannot record refused items: {exc}") from exc

    async def recent(self, *, limit: int, source: str | None = None) -> list[Kept]:
        """The most recently seen letters first."""
        where, params = ("WHERE source = ?", (source,)) if source else ("", ())
        try:
            async with (
                self._lock,
                self._db.execute(
                    "SELECT id, source, reason, loc, message, fingerprint, labels, item, first_seen, "  # noqa: S608 - fixed fragments only
                    f"last_seen, seen FROM dead_letter {where} ORDER BY touched DESC LIMIT ?",
                    (*params, limit),
                ) as cursor,
            ):
                rows = await cursor.fetchall()
        except (sqlite3.Error, ValueError) as exc:
            raise DeadLetterError(f"cannot read refused items: {exc}") from exc
        return [
            Kept(
                id=r[0],
                source=r[1],
                reason=r[2],
                where=r[3],
                message=r[4],
                fingerprint=r[5],
                labels=json.loads(r[6]) if r[6] is not None else None,
                item=json.loads(r[7]),
                first_seen=r[8],
                last_seen=r[9],
                seen=int(r[10]),
            )
            for r in rows
        ]

    async def count(self) -> int:
        try:
            async with self._lock, self._db.execute("SELECT count(*) FROM dead_letter") as cursor:
                row = await cursor.fetchone()
        except (sqlite3.Error, ValueError) as exc:
            raise DeadLetterError(f"cannot read refused items: {exc}") from exc
        return int(row[0]) if row else 0
