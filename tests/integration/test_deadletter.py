"""The dead-letter list on a real SQLite file: one row per distinct refused item, bounded, durable."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from app.store.deadletter import MAX_TEXT, DeadLetters, Letter, digest
from app.store.inbox import Inbox, Record

NOW = datetime.now(UTC)


def letter(item: Any, *, source: str = "alertmanager", reason: str = "invalid_alert") -> Letter:
    return Letter(source=source, reason=reason, where="alerts.0.labels.node", message="bad node", item=item)


def refused(fingerprint: str, **extra: Any) -> dict[str, Any]:
    return {"fingerprint": fingerprint, "labels": {"node": "../x"}, "status": "firing", **extra}


async def test_a_resend_counts_on_its_row_and_endsat_is_not_part_of_identity(tmp_path: Path) -> None:
    letters = await DeadLetters.open(tmp_path / "d.db", max_rows=10)
    try:
        await letters.keep([letter(refused("a", endsAt="0001-01-01T00:00:00Z"))], seen_at=NOW)
        later = NOW + timedelta(minutes=5)
        await letters.keep([letter(refused("a", endsAt="2030-01-01T00:00:00Z"))], seen_at=later)
        await letters.keep([letter(refused("a", endsAt=None), reason="invalid_schema")], seen_at=later)
        kept = await letters.recent(limit=10)
        assert [(k.fingerprint, k.seen, k.reason) for k in kept] == [("a", 3, "invalid_schema")]
        assert (kept[0].first_seen, kept[0].last_seen) == (NOW.isoformat(), later.isoformat())
        # Anything else that differs is a different letter; so is the same item from another source.
        await letters.keep(
            [letter(refused("a", status="resolved")), letter(refused("a"), source="agent")], seen_at=NOW
        )
        assert await letters.count() == 3
    finally:
        await letters.close()


def test_digest_is_independent_of_key_order() -> None:
    assert digest("agent", {"a": 1, "b": [1, 2]}) == digest("agent", {"b": [1, 2], "a": 1})
    assert digest("agent", {"a": 1}) != digest("alertmanager", {"a": 1})
    assert digest("agent", [1, 2]) != digest("agent", [2, 1])


async def test_the_newest_rows_are_kept_and_the_rest_trimmed(tmp_path: Path) -> None:
    letters = await DeadLetters.open(tmp_path / "d.db", max_rows=3)
    try:
        for i in range(6):
            await letters.keep([letter(refused(f"f{i}"))], seen_at=NOW)
        await letters.keep([letter(refused("f4")), letter(refused("f6")), letter(refused("f7"))], seen_at=NOW)
        assert [k.fingerprint for k in await letters.recent(limit=10)] == ["f7", "f6", "f4"]
        assert await letters.count() == 3
    finally:
        await letters.close()


async def test_rows_survive_reopen_and_share_the_inbox_file(tmp_path: Path) -> None:
    path = tmp_path / "sickbay.db"
    lock = asyncio.Lock()
    box = await Inbox.open(path, write_lock=lock)
    letters = await DeadLetters.open(path, max_rows=5, write_lock=lock)
    record = Record("alertmanager", "ok", NOW.isoformat(), "firing", "n1", "{}", NOW.isoformat())
    await asyncio.gather(box.append([record]), letters.keep([letter(refused("x"))], seen_at=NOW))
    await letters.close()
    await box.close()

    reopened = await DeadLetters.open(path, max_rows=5)
    try:
        kept = await reopened.recent(limit=5)
        assert [(k.fingerprint, k.labels, k.item) for k in kept] == [("x", {"node": "../x"}, refused("x"))]
    finally:
        await reopened.close()


async def test_odd_and_huge_items_are_kept_bounded(tmp_path: Path) -> None:
    letters = await DeadLetters.open(tmp_path / "d.db", max_rows=10)
    try:
        huge = refused("big", labels={f"k{i}": "v" * 100 for i in range(200)})
        await letters.keep([letter(42, reason="invalid_schema"), letter(huge)], seen_at=NOW)
        by_fp = {k.fingerprint: k for k in await letters.recent(limit=10)}
        assert by_fp[None].item == 42
        assert by_fp[None].labels is None
        big = by_fp["big"]
        assert big.item["truncated"] is True
        assert big.item["chars"] > MAX_TEXT
        assert len(big.item["head"]) == MAX_TEXT
        assert json.loads(json.dumps(big.labels))["truncated"] is True
    finally:
        await letters.close()


async def test_inbox_reports_which_records_were_new_and_the_unattributed(tmp_path: Path) -> None:
    box = await Inbox.open(tmp_path / "i.db")
    try:

        def record(fingerprint: str, node: str | None) -> Record:
            return Record("alertmanager", fingerprint, NOW.isoformat(), "firing", node, "{}", NOW.isoformat())

        first = await box.append([record("a", "n1"), record("b", None), record("a", "n1")])
        assert first.fresh == (True, True, False)
        again = await box.append([record("c", None), record("b", None)])
        assert again.fresh == (True, False)
        total, newest = await box.unattributed(limit=1)
        assert total == 2
        assert [r.fingerprint for r in newest] == ["c"]
    finally:
        await box.close()
