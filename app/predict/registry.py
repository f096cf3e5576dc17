"""Where risk models live: skops files (never pickle) with JSON cards, versioned, swapped atomically.

Layout of a models directory:

    CURRENT.json            {"current": "<version>", "previous": "<version>" | null}
    <version>/model.skops   the calibrated classifier, written with skops.io
    <version>/card.json     what it is: features, thresholds, training window, data hash, metrics, versions

Loading refuses, with a `ModelUnavailable` that says why, anything it cannot vouch for: a missing file, a
model whose bytes do not match the card's sha256 (corrupted or replaced), a card whose feature list is
not this Sickbay's `features.FEATURES`, or a skops file that contains a type outside `TRUSTED_TYPES`
(checked with `skops.io.get_untrusted_types` before anything is constructed). The service turns that error
into "rules-only, loudly"; it never falls back to a model it cannot check.

Saving writes a new version directory under a temporary name and renames it into place, then replaces
CURRENT.json the same way (write, fsync, `os.replace`): a crash at any point leaves the old pointer and
the old model intact. The previous version stays on disk for `rollback`.

Promotion (`promote_if_better`, judged by `judge`) scores a challenger and the current model on the same
holdout and installs the challenger only if it is better; the comparison goes into the challenger's card
(`metrics["promotion"]`), so its card shows both. `prune` removes old versions that are neither current
nor previous beyond a small number kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import sklearn  # type: ignore[import-untyped]
import skops  # type: ignore[import-untyped]
import skops.io as sio  # type: ignore[import-untyped]

from app.predict import evaluate, features

log = logging.getLogger(__name__)

MODEL_FILE = "model.skops"
CARD_FILE = "card.json"
POINTER_FILE = "CURRENT.json"
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
        proba = self.estimator.predict_proba(np.asarray(x, dtype=np.float64))
        return np.asarray(proba[:, 1], dtype=np.float64)

    def margin(self, x: npt.NDArray[np.float32] | npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """The uncalibrated model's log-odds: smooth where calibrated probabilities are steps."""
        if len(x) == 0:
            return np.zeros(0, dtype=np.float64)
        base = _base_estimator(self.estimator)
        if base is not None and hasattr(base, "decision_function"):
            return np.asarray(base.decision_function(np.asarray(x, dtype=np.float64)), dtype=np.float64)
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


def read_pointer(models_dir: Path) -> dict[str, str | None]:
    path = models_dir / POINTER_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelUnavailable("no CURRENT.json: no model has been installed", path=models_dir) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelUnavailable(f"CURRENT.json is unreadable ({exc})", path=path) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("current"), str):
        raise ModelUnavailable("CURRENT.json names no current version", path=path)
    previous = raw.get("previous")
    return {"current": raw["current"], "previous": previous if isinstance(previous, str) else None}


def load_current(models_dir: Path) -> RiskModel:
    """The model CURRENT.json points at, checked; `ModelUnavailable` when there is none usable."""
    pointer = read_pointer(models_dir)
    current = pointer["current"]
    assert current is not None
    return load(_version_dir(models_dir, current))


def _version_dir(models_dir: Path, version: str) -> Path:
    if not version or "/" in version or "\\" in version or version.startswith("."):
        raise ModelUnavailable(f"bad version name {version!r}", path=models_dir)
    return models_dir / version


# -- saving ---------------------------------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@contextmanager
def _new_version(models_dir: Path, version: str) -> Iterator[Path]:
    """A private staging directory, filled by the caller, that becomes `models_dir/version` in one rename
    when the block ends (or vanishes if it fails): a reader never sees half a version."""
    staging = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=models_dir))
    try:
        yield staging
        # mkdtemp/mkstemp make private files; a model is meant to be read by the service and operators.
        for path in staging.iterdir():
            path.chmod(0o644)
        staging.chmod(0o755)
        os.rename(staging, _version_dir(models_dir, version))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _fsync_dir(models_dir)


