"""`sickbay models`: what is installed (current and previous marked), and a rollback from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main
from app.predict import registry
from tests.predict.conftest import ModelFactory


def test_lists_versions_and_rolls_back(
    tmp_path: Path, make_model: ModelFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    registry.install(tmp_path, make_model(version="old"))
    registry.install(tmp_path, make_model(version="new", seed=1))

    assert main(["models", "--models", str(tmp_path)]) == 0
    listing = capsys.readouterr().out
    assert "new" in listing
    assert "current" in listing
    assert "previous" in listing

    assert main(["models", "--models", str(tmp_path), "--rollback"]) == 0
    assert registry.read_pointer(tmp_path) == {"current": "old", "previous": "new"}
    assert "old is current again" in capsys.readouterr().out


def test_nothing_installed_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--models", str(tmp_path), "--rollback"]) == 3
    assert "no CURRENT.json" in capsys.readouterr().err
