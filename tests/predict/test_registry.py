"""The model registry: skops only, checked cards, refusals with reasons, atomic swaps and rollback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import skops.io as sio  # type: ignore[import-untyped]
from sklearn.preprocessing import FunctionTransformer  # type: ignore[import-untyped]

from app.predict import evaluate, features, promotion, registry
from tests.predict.conftest import ModelFactory, synthetic_xy, with_card


def test_save_activate_and_load_round_trip(tmp_path: Path, make_model: ModelFactory) -> None:
    model = make_model()
    saved = registry.install(tmp_path, model)
    loaded = registry.load_current(tmp_path)
    assert loaded.card.version == "v1"
    assert loaded.card.model_sha256 == registry.sha256_file(tmp_path / "v1" / "model.skops")
    assert loaded.card.sklearn_version
    assert loaded.card.skops_version
    x = evaluate_rows()
    assert (loaded.predict(x) == saved.predict(x)).all()
    assert json.loads((tmp_path / "CURRENT.json").read_text()) == {"current": "v1", "previous": None}
    # Files are readable by the service and operators, and nothing temporary is left behind.
    assert oct((tmp_path / "v1").stat().st_mode & 0o777) == "0o755"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CURRENT.json", "v1"]


def evaluate_rows() -> np.ndarray:
    return synthetic_xy(50, seed=5, signal=3.0)[0]


def test_no_model_installed_is_model_unavailable(tmp_path: Path) -> None:
    with pytest.raises(registry.ModelUnavailable, match=r"no CURRENT\.json"):
        registry.load_current(tmp_path)


def test_a_corrupted_model_file_is_refused(tmp_path: Path, make_model: ModelFactory) -> None:
    registry.install(tmp_path, make_model())
    path = tmp_path / "v1" / "model.skops"
    data = bytearray(path.read_bytes())
    for offset in (len(data) // 3, len(data) // 2):
        data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(registry.ModelUnavailable, match="corrupted or was replaced"):
        registry.load_current(tmp_path)


def test_a_truncated_model_file_is_refused(tmp_path: Path, make_model: ModelFactory) -> None:
    registry.install(tmp_path, make_model())
    path = tmp_path / "v1" / "model.skops"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(registry.ModelUnavailable, match="sha256"):
        registry.load_current(tmp_path)


def test_a_card_with_another_feature_list_is_refused(tmp_path: Path, make_model: ModelFactory) -> None:
    registry.install(tmp_path, make_model())
    card_path = tmp_path / "v1" / "card.json"
    card = json.loads(card_path.read_text())
    card["features"] = [*card["features"][:-1], "gpu_fan_speed"]
    card_path.write_text(json.dumps(card))
    with pytest.raises(registry.ModelUnavailable) as caught:
        registry.load_current(tmp_path)
    message = str(caught.value)
    assert "feature list does not match" in message
    assert "'hours_since_reset'" in message
    assert "'gpu_fan_speed'" in message


def test_a_card_with_the_features_reordered_is_refused(tmp_path: Path, make_model: ModelFactory) -> None:
    model = with_card(make_model(), features=tuple(reversed(features.FEATURES)))
    registry.save(tmp_path, model)
    with pytest.raises(registry.ModelUnavailable, match="another order"):
        registry.load(tmp_path / "v1")


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda c: c.update(thresholds={"warn": 0.1}), "'act' threshold"),
        (lambda c: c.update(schema=99), "schema 99"),
        (lambda c: c.update(surprise=1), "unknown fields: surprise"),
        (lambda c: c.pop("version"), "incomplete"),
    ],
)
def test_malformed_cards_are_refused(
    tmp_path: Path, make_model: ModelFactory, edit: object, reason: str
) -> None:
    registry.install(tmp_path, make_model())
    card_path = tmp_path / "v1" / "card.json"
    card = json.loads(card_path.read_text())
    edit(card)  # type: ignore[operator]
    card_path.write_text(json.dumps(card))
    with pytest.raises(registry.ModelUnavailable, match=reason):
        registry.load(tmp_path / "v1")


def test_a_skops_file_with_an_untrusted_type_is_refused(tmp_path: Path, make_model: ModelFactory) -> None:
    """An attacker's model that calls os.system: its card even matches (sha256 and features)."""
    registry.install(tmp_path, make_model())
    path = tmp_path / "v1" / "model.skops"
    sio.dump(FunctionTransformer(func=os.system), path)
    card_path = tmp_path / "v1" / "card.json"
    card = json.loads(card_path.read_text())
    card["model_sha256"] = registry.sha256_file(path)
    card_path.write_text(json.dumps(card))
    with pytest.raises(registry.ModelUnavailable) as caught:
        registry.load_current(tmp_path)
    assert "outside the allow-list" in str(caught.value)
    assert "posix.system" in str(caught.value)


