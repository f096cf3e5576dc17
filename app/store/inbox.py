"""The durable inbox: every accepted alert or agent event, committed before the caller hears 2xx.

Alertmanager retries only on 5xx, so a 2xx followed by a lost row is a lost alert. Concurrent requests
are group-committed: callers enqueue their rows and wait; one writer task commits everything queued in
a single transaction (one fsync for many requests) and then wakes them all. Dedup is on
`(source, fingerprint, starts_at, status)` — never `endsAt`, which Alertmanager moves on every resend.
Rows carry a processing state, so whatever was not processed before a crash is resumed on restart, and
a lane (`app.classify.lanes`), decided as they are appended, so the consumer can take the rows that may be
hardware faults before the soft ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import aiosqlite

from app.domain import Lane, Signal
from app.store import codec, space, transactions
from app.store.group_commit import GroupCommit
from app.store.space import connect

__all__ = ["connect"]  # re-exported: `inbox.connect` was its home before `space` (callers still use it)
log = logging.getLogger(__name__)
_LOOKUP_CHUNK = 500  # fingerprints per dedup lookup, well under SQLite's bound-parameter limit

SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    source       TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    starts_at    TEXT NOT NULL,
    status       TEXT NOT NULL,
    node         TEXT,
    payload      TEXT NOT NULL,
    received_at  TEXT NOT NULL,
    state        TEXT NOT NULL DEFAULT 'pending',
    attempts     INTEGER NOT NULL DEFAULT 0,
    error        TEXT,
    lane         TEXT NOT NULL DEFAULT 'soft',
    UNIQUE (source, fingerprint, starts_at, status)
);
-- Alerts that named no node, for the status page: few rows, so a partial index keeps the lookup cheap.
CREATE INDEX IF NOT EXISTS inbox_unattributed ON inbox (seq) WHERE node IS NULL;
"""
# After the migration below: an inbox written before lanes has no `lane` column to index yet. The pending
# rows of one lane, in order; the count of pending rows reads the same index. Retention deletes by age.
INDEXES = """
DROP INDEX IF EXISTS inbox_pending;
CREATE INDEX IF NOT EXISTS inbox_lane_pending ON inbox (state, lane, seq);
CREATE INDEX IF NOT EXISTS inbox_by_received ON inbox (received_at);
"""
_ROW_COLUMNS = "seq, source, fingerprint, status, node, payload, received_at, attempts"


# Rows Sickbay appends itself to look at a transient signal again (app/service/rechecks.py); payload: the Signal.
RECHECK_SOURCE = "recheck"

# Which lane a record goes into (the runtime passes one built on the rules: app.service.lanes); without one,
# every row is soft and the inbox is plain FIFO.
LaneOf = Callable[["Record"], Lane]


