"""The inbox's lanes and its dedup on a real SQLite file: each appended row waits in the lane `lane_of`
gives it (soft when there is none or it fails), pending rows change lane when reopened under other rules,
an inbox from before lanes is migrated, and a resend of a large request is all duplicates."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from app.domain import Lane
from app.store.inbox import Inbox, Record, RowState

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).isoformat()


def record(fingerprint: str, *, node: str | None = "n1", source: str = "alertmanager") -> Record:
    return Record(source, fingerprint, NOW, "firing", node, "{}", NOW)


def fatal_when_named_fatal(r: Record) -> Lane:
    return Lane.FATAL if r.fingerprint.startswith("fatal") else Lane.SOFT


async def fingerprints(
    box: Inbox, lane: Lane | None = None, *, after_seq: int = 0, limit: int = 100
) -> list[str]:
    return [r.fingerprint for r in await box.pending(after_seq=after_seq, limit=limit, lane=lane)]


async def test_each_row_waits_in_its_lane(tmp_path: Path) -> None:
    box = await Inbox.open(tmp_path / "i.db", lane_of=fatal_when_named_fatal)
    try:
        await box.append([record("soft-1"), record("fatal-1"), record("soft-2"), record("fatal-2")])
        assert await fingerprints(box, Lane.FATAL) == ["fatal-1", "fatal-2"]
        assert await fingerprints(box, Lane.SOFT) == ["soft-1", "soft-2"]
        assert await fingerprints(box) == ["soft-1", "fatal-1", "soft-2", "fatal-2"]
        assert await fingerprints(box, limit=2) == ["soft-1", "fatal-1"]
        first, *_ = await box.pending(after_seq=0, limit=1)
        assert await fingerprints(box, after_seq=first.seq) == ["fatal-1", "soft-2", "fatal-2"]
    finally:
        await box.close()


async def test_the_arrival_events_say_what_was_stored(tmp_path: Path) -> None:
    box = await Inbox.open(tmp_path / "i.db", lane_of=fatal_when_named_fatal)
    try:
        await box.append([record("soft-1")])
        assert (box.arrived.is_set(), box.fatal_arrived.is_set()) == (True, False)
        box.arrived.clear()
        await box.append([record("soft-1")])  # a duplicate stores nothing: nothing arrived
        assert (box.arrived.is_set(), box.fatal_arrived.is_set()) == (False, False)
        await box.append([record("fatal-1")])
        assert (box.arrived.is_set(), box.fatal_arrived.is_set()) == (True, True)
        box.fatal_arrived.clear()
        await box.append([record("fatal-1")])  # a resent fatal row is not a new fatal arrival
        assert box.fatal_arrived.is_set() is False
    finally:
        await box.close()


async def test_without_lanes_or_when_the_lane_cannot_be_decided_a_row_is_soft(tmp_path: Path) -> None:
    def broken(r: Record) -> Lane:
        raise ValueError("no rules")

    for lane_of in (None, broken):
        box = await Inbox.open(tmp_path / f"{lane_of is None}.db", lane_of=lane_of)
        try:
            result = await box.append([record("fatal-1")])
            assert (result.stored, result.duplicates) == (1, 0)
            assert await fingerprints(box, Lane.SOFT) == ["fatal-1"]
            assert await fingerprints(box, Lane.FATAL) == []
            assert box.fatal_arrived.is_set() is False
        finally:
            await box.close()


async def test_pending_rows_change_lane_when_reopened_under_other_rules(tmp_path: Path) -> None:
    path = tmp_path / "i.db"
    box = await Inbox.open(path)  # no lanes: all soft
    await box.append([record("fatal-1"), record("fatal-2"), record("soft-1")])
    done, *_ = await box.pending(after_seq=0, limit=1)
    await box.mark([done.seq], RowState.DONE)
    await box.close()

    reopened = await Inbox.open(path, lane_of=fatal_when_named_fatal)
    try:
        assert await fingerprints(reopened, Lane.FATAL) == ["fatal-2"]
        assert await fingerprints(reopened, Lane.SOFT) == ["soft-1"]
    finally:
        await reopened.close()
    with sqlite3.connect(path) as db:
        lanes = dict(db.execute("SELECT fingerprint, lane FROM inbox").fetchall())
    assert lanes == {"fatal-1": "soft", "fatal-2": "fatal", "soft-1": "soft"}, "a done row keeps its lane"

    # And back: rules that call nothing fatal move the pending fatal row to the soft lane.
    again = await Inbox.open(path, lane_of=lambda r: Lane.SOFT)
    try:
        assert await fingerprints(again, Lane.FATAL) == []
        assert await fingerprints(again, Lane.SOFT) == ["fatal-2", "soft-1"]
    finally:
        await again.close()


async def test_an_inbox_from_before_lanes_is_migrated_with_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE inbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, "
            "fingerprint TEXT NOT NULL, starts_at TEXT NOT NULL, status TEXT NOT NULL, node TEXT, "
            "payload TEXT NOT NULL, received_at TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'pending', "
            "attempts INTEGER NOT NULL DEFAULT 0, error TEXT, UNIQUE (source, fingerprint, starts_at, status))"
        )
        db.execute("CREATE INDEX inbox_pending ON inbox (state, seq)")
        for fp in ("fatal-old", "soft-old"):
            db.execute(
                "INSERT INTO inbox (source, fingerprint, starts_at, status, node, payload, received_at) "
                "VALUES ('alertmanager', ?, ?, 'firing', 'n1', '{}', ?)",
                (fp, NOW, NOW),
            )
    box = await Inbox.open(path, lane_of=fatal_when_named_fatal)
    try:
        assert await fingerprints(box, Lane.FATAL) == ["fatal-old"]
        assert await fingerprints(box, Lane.SOFT) == ["soft-old"]
        await box.append([record("fatal-new")])
        assert await fingerprints(box, Lane.FATAL) == ["fatal-old", "fatal-new"]
    finally:
        await box.close()
    with sqlite3.connect(path) as db:
        indexes = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "inbox_pending" not in indexes
    assert "inbox_lane_pending" in indexes


async def test_a_resent_request_larger_than_one_lookup_is_all_duplicates(tmp_path: Path) -> None:
    box = await Inbox.open(tmp_path / "i.db")
    try:
        many = [record(f"f{i:04d}") for i in range(1203)]
        first = await box.append(many)
        assert (first.stored, first.duplicates) == (1203, 0)
        again = await box.append([*many, record("new"), record("f0000", source="agent")])
        assert (again.stored, again.duplicates) == (2, 1203)
        assert again.fresh == (False,) * 1203 + (True, True)
        assert await box.depth() == 1205
    finally:
        await box.close()


async def test_mark_counts_attempts_and_moves_rows_out_of_pending(tmp_path: Path) -> None:
    box = await Inbox.open(tmp_path / "i.db")
    try:
        await box.append([record("a"), record("b"), record("c")])
        a, b, c = await box.pending(after_seq=0, limit=10)
        await box.mark([a.seq, b.seq], RowState.PENDING, error="retry")
        await box.mark([b.seq], RowState.PENDING, error="retry")
        await box.mark([c.seq], RowState.FAILED, error="poison")
        assert [(r.fingerprint, r.attempts) for r in await box.pending(after_seq=0, limit=10)] == [
            ("a", 1),
            ("b", 2),
        ]
        assert await box.counts() == {"pending": 2, "failed": 1}
        assert await box.depth() == 2
    finally:
        await box.close()
    with sqlite3.connect(tmp_path / "i.db") as db:
        errors = dict(db.execute("SELECT fingerprint, error FROM inbox").fetchall())
    assert errors == {"a": "retry", "b": "retry", "c": "poison"}
    await box.mark([], RowState.FAILED)  # nothing to mark opens no transaction: a closed inbox is no matter


async def test_unattributed_counts_all_and_lists_the_newest(tmp_path: Path) -> None:
    box = await Inbox.open(tmp_path / "i.db")
    try:
        assert await box.unattributed(limit=5) == (0, [])
        await box.append(
            [record("x", node=None), record("y"), record("z", node=None), record("w", node=None)]
        )
        total, newest = await box.unattributed(limit=2)
        assert total == 3
        assert [(r.fingerprint, r.node) for r in newest] == [("w", None), ("z", None)]
    finally:
        await box.close()
