"""The journal's faults: every signal journaled with the plan made for it, once per inbox row.

The memory behind escalation windows, classification context, `explain`, the status page and training
labels. Writes are idempotent per inbox row, so a row replayed after a crash is journaled once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiosqlite

from app.domain import Fault, FaultClass, PastFault, Plan, Signal
from app.store import codec
from app.store.journal_db import JournalDb

FAULTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS faults (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    inbox_seq    INTEGER UNIQUE,
    at           TEXT NOT NULL,
    node         TEXT,
    gpu          INTEGER,
    xid          INTEGER,
    class        TEXT NOT NULL,
    rule         TEXT NOT NULL,
    status       TEXT NOT NULL,
    source       TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    reason       TEXT NOT NULL,
    signal       TEXT NOT NULL,
    plan         TEXT NOT NULL,
    workload     TEXT
);
CREATE INDEX IF NOT EXISTS faults_by_gpu ON faults (node, gpu, at);
CREATE INDEX IF NOT EXISTS faults_by_time ON faults (at);
CREATE INDEX IF NOT EXISTS faults_by_fingerprint ON faults (fingerprint, id);
"""


@dataclass(frozen=True, slots=True)
class Entry:
    id: int
    at: str
    node: str | None
    gpu: int | None
    xid: int | None
    fault_class: str
    rule: str
    status: str
    source: str
    reason: str
    plan: dict[str, Any]


class FaultLog(JournalDb):
    """Faults and their plans: written by the pipeline, read by escalation, `explain` and the page."""

    async def record(
        self, *, inbox_seq: int | None, fault: Fault, plan: Plan, workload: str | None = None
    ) -> tuple[int, bool]:
        """Journal a fault and its plan; returns its id and False when this row was journaled before (a replay)."""
        signal = fault.signal
        values = (
            inbox_seq,
            signal.starts_at.isoformat(),
            signal.node,
            signal.gpu,
            signal.xid,
            fault.fault_class.value,
            fault.rule,
            signal.status.value,
            signal.source.value,
            signal.fingerprint,
            fault.reason,
            codec.dumps(codec.signal_to_dict(signal)),
            codec.dumps(codec.plan_to_dict(plan)),
            workload,
        )

        async def write(db: aiosqlite.Connection) -> tuple[int, bool]:
            cursor = await db.execute(
                "INSERT OR IGNORE INTO faults (inbox_seq, at, node, gpu, xid, class, rule, status, source, "
                "fingerprint, reason, signal, plan, workload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )
            if (cursor.rowcount or 0) > 0 and cursor.lastrowid is not None:
                return int(cursor.lastrowid), True
            # A replayed row: the id it was journaled under.
            async with db.execute("SELECT id FROM faults WHERE inbox_seq = ?", (inbox_seq,)) as found:
                row = await found.fetchone()
            return (int(row[0]) if row else 0), False

        # Grouped with the other rows' writes: one transaction for many rows in a storm.
        return await self._group.run(write)

    async def history(self, *, node: str, since: datetime) -> list[PastFault]:
        """Faults journaled on `node` since `since`: escalation and backoff read these."""
        # One trip to SQLite's thread (execute_fetchall), not three (execute, fetch, close): every row
        # of a storm reads this, each waiting its turn for the connection.
        async with self._lock:
            rows = await self._db.execute_fetchall(
                "SELECT at, class, gpu, xid, workload, fingerprint, json_extract(signal, '$.name') "
                "FROM faults WHERE node = ? AND at >= ? AND status = 'firing' ORDER BY at, id",
                (node, since.isoformat()),
            )
        return [
            PastFault(
                at=datetime.fromisoformat(at),
                fault_class=FaultClass(cls),
                gpu=gpu,
                xid=xid,
                workload=workload,
                fingerprint=fingerprint,
                name=name or "",
            )
            for at, cls, gpu, xid, workload, fingerprint, name in rows
        ]

    async def active_alerts(self, *, node: str) -> list[tuple[str, str]]:
        """(fingerprint, class) of Alertmanager alerts on `node` whose latest notification is firing."""
        async with (
            self._lock,
            self._db.execute(
                "SELECT fingerprint, class, status FROM faults WHERE node = ? AND source = 'alertmanager' "
                "AND id IN (SELECT max(id) FROM faults WHERE node = ? AND source = 'alertmanager' GROUP BY fingerprint)",
                (node, node),
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        return [(fp, cls) for fp, cls, status in rows if status == "firing"]

    async def firing_alerts(self) -> list[tuple[str, dict[str, Any]]]:
        """(fingerprint, signal) of every Alertmanager alert whose latest journaled notification is firing."""
        async with (
            self._lock,
            self._db.execute(
                "SELECT fingerprint, status, signal FROM faults WHERE id IN "
                "(SELECT max(id) FROM faults WHERE source = 'alertmanager' GROUP BY fingerprint)"
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        return [(fp, json.loads(signal)) for fp, status, signal in rows if status == "firing"]

    async def latest_firing(self, fingerprint: str) -> datetime | None:
        """The startsAt of this alert's newest journaled row when that row is firing, else None."""
        async with (
            self._lock,
            self._db.execute(
                "SELECT at, status FROM faults WHERE fingerprint = ? ORDER BY id DESC LIMIT 1",
                (fingerprint,),
            ) as cursor,
        ):
            row = await cursor.fetchone()
        if row is None or row[1] != "firing":
            return None
        return datetime.fromisoformat(row[0])

    async def recent_signals(self, *, node: str, gpu: int | None, since: datetime) -> list[Signal]:
        """Signals journaled for this node and GPU since `since`, oldest first: classification context."""
        async with self._lock:  # one trip to SQLite's thread, as for `history`
            rows = await self._db.execute_fetchall(
                "SELECT signal FROM faults WHERE node = ? AND gpu IS ? AND at >= ? ORDER BY at, id",
                (node, gpu, since.isoformat()),
            )
        return [codec.signal_from_dict(json.loads(row[0])) for row in rows]

    async def entries(self, *, limit: int = 100, node: str | None = None) -> list[Entry]:
        # Two texts, not `(? IS NULL OR node = ?)`: that one cannot use an index, and one node's entries
        # (the node view, /api/v1/actions?node=) would be looked for by scanning the whole table backwards.
        where, params = ("WHERE node = ? ", (node, limit)) if node is not None else ("", (limit,))
        async with (
            self._lock,
            self._db.execute(
                "SELECT id, at, node, gpu, xid, class, rule, status, source, reason, plan FROM faults "  # noqa: S608 - fixed fragments only
                f"{where}ORDER BY id DESC LIMIT ?",
                params,
            ) as cursor,
        ):
            rows = await cursor.fetchall()
        return [
            Entry(
                id=row[0],
                at=row[1],
                node=row[2],
                gpu=row[3],
                xid=row[4],
                fault_class=row[5],
                rule=row[6],
                status=row[7],
                source=row[8],
                reason=row[9],
                plan=json.loads(row[10]),
            )
            for row in rows
        ]

    async def count(self) -> int:
        async with self._lock, self._db.execute("SELECT count(*) FROM faults") as cursor:
            row = await cursor.fetchone()
        return int(row[0]) if row else 0
