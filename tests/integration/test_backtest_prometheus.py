"""Issue 5's acceptance, smaller: `sickbay backtest` through a real Prometheus backfilled with promtool.

A fleet the shipped model never saw (seed 41; training used 11 and 12) is simulated, backfilled with
`promtool tsdb create-blocks-from openmetrics`, served by Debian's Prometheus and replayed by the backtest's
command line with the simulator's ground truth. The figures must meet the issue's targets, and the replay
through Prometheus must flag exactly what a replay of the dataset's own frame flags: the HTTP path, the
chunked range reads and the look-back add and lose nothing. The full-size run (200 nodes x 8 GPUs x 14
days) is `make backtest-acceptance`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from app.config import rules
from app.predict import backtest, costs, dataset, registry
from tests import prom
from tests.perf import backtest_acceptance as acceptance

# The only dates are the simulated fleet's (fixed) and Prometheus' retention of them (tests/prom.py keeps
# 100 years); both meet in Prometheus, on the real clock, so a year-ahead Python clock changes nothing here.
pytestmark = [pytest.mark.slow, pytest.mark.real_clock]

REPO = Path(__file__).resolve().parents[2]
NODES, DAYS, SEED = 40, 4.5, 41


@pytest.fixture(scope="module")
def unseen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return acceptance.simulate(
        tmp_path_factory.mktemp("unseen") / f"s{SEED}", nodes=NODES, days=DAYS, seed=SEED, rate_multiplier=30
    )


def test_backtest_through_real_prometheus_meets_the_targets(
    unseen: Path, tmp_path: Path, prometheus: Path, promtool: Path, free_port: Callable[[], int]
) -> None:
    html = tmp_path / "backtest.html"
    with prom.backfilled_prometheus(
        unseen, tmp_path / "prom", prometheus=prometheus, promtool=promtool, port=free_port()
    ) as url:
        body = acceptance.backtest(url, unseen, warmup_days=1.0, step="30m", html=html)

    summary = body["summary"]
    assert body["ground_truth"] == "truth"
    assert body["fleet"]["nodes"] == NODES
    assert body["fleet"]["gpus"] == NODES * 8
    assert summary["failures_with_precursor"] >= 4, "the range must hold failures to judge"
    missed = [(t.name, value) for t, value, met in acceptance.verdicts(body) if not met]
    assert not missed, f"targets missed: {missed}; summary {summary}; costs {body['costs']}"
    assert summary["traps"]["gpus"] > 0, "the fleet has trap GPUs, and none was flagged"

    # The report: a risk timeline and a lead-time histogram, drawn inline.
    page = html.read_text()
    assert page.count("<svg") >= 2
    assert "lead time" in page.lower()

    # Through Prometheus or straight from the dataset's frame, the same alarms.
    direct = _direct_alarms(unseen, body)
    via_prometheus = {_alarm(a) for a in body["alarms"]}
    assert via_prometheus == direct


def _alarm(a: dict[str, Any]) -> tuple[str, int, str, str, str, str]:
    return (a["node"], int(a["gpu"]), a["uuid"], a["first_flag"], a["last_flag"], a["outcome"])


def _direct_alarms(data: Path, body: dict[str, Any]) -> set[tuple[str, int, str, str, str, str]]:
    model = registry.load_current(REPO / "models")
    ladder = rules.load_policy(REPO / "rules" / "policy.yaml").prediction
    start = datetime.fromisoformat(body["range"]["start"]).timestamp()
    end = datetime.fromisoformat(body["range"]["end"]).timestamp()
    replay = backtest.replay(
        dataset.read_timeseries(data),
        model,
        start=start,
        end=end,
        step_s=body["range"]["step_s"],
        warn=ladder.warn,
        act=ladder.act,
        hold=backtest.Hysteresis(clear_margin=ladder.clear_margin, clear_after=ladder.clear_after),
    )
    result = backtest.assess(replay, dataset.read_truth(data), failures=None, costs=costs.CostModel())
    return {_alarm(a) for a in result.as_dict()["alarms"]}
