"""The scoring job: rules-only without a model, paused without Prometheus, signals on level changes."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry

from app import domain
from app.predict import features as f
from app.predict import prometheus, registry, service
from tests.predict.conftest import ModelFactory, with_card

NOW = datetime(2025, 3, 3, 12, tzinfo=UTC)
T0 = NOW.timestamp()


def frame(sbe_per_step: dict[str, float], *, steps: int = 24) -> pd.DataFrame:
    """One GPU per node; SBE counters growing at the given rate per 5 minutes, ending at NOW."""
    parts = []
    for node, rate in sbe_per_step.items():
        times = T0 - 300.0 * np.arange(steps)[::-1]
        parts.append(
            pd.DataFrame(
                {
                    "Hostname": node,
                    "gpu": 0,
                    "uuid": f"GPU-{node}",
                    "timestamp": times,
                    "present": 1,
                    f.SBE_AGG: rate * np.arange(steps),
                    f.GPU_TEMP: 55.0,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def test_no_model_means_rules_only_loudly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    metrics = service.PredictMetrics.create(CollectorRegistry())
    job = service.ScoringService(
        models_dir=tmp_path, read_recent=lambda now: frame({"n1": 0}), metrics=metrics
    )
    with caplog.at_level(logging.ERROR, logger="app.predict.service"):
        cycle = job.run_once(NOW)
        job.run_once(NOW)
    assert cycle.status is service.CycleStatus.RULES_ONLY
    assert "no CURRENT.json" in cycle.reason
    assert [r.levelname for r in caplog.records] == ["ERROR"]  # once, not every cycle
    assert "rules-only" in caplog.records[0].getMessage()
    assert metrics.model_loaded._value.get() == 0


def test_prometheus_down_pauses_scoring(tmp_path: Path, make_model: ModelFactory) -> None:
    registry.install(tmp_path, make_model())
    metrics = service.PredictMetrics.create(CollectorRegistry())

    def down(now: datetime) -> pd.DataFrame:
        raise prometheus.PrometheusUnavailable("connection refused", query="up")

    job = service.ScoringService(models_dir=tmp_path, read_recent=down, metrics=metrics)
    cycle = job.run_once(NOW)
    assert cycle.status is service.CycleStatus.PAUSED
    assert cycle.reason == "connection refused"
    assert metrics.scoring_paused._value.get() == 1
    assert job.signals(cycle) == []


def test_scores_become_node_signals_only_when_the_level_changes(
    tmp_path: Path, make_model: ModelFactory
) -> None:
    model = make_model()
    # Thresholds on this synthetic model's output: the first feature (sbe_rate_1h) drives it.
    registry.install(tmp_path, with_card(model, thresholds={"warn": 0.2, "act": 0.5}))
    rates = {"hot": 5.0, "calm": 0.0}
    job = service.ScoringService(models_dir=tmp_path, read_recent=lambda now: frame(rates))
    first = job.run_once(NOW)
    assert first.status is service.CycleStatus.SCORED
    assert first.scores is not None
    by_node = {r.node: r for r in first.scores.nodes}
    assert by_node["hot"].level is domain.RiskLevel.ACT
    assert by_node["calm"].level is domain.RiskLevel.NONE
    assert by_node["hot"].drivers[0][0] == "gpu0:sbe_rate_1h"
    signals = job.signals(first)
    assert [(s.node, s.status, s.label("sickbay_class"), s.label("level")) for s in signals] == [
        ("hot", domain.SignalStatus.FIRING, "at-risk", "act")
    ]
    assert signals[0].source is domain.SignalSource.PREDICTION
    # Same levels next cycle: nothing new to say.
    assert job.signals(job.run_once(NOW)) == []
    # The hot node cools down: one resolved signal, with the same fingerprint and start.
    rates["hot"] = 0.0
    cooled = job.signals(job.run_once(NOW))
    assert [(s.node, s.status) for s in cooled] == [("hot", domain.SignalStatus.RESOLVED)]
    assert cooled[0].fingerprint == signals[0].fingerprint
    assert cooled[0].starts_at == signals[0].starts_at


def test_a_promoted_model_is_picked_up_on_reload(tmp_path: Path, make_model: ModelFactory) -> None:
    registry.install(tmp_path, make_model(version="a"))
    job = service.ScoringService(models_dir=tmp_path, read_recent=lambda now: frame({"n1": 0}))
    assert job.reload() is not None
    assert job.model is not None
    assert job.model.card.version == "a"
    registry.install(tmp_path, make_model(version="b"))
    reloaded = job.reload()
    assert reloaded is not None
    assert reloaded.card.version == "b"


def test_only_the_board_now_in_a_slot_is_scored(tmp_path: Path, make_model: ModelFactory) -> None:
    registry.install(tmp_path, with_card(make_model(), thresholds={"warn": 0.2, "act": 0.5}))
    old = frame({"n1": 5.0})
    old["present"] = np.where(old["timestamp"] <= T0 - 300 * 12, 1, 0)  # gone for the last hour
    new = frame({"n1": 0.0})
    new["uuid"] = "GPU-replacement"
    new["present"] = np.where(new["timestamp"] > T0 - 300 * 12, 1, 0)
    both = pd.concat([old, new], ignore_index=True)
    job = service.ScoringService(models_dir=tmp_path, read_recent=lambda now: both)
    cycle = job.run_once(NOW)
    assert cycle.scores is not None
    assert len(cycle.scores.gpus) == 1
    assert cycle.scores.nodes[0].level is domain.RiskLevel.NONE
