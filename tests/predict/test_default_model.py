"""The default model shipped in models/: it loads, it scores, its card says how it was judged, and it holds
up on a seed it never saw.

The model comes from the evaluation protocol (`python -m tests.perf.model_protocol --install models/`):
trained on some simulator personalities x seeds, judged on others. The bounds below sit under what it
measured on this held-out classic dataset (seed 101, 60 nodes x 6 days, failures at 40x the published
rate); run with `-s` to see the figures. The held-out personalities' figures are in the card.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.predict import dataset, evaluate, features, registry, score, split, train
from tests.predict.conftest import SHIPPED_MODELS


@pytest.fixture(scope="module")
def shipped() -> registry.RiskModel:
    return registry.load_current(SHIPPED_MODELS)


def test_the_shipped_model_loads_with_a_complete_card(shipped: registry.RiskModel) -> None:
    card = shipped.card
    assert card.features == features.FEATURES
    assert card.model_sha256 == registry.sha256_file(SHIPPED_MODELS / card.version / "model.skops")
    assert (SHIPPED_MODELS / card.version / "model.skops").stat().st_size < 5_000_000
    assert card.training["provenance"], "the card must say how the training data was made"
    assert 0 < card.warn <= card.act < 1.0001
    for key in ("precision", "recall", "pr_auc", "false_alarms_per_1000_node_days", "lead_time_h"):
        assert key in card.metrics["holdout"]
    assert card.training["source_fields"] == list(features.source_fields(card.features))


def test_the_card_says_what_the_model_was_trained_and_judged_on(shipped: registry.RiskModel) -> None:
    protocol = shipped.card.training["protocol"]
    trained, judged = set(protocol["trained_on"]), set(protocol["judged_on"])
    assert trained
    assert judged
    assert trained.isdisjoint(judged)
    assert set(protocol["validated_on"]).isdisjoint(judged)
    assert {name.partition(":")[2] for name in trained}.isdisjoint(name.partition(":")[2] for name in judged)
    assert any(name.startswith("stress-10x:") for name in judged)
    for name in judged:
        figures = shipped.card.metrics[f"held_out:{name}"]
        assert "failures_by_mode" in figures
        assert "trap_gpus_by_kind" in figures


def test_the_shipped_model_scores_a_fleet_without_the_extended_fields(
    shipped: registry.RiskModel, heldout_dataset: Path
) -> None:
    frame = dataset.read_timeseries(heldout_dataset)
    end = float(frame["timestamp"].max())
    recent = frame[frame["timestamp"] > end - 2 * 86400]
    lacking = recent.drop(columns=list(features.FIELD_GROUPS["nvlink_extended"]))
    assert set(features.missing_fields(lacking, shipped.card.features)) == set(
        features.FIELD_GROUPS["nvlink_extended"]
    )
    scores = score.score_frame(lacking, shipped, now=datetime.fromtimestamp(end, UTC))
    assert len(scores.nodes) == 60
    assert all(0.0 <= r.score <= 1.0 for r in scores.gpus)


def test_the_shipped_model_scores_a_fleet(shipped: registry.RiskModel, heldout_dataset: Path) -> None:
    frame = dataset.read_timeseries(heldout_dataset)
    end = float(frame["timestamp"].max())
    recent = frame[frame["timestamp"] > end - 7 * 86400]
    scores = score.score_frame(recent, shipped, now=datetime.fromtimestamp(end, UTC))
    assert len(scores.nodes) == 60
    assert {r.model_version for r in scores.gpus} == {shipped.card.version}
    flagged = [r for r in scores.nodes if r.level.value != "none"]
    assert all(r.drivers for r in flagged)


@pytest.fixture(scope="module")
def heldout_metrics(shipped: registry.RiskModel, heldout_dataset: Path) -> evaluate.Metrics:
    config = train.TrainConfig(horizon_s=shipped.card.horizon_s, every_s=shipped.card.every_s)
    with train.Steps(show=False) as steps:
        prepared = train.prepare([heldout_dataset], config, steps=steps, whole=True)
    data = prepared.part_of(split.Part.HOLDOUT)
    metrics = evaluate.evaluate(shipped.decision_scores(data), data, threshold=shipped.card.act)
    print("held-out seed 101:", json.dumps(metrics.as_dict()))
    return metrics


def test_precision_on_a_heldout_seed(heldout_metrics: evaluate.Metrics) -> None:
    assert heldout_metrics.precision >= 0.9
    assert heldout_metrics.true_alarms > 0


def test_recall_and_lead_time_on_failures_with_precursors(heldout_metrics: evaluate.Metrics) -> None:
    assert heldout_metrics.failures_with_precursor >= 20
    # Measured 0.92 with act 0.296 (0.50 with the earlier act 0.675, chosen allowing no false alarm on
    # under 1,000 validation node-days); 0.92 again (22 of 24, lead 8.0 h, no false alarm, no trap) with
    # the model of 2026-12-02 at act 0.172; the target is 0.8.
    assert heldout_metrics.event_recall_with_precursor >= 0.8
    median = heldout_metrics.lead_time_h["median"]
    assert median is not None
    assert median >= 6.0


def test_false_alarms_and_traps_on_a_heldout_seed(heldout_metrics: evaluate.Metrics) -> None:
    assert heldout_metrics.trap_gpus > 0
    assert heldout_metrics.trap_gpus_flagged == 0
    assert heldout_metrics.false_alarms <= 1
