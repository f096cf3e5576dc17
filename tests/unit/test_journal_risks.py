"""Every scoring cycle's elevated risks are journaled (not only level changes), and old cycles are pruned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from app import domain
from app.store import inbox, journal, risks

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


def risk(node: str, score: float, level: domain.RiskLevel, *, gpu: int | None = 0) -> domain.Risk:
    return domain.Risk(
        node=node,
        gpu=gpu,
        score=score,
        level=level,
        model_version="m1",
        at=T0,
        drivers=(("sbe_rate_1h", 1.25),),
    )


async def test_cycles_keep_warn_and_act_risks_and_prune_old_ones(tmp_path: Path) -> None:
    db = await inbox.connect(tmp_path / "j.db")
    try:
        book = await journal.Journal.open(db)
        cycle = [
            risk("n1", 0.91, domain.RiskLevel.ACT),
            risk("n2", 0.45, domain.RiskLevel.WARN, gpu=3),
            risk("n3", 0.01, domain.RiskLevel.NONE),
        ]
        assert await book.record_risks(T0, cycle) == 2, "healthy GPUs are not journaled"
        rows = await book.risks()
        assert {(r["node"], r["gpu"], r["level"]) for r in rows} == {("n1", 0, "act"), ("n2", 3, "warn")}
        assert rows[0]["drivers"] == [["sbe_rate_1h", 1.25]]
        assert [r["node"] for r in await book.risks(node="n2")] == ["n2"]

        later = T0 + risks.RISK_RETENTION + timedelta(minutes=5)
        await book.record_risks(later, [risk("n4", 0.8, domain.RiskLevel.ACT)])
        assert [r["node"] for r in await book.risks()] == ["n4"], "cycles older than the retention go"
    finally:
        await db.close()


async def test_a_journaled_risk_reads_back_whole_and_the_default_page_is_200(tmp_path: Path) -> None:
    db = await inbox.connect(tmp_path / "j.db")
    try:
        book = await journal.Journal.open(db)
        await book.record_risks(T0, [risk("n1", 0.91, domain.RiskLevel.ACT, gpu=None)])
        assert await book.risks() == [
            {
                "at": T0.isoformat(),
                "node": "n1",
                "gpu": None,
                "score": 0.91,
                "level": "act",
                "model_version": "m1",
                "drivers": [["sbe_rate_1h", 1.25]],
            }
        ]
        many = [risk(f"n{i}", 0.5, domain.RiskLevel.WARN) for i in range(205)]
        await book.record_risks(T0 + timedelta(minutes=1), many)
        assert len(await book.risks()) == 200
        assert len(await book.risks(limit=3)) == 3
    finally:
        await db.close()
