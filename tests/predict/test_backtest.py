"""`sickbay backtest`: replaying a Prometheus range as the scoring service would have, judged and priced.

No Prometheus runs here: `fakeprom.FrameClient` answers `custom_query_range` from a simulated dataset the
way Prometheus would, including the host matchers of a batched read and the `group by` query that finds
the hosts. The simulated dataset is the session's `heldout_dataset` (a seed the shipped model never saw);
a handful of its nodes — some with failures that had precursors, some trap GPUs — keep the run to seconds.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app import cli as sickbay
from app import domain
from app.config import rules
from app.config.settings import RULES_DIR
from app.predict import (
    backtest,
    backtest_cli,
    commands,
    costs,
    dataset,
    features,
    history,
    prometheus,
    promql,
    registry,
    report,
    score,
)
from tests.predict.conftest import SHIPPED_MODELS, ModelFactory, with_card
from tests.predict.fakeprom import DownClient, FrameClient

DAY = 86400.0
STEP = 300.0

# -- the end-to-end run over a few nodes of the held-out dataset ----------------------------------------


@dataclass(frozen=True)
class Run:
    frame: pd.DataFrame
    truth: dataset.Truth
    model: registry.RiskModel
    client: FrameClient
    ranged: backtest.RangeReplay
    result: backtest.BacktestResult
    start: float
    end: float


def pick_nodes(truth: dataset.Truth, *, start: float, horizon: float) -> list[str]:
    """Nodes with a hardware failure that had a precursor (and a horizon of scoring before it), nodes with
    trap GPUs of different kinds, and two quiet nodes."""
    f = truth.failures
    failing = f[
        f["fault_class"].isin(["reset-gpu", "reboot-node", "replace"])
        & f["precursor_start"].notna()
        & ~f["pending"]
        & (f["failure_time"] > start + horizon)
        & (f["mode"].isin(["pcie", "nvlink", "thermal"]))
    ]
    chosen = list(dict.fromkeys(failing.sort_values("failure_time")["node"]))[:3]
    traps = truth.traps[~truth.traps["node"].isin(f["node"])].drop_duplicates("kind")
    chosen += [n for n in traps["node"] if n not in chosen][:3]
    quiet = sorted(set(truth.traps["node"]) | set(f["node"]))
    chosen += [n for n in (f"gpu-node-{i:03d}" for i in range(60)) if n not in quiet][:2]
    return chosen


@pytest.fixture(scope="module")
def shipped() -> registry.RiskModel:
    return registry.load_current(SHIPPED_MODELS)


@pytest.fixture(scope="module")
def run(heldout_dataset: Path, shipped: registry.RiskModel) -> Run:
    truth = dataset.read_truth(heldout_dataset)
    start, end = truth.start + DAY, truth.end
    nodes = pick_nodes(truth, start=start, horizon=shipped.card.horizon_s)
    frame = pd.read_parquet(dataset.timeseries_path(heldout_dataset), filters=[("node", "in", nodes)])
    client = FrameClient(frame)
    reader = prometheus.Reader(prometheus.ReaderSettings(step_s=STEP), client=client)
    ranged = backtest.replay_range(
        reader,
        shipped,
        start=start,
        end=end,
        lookback_s=DAY,
        node_batch=3,
        hold=backtest.Hysteresis(clear_margin=0.1, clear_after=3),
        xid_classes=history.xid_classes(rules.load_catalog(RULES_DIR / "xid-catalog.yaml"), per_link=True),
    )
    result = backtest.assess(ranged.replay, truth, failures=None, costs=costs.CostModel())
    return Run(frame, truth, shipped, client, ranged, result, start, end)


def test_reads_in_host_batches_with_one_query_per_metric_per_batch(run: Run) -> None:
    nodes = run.frame["node"].nunique()
    batches = -(-nodes // 3)
    assert run.ranged.batches == batches
    assert run.ranged.queries == 1 + batches * len(features.SOURCE_METRICS)
    assert run.client.queries[0].startswith("group by (")
    reads = run.client.queries[1:]
    assert all('Hostname=~"' in q for q in reads)
    assert len(set(reads)) == len(reads)  # never the same metric twice for one batch
    assert run.ranged.replay.nodes == nodes
    assert set(run.ranged.replay.scores["timestamp"]) == set(np.arange(run.start, run.end + 1, 1800.0))


def test_a_flag_is_what_scoring_the_same_samples_gives(run: Run) -> None:
    alarms = run.result.alarms
    assert len(alarms) > 0
    alarm = alarms.sort_values("peak", ascending=False).iloc[0]
    t = float(alarm["first"])
    recent = run.frame[(run.frame["node"] == alarm["node"]) & (run.frame["timestamp"] <= t)]
    scored = score.score_frame(recent, run.model, now=datetime.fromtimestamp(t, UTC))
    gpu = next(r for r in scored.gpus if r.gpu == int(alarm["gpu"]))
    assert gpu.level is domain.RiskLevel.ACT
    rows = run.ranged.replay.scores
    replayed = rows[
        (rows["node"] == alarm["node"]) & (rows["gpu"] == alarm["gpu"]) & (rows["timestamp"] == t)
    ]
    assert float(replayed["score"].iloc[0]) == pytest.approx(gpu.score, abs=1e-5)
    assert alarm["drivers"], "the first flag says what drove it"


def test_a_failure_with_a_precursor_is_caught_with_a_lead(run: Run) -> None:
    failures = run.result.failures
    caught = failures[failures["caught"] & failures["has_precursor"] & failures["scored"]]
    assert len(caught) >= 1
    assert (caught["lead_h"] > 0).all()
    summary = run.result.summary
    assert summary["recall_with_precursor"] is not None
    assert summary["recall_with_precursor"] > 0
    assert summary["precision"] == 1.0
    assert summary["lead_time_h_with_precursor"]["median"] > 0
    true = run.result.alarms[run.result.alarms["outcome"] == "true"]
    assert set(caught["id"]) <= set(true["failure_id"])


def test_no_trap_gpu_is_flagged(run: Run) -> None:
    traps = run.result.summary["traps"]
    assert traps["gpus"] >= 3
    assert traps["flagged"] == 0
    assert not ((run.result.alarms["trap"] != "") & (run.result.alarms["outcome"] == "false")).any()


def test_the_json_has_every_part_and_no_nan(run: Run) -> None:
    body = json.loads(json.dumps(run.result.as_dict(), allow_nan=False))
    assert set(body) >= {
        "range",
        "model",
        "ground_truth",
        "notes",
        "fleet",
        "summary",
        "costs",
        "alarms",
        "failures",
    }
    assert body["ground_truth"] == "truth"
    summary = body["summary"]
    for key in ("precision", "recall", "recall_with_precursor", "false_alarms_per_1000_node_days"):
        assert key in summary
    assert set(summary["lead_time_h"]) == {"median", "p10", "p90", "count", "values"}
    assert summary["node_days"] == pytest.approx(body["fleet"]["nodes"] * body["range"]["days"])
    cost = body["costs"]
    assert cost["assumptions"]["job_gpus"] == 8
    assert cost["assumptions"]["statements"]
    for key in ("reactive_gpu_h", "ladder_gpu_h", "reduction", "capacity_gpu_h", "capacity_fraction"):
        assert key in cost["all_failures"]
    alarm = body["alarms"][0]
    assert {"node", "gpu", "first_flag", "last_flag", "peak", "outcome", "acted", "drivers"} <= set(alarm)
    assert body["row_metrics"]["threshold"] == pytest.approx(run.model.card.act, abs=1e-6)


def test_the_html_report_is_self_contained_with_its_plots(run: Run, tmp_path: Path) -> None:
    path = report.write_html(tmp_path / "report.html", run.result)
    text = path.read_text(encoding="utf-8")
    assert text.count("<svg") == 2
    assert 'class="timeline"' in text
    assert 'class="leads"' in text
    assert "<polyline" in text
    assert "<script" not in text
    assert "src=" not in text
    assert "href=" not in text
    assert re.findall(r"https?://[^\"'\s<]+", text) == ["http://www.w3.org/2000/svg"] * 2
    assert "job_gpus = 8" in text


def test_xid_derived_failures_find_what_the_truth_says(run: Run) -> None:
    found = run.ranged.xid_failures
    assert found is not None
    assert len(found) > 0
    truth = run.truth.failures
    hard = truth[
        truth["fault_class"].isin(["reset-gpu", "reboot-node", "replace"])
        & truth["node"].isin(run.frame["node"])
        & ~truth["pending"]
        & (truth["failure_time"] > run.frame["timestamp"].min() + STEP)
        & (truth["failure_time"] < run.frame["timestamp"].max())
    ]
    matched = hard.merge(found, on=["node", "gpu"], suffixes=("", "_xid"))
    matched = matched[(matched["failure_time_xid"] - matched["failure_time"]).abs() <= STEP]
    assert set(matched["id"]) == set(hard["id"])
    by_xid = backtest.assess(run.ranged.replay, None, failures=found, costs=costs.CostModel())
    assert by_xid.source == "xid"
    assert by_xid.summary["recall_with_precursor"] is None  # precursors are unknown in history
    assert by_xid.summary["failures_caught"] == run.result.summary["failures_caught"]
    true_by_truth = run.result.alarms.loc[run.result.alarms["outcome"] == "true", ["node", "gpu", "first"]]
    true_by_xid = by_xid.alarms.loc[by_xid.alarms["outcome"] == "true", ["node", "gpu", "first"]]
    assert true_by_xid.to_numpy().tolist() == true_by_truth.to_numpy().tolist()
    assert by_xid.summary["traps"]["gpus"] == 0  # history knows no traps


# -- the replay's rules on hand-made frames -------------------------------------------------------------


def sbe_frame(rates: dict[tuple[str, int, str], list[float]], *, t0: float, steps: int) -> pd.DataFrame:
    """SBE counters growing at a rate per 5-minute step that changes every `steps // len(rates)` steps."""
    parts = []
    times = t0 + STEP * np.arange(steps)
    for (node, gpu, uuid), per_step in rates.items():
        increments = np.repeat(per_step, -(-steps // len(per_step)))[:steps]
        parts.append(
            pd.DataFrame(
                {
                    "node": node,
                    "gpu": gpu,
                    "uuid": uuid,
                    "timestamp": times,
                    "present": 1,
                    features.SBE_AGG: np.cumsum(increments),
                    features.GPU_TEMP: 55.0,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def test_hysteresis_holds_a_level_until_enough_steps_are_below_the_margin() -> None:
    scores = [0.1, 0.6, 0.45, 0.58, 0.3, 0.2, 0.1, 0.6, 0.2, 0.2, 0.2]
    rows = pd.DataFrame(
        {"node": "n", "gpu": 0, "uuid": "u", "timestamp": np.arange(len(scores)), "score": scores}
    )
    plain = backtest.hold_levels(rows, warn=0.4, act=0.5, hold=backtest.Hysteresis())
    assert plain.tolist() == [0, 2, 1, 2, 0, 0, 0, 2, 0, 0, 0]
    held = backtest.hold_levels(
        rows, warn=0.4, act=0.5, hold=backtest.Hysteresis(clear_margin=0.1, clear_after=2)
    )
    # 0.45 ≥ 0.5 x 0.9 keeps act; two steps below (0.3, 0.2) drop it to none; 0.6 rises at once.
    assert held.tolist() == [0, 2, 2, 2, 2, 0, 0, 2, 2, 0, 0]


def test_only_the_board_in_the_slot_is_scored(make_model: ModelFactory) -> None:
    model = with_card(make_model(), thresholds={"warn": 0.2, "act": 0.5}, sustain_s=0.0)
    t0 = 1_740_960_000.0
    steps = 288
    frame = sbe_frame({("n1", 0, "old"): [5.0], ("n1", 0, "new"): [0.0]}, t0=t0, steps=steps)
    swap = t0 + STEP * 144
    # The old board reports until the swap, the new one after it (the reader keeps both series).
    old = frame["uuid"] == "old"
    frame.loc[old & (frame["timestamp"] >= swap), [features.SBE_AGG, features.GPU_TEMP]] = np.nan
    frame.loc[old & (frame["timestamp"] >= swap), "present"] = 0
    frame.loc[~old & (frame["timestamp"] < swap), [features.SBE_AGG, features.GPU_TEMP]] = np.nan
    frame.loc[~old & (frame["timestamp"] < swap), "present"] = 0
    replayed = backtest.replay(frame, model, start=t0 + 3600, end=t0 + STEP * (steps - 1), step_s=1800)
    rows = replayed.scores
    assert set(rows.loc[rows["timestamp"] < swap, "uuid"]) == {"old"}
    assert set(rows.loc[rows["timestamp"] >= swap, "uuid"]) == {"new"}
    assert (rows.groupby("timestamp").size() == 1).all()


def test_the_decision_score_is_the_lower_of_now_and_sustain_ago(make_model: ModelFactory) -> None:
    model = with_card(make_model(), thresholds={"warn": 0.2, "act": 0.5}, sustain_s=1800.0)
    t0 = 1_740_960_000.0
    frame = sbe_frame({("n1", 0, "a"): [0.0, 0.0, 0.0, 8.0]}, t0=t0, steps=96)
    replayed = backtest.replay(frame, model, start=t0 + 3600, end=t0 + STEP * 95, step_s=1800)
    rows = replayed.scores.sort_values("timestamp").reset_index(drop=True)
    expected = np.minimum(rows["p"].to_numpy(), np.r_[0.0, rows["p"].to_numpy()[:-1]])
    assert rows["score"].to_numpy()[1:] == pytest.approx(expected[1:])


def test_alarm_outcomes_follow_the_failures_and_repairs() -> None:
    t0 = 1_740_960_000.0
    step = 1800.0
    times = t0 + step * np.arange(200)
    scores = np.zeros((3, 200))
    scores[0, 10:20] = 0.9  # fails at step 18: true
    scores[1, 40:50] = 0.9  # nothing follows: false
    scores[2, 60:62] = 0.9  # flagged after its failure at 55, before the repair at 100: after-failure
    rows = pd.DataFrame(
        {
            "node": np.repeat(["a", "b", "c"], 200),
            "gpu": 0,
            "uuid": np.repeat(["ua", "ub", "uc"], 200),
            "timestamp": np.tile(times, 3),
            "p": scores.ravel(),
            "score": scores.ravel(),
        }
    )
    rows["level"] = backtest.levels_of(rows["score"].to_numpy(), warn=0.5, act=0.5)
    alarms = pd.DataFrame(
        {
            "node": ["a", "b", "c"],
            "gpu": 0,
            "uuid": ["ua", "ub", "uc"],
            "first": [times[10], times[40], times[60]],
            "last": [times[19], times[49], times[61]],
            "steps": [10, 10, 2],
            "peak": 0.9,
            "drivers": [(), (), ()],
        }
    )
    replayed = backtest.Replay(
        start=t0,
        end=float(times[-1]),
        step_s=step,
        model_version="v",
        warn=0.5,
        act=0.5,
        hold=backtest.Hysteresis(),
        sustain_s=0.0,
        horizon_s=DAY,
        scores=rows,
        alarms=alarms,
        resets=pd.DataFrame({"node": pd.Series(dtype=object), "time": pd.Series(dtype=float)}),
    )
    failures = pd.DataFrame(
        {
            "id": ["F1", "F2"],
            "node": ["a", "c"],
            "gpu": [0, 0],
            "failure_time": [times[18] + 60, times[55]],
            "fault_class": ["reset-gpu", "reboot-node"],
        }
    )
    truth = dataset.Truth(
        start=t0,
        end=float(times[-1]),
        failures=failures,
        repairs=pd.DataFrame({"node": ["c"], "time": [times[100]], "kind": ["reboot"]}),
        traps=pd.DataFrame({"kind": ["hot-rack"], "node": ["b"], "gpu": [-1], "uuid": [""]}),
    )
    result = backtest.assess(
        replayed, truth, failures=None, costs=costs.CostModel(proactive_max_fraction=1.0)
    )
    outcome = dict(zip(result.alarms["node"], result.alarms["outcome"], strict=True))
    assert outcome == {"a": "true", "b": "false", "c": "after-failure"}
    assert result.alarms.set_index("node").loc["b", "trap"] == "hot-rack"
    assert result.summary["traps"] == {"gpus": 1, "flagged": 1, "flagged_by_kind": {"hot-rack": 1}}
    caught = result.failures.set_index("id")
    assert caught.loc["F1", "lead_h"] == pytest.approx(8 * step / 3600 + 60 / 3600)
    assert not caught.loc["F2", "caught"]
    assert result.summary["precision"] == 0.5
    money = result.priced.all_failures
    # F1 caught 4 h ahead: 2 GPU-h instead of 8; F2 reactive: 8. Node a (one GPU) is held from its first
    # flag until it fails, node b for its 10 steps.
    assert money.reactive_gpu_h == 16.0
    assert money.ladder_gpu_h == 10.0
    assert money.needless_restarts == 1
    assert money.needless_restart_gpu_h == 2.0
    assert money.capacity_gpu_h == pytest.approx((times[18] + 60 - times[10]) / 3600 + 10 * step / 3600)


# -- Prometheus: host matchers, and the command line ----------------------------------------------------


def test_host_matchers_escape_regex_and_string_characters() -> None:
    hosts = [
        promql.HostRef("gpu-1.dc", "Hostname", "gpu-1.dc"),
        promql.HostRef("b", "instance", "b:9400"),
    ]
    query = promql.selector(features.GPU_TEMP, promql.host_matchers(hosts))
    assert query == (
        '{__name__=~"DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_GPU_TEMP_CELSIUS", Hostname=~"gpu-1\\\\.dc"} or '
        '{__name__=~"DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_GPU_TEMP_CELSIUS", instance=~"b:9400"}'
    )
    assert promql.selector(features.SBE_AGG, ['node=~"a"']) == f'{features.SBE_AGG}{{node=~"a"}}'
    assert promql.host_ref({"instance": "b:9400", "gpu": "0"}) == hosts[1]


def args_for(url: str, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands.add_backtest_arguments(parser)
    return parser.parse_args(["--prometheus-url", url, "--models", str(SHIPPED_MODELS), "--quiet", *extra])


def test_prometheus_down_is_exit_code_4_with_a_message(
    capsys: pytest.CaptureFixture[str], free_port: Callable[[], int]
) -> None:
    code = sickbay.main(
        [
            "backtest",
            "--prometheus-url",
            f"http://127.0.0.1:{free_port()}",
            "--start",
            "2025-03-04T00:00:00Z",
            "--end",
            "2025-03-05T00:00:00Z",
            "--models",
            str(SHIPPED_MODELS),
            "--retries",
            "0",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 4
    assert "cannot read http://127.0.0.1:" in err
    assert "Traceback" not in err
    code = backtest_cli.run_backtest(
        args_for("http://x", "--start", "2025-03-04", "--end", "2025-03-05"), client=DownClient()
    )
    assert code == 4


def test_bad_arguments_are_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    for extra in (
        ("--start", "yesterday", "--end", "2025-03-05"),
        ("--start", "2025-03-05", "--end", "2025-03-04"),
        ("--start", "2025-03-04", "--end", "2025-03-05", "--step", "7q"),
        ("--start", "2025-03-04", "--end", "2025-03-05", "--step", "7m"),
        ("--start", "2025-03-04", "--end", "2025-03-05", "--truth", "/nonexistent/truth.json"),
    ):
        assert backtest_cli.run_backtest(args_for("http://x", *extra), client=DownClient()) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_the_command_line_prints_json_and_writes_html(
    run: Run, heldout_dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = datetime.fromtimestamp(run.start, UTC).isoformat()
    end = datetime.fromtimestamp(run.end, UTC).isoformat()
    html = tmp_path / "backtest.html"
    common = ("--start", start, "--end", end, "--lookback", "1d", "--node-batch", "3")
    code = backtest_cli.run_backtest(
        args_for(
            "http://fake", *common, "--truth", str(heldout_dataset), "--format", "json", "--html", str(html)
        ),
        client=run.client,
    )
    assert code == 0
    body = json.loads(capsys.readouterr().out)
    assert body["ground_truth"] == "truth"
    assert body["source"]["hosts"] == run.frame["node"].nunique()
    assert body["source"]["batches"] == run.ranged.batches
    policy = backtest_cli._ladder(RULES_DIR / "policy.yaml")
    assert body["model"]["clear_after_steps"] == policy.hold.clear_after  # the policy's hysteresis
    assert body["summary"]["alarms"] == run.result.summary["alarms"]
    assert html.exists()
    assert "<svg" in html.read_text(encoding="utf-8")
    code = backtest_cli.run_backtest(args_for("http://fake", *common), client=run.client)
    assert code == 0
    out = capsys.readouterr().out
    assert "when each GPU would have been flagged" in out
    assert re.search(r"ground truth\s+│\s+xid", out)