def save(models_dir: Path, model: RiskModel) -> RiskModel:
    """Write a new version directory (model + card with its sha256) atomically; does not activate it."""
    models_dir.mkdir(parents=True, exist_ok=True)
    final = _version_dir(models_dir, model.card.version)
    if final.exists():
        raise FileExistsError(f"model version {model.card.version} already exists in {models_dir}")
    with _new_version(models_dir, model.card.version) as staging:
        model_path = staging / MODEL_FILE
        sio.dump(model.estimator, model_path)
        card = replace(
            model.card,
            model_file=MODEL_FILE,
            model_sha256=sha256_file(model_path),
            sklearn_version=sklearn.__version__,
            skops_version=skops.__version__,
            numpy_version=np.__version__,
        )
        _write_atomic(staging / CARD_FILE, card.to_json().encode())
    return RiskModel(card=card, estimator=model.estimator, path=final)


def activate(models_dir: Path, version: str) -> None:
    """Point CURRENT.json at `version` (which must load), keeping the old current as `previous`."""
    load(_version_dir(models_dir, version))
    try:
        old = read_pointer(models_dir)["current"]
    except ModelUnavailable:
        old = None
    previous = old if old != version else None
    body = json.dumps({"current": version, "previous": previous}, indent=2) + "\n"
    _write_atomic(models_dir / POINTER_FILE, body.encode(), mode=0o644)
    log.info("risk model %s is now current (previous: %s)", version, previous)


def install(models_dir: Path, model: RiskModel) -> RiskModel:
    """Save and activate in one go."""
    saved = save(models_dir, model)
    activate(models_dir, saved.card.version)
    return saved


def seed(models_dir: Path, source: Path) -> str | None:
    """Copy `source`'s current model into an empty `models_dir` and make it current there; returns its
    version, or None when `models_dir` already has a model (never overwritten) or is `source` itself.
    The copy is checked like any load, so a damaged source seeds nothing."""
    if models_dir.resolve() == source.resolve() or (models_dir / POINTER_FILE).exists():
        return None
    model = load_current(source)
    version = model.card.version
    models_dir.mkdir(parents=True, exist_ok=True)
    if not _version_dir(models_dir, version).exists():
        with _new_version(models_dir, version) as staging:
            for name in (model.card.model_file, CARD_FILE):
                shutil.copyfile(_version_dir(source, version) / name, staging / name)
    activate(models_dir, version)
    return version


def rollback(models_dir: Path) -> str:
    """Make the previous version current again; returns it."""
    pointer = read_pointer(models_dir)
    previous = pointer["previous"]
    if previous is None:
        raise ModelUnavailable("there is no previous model to roll back to", path=models_dir)
    activate(models_dir, previous)
    return previous


# -- promotion ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Promotion:
    """The verdict on a challenger: both models' metrics on the same holdout, and why."""

    promoted: bool
    reason: str
    metric: str
    challenger: dict[str, Any]
    current: dict[str, Any] | None
    version: str | None = None
    challenger_version: str = ""
    current_version: str | None = None
    min_gain: float = 0.0
    holdout: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """What the challenger's card keeps under `metrics["promotion"]`: both models, side by side."""
        return {
            "promoted": self.promoted,
            "reason": self.reason,
            "metric": self.metric,
            "min_gain": self.min_gain,
            "holdout": dict(self.holdout),
            "challenger": {"version": self.challenger_version, **self.challenger},
            "current": None if self.current is None else {"version": self.current_version, **self.current},
        }


def judge(
    challenger: RiskModel, current: RiskModel | None, holdout: evaluate.EvalSet, *, min_gain: float = 0.0
) -> Promotion:
    """Score both models on the same holdout and say whether the challenger should replace the current one.

    Better means: a higher value of the primary metric (the current card's, else the challenger's) by
    more than `min_gain`, AND no more false alarms than the current model, each at its own act threshold.
    Writes nothing.
    """
    metric = (current.card if current is not None else challenger.card).primary_metric
    if metric not in PRIMARY_METRICS:
        raise ValueError(f"unknown primary metric {metric!r}")
    new = evaluate.evaluate(challenger.decision_scores(holdout), holdout, threshold=challenger.card.act)
    common: dict[str, Any] = {
        "metric": metric,
        "challenger": _summary(new),
        "challenger_version": challenger.card.version,
        "min_gain": min_gain,
        "holdout": _holdout_view(new),
    }
    if current is None:
        # Nothing to beat, but a model that misses its own precision target would act on false alarms:
        # rules-only is the safer state to stay in.
        target = challenger.card.target_precision
        precision = new.precision if np.isfinite(new.precision) else 0.0
        if precision < target:
            reason = f"no current model, and the challenger's holdout precision {precision:.3f} is below its target {target:.2f}"
            return Promotion(promoted=False, reason=reason, current=None, **common)
        reason = f"no current model; the challenger's holdout precision {precision:.3f} meets its target {target:.2f}"
        return Promotion(promoted=True, reason=reason, current=None, **common)
    old = evaluate.evaluate(current.decision_scores(holdout), holdout, threshold=current.card.act)
    common.update(current=_summary(old), current_version=current.card.version)
    new_value, old_value = _metric(new, metric), _metric(old, metric)
    if not new_value > old_value + min_gain:
        reason = f"{metric} {new_value:.4f} does not beat the current {old_value:.4f} (+{min_gain})"
        return Promotion(promoted=False, reason=reason, **common)
    if new.false_alarms > old.false_alarms:
        reason = f"{metric} improves, but false alarms rise from {old.false_alarms} to {new.false_alarms}"
        return Promotion(promoted=False, reason=reason, **common)
    reason = f"{metric} {new_value:.4f} > {old_value:.4f} with {new.false_alarms} ≤ {old.false_alarms} false alarms"
    return Promotion(promoted=True, reason=reason, **common)


