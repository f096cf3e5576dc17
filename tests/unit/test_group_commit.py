"""Group commit: concurrent writes share a transaction, each caller hears its own result or error,
and a caller hears back only once its write is committed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiosqlite
import pytest

from app.store.group_commit import GroupCommit


async def _db(tmp_path: Path) -> aiosqlite.Connection:
    db = await aiosqlite.connect(tmp_path / "t.db", isolation_level=None)
    await db.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
    return db


def _insert(key: str):  # type: ignore[no-untyped-def]
    async def write(db: aiosqlite.Connection) -> str:
        await db.execute("INSERT INTO t (k) VALUES (?)", (key,))
        return key

    return write


async def _keys(tmp_path: Path) -> set[str]:
    async with aiosqlite.connect(tmp_path / "t.db") as other, other.execute("SELECT k FROM t") as cursor:
        return {str(row[0]) for row in await cursor.fetchall()}


async def test_concurrent_writes_share_commits_and_are_committed_when_answered(tmp_path: Path) -> None:
    db = await _db(tmp_path)
    group = GroupCommit(db, write_lock=asyncio.Lock(), lock=asyncio.Lock())
    try:
        results = await asyncio.gather(*(group.run(_insert(f"k{i}")) for i in range(50)))
        assert results == [f"k{i}" for i in range(50)]
        assert group.commits < 50
        assert await _keys(tmp_path) == set(results)  # read on another connection: committed
    finally:
        await db.close()


async def test_a_failing_write_fails_alone(tmp_path: Path) -> None:
    db = await _db(tmp_path)
    group = GroupCommit(db, write_lock=asyncio.Lock(), lock=asyncio.Lock())
    try:
        await group.run(_insert("taken"))
        outcomes = await asyncio.gather(
            group.run(_insert("a")),
            group.run(_insert("taken")),
            group.run(_insert("b")),
            return_exceptions=True,
        )
        assert outcomes[0] == "a"
        assert outcomes[2] == "b"
        assert isinstance(outcomes[1], aiosqlite.IntegrityError)
        assert await _keys(tmp_path) == {"taken", "a", "b"}
    finally:
        await db.close()


async def test_a_write_alone_that_fails_raises_its_error(tmp_path: Path) -> None:
    db = await _db(tmp_path)
    group = GroupCommit(db, write_lock=asyncio.Lock(), lock=asyncio.Lock())
    try:
        await group.run(_insert("x"))
        with pytest.raises(aiosqlite.IntegrityError):
            await group.run(_insert("x"))
    finally:
        await db.close()
