"""A missed round of the rule group leaves the GPUs short of a full week, so Sickbay reads them raw.

Prometheus does not catch up on rounds it skipped (a round that overran its interval, a restart):
`Group.run` moves the next evaluation to the next slot and counts the others in
`prometheus_rule_group_iterations_missed_total` (prometheus/prometheus rules/group.go). Nothing is written
at a missed slot, at any level. Here the presence rules (`recorded_rules.PRESENCE`: row, daily, weekly) are evaluated by a real Prometheus at every round of a group running at a phase of 137 s, for 8 days
and 2 hours of two GPUs' temperatures, level by level (each level's answers backfilled before the next
reads them, as in test_recorded_parity), with every level's sample at one round left out. Prometheus runs
with its default look-back of 5 minutes, under which an instant selector finds a sample exactly 5 minutes
old: the weekly sums must not take the round before the missed one in its place.

The weekly count, read as `recorded_reader` reads it (the last value in `[g, g + 5m)`), is then exactly
`FULL_WEEK` at every grid instant whose week does not hold the missed round, and below it or absent at
every one whose week does: `recorded_reader` reads those GPUs raw (`FULL_WEEK` rows or not regular).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.predict import recorded_rules as rr
from app.sim.fleet import backfill
from tests import prom
from tests.perf.bench_scoring import free_port

pytestmark = [pytest.mark.slow, pytest.mark.real_clock]

STEP = float(rr.STEP_S)
PHASE = 137.0  # the group's offset within its interval (hashed from its name and file)
HOURS = 8 * 24 + 2
END = HOURS * 3600.0  # the last grid instant: the data run from 0 to here, one sample a step
# A day and an hour before the end: the day after it holds it, and the hour after that reads, 1 d back,
# the daily sum the missed round did not write.
MISSED = END - 86400.0 - 3600.0 + PHASE
GPUS = ('{Hostname="node-a",gpu="0",UUID="GPU-a0"}', '{Hostname="node-a",gpu="1",UUID="GPU-a1"}')
# From when each level is evaluated (the weekly sums are checked from day 7 on; they read the daily ones up
# to 6 days back, which read a day of rows).
_STARTS = (0.0, 0.0, 7 * 86400.0 - 3600.0)


def _binary(name: str) -> Path:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (Debian package `prometheus`; `make setup` installs it)")
    return Path(found)


def _backfill(promtool: Path, text: str, work: Path, data: Path) -> None:
    path = work / "level.om"
    path.write_text(text + "# EOF\n")
    block = f"--max-block-duration={int(backfill.BLOCK_BASE_S * 3**5)}s"
    command = ["tsdb", "create-blocks-from", "openmetrics", "--quiet", block, str(path), str(data)]
    done = subprocess.run([str(promtool), *command], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@dataclass(frozen=True)
class Counts:
    weekly: dict[float, dict[str, float]]  # by grid instant from day 7 on, by GPU, as the reader reads it
    daily_after: dict[str, float]  # by GPU, two rounds after the missed one


@pytest.fixture(scope="module")
def counts(tmp_path_factory: pytest.TempPathFactory) -> Counts:
    prometheus, promtool = _binary("prometheus"), _binary("promtool")
    work = tmp_path_factory.mktemp("missed")
    data, config = work / "tsdb", work / "prometheus.yml"
    config.write_text(prom.EMPTY_CONFIG)
    name = rr.names(rr.PRESENCE.metric)[0]
    steps = int(END // STEP)
    raw = [f"# TYPE {name} gauge"]
    raw += [f"{name}{labels} 60 {k * STEP:.3f}" for labels in GPUS for k in range(steps + 1)]
    _backfill(promtool, "\n".join(raw) + "\n", work, data)
    port = free_port()
    for start, rule in zip(_STARTS, rr.PRESENCE.rules(), strict=True):
        with prom.running_prometheus(prometheus, data=data, config=config, port=port) as url:
            answer = prom.range_query(url, rule.expr, start=start + PHASE, end=END, step_s=STEP)
        for one in answer:  # the missed round wrote nothing
            one["values"] = [v for v in one["values"] if abs(float(v[0]) - MISSED) > 1.0]
        assert answer, rule.record
        _backfill(promtool, prom.openmetrics(rule.record, answer), work, data)
    out: dict[float, dict[str, float]] = {}
    with prom.running_prometheus(prometheus, data=data, config=config, port=port) as url:
        ahead = STEP - 0.001
        query = f"last_over_time({rr.SAMPLES}[{round(ahead * 1000)}ms])"
        first = 7 * 86400.0
        for one in prom.range_query(url, query, start=first + ahead, end=END + ahead, step_s=STEP):
            for t, value in one["values"]:
                out.setdefault(round(float(t) - ahead), {})[one["metric"]["gpu"]] = float(value)
        daily = prom.instant_query(url, rr.PRESENCE.name("24h"), at=MISSED + 600.0)
    return Counts(out, {one["metric"]["gpu"]: float(one["value"][1]) for one in daily})


def test_a_week_without_the_missed_round_holds_every_row(counts: Counts) -> None:
    weekly, missed_grid = counts.weekly, MISSED - PHASE
    before = [g for g in weekly if 7 * 86400.0 <= g < missed_grid]
    assert len(before) == (missed_grid - 7 * 86400.0) // STEP  # every grid instant of the hour before
    for g in before:
        assert weekly[g] == {"0": rr.FULL_WEEK, "1": rr.FULL_WEEK}, g


def test_every_week_holding_the_missed_round_is_short_or_absent(counts: Counts) -> None:
    weekly, missed_grid = counts.weekly, MISSED - PHASE
    after = [missed_grid + k * STEP for k in range(int((END - missed_grid) // STEP) + 1)]
    assert len(after) == 12 * 25 + 1  # the missed instant and the 25 h after it, to the end of the data
    for g in after:
        for gpu in ("0", "1"):
            assert weekly.get(g, {}).get(gpu, 0.0) < rr.FULL_WEEK, (g, gpu)


def test_the_day_after_the_missed_round_holds_a_row_less(counts: Counts) -> None:
    assert counts.daily_after == {"0": rr.DAY_ROWS - 1, "1": rr.DAY_ROWS - 1}
