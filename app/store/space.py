"""The SQLite file itself: opening it, the one-time switch to incremental auto-vacuum, and giving the
space of deleted rows back to the file system.

SQLite never shrinks a file on DELETE: freed pages go to a free list and are reused. With
`auto_vacuum=INCREMENTAL` the file can be truncated a few pages at a time (`PRAGMA incremental_vacuum(N)`),
without the full rewrite (and the exclusive lock for its whole length) of a `VACUUM`. The mode can only
be chosen before the first table is created, or changed by one `VACUUM` after: "it is not possible to
enable or disable auto-vacuum after a table has been created ... run VACUUM" (sqlite.org/pragma.html
#pragma_auto_vacuum). A file made before this module opened it is migrated once, at start-up, before any
other connection is open (`migrate`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import aiosqlite

log = logging.getLogger(__name__)
_INCREMENTAL = 2  # PRAGMA auto_vacuum: 0 NONE, 1 FULL, 2 INCREMENTAL


async def connect(path: Path, *, durable: bool = True) -> aiosqlite.Connection:
    """Open the shared SQLite file in WAL mode.

    `durable`: FULL sync, the WAL is fsynced at every commit, so an acknowledged alert survives power
    loss, not only a process crash (group commit keeps this affordable). The journal's connection uses
    NORMAL: its rows are derived from inbox rows that stay pending until processed, and WAL frames are
    written in order, so a power cut can only lose the newest journal rows along with their "done" marks.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    db = await aiosqlite.connect(path, isolation_level=None)
    # Before the first table of a new file is created, this chooses its mode; on an older file it is a
    # no-op until `migrate` runs its VACUUM.
    await db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
    await db.execute("PRAGMA busy_timeout=10000")
    return db


async def _pragma(db: aiosqlite.Connection, name: str) -> int:
    async with db.execute(f"PRAGMA {name}") as cursor:
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def migrate(db: aiosqlite.Connection) -> bool:
    """Switch a file made before incremental auto-vacuum over to it: one VACUUM, which rewrites the file
    (it needs about the file's size again in free disk space, and holds the write lock while it runs).
    Call it before any other connection to the file is open. Returns whether it ran."""
    if await _pragma(db, "auto_vacuum") == _INCREMENTAL:
        return False
    started = time.monotonic()
    await db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    await db.execute("VACUUM")
    mode = await _pragma(db, "auto_vacuum")
    if mode != _INCREMENTAL:  # never seen; said loudly rather than pruning a file that cannot shrink
        log.error("store: VACUUM left auto_vacuum=%d; deleted rows' space will be reused, not returned", mode)
        return False
    log.warning(
        "store migrated to incremental auto-vacuum (a one-time VACUUM, %.1fs)", time.monotonic() - started
    )
    return True


@dataclass(frozen=True, slots=True)
class Size:
    """The file as SQLite sees it: all its pages, and the free ones among them."""

    pages: int
    free_pages: int
    page_size: int

    @property
    def bytes(self) -> int:
        return self.pages * self.page_size

    @property
    def free_bytes(self) -> int:
        return self.free_pages * self.page_size


async def size(db: aiosqlite.Connection) -> Size:
    return Size(
        pages=await _pragma(db, "page_count"),
        free_pages=await _pragma(db, "freelist_count"),
        page_size=await _pragma(db, "page_size"),
    )


async def reclaim(db: aiosqlite.Connection, *, pages: int, write_lock: asyncio.Lock) -> int:
    """Give free pages back, `pages` per step, each step under the store's write lock (intake commits go
    between steps), then checkpoint the WAL so the main file is truncated too. Returns pages given back."""
    given = 0
    while True:
        before = await _pragma(db, "freelist_count")
        if before == 0:
            break
        async with write_lock:
            await db.execute(f"PRAGMA incremental_vacuum({int(pages)})")
        freed = before - await _pragma(db, "freelist_count")
        if freed <= 0:  # auto_vacuum is not incremental (a file `migrate` has not seen): nothing to give
            break
        given += freed
        await asyncio.sleep(0)
    if given:
        # The truncation reaches the main file when the WAL is checkpointed; PASSIVE never waits on readers.
        async with write_lock:
            await db.execute("PRAGMA wal_checkpoint(PASSIVE)")
    return given
