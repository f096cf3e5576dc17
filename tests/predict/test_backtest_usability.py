"""`sickbay backtest` as a new user meets it: default models, --flags-out, --truth errors, missing fields."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.predict import backtest_cli, commands, coverage, features, registry
from tests.predict.conftest import ModelFactory, with_card
from tests.predict.fakeprom import DownClient, FrameClient

STEP = 300.0
T0 = 1_740_960_000.0  # 2025-03-03T00:00:00Z


def small_fleet(steps: int = 36) -> pd.DataFrame:
    """Two nodes of one GPU, 3 hours at 5 min, exporting only SBE and temperatures (no NVLink, no PCIe)."""
    parts = []
    for node in ("n1", "n2"):
        parts.append(
            pd.DataFrame(
                {
                    "node": node,
                    "gpu": 0,
                    "uuid": f"GPU-{node}",
                    "timestamp": T0 + STEP * np.arange(steps),
                    "present": 1,
                    features.SBE_AGG: np.cumsum(np.full(steps, 3.0 if node == "n1" else 0.0)),
                    features.GPU_TEMP: 55.0,
                    features.MEMORY_TEMP: 60.0,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def installed(make_model: ModelFactory, directory: Path) -> registry.RiskModel:
    model = with_card(make_model(), thresholds={"warn": 0.2, "act": 0.5}, step_s=STEP, sustain_s=0.0)
    return registry.install(directory, model)


def args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sickbay backtest")
    commands.add_backtest_arguments(parser)
    return parser.parse_args(
        [
            "--prometheus-url",
            "http://fake",
            "--start",
            "2025-03-03T01:00:00Z",
            "--end",
            "2025-03-03T02:55:00Z",
            "--step",
            "5m",
            "--lookback",
            "1h",
            "--quiet",
            "--format",
            "json",
            *extra,
        ]
    )


def test_models_default_to_the_installed_directory_serve_uses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(commands.MODELS_ENV, raising=False)
    monkeypatch.delenv("SICKBAY_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # not models/ relative to the current directory
    shipped = Path(__file__).resolve().parents[2] / "models"
    assert commands.installed_models_dir() == shipped
    assert args().models is None
    assert commands.models_dir(None) == shipped
    config = tmp_path / "sickbay.yaml"
    config.write_text("prediction:\n  models_dir: /srv/models\n", encoding="utf-8")
    monkeypatch.setenv("SICKBAY_CONFIG", str(config))
    assert commands.installed_models_dir() == Path("/srv/models")
    monkeypatch.setenv(commands.MODELS_ENV, str(tmp_path / "env-models"))
    assert commands.installed_models_dir() == tmp_path / "env-models"


def test_flags_out_writes_every_flagged_step_and_the_missing_fields_are_named(
    make_model: ModelFactory,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = installed(make_model, tmp_path / "models")
    monkeypatch.setenv(commands.MODELS_ENV, str(tmp_path / "models"))
    flags = tmp_path / "flags.jsonl"
    # warn 0 flags every step: each one must come out as a line.
    code = backtest_cli.run_backtest(
        args("--flags-out", str(flags), "--warn", "0", "--act", "0.5"), client=FrameClient(small_fleet())
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    body = json.loads(captured.out)
    assert body["model"]["version"] == model.card.version
    counted = body["model"]["flagged_steps"]
    lines = [json.loads(line) for line in flags.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == counted["warn"] + counted["act"] == 2 * 24
    assert set(lines[0]) == {"node", "gpu", "uuid", "time", "risk", "level"}
    assert {line["level"] for line in lines} <= {"warn", "act"}
    assert lines[0]["time"] == "2025-03-03T01:00:00Z"
    # The fleet exports no PCIe or NVLink counters: said on stderr and in the JSON, by field name.
    missing = body["source"]["missing_fields"]
    assert features.PCIE_REPLAY in missing
    assert features.NVLINK_RECOVERY in missing
    assert features.SBE_AGG not in missing
    assert "WARNING: this fleet does not export" in captured.err
    assert body["baseline"]["version"] == "rules:prediction-baseline"
    assert set(body["baseline"]["summary"]) == set(body["summary"]), "the same keys side by side"


def test_warm_up_starts_scoring_once_the_windows_are_full(
    make_model: ModelFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    installed(make_model, tmp_path / "models")
    # The history starts at --start: with a 1 h look-back, scoring starts an hour later and says so.
    code = backtest_cli.run_backtest(
        args("--models", str(tmp_path / "models"), "--start", "2025-03-03T00:00:00Z"),
        client=FrameClient(small_fleet()),
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "warm-up" in captured.err
    assert json.loads(captured.out)["range"]["start"] == "2025-03-03T01:00:00Z"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("not json", "not JSON"),
        ('{"traps": []}', "no 'failures' list"),
        ('{"failures": [{"node": "n1"}]}', "failures[0] lacks id, gpu, failure_time_ts, fault_class"),
        ('{"failures": {"id": 1}}', "'failures' must be a list"),
    ],
)
def test_a_bad_truth_file_is_exit_2_naming_the_problem(
    content: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = tmp_path / "truth.json"
    truth.write_text(content, encoding="utf-8")
    code = backtest_cli.run_backtest(args("--truth", str(truth)), client=DownClient())
    err = capsys.readouterr().err
    assert code == 2
    assert said in err
    assert "Traceback" not in err


def test_warn_not_below_act_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert backtest_cli.run_backtest(args("--warn", "0.6", "--act", "0.6"), client=DownClient()) == 2
    assert "must be below act" in capsys.readouterr().err


def test_the_missing_field_helper_follows_compute_features() -> None:
    every = list(features.SOURCE_METRICS)
    assert coverage.missing_fields(every, features.FEATURES) == ()
    # The aggregate ECC counter stands in for the volatile one: nothing is lost, nothing is said.
    assert coverage.missing_fields([f for f in every if f != features.SBE_VOL], features.FEATURES) == ()
    without_nvlink = [f for f in every if "NVLINK_REPLAY" not in f]
    assert coverage.missing_fields(without_nvlink, features.FEATURES) == (features.NVLINK_REPLAY,)
    # A field only features the model does not use read is not the model's.
    assert coverage.missing_fields(without_nvlink, ["sbe_rate_1h"]) == ()
    # A DCGM 4.6 name counts as the field.
    renamed = [f for f in every if f != features.PCIE_REPLAY] + ["DCGM_FI_DEV_PCIE_REPLAY_TOTAL"]
    assert coverage.missing_fields(renamed, features.FEATURES) == ()
