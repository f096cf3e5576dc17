"""The inbox on a real SQLite file: group commit, dedup, processing state, resume after reopen."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.store.inbox import Inbox, Record, RowState


def record(i: int, *, status: str = "firing", node: str = "n1") -> Record:
    return Record(
        source="alertmanager",
        fingerprint=f"fp{i}",
        starts_at="2026-11-29T09:00:00+00:00",
        status=status,
        node=node,
        payload="{}",
        received_at="2026-11-29T09:00:01+00:00",
    )


async def test_concurrent_appends_share_commits(tmp_path: Path) -> None:
    sizes: list[int] = []
    inbox = await Inbox.open(tmp_path / "i.db", on_commit=sizes.append)
    try:
        results = await asyncio.gather(
            *(inbox.append([record(i * 10 + j) for j in range(10)]) for i in range(200))
        )
        assert sum(r.stored for r in results) == 2000
        assert inbox.commits == len(sizes)
        assert sum(sizes) == 200
        assert inbox.commits < 200, "concurrent requests must be group-committed, not one transaction each"
    finally:
        await inbox.close()


async def test_dedup_key_is_fingerprint_starts_at_status(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "i.db")
    try:
        first = await inbox.append([record(1), record(1), record(1, status="resolved")])
        assert (first.stored, first.duplicates) == (2, 1)
        again = await inbox.append([record(1)])
        assert (again.stored, again.duplicates) == (0, 1)
    finally:
        await inbox.close()


async def test_pending_rows_survive_reopen_until_marked(tmp_path: Path) -> None:
    path = tmp_path / "i.db"
    inbox = await Inbox.open(path)
    await inbox.append([record(i) for i in range(5)])
    rows = await inbox.pending(after_seq=0, limit=10)
    await inbox.mark([rows[0].seq, rows[1].seq], RowState.DONE)
    await inbox.mark([rows[2].seq], RowState.FAILED, error="boom")
    await inbox.close()

    reopened = await Inbox.open(path)
    try:
        left = await reopened.pending(after_seq=0, limit=10)
        assert [r.fingerprint for r in left] == ["fp3", "fp4"]
        assert await reopened.counts() == {"done": 2, "failed": 1, "pending": 2}
        assert await reopened.depth() == 2
    finally:
        await reopened.close()
