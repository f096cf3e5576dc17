"""The recorded path and the raw path give the same features, through a real Prometheus.

A small simulated fleet (3 nodes x 8 GPUs, 8.2 days at 5 minutes) is backfilled into Debian's Prometheus
(`promtool tsdb create-blocks-from openmetrics`). The shipped recording rules are then evaluated by that
Prometheus over the last week, level by level (`levels`: a level reads only the records of the levels
before it, so each level's blocks are served before the next is evaluated): the rows on the 5-minute grid
(the daily sums read each of them), the levels above at whole hours, each rule's expression as a range
query at that step, the answers written back as the rule's series and backfilled.
This is what `promtool tsdb create-blocks-from rules` does (range queries at the group's interval, one
run per level, since it "cannot see the results of previous rules":
https://prometheus.io/docs/prometheus/latest/storage/#backfilling-for-recording-rules), without its two
costs here: it writes one block per rule per 2 h (~6,400 blocks, minutes of test time on 2 cores) and it
evaluates at the group's hash-derived phase, which makes the instants a test reads depend on a file name.
That promtool's rule backfill writes exactly what the rules evaluate to is checked on the row level
(`test_promtools_rule_backfill_writes_what_the_rules_evaluate_to`). `FeatureReader` then reads the features at the history's last whole hour twice: before the rules' series
exist (it falls back to the raw look-back and says so) and after (the recorded path).

Tolerance. Both paths sum the same 5-minute grid rows over the same windows, so the sums agree exactly;
nothing is extrapolated (`increase(m[5m:5m])` has its two points on the range's ends), and the grid
instants agree (the rules evaluated on the grid, phase 0, which the rows' `[4m59s999ms:5m]` ranges treat
as any other phase). What differs is the arithmetic: Prometheus
adds float64 values in another order than the features' prefix sums (an absolute 1e-6 on sums of
thousands of integers and of temperatures near 60 °C), and the features are float32 (relative 1e-6). So:
relative 1e-4 and absolute 1e-3, far below any feature's meaningful change (the smallest is a share of
one row in 288, 3.5e-3). A GPU that is not regular (a gap or a reset in its week) is read raw on the
recorded path too; the test asserts that most hosts are read through the rules.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from prometheus_client import CollectorRegistry

from app.config.settings import PredictionSettings
from app.demo.processes import free_port
from app.obs.metrics import create_metrics
from app.predict import dataset, features, recorded_reader, recorded_xid
from app.predict import prometheus as predict_prometheus
from app.predict import recorded_rules as rr
from app.predict import service as predict_service
from app.service.scoring_job import SHIPPED_MODELS, Scoring
from app.sim.fleet import backfill
from app.store import inbox
from tests import prom
from tests.perf import backtest_acceptance as acceptance
from tests.predict.test_recorded_rules_samples import samples_per_series

pytestmark = [pytest.mark.slow, pytest.mark.real_clock]

NODES, DAYS, SEED = 3, 8.2, 5
TAIL_S = 3600.0  # scoring reads the features at now and `sustain_s` before; any whole number of steps
RTOL, ATOL = 1e-4, 1e-3
# How far before now each level is backfilled, and at what step (now is a whole hour): the instants read
# are now and now - 1 h, the weekly sums there read the daily ones 1..6 days before, on whole hours, and
# each daily sum reads the 288 rows of its day, every 5 minutes. Above the rows a rule's value at t depends only on the levels below at t and whole hours
# before it, not on how often it is evaluated: the live 5-minute interval only adds instants this test
# does not read (and would cost promtool minutes).
_LEVEL_STARTS = (7 * 86400.0 + 3600.0, 6 * 86400.0 + 3600.0, *(3600.0,) * 4)
_LEVEL_STEPS = (float(rr.STEP_S), *(3600.0,) * 5)


def levels() -> list[list[rr.Rule]]:
    """The rules by dependency: those that read the exporter's series, then each that reads only
    records of the levels before it."""
    level: dict[str, int] = {}
    for rule in rr.rules():  # the group lists every rule after the ones it reads
        reads = re.findall(r"\bgpu:[\w:]+", rule.expr)
        level[rule.record] = 1 + max((level[name] for name in reads), default=-1)
    out: list[list[rr.Rule]] = [[] for _ in range(max(level.values()) + 1)]
    for rule in rr.rules():
        out[level[rule.record]].append(rule)
    return out


def test_levels_follow_the_rule_text() -> None:
    names = [[r.record for r in one] for one in levels()]
    assert len(names) == 6  # rows, daily, weekly, the ratios, the thermal line's slope, its intercept
    assert rr.PRESENCE.name(rr.STEP) in names[0]
    assert rr.PRESENCE.name("24h") in names[1]
    assert rr.SAMPLES in names[2]
    assert rr.thermal("gpu", "util") in names[3]
    assert names[4:] == [
        [rr.thermal(t, "slope") for t in rr.TEMPERATURES],
        [rr.thermal(t, "intercept") for t in rr.TEMPERATURES],
    ]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fleet") / f"s{SEED}"
    return acceptance.simulate(out, nodes=NODES, days=DAYS, seed=SEED, rate_multiplier=30)


@dataclass(frozen=True)
class Served:
    """Two TSDBs of the same history: raw only, and raw with the rules' series; how to serve them."""

    raw: Path
    rules: Path
    config: Path
    flags: tuple[str, ...]
    now: float
    port: int


