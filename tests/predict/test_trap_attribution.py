"""Which trap a row is, at its time: an episode (a precursor that recovered) overrides the standing kind of
its GPU from its start to a day after it stops, and false alarms are counted by the kind they began under.

A GPU can be two traps: the simulator puts a recovered precursor on a GPU that also ran a buggy job, and
reading the GPU's kind without its time reported that precursor's alarms as the job's (issue 12's
held-out fleets: weak-precursors:s73's gpu-node-009/1 was flagged during its recovered HBM precursor and
counted as an app-XID trap).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd

from app.predict import backtest_summary, dataset, evaluate, labels

HOUR = 3600.0
T0 = 1_740_960_000.0
STEP = 1800.0


def _truth() -> dataset.Truth:
    return dataset.truth_from_dict(
        {
            "failures": [],
            "traps": [
                {"kind": "app-xid-job", "job": "j1"},
                {
                    "kind": "recovered-precursor",
                    "node": "n1",
                    "gpu": 0,
                    "uuid": "GPU-a",
                    "time_ts": T0 + 10 * HOUR,
                    "until_ts": T0 + 20 * HOUR,
                },
                {"kind": "recovered-precursor", "node": "n2", "gpu": 3, "time_ts": T0 + 5 * HOUR},
                {"kind": "stable-high-sbe", "node": "n3", "gpu": 1, "uuid": "GPU-c"},
            ],
            "app_xids": [{"node": "n1", "gpu": 0, "uuid": "GPU-a", "job": "j1", "time_ts": T0}],
        }
    )


def _rows(node: str, gpu: int, uuid: str, hours: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"node": node, "gpu": gpu, "uuid": uuid, "timestamp": [T0 + h * HOUR for h in hours]})


def test_truth_keeps_an_episodes_start_and_stop() -> None:
    traps = _truth().traps
    by_kind = {r["kind"]: r for r in traps[traps["uuid"] == "GPU-a"].to_dict("records")}
    assert by_kind["recovered-precursor"]["start"] == T0 + 10 * HOUR
    assert by_kind["recovered-precursor"]["until"] == T0 + 20 * HOUR
    assert math.isnan(by_kind["app-xid-job"]["start"])
    assert list(traps.columns) == list(dataset.TRAP_COLUMNS)


def test_an_episode_overrides_the_standing_kind_from_its_start_to_a_day_after_it_stops() -> None:
    rows = _rows("n1", 0, "GPU-a", [0, 9.9, 10, 20, 20 + 23.9, 20 + 24.1])
    kinds = dataset.trap_kinds(_truth().traps, rows)
    assert kinds.tolist() == [
        "app-xid-job",
        "app-xid-job",
        "recovered-precursor",
        "recovered-precursor",
        "recovered-precursor",
        "app-xid-job",
    ]


def test_a_gpu_that_is_only_an_episode_is_no_trap_outside_it_and_an_open_one_never_ends() -> None:
    traps = _truth().traps
    before_after = dataset.trap_kinds(traps, _rows("n1", 1, "GPU-b", [15]))
    assert before_after.tolist() == [""]  # another GPU of the node
    by_slot = dataset.trap_kinds(traps, _rows("n2", 3, "GPU-x", [4.9, 5, 500]))
    assert by_slot.tolist() == ["", "recovered-precursor", "recovered-precursor"]
    standing = dataset.trap_kinds(traps, _rows("n3", 1, "GPU-c", [0, 300]))
    assert standing.tolist() == ["stable-high-sbe", "stable-high-sbe"]


def test_a_truth_without_episode_columns_reads_as_standing_traps() -> None:
    traps = pd.DataFrame([{"kind": "hot-rack", "node": "n1", "gpu": -1, "uuid": ""}])
    kinds = dataset.trap_kinds(traps, _rows("n1", 4, "GPU-z", [0, 100]))
    assert kinds.tolist() == ["hot-rack", "hot-rack"]


def _evalset(hours: list[float], flagged_hours: set[float]) -> tuple[evaluate.EvalSet, np.ndarray]:
    keys = _rows("n1", 0, "GPU-a", hours)
    n = len(keys)
    lab = labels.Labels(
        label=np.zeros(n, dtype=np.int8),
        status=np.full(n, labels.Status.NEGATIVE, dtype=np.int8),
        time_to_failure_s=np.full(n, np.inf),
        failure_id=np.full(n, None, dtype=object),
    )
    empty = pd.DataFrame(columns=["id", "node", "gpu", "failure_time", "precursor_start", "fault_class"])
    data = evaluate.EvalSet(
        keys=keys,
        x=np.zeros((n, 1), dtype=np.float32),
        labels=lab,
        failures=empty,
        trap_kind=dataset.trap_kinds(_truth().traps, keys),
        horizon_s=86400.0,
    )
    scores = np.array([1.0 if h in flagged_hours else 0.0 for h in hours])
    return data, scores


def test_false_alarms_are_counted_by_the_kind_they_began_under() -> None:
    hours = [h * STEP / HOUR for h in range(0, 200)]  # 100 h on a 30-minute grid
    # One alarm during the episode (12-14 h), one on the buggy job's GPU long after it (80 h).
    data, scores = _evalset(hours, {12.0, 12.5, 13.0, 80.0})
    m = evaluate.evaluate(scores, data, threshold=0.5)
    assert m.false_alarms == 2
    assert m.false_alarms_by_trap == {"app-xid-job": 1, "recovered-precursor": 1}
    # One GPU, flagged under both kinds it was: one trap GPU, counted once per kind.
    assert (m.trap_gpus, m.trap_gpus_flagged) == (1, 1)
    assert m.trap_gpus_by_kind == {"app-xid-job": 1, "recovered-precursor": 1}
    assert m.trap_gpus_flagged_by_kind == {"app-xid-job": 1, "recovered-precursor": 1}


def test_an_alarm_only_during_the_episode_is_the_episodes_and_not_the_standing_kinds() -> None:
    hours = [h * STEP / HOUR for h in range(0, 200)]
    data, scores = _evalset(hours, {15.0, 15.5})
    m = evaluate.evaluate(scores, data, threshold=0.5)
    assert m.false_alarms_by_trap == {"recovered-precursor": 1}
    assert m.trap_gpus_flagged_by_kind == {"recovered-precursor": 1}


def test_an_alarm_on_no_trap_is_counted_as_none() -> None:
    keys = _rows("n9", 0, "GPU-q", [0, 0.5, 1.0])
    data, _ = _evalset([0, 0.5, 1.0], set())
    data = evaluate.EvalSet(
        keys=keys,
        x=data.x,
        labels=data.labels,
        failures=data.failures,
        trap_kind=dataset.trap_kinds(_truth().traps, keys),
        horizon_s=data.horizon_s,
    )
    m = evaluate.evaluate(np.array([0.0, 1.0, 1.0]), data, threshold=0.5)
    assert m.false_alarms_by_trap == {"none": 1}
    assert (m.trap_gpus, m.trap_gpus_flagged) == (0, 0)


def test_a_backtests_summary_counts_false_alarms_by_trap_and_a_gpu_under_each_kind_it_was_flagged() -> None:
    alarms = pd.DataFrame(
        {
            "node": ["n1", "n1", "n2", "n3"],
            "gpu": [0, 0, 1, 2],
            "uuid": ["GPU-a", "GPU-a", "GPU-b", "GPU-c"],
            "outcome": ["false", "false", "false", "true"],
            "trap": ["app-xid-job", "recovered-precursor", "", "recovered-precursor"],
        }
    )
    caught = pd.DataFrame({"scored": [True], "has_precursor": [True], "caught": [True], "lead_h": [10.0]})
    keys = _rows("n1", 0, "GPU-a", [0, 1])
    replay = SimpleNamespace(nodes=3, start=T0, end=T0 + 10 * 86400.0)
    summary = backtest_summary.summarise(
        replay,  # type: ignore[arg-type]
        alarms,
        caught,
        np.array(["app-xid-job", "recovered-precursor"], dtype=object),
        keys,
        known_precursors=True,
    )
    assert summary["false_alarms"] == 3
    assert summary["false_alarms_by_trap"] == {"app-xid-job": 1, "none": 1, "recovered-precursor": 1}
    assert summary["traps"]["flagged"] == 1  # one GPU, flagged under two kinds
    assert summary["traps"]["flagged_by_kind"] == {"app-xid-job": 1, "recovered-precursor": 1}
