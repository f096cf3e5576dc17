"""Where risk models live: skops files (never pickle) with JSON cards, versioned, swapped atomically.

Layout of a models directory:

    CURRENT.json            {"current": "<version>", "previous": "<version>" | null}
    <version>/model.skops   the calibrated classifier, written with skops.io
    <version>/card.json     what it is: features, thresholds, training window, data hash, metrics, versions

Loading is `model_card.load` (re-exported here with the card types): it refuses what it cannot vouch for.

Saving writes a new version directory under a temporary name and renames it into place, then replaces
CURRENT.json the same way (write, fsync, `os.replace`): a crash at any point leaves the old pointer and
the old model intact. The previous version stays on disk for `rollback`.

Promotion (`promotion.promote_if_better`) installs a challenger only when it beats the current model and
the rules baseline on the same holdout. `prune` removes old versions that are neither current nor
previous beyond a small number kept.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import sklearn  # type: ignore[import-untyped]
import skops  # type: ignore[import-untyped]
import skops.io as sio  # type: ignore[import-untyped]

from app.predict import evaluate
from app.predict.model_card import (
    CARD_FILE,
    CARD_SCHEMA,
    MODEL_FILE,
    PRIMARY_METRICS,
    TRUSTED_TYPES,
    ModelCard,
    ModelUnavailable,
    RiskModel,
    check_features,
    load,
    read_card,
    sha256_file,
)

__all__ = [
    "CARD_FILE",
    "CARD_SCHEMA",
    "MODEL_FILE",
    "POINTER_FILE",
    "PRIMARY_METRICS",
    "TRUSTED_TYPES",
    "ModelCard",
    "ModelUnavailable",
    "RiskModel",
    "activate",
    "card_metrics",
    "check_features",
    "install",
    "load",
    "load_current",
    "prune",
    "read_card",
    "read_pointer",
    "rollback",
    "save",
    "seed",
    "sha256_file",
]

log = logging.getLogger(__name__)

POINTER_FILE = "CURRENT.json"


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


def card_metrics(metrics: Mapping[str, evaluate.Metrics]) -> dict[str, Any]:
    return {name: m.as_dict() for name, m in metrics.items()}