@pytest.fixture(scope="module")
def served(fleet: Path, tmp_path_factory: pytest.TempPathFactory) -> Served:
    prometheus, promtool = _binary("prometheus"), _binary("promtool")
    tmp = tmp_path_factory.mktemp("served")
    data = tmp / "tsdb"
    result = backfill.backfill(fleet, data, promtool=promtool, host_label="Hostname")
    raw = tmp / "raw-tsdb"
    shutil.copytree(data, raw)
    config = tmp / "prometheus.yml"
    config.write_text(prom.EMPTY_CONFIG)
    flags = (
        f"--query.lookback-delta={prom.lookback_delta(result.step_s)}",
        "--storage.tsdb.max-block-duration=2h",
    )
    now = float(dataset.read_timeseries(fleet)["timestamp"].max()) // 3600 * 3600
    port = free_port()
    for i, rules in enumerate(levels()):
        with prom.running_prometheus(prometheus, data=data, config=config, port=port, extra=flags) as url:
            text = "".join(
                prom.openmetrics(
                    r.record,
                    prom.range_query(
                        url, r.expr, start=now - _LEVEL_STARTS[i], end=now, step_s=_LEVEL_STEPS[i]
                    ),
                )
                for r in rules
            )
        assert text.count("\n") > 2 * len(rules), f"level {i} recorded almost nothing"
        level_file = tmp / f"level{i}.om"
        level_file.write_text(text + "# EOF\n")
        # One block for the level (promtool cuts 2 h blocks by default, one file pass each).
        block = f"--max-block-duration={int(backfill.BLOCK_BASE_S * 3**5)}s"
        _run_ok(
            [
                str(promtool),
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "--quiet",
                block,
                str(level_file),
                str(data),
            ]
        )
    return Served(raw=raw, rules=data, config=config, flags=flags, now=now, port=port)


# The shipped look-back, a week: the reader reads raw from a week before the earliest row it scores
# (`recorded_reader._reach_s`), so the row at now - tail sees a whole week, as the rules do.
LOOKBACK_S = 7 * 86400.0


def _binary(name: str) -> Path:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (Debian package `prometheus`; `make setup` installs it)")
    return Path(found)


def _read(served: Served, data: Path, prometheus: Path) -> recorded_reader.FeatureRead:
    at = datetime.fromtimestamp(served.now, UTC)
    with prom.running_prometheus(
        prometheus, data=data, config=served.config, port=served.port, extra=served.flags
    ) as url:
        settings = predict_prometheus.ReaderSettings(url=url, step_s=rr.STEP_S, lookback_s=LOOKBACK_S)
        return recorded_reader.FeatureReader(predict_prometheus.Reader(settings)).read(at, TAIL_S)


def test_recorded_and_raw_paths_agree_through_real_prometheus(served: Served, prometheus: Path) -> None:
    raw = _read(served, served.raw, prometheus)
    assert raw.path == recorded_reader.RAW
    recorded = _read(served, served.rules, prometheus)
    assert recorded.path == recorded_reader.RECORDED
    assert recorded.raw_hosts < NODES, "no host was read through the rules: the test would prove nothing"
    _assert_same_features(raw.table, recorded.table, instants=[served.now - TAIL_S, served.now])


def test_the_rules_name_every_host_with_an_xid_event(served: Served, prometheus: Path) -> None:
    # `recorded_xid` reads raw the hosts the recorded event count names; the raw path's features must
    # find events on those hosts only (and some: else the agreement above proves nothing for XIDs).
    instants = [served.now - TAIL_S, served.now]
    with prom.running_prometheus(
        prometheus, data=served.rules, config=served.config, port=served.port, extra=served.flags
    ) as url:
        settings = predict_prometheus.ReaderSettings(url=url, step_s=rr.STEP_S, lookback_s=LOOKBACK_S)
        named = {h.node for h in recorded_xid.with_events(predict_prometheus.Reader(settings), instants)}
    raw = _read(served, served.raw, prometheus).table
    raw = raw[raw["timestamp"].isin(instants)]
    events = raw[list(recorded_xid.FEATURES)].fillna(0).sum(axis=1) > 0
    assert events.any(), "no XID event in the fleet: the test would prove nothing"
    assert set(raw.loc[events, "node"].astype(str)) <= named


