"""The one write transaction of the store: every table's multi-statement write runs through it.

SQLite has one writer per file. The inbox, the journal's tables and the dead-letter list each hold their own
connection to the same file, so a write takes the FIFO write lock they share first (SQLite's busy handler
sleeps and retries, which starves a connection behind back-to-back group commits; the lock takes turns
fairly), then its connection's own lock (one statement sequence at a time on a connection), then
`BEGIN IMMEDIATE`, so the transaction holds SQLite's write lock from its first statement.

It only brackets statements; what they write is the caller's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiosqlite


@contextlib.asynccontextmanager
async def transaction(
    db: aiosqlite.Connection, *, write_lock: asyncio.Lock, lock: asyncio.Lock
) -> AsyncIterator[None]:
    """One write transaction under both locks: committed when the block ends, rolled back if it raises
    (a cancel included)."""
    async with write_lock, lock:
        await db.execute("BEGIN IMMEDIATE")
        try:
            yield
            await db.commit()
        except BaseException:
            await db.rollback()
            raise
