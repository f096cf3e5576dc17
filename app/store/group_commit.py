"""Group commit for the small writes of one connection: many callers' writes, one transaction.

In a storm the pipeline journals each row's fault, then its outcomes, then marks the row done: three
small transactions per row, each taking the shared write lock, `BEGIN IMMEDIATE` and a commit (an fsync
on the inbox's connection) of its own, all in line behind one another. Here a caller hands its write in
and waits; one writer commits every write queued by then in a single transaction and then answers them
all, so while one commit is in flight the next ones gather behind it instead of queueing one by one.

A caller hears back only once its write is committed (what the inbox's acknowledgement and the
pipeline's "done after journaled" both rest on), with its write's own result or its own error. When one
write of a batch raises, the batch is rolled back and each of its writes runs again alone, in a
transaction of its own, so only the one that raises fails (a savepoint per write would cost two more
round trips to SQLite's thread for every write, to serve the rare batch with an error). A commit that
fails fails the writes it carried. A write runs on the writer task, so a caller cancelled while it waits
may still see its write committed: the writes handed in here are idempotent or harmless to keep (an
INSERT OR IGNORE per row, an outcome, a state mark, a key's value), and must be safe to run again after
a rollback.

No task lives between bursts: the writer is started when a write arrives and none is running, and ends
when the queue is empty, so nothing is left to close.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiosqlite

from app.store import transactions

T = TypeVar("T")
Write = Callable[[aiosqlite.Connection], Awaitable[T]]
MAX_BATCH = 500  # writes per transaction: bounds how long one commit holds the shared write lock


@dataclass(slots=True)
class _Queued:
    write: Write[Any]
    done: asyncio.Future[Any]


class GroupCommit:
    def __init__(
        self,
        db: aiosqlite.Connection,
        *,
        write_lock: asyncio.Lock,
        lock: asyncio.Lock,
        max_batch: int = MAX_BATCH,
    ) -> None:
        self._db = db
        self._write_lock = write_lock
        self._lock = lock
        self._max_batch = max_batch
        self._queue: list[_Queued] = []
        self._writer: asyncio.Task[None] | None = None
        self.commits = 0  # transactions committed, to show that writes were grouped

    async def run(self, write: Write[T]) -> T:
        """Run `write` in the next group transaction; return its result once that is committed."""
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append(_Queued(write, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all(), name="group-commit")
        return await done

    async def _write_all(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
            await self._commit(batch)

    async def _commit(self, batch: list[_Queued]) -> None:
        try:
            results = await self._transaction([queued.write for queued in batch])
        except _WriteFailed as failed:
            if len(batch) == 1:
                self._fail(batch, failed.error)
                return
            for queued in batch:  # the batch is undone: each write alone now, so one error stays its own
                await self._commit_alone(queued)
            return
        except BaseException as exc:
            self._fail(batch, exc)
            if not isinstance(exc, Exception):
                raise
            return
        for queued, value in zip(batch, results, strict=True):
            if not queued.done.done():  # else its caller was cancelled: the write stands, nobody hears
                queued.done.set_result(value)

    async def _commit_alone(self, queued: _Queued) -> None:
        try:
            (value,) = await self._transaction([queued.write])
        except _WriteFailed as failed:
            self._fail([queued], failed.error)
        except BaseException as exc:
            self._fail([queued], exc)
            if not isinstance(exc, Exception):
                raise
        else:
            if not queued.done.done():
                queued.done.set_result(value)

    async def _transaction(self, writes: list[Write[Any]]) -> list[Any]:
        """The writes in one transaction, committed; rolled back on any error (`_WriteFailed` when a write
        itself raised)."""
        results: list[Any] = []
        async with transactions.transaction(self._db, write_lock=self._write_lock, lock=self._lock):
            for write in writes:
                try:
                    results.append(await write(self._db))
                except Exception as exc:
                    raise _WriteFailed(exc) from exc
        self.commits += 1
        return results

    @staticmethod
    def _fail(batch: list[_Queued], exc: BaseException) -> None:
        error = exc if isinstance(exc, Exception) else RuntimeError(f"group commit stopped: {exc!r}")
        for queued in batch:
            if not queued.done.done():
                queued.done.set_exception(error)


class _WriteFailed(Exception):
    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error
