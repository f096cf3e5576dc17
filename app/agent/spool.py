"""A bounded, durable queue of events not yet accepted by the service: one SQLite file on the node.

Every event is written here before the first push, so a service outage, a leader failover or an agent
restart loses nothing; an XID 79 often precedes a node reboot, hence synchronous=FULL. The queue is capped
by count and bytes; past either cap the oldest events go first, and the caller counts them. Calls block
(sqlite3), so async callers run them in a worker thread. It knows nothing about HTTP or NVML.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL,
    size INTEGER NOT NULL
)
"""


@dataclass(frozen=True, slots=True)
class SpooledEvent:
    seq: int
    event_id: str
    body: str


@dataclass(frozen=True, slots=True)
class Depth:
    events: int
    bytes: int


class Spool:
    """FIFO over SQLite. Thread-safe: one connection, one lock."""

    def __init__(self, path: Path, *, max_events: int, max_bytes: int) -> None:
        if max_events < 1 or max_bytes < 1:
            raise ValueError("spool limits must be positive")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)

    def append(self, items: Sequence[tuple[str, str]]) -> int:
        """Store (event_id, body) pairs in one transaction; returns how many oldest events were dropped."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT OR IGNORE INTO events (event_id, body, size) VALUES (?, ?, ?)",
                    [(event_id, body, len(body.encode())) for event_id, body in items],
                )
                dropped = self._trim()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return dropped

    def _trim(self) -> int:
        depth = self._depth()
        excess_events = max(0, depth.events - self._max_events)
        excess_bytes = max(0, depth.bytes - self._max_bytes)
        if not excess_events and not excess_bytes:
            return 0
        doomed: list[int] = []
        freed = 0
        for seq, size in self._db.execute("SELECT seq, size FROM events ORDER BY seq"):
            if len(doomed) >= excess_events and freed >= excess_bytes:
                break
            doomed.append(seq)
            freed += size
        self._db.executemany("DELETE FROM events WHERE seq = ?", [(seq,) for seq in doomed])
        return len(doomed)

    def peek(self, limit: int) -> list[SpooledEvent]:
        """The oldest events, without removing them: they leave only once the service accepted them."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, event_id, body FROM events ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
        return [SpooledEvent(seq, event_id, body) for seq, event_id, body in rows]

    def remove(self, seqs: Sequence[int]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("DELETE FROM events WHERE seq = ?", [(seq,) for seq in seqs])
            self._db.execute("COMMIT")

    def depth(self) -> Depth:
        with self._lock:
            return self._depth()

    def _depth(self) -> Depth:
        count, size = self._db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM events").fetchone()
        return Depth(int(count), int(size))

    def close(self) -> None:
        with self._lock:
            self._db.close()
