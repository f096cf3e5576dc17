"""The model-validation log on a real SQLite file: what is appended comes back field for field, `latest`
is each version's newest row on its fleet only, `recent` pages newest first."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.store import inbox, validation

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[validation.ValidationLog]:
    db = await inbox.connect(tmp_path / "v.db")
    try:
        yield await validation.ValidationLog.open(db)
    finally:
        await db.close()


def row(
    version: str, *, fleet: str = "prod", minutes: int = 0, acting: bool = False, **kw: object
) -> validation.Row:
    return validation.Row(
        at=NOW + timedelta(minutes=minutes),
        version=version,
        fleet=fleet,
        reason=kw.pop("reason", "new-version"),  # type: ignore[arg-type]
        acting=acting,
        detail=f"detail of {version}",
        by="sickbay",
        **kw,  # type: ignore[arg-type]
    )


async def test_a_row_comes_back_as_written(log: validation.ValidationLog) -> None:
    await log.append(row("m1", acting=True, evidence={"recall": 0.9, "cases": [1, 2]}))
    await log.append(row("m2"))
    got = await log.recent(fleet="prod")
    assert got == [
        validation.Row(NOW, "m2", "prod", "new-version", False, "detail of m2", "sickbay", None, id=2),
        validation.Row(
            NOW,
            "m1",
            "prod",
            "new-version",
            True,
            "detail of m1",
            "sickbay",
            {"recall": 0.9, "cases": [1, 2]},
            id=1,
        ),
    ]
    assert got[1].as_dict() == {
        "id": 1,
        "at": NOW.isoformat(),
        "version": "m1",
        "fleet": "prod",
        "mode": "acting",
        "reason": "new-version",
        "detail": "detail of m1",
        "by": "sickbay",
        "evidence": {"recall": 0.9, "cases": [1, 2]},
    }
    assert got[0].as_dict()["mode"] == "shadow"


async def test_latest_is_each_versions_newest_row_on_this_fleet(log: validation.ValidationLog) -> None:
    await log.append(row("m1", reason="new-version"))
    await log.append(row("m1", minutes=1, acting=True, reason="backtest-passed"))
    await log.append(row("m2", minutes=2))
    await log.append(row("m1", fleet="staging", minutes=3, reason="other fleet"))
    latest = {r.version: r for r in await log.latest(fleet="prod")}
    assert set(latest) == {"m1", "m2"}
    assert (latest["m1"].reason, latest["m1"].acting) == ("backtest-passed", True)
    assert [r.reason for r in await log.latest(fleet="staging")] == ["other fleet"]
    assert await log.latest(fleet="nowhere") == []


async def test_recent_is_newest_first_and_limited(log: validation.ValidationLog) -> None:
    for i in range(5):
        await log.append(row(f"m{i}", minutes=i))
    await log.append(row("x", fleet="staging"))
    assert [r.version for r in await log.recent(fleet="prod", limit=3)] == ["m4", "m3", "m2"]
    assert len(await log.recent(fleet="prod")) == 5


async def test_recent_pages_20_by_default(log: validation.ValidationLog) -> None:
    for i in range(21):
        await log.append(row(f"m{i}", minutes=i))
    recent = await log.recent(fleet="prod")
    assert [r.version for r in recent] == [f"m{i}" for i in range(20, 0, -1)]
