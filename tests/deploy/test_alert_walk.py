"""One XID 79 alert's walk from the HTTP handler to the node PATCH (scripts/alert-walk.py, issue 13's hop
count) stays as measured: the signal-to-Plan step is the service's one planning function, act enters decide
only where it was measured to, and the walk does not grow more climbs back up the layers.

The walk is the script's own, run in this process against the simulated API server, once for the module:
about 3 s (the profiler is on only from the handler to the PATCH).
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.deploy import support

pytestmark = pytest.mark.slow
SCRIPT = support.ROOT / "scripts" / "alert-walk.py"

# Measured at 715f4e3: 273 stays in 49 modules, 73 climbs back up (d32d312: 166 stays, 30 modules, 65).
# Alone the walk is the same on every run; under the parallel suite's load one more climb was seen (74):
# the token bucket's refill and the inbox's wake-up depend on how much time passed between calls, so a
# busy machine takes a branch a quiet one does not. The slack is that, not room to grow.
MAX_CLIMBS = 73 + 3

# Where act still calls decide on this path: the quarantine's write builds its patch from the node it has
# just re-read (footprint, inside the 409 loop) and asks the breaker under its lock (gates), so the two
# happen at the write and not before it. Reading the situation is the service's (`app.service.observing`).
ACT_INTO_DECIDE = {
    ("app.act.nodes", "app.decide.footprint"),
    ("app.act.gatekeeper", "app.decide.gates"),
}


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("alert_walk", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def walk() -> dict[str, Any]:
    script = load_script()
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("SICKBAY_PREDICTION__ENABLED", "false")  # as the autouse fixture, for the module
    try:
        with tempfile.TemporaryDirectory(prefix="alert-walk-") as tmp:
            path = script.run_walk(Path(tmp))
    finally:
        monkeypatch.undo()
    return dict(script.figures(path, script.layer_order(support.ROOT / ".importlinter")))


def test_the_walk_runs_from_the_alerts_handler_to_the_patch_leaving_the_kube_client(
    walk: dict[str, Any],
) -> None:
    stays = walk["walk"]
    assert (stays[0]["module"], stays[0]["functions"][0]) == ("app.service.runtime.routes", "_alerts")
    assert stays[-1]["module"] == "app.kube.transport"
    assert "direct" in [f.rsplit(".", 1)[-1] for f in stays[-1]["functions"]]
    last_act = max(i for i, s in enumerate(stays) if s["module"].startswith("app.act."))
    assert (stays[last_act + 1]["module"], stays[last_act + 1]["functions"][0]) == (
        "app.kube.client",
        "KubeClient.patch_node",
    )
    assert walk["unranked"] == []  # every package on the path has its place in the layers contract


def test_the_plan_is_made_by_the_service_planning_step_not_by_act(walk: dict[str, Any]) -> None:
    callers = {
        s["from"]
        for s in walk["walk"]
        if s["module"] == "app.decide.plans" and not s["from"].startswith("app.decide.")
    }
    assert callers == {"app.service.planning"}


def test_act_enters_decide_only_where_measured(walk: dict[str, Any]) -> None:
    entries = {
        (s["from"], s["module"])
        for s in walk["walk"]
        if s["module"].startswith("app.decide.") and (s["from"] or "").startswith("app.act.")
    }
    assert entries <= ACT_INTO_DECIDE, entries - ACT_INTO_DECIDE


def test_no_more_climbs_back_up_than_measured(walk: dict[str, Any]) -> None:
    assert 0 < walk["climbs"] <= MAX_CLIMBS
