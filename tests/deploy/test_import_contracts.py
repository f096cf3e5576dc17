"""The import contracts catch what they are for: each forbidden import, planted in a scratch copy of the
package, breaks lint-imports and is reported under the contract that forbids it, and only that one.

The copy (`app/` and `.importlinter`) is made once for the module; `lint_scratch.py` lints it clean,
then once per case with the case's line appended to one module and taken out again, all in one process
(about 0.4 s a case). Also checked without linting: every contract has a case here, and the two layers
contracts name every module they govern, so a new module cannot slip past them by being left out.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import support

CONFIG = support.ROOT / ".importlinter"
APP = support.ROOT / "app"
DRIVER = Path(__file__).with_name("lint_scratch.py")


@dataclass(frozen=True)
class Case:
    id: str
    path: str  # the module the line is appended to
    line: str
    broken: frozenset[str]  # ids of the contracts it must break, all of them and no others
    arrow: str  # the import as lint-imports reports it

    def as_json(self) -> dict[str, str]:
        return {"id": self.id, "path": self.path, "line": self.line}


def _case(id_: str, path: str, line: str, arrow: str, *broken: str) -> Case:
    return Case(id_, path, line, frozenset(broken), arrow)


CASES = [
    # The imports issue 13 found passing the old contracts.
    _case(
        "predict-to-act",
        "app/predict/score.py",
        "from app.act import executor",
        "app.predict.score -> app.act.executor",
        "layers",
        "jobs-enqueue",  # the scoring job imports app.predict.score
    ),
    _case(
        "predict-to-kube",
        "app/predict/score.py",
        "from app.kube import port",
        "app.predict.score -> app.kube.port",
        "kube-port-users",
        "jobs-enqueue",
    ),
    _case(
        "kube-to-predict",
        "app/kube/port.py",
        "from app.predict import score",
        "app.kube.port -> app.predict.score",
        "layers",
    ),
    _case(
        "ingest-to-kube",
        "app/ingest/handlers.py",
        "from app.kube import port",
        "app.ingest.handlers -> app.kube.port",
        "kube-port-users",
        "intake-records",
    ),
    *(
        _case(
            f"kubernetes-in-{where}",
            path,
            "import kubernetes",
            f"{path.removesuffix('.py').replace('/', '.')} -> kubernetes",
            "kubernetes-only-in-kube",
        )
        for where, path in [
            ("schedule", "app/service/schedule.py"),
            ("api", "app/service/api.py"),
            ("predict", "app/predict/score.py"),
            ("sim", "app/sim/kubeapi/server.py"),
        ]
    ),
    *(
        _case(
            f"decide-to-{module}", "app/decide/plans.py", line, f"app.decide.plans -> {module}", "pure-core"
        )
        for module, line in [
            ("urllib", "import urllib.request"),
            ("threading", "import threading"),
            ("prometheus_client", "import prometheus_client"),
        ]
    ),
    _case(
        "domain-to-pydantic",
        "app/domain/actions.py",
        "import pydantic",
        "app.domain.actions -> pydantic",
        "domain-stdlib-only",
    ),
    # One for each contract the cases above leave untested.
    _case(
        "schedule-to-act",
        "app/service/schedule.py",
        "from app.act import executor",
        "app.service.schedule -> app.act.executor",
        "jobs-enqueue",
    ),
    _case(
        "apscheduler-outside-schedule",
        "app/service/rechecks.py",
        "import apscheduler",
        "app.service.rechecks -> apscheduler",
        "one-scheduler",
    ),
    _case(
        "sklearn-outside-predict",
        "app/service/api.py",
        "import sklearn",
        "app.service.api -> sklearn",
        "ml-only-in-predict",
    ),
    _case(
        "planning-to-status",
        "app/service/planning.py",
        "from app.service import status",
        "app.service.planning -> app.service.status",
        "service-layers",
    ),
    _case(
        "runtime-to-sim",
        "app/service/runtime/__init__.py",
        "from app.sim import kubeapi",
        "app.service.runtime -> app.sim.kubeapi",
        "layers",
        "no-sim-in-production",
    ),
    _case(
        "sim-to-demo",
        "app/sim/commands.py",
        "from app.demo import stack",
        "app.sim.commands -> app.demo.stack",
        "layers",
        "no-demo-in-production",
    ),
    _case(
        "predict-reader-to-backtest",
        "app/predict/prometheus.py",
        "from app.predict import backtest",
        "app.predict.prometheus -> app.predict.backtest",
        "predict-layers",
    ),
    _case(
        "features-to-sqlite",
        "app/predict/coverage.py",
        "import sqlite3",
        "app.predict.coverage -> sqlite3",
        "pure-features",
    ),
]


def _contracts() -> dict[str, configparser.SectionProxy]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(CONFIG, encoding="utf-8")
    prefix = "importlinter:contract:"
    return {name.removeprefix(prefix): parser[name] for name in parser.sections() if name.startswith(prefix)}


def _lines(contract: configparser.SectionProxy, key: str) -> list[str]:
    """A multi-line option's entries, without the comments configparser keeps in them."""
    entries = (line.split("#", 1)[0].strip() for line in contract[key].splitlines())
    return [entry for entry in entries if entry]


