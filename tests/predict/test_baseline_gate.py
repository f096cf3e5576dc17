"""The rules baseline on a small features frame, and the promotion gate that refuses a model worse than it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.predict import baseline, evaluate, features, promotion, registry
from tests.predict.conftest import ModelFactory

HALF_HOUR = 1800.0


def table(columns: dict[str, list[float]], *, gpus: int = 1) -> pd.DataFrame:
    """A features frame: `gpus` GPUs of one node on a 30-minute grid, the same values for each."""
    steps = len(next(iter(columns.values())))
    parts = []
    for gpu in range(gpus):
        part = pd.DataFrame(
            {"node": "n1", "gpu": gpu, "uuid": f"GPU-{gpu}", "timestamp": HALF_HOUR * np.arange(steps)}
        )
        for name, values in columns.items():
            part[name] = np.asarray(values, dtype=np.float32)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def rule(**kw: object) -> baseline.Rule:
    return baseline.Rule.model_validate({"name": "r", "why": "because", **kw})


def test_the_shipped_rules_load_and_read_features_the_model_frame_has() -> None:
    rules = baseline.load()
    assert rules.version == "rules:prediction-baseline"
    assert len(rules.rules) >= 5
    assert rules.missing(list(features.FEATURES)) == (), "every rule reads a column compute_features makes"


def test_a_rule_fires_only_after_its_sustain_window_and_never_on_missing_values() -> None:
    frame = table({"mem_temp_vs_baseline_c": [0, 15, 0, 15, 15, 15, np.nan]})
    hot = rule(feature="mem_temp_vs_baseline_c", above=12, sustain="1h")
    fired = baseline.fire(baseline.Baseline(rules=(hot,)), frame)
    # One hot row is not an hour; three in a row (t-1h, t-30m, t) are; NaN is missing, never hot.
    assert fired.score.tolist() == [0, 0, 0, 0, 0, 1, 0]
    assert fired.rules[5] == ("r",)


def test_relative_rules_compare_with_the_gpus_own_history_and_a_floor() -> None:
    frame = table(
        {"pcie_replay_rate_1h": [0.01, 2.0, 2.0, 0.4], "pcie_replay_rate_24h": [0.01, 0.1, 1.0, 0.01]}
    )
    surge = rule(
        feature="pcie_replay_rate_1h", above=6, relative_to="pcie_replay_rate_24h", at_least=0.5, sustain="0s"
    )
    fired = baseline.fire(baseline.Baseline(rules=(surge,)), frame)
    # 0.01 vs 0.01: no surge; 2.0 vs 0.1: 20x; 2.0 vs 1.0: only 2x; 0.4 is 40x but under the floor.
    assert fired.score.tolist() == [0, 1, 0, 0]


def test_a_rule_on_a_column_the_frame_lacks_is_skipped_and_said() -> None:
    rules = baseline.Baseline(
        rules=(rule(name="gone", feature="no_such_feature", above=1), rule(feature="x", above=1))
    )
    fired = baseline.fire(rules, table({"x": [0, 2]}))
    assert fired.skipped == ("gone",)
    assert fired.score.tolist() == [0, 1]


def test_a_bad_rules_file_names_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - name: a\n    feature: x\n    above: high\n    why: y\n", encoding="utf-8")
    with pytest.raises(Exception, match="above"):
        baseline.load(path)
    assert baseline.load(baseline.DEFAULT_FILE).rules[0].sustain == timedelta(0)


def figures(precision: float | None, recall: float | None, rate: float | None) -> promotion.Figures:
    return promotion.Figures(precision=precision, recall=recall, false_alarms_per_1000_node_days=rate)


def test_the_gate_wants_higher_precision_at_no_worse_recall_and_false_alarm_rate() -> None:
    rules = figures(0.71, 0.6, 3.6)
    assert promotion.beats_baseline(figures(0.9, 0.8, 1.0), rules).passed
    worse = promotion.beats_baseline(figures(0.03, 0.84, 224.0), rules)
    assert not worse.passed
    assert "precision 0.030 does not beat the baseline's 0.710" in worse.reason
    assert "224.00 exceed the baseline's 3.60" in worse.reason
    assert not promotion.beats_baseline(figures(0.95, 0.5, 1.0), rules).passed, "recall fell"
    assert not promotion.beats_baseline(figures(None, None, 0.0), rules).passed, "no alarm, no precision"
    assert promotion.beats_baseline(figures(0.5, None, 0.0), figures(None, None, 0.0)).passed


def test_promotion_refuses_a_model_worse_than_the_baseline_unless_forced(
    make_model: ModelFactory, holdout: evaluate.EvalSet, tmp_path: Path
) -> None:
    # The synthetic label follows the first feature: a rule on it is a strong baseline.
    oracle = baseline.Baseline(rules=(rule(name="oracle", feature=features.FEATURES[0], above=1.5),))
    weak = make_model(version="weak", signal=0.5, act=0.05)
    refused = promotion.promote_if_better(weak, None, holdout, models_dir=tmp_path, rules=oracle)
    assert not refused.promoted
    assert "does not beat rules:prediction-baseline" in refused.reason
    record = refused.record()["baseline"]
    assert record["model"]["precision"] < record["baseline"]["precision"]
    with pytest.raises(registry.ModelUnavailable):
        registry.read_pointer(tmp_path)  # nothing was installed
    forced = promotion.promote_if_better(weak, None, holdout, models_dir=tmp_path, rules=oracle, force=True)
    assert forced.promoted
    assert forced.forced
    assert registry.read_pointer(tmp_path)["current"] == "weak"