def with_promotion(model: RiskModel, verdict: Promotion) -> RiskModel:
    """The model with the verdict recorded in its card (`metrics["promotion"]`), so the card shows both."""
    card = replace(model.card, metrics={**model.card.metrics, "promotion": verdict.record()})
    return RiskModel(card=card, estimator=model.estimator, path=model.path)


def promote_if_better(
    challenger: RiskModel,
    current: RiskModel | None,
    holdout: evaluate.EvalSet,
    *,
    models_dir: Path,
    min_gain: float = 0.0,
) -> Promotion:
    """Score both models on the same holdout; install the challenger only if it is better (`judge`).

    Promotion is `install` (atomic; the old current becomes `previous`) of the challenger with the
    comparison recorded in its card. A rejected challenger is not written: the caller decides.
    """
    verdict = judge(challenger, current, holdout, min_gain=min_gain)
    if not verdict.promoted:
        return verdict
    saved = install(models_dir, with_promotion(challenger, verdict))
    return replace(verdict, version=saved.card.version)


# -- pruning --------------------------------------------------------------------------------------------


def prune(models_dir: Path, *, keep: int = 3) -> list[str]:
    """Delete old versions that are neither current nor previous, beyond the newest `keep` of them.

    Only directories with a readable card count as versions (anything else is left alone), and nothing is
    pruned without a readable CURRENT.json. A version is renamed to a hidden name before it is deleted, so
    a crash never leaves a half-deleted directory under a version's name. Returns the versions removed.
    """
    try:
        pointer = read_pointer(models_dir)
    except ModelUnavailable:
        return []
    protected = {v for v in pointer.values() if v is not None}
    candidates: list[tuple[str, str]] = []
    for path in models_dir.iterdir():
        if not path.is_dir() or path.name.startswith(".") or path.name in protected:
            continue
        try:
            card = read_card(path)
        except ModelUnavailable:
            continue
        candidates.append((card.created_at, path.name))
    candidates.sort(reverse=True)
    removed: list[str] = []
    for _, name in candidates[max(keep, 0) :]:
        doomed = models_dir / f".pruned-{name}"
        try:
            os.rename(models_dir / name, doomed)
        except OSError as exc:
            log.warning("could not prune risk model %s: %s", name, exc)
            continue
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(name)
        log.info("pruned old risk model %s", name)
    if removed:
        _fsync_dir(models_dir)
    return removed


def _metric(metrics: evaluate.Metrics, name: str) -> float:
    value = float(getattr(metrics, name))
    return value if np.isfinite(value) else float("-inf")


def _summary(metrics: evaluate.Metrics) -> dict[str, Any]:
    body = metrics.as_dict()
    keys = (
        "threshold",
        "precision",
        "recall",
        "pr_auc",
        "false_alarms",
        "event_recall_with_precursor",
        "trap_gpus_flagged",
    )
    return {k: body[k] for k in keys}


def _holdout_view(metrics: evaluate.Metrics) -> dict[str, Any]:
    body = metrics.as_dict()
    return {k: body[k] for k in ("rows", "positives", "node_days", "failures")}


def card_metrics(metrics: Mapping[str, evaluate.Metrics]) -> dict[str, Any]:
    return {name: m.as_dict() for name, m in metrics.items()}