def test_a_host_without_recorded_values_is_read_raw_and_agrees(
    served: Served, prometheus: Path, tmp_path: Path
) -> None:
    # One host's 7-day presence record deleted (the admin API's delete-series, tombstones queried at once:
    # https://prometheus.io/docs/prometheus/latest/querying/api/#delete-series): it is not regular, so the
    # recorded path reads it raw over the look-back, in a batch of hosts, and it agrees with the raw path.
    raw = _read(served, served.raw, prometheus)
    node = str(raw.table["node"].astype(str).min())
    data = tmp_path / "tsdb"
    shutil.copytree(served.rules, data)
    at = datetime.fromtimestamp(served.now, UTC)
    flags = (*served.flags, "--web.enable-admin-api")
    with prom.running_prometheus(
        prometheus, data=data, config=served.config, port=served.port, extra=flags
    ) as url:
        match = f'{rr.SAMPLES}{{Hostname="{node}"}}'
        query = urllib.parse.urlencode({"match[]": match})
        request = urllib.request.Request(f"{url}/api/v1/admin/tsdb/delete_series?{query}", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 204
        settings = predict_prometheus.ReaderSettings(url=url, step_s=rr.STEP_S, lookback_s=LOOKBACK_S)
        recorded = recorded_reader.FeatureReader(predict_prometheus.Reader(settings)).read(at, TAIL_S)
    assert recorded.path == recorded_reader.RECORDED
    assert recorded.raw_hosts == 1
    _assert_same_features(raw.table, recorded.table, instants=[served.now - TAIL_S, served.now])


@pytest.mark.parametrize("rules", [True, False], ids=["rules-installed", "rules-absent"])
async def test_the_service_as_serve_builds_it_picks_the_path_and_says_so(
    served: Served, prometheus: Path, tmp_path: Path, rules: bool, caplog: pytest.LogCaptureFixture
) -> None:
    at = datetime.fromtimestamp(served.now, UTC)
    box = await inbox.Inbox.open(tmp_path / "sickbay.db")
    try:
        with prom.running_prometheus(
            prometheus,
            data=served.rules if rules else served.raw,
            config=served.config,
            port=served.port,
            extra=served.flags,
        ) as url:
            metrics = create_metrics(CollectorRegistry())
            settings = PredictionSettings(
                models_dir=SHIPPED_MODELS, prometheus_url=url, lookback_s=LOOKBACK_S
            )
            scoring = Scoring(settings, inbox=box, metrics=metrics, clock=lambda: at)
            scoring.service.reload()
            with caplog.at_level(logging.INFO, logger="app.predict.recorded_reader"):
                await scoring.score_once()
    finally:
        await box.close()
    assert scoring.last is not None
    assert scoring.last.status == predict_service.CycleStatus.SCORED
    assert scoring.last.scores is not None
    assert len(scoring.last.scores.gpus) == NODES * 8
    path, other = (
        (recorded_reader.RECORDED, recorded_reader.RAW)
        if rules
        else (recorded_reader.RAW, recorded_reader.RECORDED)
    )
    gauge = "sickbay_predict_read_path"
    assert metrics.registry.get_sample_value(gauge, {"path": path}) == 1
    assert metrics.registry.get_sample_value(gauge, {"path": other}) == 0
    said = [r for r in caplog.records if r.name == "app.predict.recorded_reader"]
    if rules:
        assert [r.levelno for r in said] == [logging.INFO]
        assert "reads the recording rules' long windows" in said[0].getMessage()
    else:
        assert [r.levelno for r in said] == [logging.WARNING]
        assert "recording rules" in said[0].getMessage()
        assert "not installed" in said[0].getMessage()


def _run_ok(command: list[str]) -> None:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def _assert_same_features(raw: pd.DataFrame, recorded: pd.DataFrame, *, instants: list[float]) -> None:
    keys = ["node", "gpu", "uuid", "timestamp"]
    raw = raw[raw["timestamp"].isin(instants)].astype({"node": str, "uuid": str})
    recorded = recorded.astype({"node": str, "uuid": str})
    assert len(recorded) == len(raw) == NODES * 8 * len(instants)
    merged = raw.merge(recorded, on=keys, suffixes=("_raw", "_rec"), validate="one_to_one")
    assert len(merged) == len(raw)
    compared = 0
    for name in features.FEATURES:
        a = merged[f"{name}_raw"].to_numpy(dtype=np.float64)
        b = merged[f"{name}_rec"].to_numpy(dtype=np.float64)
        assert np.array_equal(np.isnan(a), np.isnan(b)), name
        known = ~np.isnan(a)
        bad = ~np.isclose(a[known], b[known], rtol=RTOL, atol=ATOL)
        assert not bad.any(), (name, a[known][bad][:5], b[known][bad][:5])
        compared += int(known.sum())
    assert compared > 0


@pytest.mark.parametrize("phase_s", [0.001, 137.0, 299.999])
def test_the_row_rules_stand_for_the_same_grid_row_at_any_phase(
    served: Served, prometheus: Path, phase_s: float
) -> None:
    # A live group runs at a phase of its interval derived from a hash; its rows must be those of the last
    # grid instant at or before the evaluation, whatever the phase.
    rows = levels()[0]
    with prom.running_prometheus(
        prometheus, data=served.raw, config=served.config, port=served.port, extra=served.flags
    ) as url:
        for rule in rows:
            on_grid = _values(prom.instant_query(url, rule.expr, at=served.now))
            later = _values(prom.instant_query(url, rule.expr, at=served.now + phase_s))
            assert on_grid, rule.record
            assert later == on_grid, rule.record


def _values(vector: list[dict[str, Any]]) -> dict[tuple[tuple[str, str], ...], str]:
    """Value by label set (the series' name aside: a recorded sample has the record's, an expression none)."""
    return {
        tuple(sorted((k, v) for k, v in one["metric"].items() if k != "__name__")): one["value"][1]
        for one in vector
    }


def test_promtools_rule_backfill_writes_what_the_rules_evaluate_to(
    served: Served, prometheus: Path, tmp_path: Path
) -> None:
    # The real `promtool tsdb create-blocks-from rules`, on the row level over the last 2 h (the levels
    # above read recorded series, which one run cannot: see the module docstring): every sample it wrote is
    # the rule's expression evaluated by Prometheus at that sample's timestamp.
    promtool = _binary("promtool")
    rows = levels()[0]
    rule_file = tmp_path / "rows.yaml"
    group = {
        "name": rr.GROUP,
        "interval": rr.INTERVAL,
        "rules": [{"record": r.record, "expr": r.expr} for r in rows],
    }
    rule_file.write_text(yaml.safe_dump({"groups": [group]}, sort_keys=False))
    data = tmp_path / "tsdb"
    shutil.copytree(served.raw, data)
    with prom.running_prometheus(
        prometheus, data=data, config=served.config, port=served.port, extra=served.flags
    ) as url:
        start, end = served.now - 7200.0, served.now
        _run_ok(
            [
                str(promtool),
                "tsdb",
                "create-blocks-from",
                "rules",
                "--quiet",
                f"--url={url}",
                f"--start={int(start)}",
                f"--end={int(end)}",
                f"--output-dir={data}",
                str(rule_file),
            ]
        )
    with prom.running_prometheus(
        prometheus, data=data, config=served.config, port=served.port, extra=served.flags
    ) as url:
        compared = 0
        for rule in rows:
            written = prom.instant_query(url, f"{rule.record}[2h]", at=end)
            times = sorted({float(t) for one in written for t, _ in one.get("values", [])})
            assert times, rule.record
            for t in times:
                wrote = _values(prom.instant_query(url, f"last_over_time({rule.record}[1ms])", at=t))
                assert wrote == _values(prom.instant_query(url, rule.expr, at=t)), (rule.record, t)
                compared += 1
    assert compared >= len(rows) * 20  # ~24 evaluations of each rule in 2 h


def test_prometheus_max_samples_holds_the_bound_read_from_the_rule_text(
    served: Served, prometheus: Path
) -> None:
    # `--query.max-samples` set to the largest bound `test_recorded_rules_samples` reads from the rules,
    # at this fleet's GPUs: every rule evaluates under it, and the first version's week-long subquery,
    # whose bound is over it, is refused ("query processing would load too many samples into memory").
    gpus = NODES * 8
    limit = int(max(sum(samples_per_series(r.expr).values()) for r in rr.rules()) * gpus)
    old = "count_over_time(DCGM_FI_DEV_GPU_TEMP[10075m:5m])"
    assert sum(samples_per_series(old).values()) * gpus > limit
    flags = (*served.flags, f"--query.max-samples={limit}")
    with prom.running_prometheus(
        prometheus, data=served.rules, config=served.config, port=served.port, extra=flags
    ) as url:
        for rule in rr.rules():
            assert prom.instant_query(url, rule.expr, at=served.now), rule.record
        params = urllib.parse.urlencode({"query": old, "time": f"{served.now:.3f}"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=30)
        assert "too many samples" in refused.value.read().decode()