class RowState(StrEnum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Record:
    """One alert or event to store; `payload` is its validated JSON, re-parsed by the pipeline."""

    source: str
    fingerprint: str
    starts_at: str
    status: str
    node: str | None
    payload: str
    received_at: str


def record_of(signal: Signal, *, payload: str | None = None) -> Record:
    """The inbox row of a signal: `payload` is the validated JSON it came as (an agent event); a signal
    Sickbay made itself (a capacity drop, a risk change) is stored serialised."""
    return Record(
        source=signal.source.value,
        fingerprint=signal.fingerprint,
        starts_at=signal.starts_at.isoformat(),
        status=signal.status.value,
        node=signal.node,
        payload=codec.signal_json(signal) if payload is None else payload,
        received_at=signal.received_at.isoformat(),
    )


@dataclass(frozen=True, slots=True)
class Row:
    seq: int
    source: str
    fingerprint: str
    status: str
    node: str | None
    payload: str
    received_at: str
    attempts: int


@dataclass(frozen=True, slots=True)
class Appended:
    stored: int
    duplicates: int
    # Per record of the request, in order: True when it was stored, False when it was a duplicate.
    fresh: tuple[bool, ...] = ()


class InboxClosedError(RuntimeError):
    """The inbox is shutting down or its writer died; the caller must answer 503 so the sender retries."""


@dataclass(slots=True)
class _Pending:
    records: Sequence[Record]
    done: asyncio.Future[Appended]


class Inbox:
    """The inbox table plus the single writer task that group-commits appends."""

    def __init__(
        self,
        db: aiosqlite.Connection,
        *,
        max_batch_rows: int = 5000,
        on_commit: Callable[[int], None] | None = None,
        write_lock: asyncio.Lock | None = None,
        lane_of: LaneOf | None = None,
    ) -> None:
        self._db = db
        self._lane_of = lane_of
        # Shared with the journal's connection: SQLite's own busy handler sleeps and retries, which starves
        # the journal behind back-to-back group commits; a FIFO asyncio lock takes turns fairly instead.
        self._write_lock = write_lock or asyncio.Lock()
        self._inflight: list[_Pending] = []
        self._on_commit = on_commit
        self._max_batch_rows = max_batch_rows
        self._queue: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._lock = asyncio.Lock()
        self._writer: asyncio.Task[None] | None = None
        self._closed = False
        self.arrived = asyncio.Event()  # set after each commit that stored new rows; the consumer waits on it
        # Set after each commit that stored a fatal row: the consumer looks at it between rows, and clears it
        # when it takes the fatal lane.
        self.fatal_arrived = asyncio.Event()
        self.commits = 0  # transactions committed by the writer, to show that group commit happens
        self._marks = GroupCommit(db, write_lock=self._write_lock, lock=self._lock)

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        max_batch_rows: int = 5000,
        on_commit: Callable[[int], None] | None = None,
        write_lock: asyncio.Lock | None = None,
        lane_of: LaneOf | None = None,
    ) -> Inbox:
        """Open (creating or migrating if needed) the inbox; `on_commit` hears how many requests each commit
        carried; `lane_of` decides each appended record's lane (and, at open, again each pending row's)."""
        db = await connect(path)
        await space.migrate(db)  # the file's first connection: nothing else may hold it during a VACUUM
        await db.executescript(SCHEMA)
        inbox = cls(
            db, max_batch_rows=max_batch_rows, on_commit=on_commit, write_lock=write_lock, lane_of=lane_of
        )
        await inbox._migrate()
        await db.executescript(INDEXES)
        await inbox._relane_pending()
        inbox._writer = asyncio.create_task(inbox._write_loop(), name="inbox-writer")
        return inbox

    async def _migrate(self) -> None:
        """An inbox from before lanes gains its `lane` column; its rows start soft (`_relane_pending` then
        sorts the pending ones). `ADD COLUMN` with a constant default rewrites no row."""
        async with self._db.execute("PRAGMA table_info(inbox)") as cursor:
            columns = {str(row[1]) for row in await cursor.fetchall()}
        if "lane" not in columns:
            async with transactions.transaction(self._db, write_lock=self._write_lock, lock=self._lock):
                await self._db.execute("ALTER TABLE inbox ADD COLUMN lane TEXT NOT NULL DEFAULT 'soft'")
            log.info("inbox migrated: rows now carry a lane (fatal or soft)")

    async def _relane_pending(self) -> None:
        """Decide the lane of every pending row again: rows from before lanes, or from before the rules
        changed (a cluster that reclassified an XID), wait where the current rules put them."""
        if self._lane_of is None:
            return
        async with self._db.execute(
            "SELECT seq, lane, source, fingerprint, starts_at, status, node, payload, received_at FROM inbox "
            "WHERE state = 'pending'"
        ) as cursor:
            rows = await cursor.fetchall()
        lanes = ((self._lane(Record(*fields)).value, seq, lane) for seq, lane, *fields in rows)
        moved = [(new, seq) for new, seq, lane in lanes if new != lane]
        if moved:
            async with transactions.transaction(self._db, write_lock=self._write_lock, lock=self._lock):
                await self._db.executemany("UPDATE inbox SET lane = ? WHERE seq = ?", moved)
            log.info("inbox: %d pending rows changed lane under the current rules", len(moved))

    def _lane(self, record: Record) -> Lane:
        if self._lane_of is None:
            return Lane.SOFT
        try:
            return self._lane_of(record)
        except Exception:  # the lane orders work; it must never cost a commit (the pipeline meets the row)
            log.warning("no lane for %s row %s; it waits in the soft lane", record.source, record.fingerprint)
            return Lane.SOFT

    async def close(self) -> None:
        self._closed = True
        self._wakeup.set()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        for pending in (*self._inflight, *self._queue):
            if not pending.done.done():
                pending.done.set_exception(InboxClosedError("inbox closed before commit"))
        self._queue.clear()
        self._inflight = []
        await self._db.close()

    async def append(self, records: Sequence[Record]) -> Appended:
        """Return only once every record is committed (or known to be a duplicate)."""
        if self._closed or self._writer is None or self._writer.done():
            raise InboxClosedError("inbox is not accepting writes")
        if not records:
            return Appended(stored=0, duplicates=0)
        done: asyncio.Future[Appended] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(records, done))
        self._wakeup.set()
        return await done

    async def _write_loop(self) -> None:
        while not self._closed:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._queue:
                batch = self._take_batch()
                self._inflight = batch  # so close() can fail these callers if it cancels the commit
                try:
                    outcome = await self._commit(batch)
                except Exception as exc:  # disk full, I/O error: fail these callers (503), keep serving
                    log.exception("inbox commit failed for %d requests", len(batch))
                    for pending in batch:
                        if not pending.done.done():
                            pending.done.set_exception(InboxClosedError(f"inbox commit failed: {exc}"))
                    continue
                results, fatal = outcome
                for pending, result in zip(batch, results, strict=True):
                    if not pending.done.done():
                        pending.done.set_result(result)
                self._inflight = []
                if fatal:
                    self.fatal_arrived.set()
                if any(r.stored for r in results):
                    self.arrived.set()

    def _take_batch(self) -> list[_Pending]:
        batch: list[_Pending] = []
        rows = 0
        while self._queue and (not batch or rows + len(self._queue[0].records) <= self._max_batch_rows):
            pending = self._queue.pop(0)
            batch.append(pending)
            rows += len(pending.records)
        return batch

    async def _commit(self, batch: Sequence[_Pending]) -> tuple[list[Appended], bool]:
        """One transaction for the whole batch, in a handful of round trips to SQLite's thread; returns
        each request's counts and whether a fatal row was stored.

        Which rows are duplicates is worked out up front (one lookup of the batch's keys, plus the
        batch's own repeats), so every request learns its own counts from a single multi-row insert.
        """
        rows = [r for pending in batch for r in pending.records]
        async with transactions.transaction(self._db, write_lock=self._write_lock, lock=self._lock):
            seen = await self._existing(rows)
            results: list[Appended] = []
            fresh: list[tuple[str, str, str, str, str | None, str, str, str]] = []
            for pending in batch:
                flags: list[bool] = []
                for r in pending.records:
                    key = (r.source, r.fingerprint, r.starts_at, r.status)
                    flags.append(key not in seen)
                    if flags[-1]:
                        seen.add(key)
                        lane = self._lane(r).value
                        fresh.append((*key, r.node, r.payload, r.received_at, lane))
                stored = sum(flags)
                results.append(Appended(stored=stored, duplicates=len(flags) - stored, fresh=tuple(flags)))
            await self._db.executemany(
                "INSERT OR IGNORE INTO inbox "
                "(source, fingerprint, starts_at, status, node, payload, received_at, lane) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                fresh,
            )
        self.commits += 1
        if self._on_commit is not None:
            self._on_commit(len(batch))
        return results, any(row[-1] == Lane.FATAL.value for row in fresh)

    async def _existing(self, rows: Sequence[Record]) -> set[tuple[str, str, str, str]]:
        """Dedup keys of `rows` already stored (inside the caller's transaction)."""
        found: set[tuple[str, str, str, str]] = set()
        by_source: dict[str, list[str]] = {}
        for record in rows:
            by_source.setdefault(record.source, []).append(record.fingerprint)
        for source, fingerprints in by_source.items():
            unique = sorted(set(fingerprints))
            for start in range(0, len(unique), _LOOKUP_CHUNK):
                chunk = unique[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                async with self._db.execute(
                    "SELECT source, fingerprint, starts_at, status FROM inbox "  # noqa: S608 - placeholders only
                    f"WHERE source = ? AND fingerprint IN ({marks})",
                    (source, *chunk),
                ) as cursor:
                    found.update((a, b, c, d) for a, b, c, d in await cursor.fetchall())
        return found

    async def pending(self, *, after_seq: int, limit: int, lane: Lane | None = None) -> list[Row]:
        """Pending rows after `after_seq`, in order: of one lane, or of both."""
        where, params = ("AND lane = ?", (lane.value,)) if lane is not None else ("", ())
        async with (
            self._lock,
            self._db.execute(
                f"SELECT {_ROW_COLUMNS} FROM inbox "  # noqa: S608 - fixed fragments only
                f"WHERE state = 'pending' {where} AND seq > ? ORDER BY seq LIMIT ?",
                (*params, after_seq, limit),
            ) as cursor,
        ):
            return [Row(*row) for row in await cursor.fetchall()]

    async def mark(self, seqs: Sequence[int], state: RowState, *, error: str | None = None) -> None:
        """Mark rows, returning once committed; the marks of many nodes' rows share one commit (one fsync)."""
        if not seqs:
            return
        rows = [(state.value, error, seq) for seq in seqs]

        async def write(db: aiosqlite.Connection) -> None:
            await db.executemany(
                "UPDATE inbox SET state = ?, error = ?, attempts = attempts + 1 WHERE seq = ?", rows
            )

        await self._marks.run(write)

    async def depth(self) -> int:
        async with (
            self._lock,
            self._db.execute("SELECT count(*) FROM inbox WHERE state = 'pending'") as cursor,
        ):
            row = await cursor.fetchone()
        return int(row[0]) if row else 0

    async def counts(self) -> dict[str, int]:
        async with self._lock, self._db.execute("SELECT state, count(*) FROM inbox GROUP BY state") as cursor:
            return {state: int(n) for state, n in await cursor.fetchall()}

    async def unattributed(self, *, limit: int) -> tuple[int, list[Row]]:
        """Alerts stored with no node (none of the node labels was set): how many, and the newest."""
        async with self._lock:
            async with self._db.execute("SELECT count(*) FROM inbox WHERE node IS NULL") as cursor:
                row = await cursor.fetchone()
            async with self._db.execute(
                f"SELECT {_ROW_COLUMNS} FROM inbox WHERE node IS NULL ORDER BY seq DESC LIMIT ?",  # noqa: S608 - fixed fragments only
                (limit,),
            ) as cursor:
                newest = [Row(*r) for r in await cursor.fetchall()]
        return (int(row[0]) if row else 0), newest
