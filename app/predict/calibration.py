"""Calibrating a fitted model and scoring it, chunk by chunk, so large validation parts fit in memory.

`HistGradientBoostingClassifier` converts its whole input to float64 before predicting (twice the
float32 matrix), and `CalibratedClassifierCV.fit` predicts its whole input at once. Here scores are
computed a chunk at a time (`scores`, `probabilities`: rows are scored independently, so the numbers are
the same), and `calibrate_scores` fits the calibrator on scores computed beforehand — possibly streamed,
never held as one matrix — giving the very model `CalibratedClassifierCV(FrozenEstimator(model)).fit`
gives on those rows: the wrapper is fitted on five positive and five negative rows (for its structure:
classes, the frozen estimator), then its calibrator is refitted on every row's score, the step
`sklearn.calibration._fit_calibrator` takes on the scores it computes itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.calibration import CalibratedClassifierCV  # type: ignore[import-untyped]
from sklearn.frozen import FrozenEstimator  # type: ignore[import-untyped]

from app.predict.train_config import Calibration

CHUNK_ROWS = 262_144
MIN_CLASS_ROWS = 5


def scores(
    model: Any, x: npt.NDArray[np.float32] | npt.NDArray[np.float64], *, chunk_rows: int = CHUNK_ROWS
) -> npt.NDArray[np.float64]:
    """The fitted classifier's decision function (log-odds) per row, a chunk at a time."""
    return _chunked(model.decision_function, x, chunk_rows)


def probabilities(
    model: Any, x: npt.NDArray[np.float32] | npt.NDArray[np.float64], *, chunk_rows: int = CHUNK_ROWS
) -> npt.NDArray[np.float64]:
    """The positive class's probability per row, a chunk at a time."""
    return _chunked(lambda block: model.predict_proba(block)[:, 1], x, chunk_rows)


def _chunked(
    function: Any, x: npt.NDArray[np.float32] | npt.NDArray[np.float64], chunk_rows: int
) -> npt.NDArray[np.float64]:
    out = np.empty(len(x), dtype=np.float64)
    for lo in range(0, len(x), chunk_rows):
        block = np.asarray(x[lo : lo + chunk_rows], dtype=np.float64)
        out[lo : lo + len(block)] = np.asarray(function(block), dtype=np.float64).reshape(-1)
    return out


def calibrate(model: Any, x: npt.NDArray[np.float32], y: npt.NDArray[np.int8], method: Calibration) -> Any:
    """`CalibratedClassifierCV(FrozenEstimator(model), method=method)` fitted on (x, y), in chunks."""
    _check_classes(y)
    return calibrate_scores(model, scores(model, x), y, method, example=example_rows(x, y))


def calibrate_scores(
    model: Any,
    decision: npt.NDArray[np.float64],
    y: npt.NDArray[np.int8],
    method: Calibration,
    *,
    example: tuple[npt.NDArray[np.float32], npt.NDArray[np.int8]],
    sample_weight: npt.NDArray[np.float64] | None = None,
) -> Any:
    """The calibrated model from the base model's `decision` scores on the calibration rows and their
    labels `y`; `example`: a few of those rows (x, y), `example_rows`, to build the wrapper on."""
    _check_classes(y)
    calibrated = CalibratedClassifierCV(FrozenEstimator(model), method=method)
    calibrated.fit(*example)
    (pair,) = calibrated.calibrated_classifiers_
    (calibrator,) = pair.calibrators
    calibrator.fit(np.asarray(decision, dtype=np.float64), np.asarray(y, dtype=np.int64), sample_weight)
    return calibrated


def probabilities_from_scores(calibrated: Any, decision: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """What `calibrated.predict_proba(x)[:, 1]` gives, from the base model's `decision` scores on x: a
    binary `_CalibratedClassifier` applies its one calibrator to them (and clips a hair above 1 to 1)."""
    (pair,) = calibrated.calibrated_classifiers_
    (calibrator,) = pair.calibrators
    p = np.asarray(calibrator.predict(np.asarray(decision, dtype=np.float64)), dtype=np.float64)
    p[(p > 1.0) & (p <= 1.0 + 1e-5)] = 1.0
    return p


def example_rows(
    x: npt.NDArray[np.float32], y: npt.NDArray[np.int8]
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int8]]:
    """Five positive and five negative rows of (x, y), what `calibrate_scores` builds its wrapper on
    (`CalibratedClassifierCV` splits its input in five stratified folds even around a frozen model)."""
    pick = np.concatenate([np.flatnonzero(y == 1)[:MIN_CLASS_ROWS], np.flatnonzero(y == 0)[:MIN_CLASS_ROWS]])
    return np.asarray(x[pick]), np.asarray(y[pick])


def _check_classes(y: npt.NDArray[np.int8]) -> None:
    if int(y.sum()) < MIN_CLASS_ROWS or int((y == 0).sum()) < MIN_CLASS_ROWS:
        raise ValueError("the validation part needs at least 5 positive and 5 negative rows to calibrate")
