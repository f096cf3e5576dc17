"""One scheduled scoring cycle end to end inside the service: risks exported as gauges, journaled, and
level changes enqueued as `at-risk` signals in the inbox (where the pipeline takes them like any alert).
The cycle itself is made by hand: reading Prometheus and the model are tested elsewhere."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from prometheus_client import CollectorRegistry

from app import domain
from app.config.settings import PredictionSettings
from app.obs.metrics import create_metrics
from app.predict import registry, score, service
from app.service.scoring_job import SHIPPED_MODELS, Scoring
from app.store import inbox, journal

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


HOT = domain.Risk(node="n1", gpu=2, score=0.9, level=domain.RiskLevel.ACT, model_version="m1", at=T0)
COOL = domain.Risk(node="n2", gpu=0, score=0.01, level=domain.RiskLevel.NONE, model_version="m1", at=T0)


class OneCycle(service.ScoringService):
    def run_once(self, now: datetime) -> service.Cycle:
        scores = score.Scores(at=now, model_version="m1", gpus=(HOT, COOL), nodes=(HOT, COOL))
        return service.Cycle(service.CycleStatus.SCORED, now, scores=scores, thresholds=(0.3, 0.6))


async def test_a_cycle_exports_journals_and_enqueues(tmp_path: Path) -> None:
    box = await inbox.Inbox.open(tmp_path / "sickbay.db")
    db = await inbox.connect(tmp_path / "sickbay.db")
    try:
        book = await journal.Journal.open(db)
        metrics = create_metrics(CollectorRegistry())
        scoring = Scoring(
            PredictionSettings(models_dir=tmp_path / "models"),
            inbox=box,
            metrics=metrics,
            clock=lambda: T0,
            journal=book,
        )
        scoring.service = OneCycle(models_dir=tmp_path / "models", read_recent=lambda now: pd.DataFrame())

        await scoring.score_once()

        registry = metrics.registry
        assert registry.get_sample_value("sickbay_gpu_risk", {"node": "n1", "gpu": "2"}) == 0.9
        assert registry.get_sample_value("sickbay_node_risk", {"node": "n2"}) == 0.01
        assert [(r["node"], r["level"]) for r in await book.risks()] == [("n1", "act")]
        rows = await box.pending(after_seq=0, limit=10)
        assert [(r.node, r.source) for r in rows] == [("n1", "prediction")]
        assert '"sickbay_class":"at-risk"' in rows[0].payload.replace(" ", "")
    finally:
        await db.close()
        await box.close()


async def test_a_fresh_models_volume_starts_from_the_shipped_model(tmp_path: Path) -> None:
    box = await inbox.Inbox.open(tmp_path / "sickbay.db")
    try:
        settings = PredictionSettings(models_dir=tmp_path / "volume", seed_from_shipped=True)
        scoring = Scoring(settings, inbox=box, metrics=create_metrics(CollectorRegistry()))
        await scoring.start()
        await scoring.loaded()
        shipped = registry.read_pointer(SHIPPED_MODELS)["current"]
        assert scoring.service.model is not None
        assert scoring.service.model.card.version == shipped
        assert registry.read_pointer(tmp_path / "volume")["current"] == shipped
        await scoring.stop()
    finally:
        await box.close()


def test_the_readers_lower_the_mmap_threshold_the_settings_name() -> None:
    settings = PredictionSettings(prometheus_url="http://127.0.0.1:9", mmap_threshold_bytes=3 << 20)
    scoring = Scoring(settings, inbox=None, metrics=create_metrics(CollectorRegistry()))  # type: ignore[arg-type]
    assert scoring.service.read_features is not None
    reader = scoring.service.read_features.__self__.reader  # type: ignore[attr-defined]
    assert reader.settings.mmap_threshold_bytes == 3 << 20
