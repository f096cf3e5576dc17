"""Retention on a real SQLite file: batched deletes keep what must stay, the file shrinks after pruning,
and a file made before incremental auto-vacuum is migrated once."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.store import inbox, retention, space

NOW = datetime.now(UTC).replace(microsecond=0)


def _fill(path: Path, rows: int) -> None:
    """Processed inbox rows, half of them old, a pending old one, an old one of a held node, and an old
    Alertmanager firing with no resolved notification."""
    with sqlite3.connect(path) as db:
        db.executescript(inbox.SCHEMA + inbox.INDEXES)
        old, new = (NOW - timedelta(days=30)).isoformat(), NOW.isoformat()
        payload = "x" * 2000
        db.executemany(
            "INSERT INTO inbox (source, fingerprint, starts_at, status, node, payload, received_at, state) "
            "VALUES ('agent', ?, ?, 'firing', 'n1', ?, ?, 'done')",
            [(f"fp{i}", old, payload, old if i % 2 else new) for i in range(rows)],
        )
        db.execute(
            "INSERT INTO inbox (source, fingerprint, starts_at, status, node, payload, received_at, state) "
            "VALUES ('agent', 'pending', ?, 'firing', 'n1', '{}', ?, 'pending')",
            (old, old),
        )
        db.execute(
            "INSERT INTO inbox (source, fingerprint, starts_at, status, node, payload, received_at, state) "
            "VALUES ('agent', 'held', ?, 'firing', 'held-node', '{}', ?, 'done')",
            (old, old),
        )
        db.execute(
            "INSERT INTO inbox (source, fingerprint, starts_at, status, node, payload, received_at, state) "
            "VALUES ('alertmanager', 'still-firing', ?, 'firing', 'n2', '{}', ?, 'done')",
            (old, old),
        )


async def test_batched_prune_keeps_what_must_stay_and_the_file_shrinks(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _fill(path, 400)  # made without auto-vacuum: the migration runs first
    db = await inbox.connect(path)
    assert await space.migrate(db) is True
    assert await space.migrate(db) is False  # once
    await db.close()
    before = path.stat().st_size
    pruner = await retention.Pruner.open(path, write_lock=asyncio.Lock(), batch_rows=50, vacuum_pages=20)
    try:
        done = await pruner.prune({"inbox": NOW - timedelta(days=14)}, held=frozenset({"held-node"}))
        assert done.rows == {"inbox": 200}
        assert done.pages_reclaimed > 0
        assert done.size is not None
        assert done.size.free_pages == 0
    finally:
        await pruner.close()
    with sqlite3.connect(path) as check:
        left = {
            fp
            for (fp,) in check.execute(
                "SELECT fingerprint FROM inbox WHERE received_at < ?", (NOW.isoformat(),)
            )
        }
        assert left == {"pending", "held", "still-firing"}
        assert check.execute("SELECT count(*) FROM inbox").fetchone()[0] == 203
    assert path.stat().st_size < before * 0.75
