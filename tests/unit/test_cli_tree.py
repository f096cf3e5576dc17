"""`sickbay` is one argparse tree: every command's `--help` is its own and says `sickbay <command>`, every
command names a handler that exists, and building the tree loads none of the heavy parts."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import cli
from app.agent.settings import AgentSettings
from app.predict import backtest, baseline, costs
from app.predict.features import series

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = (
    "serve",
    "agent",
    "train",
    "evaluate",
    "score",
    "backtest",
    "models",
    "demo",
    "simulate",
    "breaker",
    "model",
    "explain",
    "audit",
)


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    for name, child in _children(parser).items():
        yield (*path, name), child
        yield from _walk(child, (*path, name))


TREE = dict(_walk(cli.build_parser()))


def test_the_tree_has_every_command_and_sub_command() -> None:
    assert {path for path in TREE if len(path) == 1} == {(name,) for name in TOP_LEVEL}
    assert {path for path in TREE if len(path) == 2} == {
        ("simulate", "serve"),
        ("simulate", "kube-api"),
        ("simulate", "backfill"),
        ("breaker", "status"),
        ("breaker", "reset"),
        ("model", "status"),
        ("model", "validate"),
        ("model", "shadow"),
    }


def test_sickbay_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: sickbay ")
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("    ")}
    assert listed >= set(TOP_LEVEL)


@pytest.mark.parametrize("path", sorted(TREE), ids=" ".join)
def test_every_help_is_the_commands_own(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args([*path, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: sickbay {' '.join(path)} "), out
    assert "python -m" not in out
    assert "options:" in out


@pytest.mark.parametrize("path", sorted(TREE), ids=" ".join)
def test_every_command_runs_a_handler_that_exists(path: tuple[str, ...]) -> None:
    parser = TREE[path]
    if _children(parser) and parser.get_default("handler") is None:
        return  # `breaker` and `model` need an action; their actions have the handlers
    name = parser.get_default("handler")
    assert isinstance(name, str), f"sickbay {' '.join(path)} runs nothing"
    assert callable(cli.handler(name))


@pytest.mark.parametrize(
    "argv", [[], ["no-such-command"], ["model"], ["breaker"], ["model", "status", "--force"]]
)
def test_a_usage_error_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert "usage: sickbay" in capsys.readouterr().err


def test_a_configuration_error_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text("{}", encoding="utf-8")
    code = cli.main(["--config", str(tmp_path / "missing.yaml"), "explain", str(payload)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("sickbay: cannot read configuration file"), err
    assert len(err.splitlines()) == 1


def test_every_agent_flag_is_a_setting() -> None:
    dests = {a.dest for a in TREE[("agent",)]._actions if a.dest != "help"}
    assert dests <= set(AgentSettings.model_fields)


def test_defaults_resolved_by_the_command_are_the_ones_their_help_says() -> None:
    """Declared as None so the tree need not import the predictor; the help states the value."""
    helps = {a.dest: a.help or "" for a in TREE[("backtest",)]._actions}
    defaults = {a.dest: a.default for a in TREE[("backtest",)]._actions}
    assert defaults["node_batch"] is None
    assert f"({backtest.DEFAULT_NODE_BATCH})" in helps["node_batch"]
    assert defaults["job_gpus"] is None
    assert f"({costs.CostModel().job_gpus})" in helps["job_gpus"]
    assert f"{series.W7D / 86400:g}d)" in helps["warmup"]
    for command in ("backtest", "train"):
        action = next(a for a in TREE[(command,)]._actions if a.dest == "baseline")
        assert action.default is None
        assert f"rules/{baseline.DEFAULT_FILE.name}" in (action.help or "")


HEAVY = (
    "sklearn",
    "skops",
    "pandas",
    "numpy",
    "app.predict.registry",
    "app.sim.fleet",
    "app.sim.kubeapi",
    "app.demo.main",
    "app.demo.stack",
    "app.service.runtime",
    "kubernetes",
    "aiohttp",
)


def test_building_the_tree_loads_no_model_simulator_demo_or_service() -> None:
    code = (
        "import json, sys\n"
        "import app.cli\n"
        "app.cli.build_parser()\n"
        f"print(json.dumps(sorted(set({list(HEAVY)!r}) & set(sys.modules))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == []
