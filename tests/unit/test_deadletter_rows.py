"""What the dead-letter list stores for each refused item (fingerprint, where, message, labels, item, each
cut to its bound), which rows a source filter and a limit return, and that a failed write or read raises
DeadLetterError rather than losing the letter silently. A real SQLite file in tmp_path."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.store import codec
from app.store.deadletter import MAX_TEXT, DeadLetterError, DeadLetters, Kept, Letter, digest

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def letter(item: Any, **fields: Any) -> Letter:
    base: dict[str, Any] = {"source": "alertmanager", "reason": "invalid_alert", "where": "w", "message": "m"}
    return Letter(item=item, **{**base, **fields})


@pytest.fixture
async def letters(tmp_path: Path) -> AsyncIterator[DeadLetters]:
    kept = await DeadLetters.open(tmp_path / "d.db", max_rows=10)
    yield kept
    await kept.close()


async def only(letters: DeadLetters) -> Kept:
    (kept,) = await letters.recent(limit=10)
    return kept


@pytest.mark.parametrize(
    ("item", "given", "fingerprint"),
    [
        ({"fingerprint": "fp"}, None, "fp"),
        ({"id": "ev-1"}, None, "ev-1"),  # an agent event's id stands in for a fingerprint
        ({"fingerprint": "fp", "id": "ev-1"}, None, "fp"),
        ({"fingerprint": 7}, None, None),
        ({"id": ["x"]}, None, None),
        ({}, None, None),
        ("text", None, None),
        ({"fingerprint": "f" * 600}, None, "f" * 512),
        ({"fingerprint": "fp"}, "row-fp", "row-fp"),  # an inbox row's own fingerprint wins
        ({"fingerprint": "fp"}, "", "fp"),
        ([1], "g" * 600, "g" * 512),
    ],
)
async def test_the_fingerprint_is_the_rows_or_read_from_the_item(
    letters: DeadLetters, item: Any, given: str | None, fingerprint: str | None
) -> None:
    await letters.keep([letter(item, fingerprint=given)], seen_at=NOW)
    assert (await only(letters)).fingerprint == fingerprint


async def test_a_letter_is_stored_as_given_with_long_fields_cut(letters: DeadLetters) -> None:
    item = {"labels": {"node": "n1"}, "status": "firing", "endsAt": "x"}
    await letters.keep(
        [letter(item, source="agent", reason="bad_event", where="w" * 600, message="m" * 600)], seen_at=NOW
    )
    kept = await only(letters)
    assert (kept.source, kept.reason, kept.where, kept.message) == (
        "agent",
        "bad_event",
        "w" * 512,
        "m" * 512,
    )
    assert (kept.labels, kept.item, kept.seen) == ({"node": "n1"}, item, 1)
    assert (kept.first_seen, kept.last_seen) == (NOW.isoformat(), NOW.isoformat())


async def test_each_row_has_its_own_id_in_the_order_first_kept(letters: DeadLetters) -> None:
    await letters.keep([letter({"fingerprint": "a"}), letter({"fingerprint": "b"})], seen_at=NOW)
    await letters.keep([letter({"fingerprint": "a"})], seen_at=NOW)  # a resend keeps its row's id
    assert [(k.fingerprint, k.id) for k in await letters.recent(limit=10)] == [("a", 1), ("b", 2)]


@pytest.mark.parametrize(
    ("item", "labels"),
    [
        ({"labels": None}, None),
        ({"labels": []}, []),
        ({"label": {"a": "b"}}, None),
        (["labels"], None),
    ],
)
async def test_labels_are_kept_only_when_the_item_has_them(
    letters: DeadLetters, item: Any, labels: Any
) -> None:
    await letters.keep([letter(item)], seen_at=NOW)
    assert (await only(letters)).labels == labels


def padded(length: int) -> dict[str, str]:
    """An item whose stored JSON is exactly `length` characters."""
    overhead = len(codec.dumps({"x": ""}))
    return {"x": "v" * (length - overhead)}


async def test_an_item_of_exactly_the_bound_is_kept_whole_one_more_is_cut(letters: DeadLetters) -> None:
    whole, cut = padded(MAX_TEXT), padded(MAX_TEXT + 1)
    await letters.keep([letter(whole), letter(cut)], seen_at=NOW)
    items = [k.item for k in await letters.recent(limit=10)]
    text = codec.dumps(cut)
    assert items == [{"truncated": True, "chars": MAX_TEXT + 1, "head": text[:MAX_TEXT]}, whole]


async def test_a_resend_updates_the_row_and_moves_it_to_the_front(letters: DeadLetters) -> None:
    later = NOW + timedelta(minutes=1)
    await letters.keep([letter({"fingerprint": "a"}), letter({"fingerprint": "b"})], seen_at=NOW)
    await letters.keep([letter({"fingerprint": "a"}, reason="r2", where="w2", message="m2")], seen_at=later)
    first, second = await letters.recent(limit=10)
    assert (first.fingerprint, first.reason, first.where, first.message, first.seen) == (
        "a",
        "r2",
        "w2",
        "m2",
        2,
    )
    assert (first.first_seen, first.last_seen) == (NOW.isoformat(), later.isoformat())
    assert (second.fingerprint, second.seen) == ("b", 1)
    # The same letter twice in one batch is one row seen twice.
    await letters.keep([letter({"fingerprint": "c"}), letter({"fingerprint": "c"})], seen_at=later)
    assert [(k.fingerprint, k.seen) for k in await letters.recent(limit=10)] == [("c", 2), ("a", 2), ("b", 1)]


async def test_recent_filters_by_source_and_honours_the_limit(letters: DeadLetters) -> None:
    batch = [letter({"fingerprint": f"a{i}"}, source="agent") for i in range(3)]
    batch += [letter({"fingerprint": f"m{i}"}) for i in range(2)]
    await letters.keep(batch, seen_at=NOW)
    assert [k.fingerprint for k in await letters.recent(limit=2, source="agent")] == ["a2", "a1"]
    assert [k.fingerprint for k in await letters.recent(limit=10, source="alertmanager")] == ["m1", "m0"]
    assert [k.fingerprint for k in await letters.recent(limit=3)] == ["m1", "m0", "a2"]
    assert await letters.recent(limit=10, source="nobody") == []
    assert await letters.count() == 5


@pytest.mark.parametrize("max_rows", [1, 2])
async def test_the_bound_holds_within_one_batch(tmp_path: Path, max_rows: int) -> None:
    letters = await DeadLetters.open(tmp_path / "d.db", max_rows=max_rows)
    try:
        await letters.keep([letter({"fingerprint": f"f{i}"}) for i in range(4)], seen_at=NOW)
        kept = [k.fingerprint for k in await letters.recent(limit=10)]
        assert kept == ["f3", "f2"][:max_rows]
        assert await letters.count() == max_rows
    finally:
        await letters.close()


async def test_nothing_to_keep_writes_nothing(tmp_path: Path) -> None:
    letters = await DeadLetters.open(tmp_path / "d.db", max_rows=3)
    assert await letters.count() == 0
    await letters.close()
    await letters.keep([], seen_at=NOW)  # no transaction at all, so a closed connection does not matter


async def test_a_closed_list_raises_its_own_error_on_every_call(tmp_path: Path) -> None:
    letters = await DeadLetters.open(tmp_path / "d.db", max_rows=3)
    await letters.close()
    with pytest.raises(DeadLetterError, match=r"^cannot record refused items: "):
        await letters.keep([letter({})], seen_at=NOW)
    with pytest.raises(DeadLetterError, match=r"^cannot read refused items: "):
        await letters.recent(limit=1)
    with pytest.raises(DeadLetterError, match=r"^cannot read refused items: "):
        await letters.count()


def test_the_digest_is_stable_across_releases() -> None:
    # Digests are stored (UNIQUE per source): a format change would make every resend of a kept letter
    # a new row after an upgrade. endsAt is left out of objects only.
    expected = r'["agent",{"a":[1,2],"b":"\u00e9"}]'
    item = {"b": "é", "endsAt": "x", "a": [1, 2]}
    assert digest("agent", item) == hashlib.sha256(expected.encode()).hexdigest()
    assert digest("agent", item) == "aa5dd886672234afbc4d2a666479e4c8b35ecda564e3cce77ee7fd7f95c615c1"
    assert digest("agent", [{"endsAt": 1}]) != digest("agent", [{}])