def _copy_ignore(_dir: str, names: list[str]) -> set[str]:
    return {name for name in names if name == "__pycache__" or name.endswith(".pyc")}


@pytest.fixture(scope="module")
def linted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """lint-imports' exit status and report for the clean copy (`baseline`) and for each case."""
    scratch = tmp_path_factory.mktemp("contracts")
    shutil.copytree(APP, scratch / "app", ignore=_copy_ignore)
    shutil.copy2(CONFIG, scratch / ".importlinter")
    cases_file = scratch / "cases.json"
    results_file = scratch / "results.json"
    cases_file.write_text(json.dumps([case.as_json() for case in CASES]), encoding="utf-8")
    # Wide enough that no contract's name wraps in the report; nothing of the checkout on the path.
    env = {**os.environ, "COLUMNS": "240", "PYTHONPATH": str(scratch), "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(DRIVER), str(scratch), str(cases_file), str(results_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results: dict[str, dict[str, Any]] = json.loads(results_file.read_text(encoding="utf-8"))
    print(f"lint-imports {len(results)} times in {time.monotonic() - started:.1f} s")
    return results


def test_the_clean_copy_keeps_every_contract(linted: dict[str, dict[str, Any]]) -> None:
    baseline = linted["baseline"]
    assert baseline["status"] == 0, baseline["output"]
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in baseline["output"]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_a_planted_import_breaks_its_contract(linted: dict[str, dict[str, Any]], case: Case) -> None:
    result = linted[case.id]
    output: str = result["output"]
    assert result["status"] == 1, output
    contracts = _contracts()
    broken = {key for key, contract in contracts.items() if f"{contract['name']} BROKEN" in output}
    assert broken == case.broken, output
    assert f"Contracts: {len(contracts) - len(broken)} kept, {len(broken)} broken." in output
    assert case.arrow in output, output


def test_every_contract_has_a_case() -> None:
    covered = set().union(*(case.broken for case in CASES))
    assert covered == set(_contracts())


def _modules(package: Path) -> set[str]:
    """The modules and subpackages directly in a package directory."""
    names = {path.stem for path in package.glob("*.py") if path.name != "__init__.py"}
    names |= {path.name for path in package.iterdir() if (path / "__init__.py").is_file()}
    return names


def _layered(contract: configparser.SectionProxy) -> set[str]:
    names = set()
    for layer in _lines(contract, "layers"):
        names |= {name.strip() for name in layer.replace("|", ":").split(":")}
    return names


def test_the_layers_name_every_top_level_module() -> None:
    listed = _layered(_contracts()["layers"])
    assert {f"app.{name}" for name in _modules(APP)} == listed


def test_the_service_layers_name_every_module_of_service() -> None:
    contract = _contracts()["service-layers"]
    assert _lines(contract, "containers") == ["app.service"]
    assert _modules(APP / "service") == _layered(contract)


def test_the_predictor_layers_name_every_module_of_predict() -> None:
    contract = _contracts()["predict-layers"]
    assert _lines(contract, "containers") == ["app.predict"]
    assert _modules(APP / "predict") == _layered(contract)
