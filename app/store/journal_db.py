"""The journal's connection and locks, shared by its tables (`faults`, `outcomes`, `risks`,
`recheck_queue`, `restart_queue`) and by the journal that puts them together (`journal.Journal`).

Reads hold the journal's own lock for the statement; writes take the write lock shared with the inbox
first (see `Inbox`), and a multi-statement write runs in one transaction (`transactions.transaction`, the
store's one way to write). The pipeline's small writes (a fault, its outcomes, a key) go through the
connection's group commit (`group_commit`), which puts many of them in one such transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiosqlite

from app.store import transactions
from app.store.group_commit import GroupCommit


class JournalDb:
    def __init__(self, db: aiosqlite.Connection, *, write_lock: asyncio.Lock | None = None) -> None:
        self._db = db
        self._lock = asyncio.Lock()
        self._write_lock = write_lock or asyncio.Lock()  # shared with the inbox: see Inbox
        self._group = GroupCommit(db, write_lock=self._write_lock, lock=self._lock)

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[None]:
        """One write transaction under both locks: committed when the block ends, rolled back if it raises
        (a cancel included)."""
        async with transactions.transaction(self._db, write_lock=self._write_lock, lock=self._lock):
            yield
