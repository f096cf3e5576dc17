"""The inbox when things go wrong or come in odd shapes: a failing commit, a closed or dead writer, callers
queued at shutdown, batch limits, per-record dedup flags, and the status page's queries.

Every wait on an append is bounded (`settle`): a caller that hangs instead of hearing an error is the bug
these tests look for, and it must fail the test rather than stall the run.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from app.domain import Signal, SignalSource, SignalStatus
from app.store import codec
from app.store.inbox import Appended, Inbox, InboxClosedError, Record, RowState, connect, record_of

T = TypeVar("T")
HANG = 20.0  # seconds: far beyond any commit of these few rows; reaching it means the caller hangs


async def settle(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, HANG)


async def until_the_writer_waits(inbox: Inbox) -> None:
    """Until the writer has taken a batch (and so waits on the write lock the test holds)."""
    async with asyncio.timeout(HANG):
        while not inbox._inflight:
            await asyncio.sleep(0)


def record(
    i: int, *, node: str | None = "n1", source: str = "alertmanager", status: str = "firing"
) -> Record:
    return Record(
        source=source,
        fingerprint=f"fp{i}",
        starts_at="2026-11-29T09:00:00+00:00",
        status=status,
        node=node,
        payload=f'{{"i": {i}}}',
        received_at="2026-11-29T09:00:01+00:00",
    )


async def test_append_after_close_raises_instead_of_hanging(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "i.db")
    await inbox.close()
    with pytest.raises(InboxClosedError, match="not accepting writes"):
        await settle(inbox.append([record(1)]))


async def test_append_after_the_writer_died_raises(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "i.db")
    try:
        assert inbox._writer is not None
        inbox._writer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await inbox._writer
        with pytest.raises(InboxClosedError):
            await settle(inbox.append([record(1)]))
    finally:
        await inbox.close()


async def test_a_failed_commit_fails_its_callers_and_the_inbox_keeps_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox = await Inbox.open(tmp_path / "i.db")
    try:
        real = inbox._db.executemany
        calls = 0

        async def disk_full_once(sql: str, rows: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise sqlite3.OperationalError("database or disk is full")
            return await real(sql, rows)

        monkeypatch.setattr(inbox._db, "executemany", disk_full_once)
        with pytest.raises(InboxClosedError, match="inbox commit failed: database or disk is full"):
            await settle(inbox.append([record(1), record(2)]))
        assert inbox.commits == 0
        # Rolled back: the rows are not half there, and the same alert stores on its retry.
        again = await settle(inbox.append([record(1), record(2)]))
        assert again == Appended(stored=2, duplicates=0, fresh=(True, True))
        assert [r.fingerprint for r in await inbox.pending(after_seq=0, limit=10)] == ["fp1", "fp2"]
    finally:
        await inbox.close()


async def test_close_fails_the_callers_still_queued(tmp_path: Path) -> None:
    lock = asyncio.Lock()
    inbox = await Inbox.open(tmp_path / "i.db", write_lock=lock)
    await lock.acquire()  # the journal holds the shared write lock: the writer waits behind it
    waiting = asyncio.ensure_future(inbox.append([record(1)]))
    await until_the_writer_waits(inbox)
    queued = asyncio.ensure_future(inbox.append([record(2)]))
    await asyncio.sleep(0)
    assert not waiting.done()
    await inbox.close()
    lock.release()
    for caller in (waiting, queued):
        with pytest.raises(InboxClosedError, match="closed before commit"):
            await settle(caller)


async def test_batches_stop_at_the_row_limit_but_a_large_request_still_goes(tmp_path: Path) -> None:
    sizes: list[int] = []
    lock = asyncio.Lock()
    inbox = await Inbox.open(tmp_path / "i.db", max_batch_rows=4, on_commit=sizes.append, write_lock=lock)
    try:
        await lock.acquire()
        first = asyncio.ensure_future(inbox.append([record(0)]))  # taken alone while the lock is held
        await until_the_writer_waits(inbox)
        rest = [asyncio.ensure_future(inbox.append([record(10 + i), record(20 + i)])) for i in range(3)] + [
            asyncio.ensure_future(inbox.append([record(30 + i) for i in range(6)]))
        ]
        await asyncio.sleep(0)  # all four queued behind the writer
        lock.release()
        results = await settle(asyncio.gather(first, *rest))
        assert [r.stored for r in results] == [1, 2, 2, 2, 6]
        # 1 | 2+2 (4 rows) | 2 (another 6 would pass 4) | 6 (alone, over the limit: never starved)
        assert sizes == [1, 2, 1, 1]
        assert inbox.commits == 4
    finally:
        await inbox.close()


async def test_each_record_learns_whether_it_was_stored(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "i.db")
    try:
        await settle(inbox.append([record(1)]))
        result = await settle(inbox.append([record(2), record(1), record(2), record(1, status="resolved")]))
        assert result == Appended(stored=2, duplicates=2, fresh=(True, False, False, True))
        # Another source with the same fingerprint is another row.
        other = await settle(inbox.append([record(1, source="agent")]))
        assert other.fresh == (True,)
    finally:
        await inbox.close()


async def test_duplicates_are_found_across_lookup_chunks(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "i.db")
    try:
        batch = [record(i) for i in range(1201)]
        assert (await settle(inbox.append(batch))).stored == 1201
        again = await settle(inbox.append(batch))
        assert (again.stored, again.duplicates) == (0, 1201)
    finally:
        await inbox.close()


async def test_arrived_is_set_only_by_a_commit_that_stored_something(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "i.db")
    try:
        assert await settle(inbox.append([])) == Appended(stored=0, duplicates=0)
        assert inbox.commits == 0
        assert not inbox.arrived.is_set()
        await settle(inbox.append([record(1)]))
        assert inbox.arrived.is_set()
        inbox.arrived.clear()
        await settle(inbox.append([record(1)]))
        assert not inbox.arrived.is_set()
    finally:
        await inbox.close()


async def test_pending_pages_by_seq_and_mark_counts_attempts(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "i.db")
    try:
        await settle(inbox.append([record(i) for i in range(5)]))
        first = await inbox.pending(after_seq=0, limit=2)
        assert [r.fingerprint for r in first] == ["fp0", "fp1"]
        assert first[0].payload == '{"i": 0}'
        assert (first[0].source, first[0].status, first[0].node, first[0].attempts) == (
            "alertmanager",
            "firing",
            "n1",
            0,
        )
        after = await inbox.pending(after_seq=first[-1].seq, limit=10)
        assert [r.fingerprint for r in after] == ["fp2", "fp3", "fp4"]
        await inbox.mark([], RowState.DONE)
        await inbox.mark([first[0].seq], RowState.PENDING, error="retry later")
        await inbox.mark([first[0].seq], RowState.PENDING)
        retried = await inbox.pending(after_seq=0, limit=1)
        assert retried[0].attempts == 2
        await inbox.mark([r.seq for r in after], RowState.DONE)
        assert await inbox.depth() == 2
        assert await inbox.counts() == {"pending": 2, "done": 3}
    finally:
        await inbox.close()


async def test_unattributed_counts_all_and_lists_the_newest_first(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "i.db")
    try:
        await settle(
            inbox.append([record(1, node=None), record(2), record(3, node=None), record(4, node=None)])
        )
        count, newest = await inbox.unattributed(limit=2)
        assert count == 3
        assert [r.fingerprint for r in newest] == ["fp4", "fp3"]
    finally:
        await inbox.close()


async def test_connect_is_wal_and_fsyncs_only_when_durable(tmp_path: Path) -> None:
    for durable, level in ((True, 2), (False, 1)):  # SQLite: 2 = FULL, 1 = NORMAL
        db = await connect(tmp_path / "deep" / f"{durable}.db", durable=durable)
        try:
            async with db.execute("PRAGMA journal_mode") as cursor:
                assert (await cursor.fetchone())[0] == "wal"  # type: ignore[index]
            async with db.execute("PRAGMA synchronous") as cursor:
                assert (await cursor.fetchone())[0] == level  # type: ignore[index]
            async with db.execute("PRAGMA busy_timeout") as cursor:
                assert (await cursor.fetchone())[0] == 10000  # type: ignore[index]
        finally:
            await db.close()


def test_record_of_keeps_the_payload_it_came_as_or_serialises_the_signal() -> None:
    at = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    signal = Signal(
        source=SignalSource.AGENT,
        fingerprint="ev-1",
        status=SignalStatus.FIRING,
        name="xid",
        starts_at=at,
        received_at=at.replace(second=5),
        node="n1",
        xid=79,
    )
    made = record_of(signal)
    assert made == Record(
        source="agent",
        fingerprint="ev-1",
        starts_at=at.isoformat(),
        status="firing",
        node="n1",
        payload=codec.signal_json(signal),
        received_at=at.replace(second=5).isoformat(),
    )
    assert record_of(signal, payload='{"as": "sent"}').payload == '{"as": "sent"}'
