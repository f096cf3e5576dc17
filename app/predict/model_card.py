"""A risk model on disk: its card (what it is) and the checked load that refuses what it cannot vouch for.

`load` refuses, with a `ModelUnavailable` that says why, a missing file, a model whose bytes do not match
the card's sha256 (corrupted or replaced), a card whose feature list is not this Sickbay's
`features.FEATURES`, or a skops file that contains a type outside `TRUSTED_TYPES` (checked with
`skops.io.get_untrusted_types` before anything is constructed). `registry` keeps the versions.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import sklearn  # type: ignore[import-untyped]
import skops.io as sio  # type: ignore[import-untyped]

from app.predict import calibration, evaluate, features

log = logging.getLogger(__name__)

MODEL_FILE = "model.skops"
CARD_FILE = "card.json"
CARD_SCHEMA = 1
PRIMARY_METRICS = frozenset({"pr_auc", "event_recall_with_precursor", "recall"})

# The types skops does not trust by default that a Sickbay risk model contains — a CalibratedClassifierCV
# around a frozen HistGradientBoostingClassifier, isotonic or sigmoid. (skops already trusts the public
# scikit-learn estimators and numpy containers it can rebuild without running code.) A file that needs
# anything else — a function, an arbitrary class — is refused before anything in it is constructed.
TRUSTED_TYPES: frozenset[str] = frozenset(
    {
        "sklearn.calibration._CalibratedClassifier",
        "sklearn.calibration._SigmoidCalibration",
        "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    }
)


class ModelUnavailable(Exception):
    """No usable risk model: the caller runs rules-only and says so (log line, metric, status page)."""

    def __init__(self, reason: str, *, path: Path | None = None) -> None:
        self.reason = reason
        self.path = path
        super().__init__(f"risk model unavailable{f' at {path}' if path else ''}: {reason}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCard:
    """Everything known about a model, saved next to it as JSON."""

    version: str
    created_at: str
    features: tuple[str, ...]
    thresholds: dict[str, float]
    horizon_s: float
    data_hash: str
    name: str = "sickbay-gpu-risk"
    schema: int = CARD_SCHEMA
    primary_metric: str = "pr_auc"
    target_precision: float = 0.9
    every_s: float = 1800.0
    sustain_s: float = 1800.0
    step_s: float | None = None
    feature_medians: dict[str, float | None] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    sklearn_version: str = ""
    skops_version: str = ""
    numpy_version: str = ""
    model_file: str = MODEL_FILE
    model_sha256: str = ""

    def to_json(self) -> str:
        body = asdict(self)
        body["features"] = list(self.features)
        return json.dumps(body, indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, text: str, *, path: Path | None = None) -> ModelCard:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ModelUnavailable(f"card is not JSON ({exc})", path=path) from None
        if not isinstance(raw, dict):
            raise ModelUnavailable("card is not a JSON object", path=path)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ModelUnavailable(f"card has unknown fields: {', '.join(unknown)}", path=path)
        try:
            raw["features"] = tuple(raw["features"])
            card = cls(**raw)
        except (KeyError, TypeError) as exc:
            raise ModelUnavailable(f"card is incomplete or malformed ({exc})", path=path) from None
        if card.schema != CARD_SCHEMA:
            raise ModelUnavailable(f"card schema {card.schema} is not {CARD_SCHEMA}", path=path)
        return card

    @property
    def warn(self) -> float:
        return float(self.thresholds["warn"])

    @property
    def act(self) -> float:
        return float(self.thresholds["act"])


@dataclass(frozen=True, slots=True)
class RiskModel:
    """A loaded (or freshly trained) model with its card. `estimator` is sklearn's, hence Any."""

    card: ModelCard
    estimator: Any
    path: Path | None = None

    def predict(self, x: npt.NDArray[np.float32] | npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Calibrated probability of a hardware fault within the card's horizon, per row of `x`."""
        if len(x) == 0:
            return np.zeros(0, dtype=np.float64)
        return calibration.probabilities(self.estimator, x)

    def margin(self, x: npt.NDArray[np.float32] | npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """The uncalibrated model's log-odds: smooth where calibrated probabilities are steps."""
        if len(x) == 0:
            return np.zeros(0, dtype=np.float64)
        base = _base_estimator(self.estimator)
        if base is not None and hasattr(base, "decision_function"):
            return calibration.scores(base, x)
        p = np.clip(self.predict(x), 1e-6, 1 - 1e-6)
        return np.asarray(np.log(p / (1 - p)), dtype=np.float64)

    def decision_scores(self, data: evaluate.EvalSet) -> npt.NDArray[np.float64]:
        """Probabilities sustained over the card's `sustain_s` (what thresholds apply to)."""
        return evaluate.sustain(data.keys, self.predict(data.x), sustain_s=self.card.sustain_s)


def _base_estimator(estimator: Any) -> Any:
    """The classifier inside CalibratedClassifierCV(FrozenEstimator(...)), or None."""
    calibrated = getattr(estimator, "calibrated_classifiers_", None)
    if not calibrated:
        return None
    inner = getattr(calibrated[0], "estimator", None)
    return getattr(inner, "estimator", inner)


# -- loading --------------------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_card(directory: Path) -> ModelCard:
    path = directory / CARD_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelUnavailable(f"cannot read the card ({exc.strerror or exc})", path=path) from None
    return ModelCard.from_json(text, path=path)


def check_features(card: ModelCard, *, path: Path | None = None) -> None:
    if tuple(card.features) == features.FEATURES:
        return
    expected, got = list(features.FEATURES), list(card.features)
    missing = [f for f in expected if f not in got]
    unexpected = [f for f in got if f not in expected]
    detail = []
    if missing:
        detail.append(f"missing {missing}")
    if unexpected:
        detail.append(f"unexpected {unexpected}")
    if not detail:
        detail.append("same features in another order")
    raise ModelUnavailable(
        "the card's feature list does not match this Sickbay's features "
        f"({'; '.join(detail)}): retrain the model with this version",
        path=path,
    )


def load(directory: Path, *, trusted: frozenset[str] = TRUSTED_TYPES) -> RiskModel:
    """Load and check one model version directory; raises `ModelUnavailable` with the reason."""
    card = read_card(directory)
    check_features(card, path=directory / CARD_FILE)
    for key in ("warn", "act"):
        if not isinstance(card.thresholds.get(key), int | float):
            raise ModelUnavailable(f"card has no numeric '{key}' threshold", path=directory / CARD_FILE)
    model_path = directory / card.model_file
    if model_path.name != card.model_file or not model_path.is_file():
        raise ModelUnavailable(f"model file {card.model_file!r} is missing", path=directory)
    actual = sha256_file(model_path)
    if not card.model_sha256 or actual != card.model_sha256:
        raise ModelUnavailable(
            f"model file sha256 {actual[:12]}… does not match the card's {card.model_sha256[:12] or 'none'}…: "
            "the file is corrupted or was replaced",
            path=model_path,
        )
    try:
        untrusted = set(sio.get_untrusted_types(file=model_path))
    except Exception as exc:  # skops raises many kinds on a damaged archive
        raise ModelUnavailable(
            f"not a readable skops file ({type(exc).__name__}: {exc})", path=model_path
        ) from None
    refused = sorted(untrusted - trusted)
    if refused:
        raise ModelUnavailable(
            f"skops file contains types outside the allow-list: {', '.join(refused)}; refusing to load it",
            path=model_path,
        )
    try:
        estimator = sio.load(model_path, trusted=sorted(untrusted))
    except Exception as exc:
        raise ModelUnavailable(
            f"skops could not load the model ({type(exc).__name__}: {exc})", path=model_path
        ) from None
    if not hasattr(estimator, "predict_proba"):
        raise ModelUnavailable("the loaded object is not a classifier", path=model_path)
    if card.sklearn_version and _minor(card.sklearn_version) != _minor(sklearn.__version__):
        log.warning(
            "risk model %s was trained with scikit-learn %s, running %s: scores may differ",
            card.version,
            card.sklearn_version,
            sklearn.__version__,
        )
    return RiskModel(card=card, estimator=estimator, path=directory)


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])