def test_the_allow_list_covers_what_training_produces(tmp_path: Path, make_model: ModelFactory) -> None:
    registry.save(tmp_path, make_model())
    untrusted = set(sio.get_untrusted_types(file=tmp_path / "v1" / "model.skops"))
    assert untrusted <= registry.TRUSTED_TYPES


def test_promotion_keeps_the_current_model_against_a_worse_challenger(
    tmp_path: Path, make_model: ModelFactory, holdout: evaluate.EvalSet
) -> None:
    current = registry.install(tmp_path, make_model(version="good", signal=3.0))
    worse = make_model(version="noise", signal=0.0, seed=1)
    result = promotion.promote_if_better(worse, current, holdout, models_dir=tmp_path)
    assert not result.promoted
    assert "does not beat" in result.reason
    assert registry.read_pointer(tmp_path)["current"] == "good"
    assert not (tmp_path / "noise").exists()


def test_promotion_installs_a_better_challenger_and_keeps_the_previous(
    tmp_path: Path, make_model: ModelFactory, holdout: evaluate.EvalSet
) -> None:
    current = registry.install(tmp_path, make_model(version="weak", signal=0.5, seed=2, act=0.05))
    better = make_model(version="strong", signal=3.0, seed=3, act=0.8)
    result = promotion.promote_if_better(better, current, holdout, models_dir=tmp_path)
    assert result.promoted, result.reason
    assert result.version == "strong"
    assert registry.read_pointer(tmp_path) == {"current": "strong", "previous": "weak"}
    assert registry.load_current(tmp_path).card.version == "strong"
    assert registry.load(tmp_path / "weak").card.version == "weak"
    assert registry.rollback(tmp_path) == "weak"
    assert registry.read_pointer(tmp_path) == {"current": "weak", "previous": "strong"}


def test_promotion_needs_no_more_false_alarms(
    tmp_path: Path, make_model: ModelFactory, holdout: evaluate.EvalSet
) -> None:
    current = registry.install(tmp_path, make_model(version="careful", signal=3.0, act=0.9))
    # Same quality ranking, but a threshold so low that it alarms on most negatives.
    eager = with_card(
        make_model(version="eager", signal=3.0, seed=4), thresholds={"warn": 0.0001, "act": 0.001}
    )
    result = promotion.promote_if_better(eager, current, holdout, models_dir=tmp_path, min_gain=-1.0)
    assert not result.promoted
    assert "false alarms rise" in result.reason


def test_first_model_is_promoted_when_there_is_none(
    tmp_path: Path, make_model: ModelFactory, holdout: evaluate.EvalSet
) -> None:
    first = with_card(make_model(act=0.8), target_precision=0.8)  # the bar is the card's own target
    result = promotion.promote_if_better(first, None, holdout, models_dir=tmp_path)
    assert result.promoted, result.reason
    assert registry.read_pointer(tmp_path)["current"] == "v1"


