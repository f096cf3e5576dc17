"""Training that scales: negative down-sampling, chunked features into one matrix, chunked calibration.

Down-sampled + reweighted + calibrated training must give probabilities calibrated at the true base rate;
the validation and holdout parts are never down-sampled; features built chunk by chunk equal those of
one big frame exactly; the model card says which rate was used.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.calibration import CalibratedClassifierCV  # type: ignore[import-untyped]
from sklearn.frozen import FrozenEstimator  # type: ignore[import-untyped]

from app.predict import calibration, dataset, features, matrix, sampling, split, train
from tests.predict.test_pipeline import small_config

NOW = datetime(2026, 12, 3, tzinfo=UTC)


# -- pure pieces -----------------------------------------------------------------------------------------


def test_auto_rate_keeps_everything_up_to_the_keep_size_then_shrinks() -> None:
    assert sampling.auto_rate(1_000) == 1.0
    assert sampling.auto_rate(sampling.AUTO_KEEP_ROWS) == 1.0
    assert sampling.auto_rate(80_000_000) == pytest.approx(sampling.AUTO_KEEP_ROWS / 80_000_000)
    # 5-minute samples on a 30-minute grid: one feature row in six.
    assert sampling.estimated_feature_rows(6_000, step_s=300.0, every_s=1800.0) == 1_000
    assert sampling.estimated_feature_rows(6_000, step_s=300.0, every_s=None) == 6_000


@pytest.mark.parametrize("rate", [0.0, -0.1, 1.5])
def test_a_rate_outside_zero_one_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="negative_rate"):
        train.TrainConfig(negative_rate=rate)


def _keys(gpus: int, instants: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "node": np.repeat([f"n{g // 4:03d}" for g in range(gpus)], instants),
            "gpu": np.repeat(np.arange(gpus) % 4, instants),
            "uuid": np.repeat([f"GPU-{g}" for g in range(gpus)], instants),
            "timestamp": np.tile(np.arange(instants) * 1800.0, gpus),
        }
    )


def test_keep_is_stratified_per_gpu_evenly_in_time_and_independent_of_chunks() -> None:
    keys = _keys(gpus=24, instants=500)
    rng = np.random.default_rng(3)
    candidate = rng.random(len(keys)) > 0.01  # the rest: positives, or rows outside the region
    rate = 0.1
    kept = sampling.keep(keys, candidate, rate, seed=5, salt="fleet")
    assert kept[~candidate].all()
    gpu = keys["uuid"].to_numpy()
    for name in np.unique(gpu):
        mine = (gpu == name) & candidate
        chosen = np.flatnonzero(mine & kept)
        assert abs(len(chosen) - mine.sum() * rate) <= 1
        # Evenly in time: the kept rows of a GPU are about 1 / rate candidates apart.
        ranks = np.searchsorted(np.flatnonzero(mine), chosen)
        assert set(np.diff(ranks)) <= {9, 10, 11}
    # Chunks of whole nodes choose the same rows; the seed changes the choice.
    node = keys["node"].to_numpy()
    pieces = [
        sampling.keep(
            keys[node == n].reset_index(drop=True), candidate[node == n], rate, seed=5, salt="fleet"
        )
        for n in np.unique(node)
    ]
    assert np.array_equal(np.concatenate(pieces), kept)
    assert not np.array_equal(sampling.keep(keys, candidate, rate, seed=6, salt="fleet"), kept)


def test_region_keeps_validation_and_holdout_rows_out() -> None:
    spec = split.SplitSpec()
    keys = _keys(gpus=400, instants=28 * 48)
    t = keys["timestamp"].to_numpy(dtype=np.float64)
    edges = split.boundaries(t, spec)
    bounds = sampling.lower_bounds(float(t.min()), float(t.max()), spec, every_s=1800.0)
    upper = sampling.upper_bounds(float(t.min()), float(t.max()), spec)
    part, _ = split.assign(keys["node"].to_numpy(dtype=object), t, spec, edges=edges)
    inside = sampling.region(keys["node"], t, spec, bounds)
    assert set(np.unique(part[inside])) <= {split.Part.TRAIN, split.Part.NONE}
    assert inside[part == split.Part.TRAIN].all()
    dropped = sampling.unused(keys["node"], t, spec, upper)
    assert (part[dropped] == split.Part.NONE).all()
    assert dropped.mean() > 0.15  # the warm-up, and the training nodes' last quarter


def test_row_buffer_fills_one_matrix_growing_in_place() -> None:
    rng = np.random.default_rng(0)
    chunks = [rng.standard_normal((n, 7)).astype(np.float32) for n in (5, 0, 130, 41)]
    buffer = matrix.RowBuffer(7, capacity=10)
    for chunk in chunks:
        buffer.append(chunk)
    assert len(buffer) == 176
    assert buffer.capacity >= 176
    out = buffer.finish()
    assert out.shape == (176, 7)
    assert out.dtype == np.float32
    assert np.array_equal(out, np.concatenate(chunks))
    with pytest.raises(RuntimeError):
        buffer.append(chunks[0])
    with pytest.raises(ValueError, match="columns"):
        matrix.RowBuffer(3).append(chunks[0])


# -- calibration -----------------------------------------------------------------------------------------


def _synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows whose true probability is known: logit = -7 + 1.5 x0 + x1 (a base rate near 0.4%)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    p = 1.0 / (1.0 + np.exp(-(-7.0 + 1.5 * x[:, 0] + x[:, 1])))
    return x, (rng.random(n) < p).astype(np.int8), p


def test_down_sampled_reweighted_calibrated_training_is_calibrated_at_the_true_base_rate() -> None:
    config = train.TrainConfig(max_iter=30, min_samples_leaf=50)
    x, y, _ = _synthetic(400_000, seed=1)
    keys = _keys(gpus=400, instants=1000)
    rate = 0.05
    kept = sampling.keep(keys, y != 1, rate, seed=0, salt="synthetic")
    weight = np.where(y != 1, 1.0 / rate, 1.0).astype(np.float32)[kept]
    assert kept.mean() < 0.06
    assert kept[y == 1].all()
    base = train.fit_estimator(x[kept], y[kept], config, sample_weight=weight)
    x_val, y_val, _ = _synthetic(200_000, seed=2)  # not down-sampled: the true base rate
    model = train.calibrate(base, x_val, y_val, config.calibration)
    x_hold, y_hold, p_hold = _synthetic(400_000, seed=3)
    predicted = calibration.probabilities(model, x_hold)
    observed = y_hold.mean()
    assert predicted.mean() == pytest.approx(observed, rel=0.15)
    assert predicted.mean() == pytest.approx(p_hold.mean(), rel=0.15)
    # Without calibration the balanced, down-sampled base model is far off the base rate.
    assert calibration.probabilities(base, x_hold).mean() > 10 * observed
    # And down-sampling costs little ranking: holdout PR-AUC near the full-data model's.
    full = train.calibrate(train.fit_estimator(x, y, config), x_val, y_val, config.calibration)
    from sklearn.metrics import average_precision_score  # type: ignore[import-untyped]  # noqa: PLC0415

    sampled_auc = average_precision_score(y_hold, predicted)
    full_auc = average_precision_score(y_hold, calibration.probabilities(full, x_hold))
    assert sampled_auc == pytest.approx(full_auc, abs=0.03)


def test_calibrating_in_chunks_gives_the_model_calibrated_classifier_cv_gives() -> None:
    x, y, _ = _synthetic(60_000, seed=4)
    y[:50] = 1  # enough positives for isotonic steps
    base = train.fit_estimator(x[:30_000], y[:30_000], train.TrainConfig(max_iter=10))
    for method in ("sigmoid", "isotonic"):
        expected = CalibratedClassifierCV(FrozenEstimator(base), method=method).fit(x[30_000:], y[30_000:])
        got = train.calibrate(base, x[30_000:], y[30_000:], method)
        assert np.array_equal(
            expected.predict_proba(x)[:, 1], calibration.probabilities(got, x, chunk_rows=4_099)
        )
        # From scores streamed beforehand, as the benchmark scores rows it never holds at once.
        from_scores = calibration.probabilities_from_scores(got, calibration.scores(base, x))
        assert np.array_equal(expected.predict_proba(x)[:, 1], from_scores)


# -- preparing a simulated fleet -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def full(train_dataset: Path) -> train.Prepared:
    with train.Steps(show=False) as steps:
        return train.prepare([train_dataset], small_config(), steps=steps)


@pytest.fixture(scope="module")
def sampled(train_dataset: Path) -> train.Prepared:
    config = dataclasses.replace(small_config(), negative_rate=0.2, node_chunk=3)
    with train.Steps(show=False) as steps:
        return train.prepare([train_dataset], config, steps=steps)


def _part(prepared: train.Prepared, which: split.Part) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    data = prepared.part_of(which)
    return data.keys, data.x, data.labels.label


def test_chunked_features_equal_one_big_frame_exactly(train_dataset: Path, full: train.Prepared) -> None:
    frame = dataset.read_timeseries(train_dataset)
    with train.Steps(show=False) as steps:
        whole = features.compute_features(frame, every_s=small_config().every_s)
        one_chunk = dataclasses.replace(small_config(), node_chunk=10_000)
        single = train.prepare([train_dataset], one_chunk, steps=steps)
    expected = whole[list(features.FEATURES)].to_numpy(dtype=np.float32)
    assert full.data.x.shape == expected.shape
    assert np.array_equal(full.data.x, expected, equal_nan=True)
    assert np.array_equal(single.data.x, full.data.x, equal_nan=True)
    assert (whole["node"].astype(str).to_numpy() == full.data.keys["node"].to_numpy()).all()
    assert np.array_equal(single.data.labels.status, full.data.labels.status)
    assert np.array_equal(single.part, full.part)


def test_validation_and_holdout_are_never_down_sampled(full: train.Prepared, sampled: train.Prepared) -> None:
    assert sampled.edges == full.edges
    for which in (split.Part.VALIDATION, split.Part.HOLDOUT):
        keys_f, x_f, y_f = _part(full, which)
        keys_s, x_s, y_s = _part(sampled, which)
        pd.testing.assert_frame_equal(keys_s, keys_f)
        assert np.array_equal(x_s, x_f, equal_nan=True)
        assert np.array_equal(y_s, y_f)
        assert (sampled.weight_of(which) == 1.0).all()
    _, _, y_full = _part(full, split.Part.TRAIN)
    _, _, y_kept = _part(sampled, split.Part.TRAIN)
    assert y_kept.sum() == y_full.sum()  # every positive
    negatives, kept = int((y_full == 0).sum()), int((y_kept == 0).sum())
    assert kept == pytest.approx(0.2 * negatives, rel=0.05)
    weight = sampled.weight_of(split.Part.TRAIN)
    assert set(np.unique(weight[y_kept == 0])) == {5.0}
    # Weighted, the kept negatives stand for all of them.
    assert float(weight[y_kept == 0].sum()) == pytest.approx(negatives, rel=0.05)


def test_the_model_card_records_the_rate(full: train.Prepared, sampled: train.Prepared) -> None:
    with train.Steps(show=False) as steps:
        card = train.fit(
            sampled, dataclasses.replace(small_config(), negative_rate=0.2), now=NOW, steps=steps
        )
    record = card.model.card.training["negative_sampling"]
    assert (record["rate"], record["chosen"], record["negative_weight"]) == (0.2, "config", 5.0)
    assert record["region_negatives_kept"] < record["region_negatives"]
    assert record["unused_rows_dropped"] > 0
    auto = full.sampling.as_dict()
    assert (auto["chosen"], auto["rate"]) == ("auto", 1.0)
    assert auto["estimated_feature_rows"] == pytest.approx(auto["rows_seen"], rel=0.05)