def test_a_first_model_below_its_precision_target_is_not_installed(
    tmp_path: Path, make_model: ModelFactory, holdout: evaluate.EvalSet
) -> None:
    """With nothing to beat, the bar is the model's own target: an eager one stays out (rules-only)."""
    result = promotion.promote_if_better(make_model(act=0.05), None, holdout, models_dir=tmp_path)
    assert not result.promoted
    assert "below its target 0.90" in result.reason
    assert not (tmp_path / registry.POINTER_FILE).exists()


def test_a_crash_while_swapping_leaves_the_old_model_current(
    tmp_path: Path, make_model: ModelFactory, holdout: evaluate.EvalSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    current = registry.install(tmp_path, make_model(version="old", signal=0.5, seed=2, act=0.05))

    def crash(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(registry.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        promotion.promote_if_better(
            make_model(version="new", seed=3, act=0.8), current, holdout, models_dir=tmp_path
        )
    monkeypatch.undo()
    assert registry.load_current(tmp_path).card.version == "old"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_crash_while_swapping_the_pointer_leaves_the_old_model_current(
    tmp_path: Path, make_model: ModelFactory, holdout: evaluate.EvalSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    current = registry.install(tmp_path, make_model(version="old", signal=0.5, seed=2, act=0.05))
    real_replace = os.replace

    def crash_on_pointer(src: str, dst: str) -> None:
        if str(dst).endswith(registry.POINTER_FILE):
            raise OSError("power cut")
        real_replace(src, dst)

    monkeypatch.setattr(registry.os, "replace", crash_on_pointer)
    with pytest.raises(OSError, match="power cut"):
        promotion.promote_if_better(
            make_model(version="new", seed=3, act=0.8), current, holdout, models_dir=tmp_path
        )
    monkeypatch.undo()
    assert registry.read_pointer(tmp_path) == {"current": "old", "previous": None}
    assert registry.load_current(tmp_path).card.version == "old"
    # The new version is complete on disk, just not current: activating it later works.
    registry.activate(tmp_path, "new")
    assert registry.read_pointer(tmp_path) == {"current": "new", "previous": "old"}


def test_saving_a_version_twice_is_refused(tmp_path: Path, make_model: ModelFactory) -> None:
    registry.save(tmp_path, make_model())
    with pytest.raises(FileExistsError):
        registry.save(tmp_path, make_model())


def test_rollback_without_a_previous_model(tmp_path: Path, make_model: ModelFactory) -> None:
    registry.install(tmp_path, make_model())
    with pytest.raises(registry.ModelUnavailable, match="no previous model"):
        registry.rollback(tmp_path)


def test_a_pointer_cannot_escape_the_models_directory(tmp_path: Path) -> None:
    (tmp_path / "CURRENT.json").write_text(json.dumps({"current": "../elsewhere"}))
    with pytest.raises(registry.ModelUnavailable, match="bad version name"):
        registry.load_current(tmp_path)


def test_seeding_copies_the_current_model_into_an_empty_directory_only(
    tmp_path: Path, make_model: ModelFactory
) -> None:
    shipped = tmp_path / "shipped"
    registry.install(shipped, make_model(version="shipped-v1"))
    volume = tmp_path / "volume"
    assert registry.seed(volume, shipped) == "shipped-v1"
    assert registry.load_current(volume).card.version == "shipped-v1"

    registry.install(volume, make_model(version="retrained", seed=1))
    assert registry.seed(volume, shipped) is None, "a directory with a model is never overwritten"
    assert registry.read_pointer(volume)["current"] == "retrained"
    assert registry.seed(shipped, shipped) is None


def test_seeding_from_a_damaged_model_seeds_nothing(tmp_path: Path, make_model: ModelFactory) -> None:
    shipped = tmp_path / "shipped"
    saved = registry.install(shipped, make_model(version="v1"))
    assert saved.path is not None
    (saved.path / registry.MODEL_FILE).write_bytes(b"not a model")
    with pytest.raises(registry.ModelUnavailable):
        registry.seed(tmp_path / "volume", shipped)
    assert not (tmp_path / "volume" / registry.POINTER_FILE).exists()
