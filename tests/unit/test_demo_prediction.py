"""The demo's prediction scene, in parts that need no running stack: the planted precursor, the model's
promotion, the owned workloads of the simulated cluster, reading Sickbay's reasons and metrics, the report.

The scene itself, against the whole stack, is `tests/e2e/test_demo_prediction.py`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.demo import configs, prediction, report
from app.demo.main import demo_fleet_config
from app.sim.fleet import FleetSim
from app.sim.kubeapi import KubeApiServer
from app.sim.kubeapi.resources import JOBS, JOBSETS, PODS

REPO = Path(__file__).resolve().parents[2]
HOUR = 3600.0


def _fleet(nodes: int = 12) -> tuple[FleetSim, float]:
    start = prediction.history_start(span_s=prediction.HISTORY_S, now=1_800_000_123.0)
    return FleetSim(
        nodes=nodes, seed=7, config=demo_fleet_config(), start=start
    ), start + prediction.HISTORY_S


def test_the_past_ends_on_the_scoring_grid() -> None:
    start = prediction.history_start(span_s=26 * HOUR, step_s=300.0, now=1_800_000_123.0)
    end = start + 26 * HOUR
    assert end % 300.0 == 0
    assert 0 <= 1_800_000_123.0 - end < 300.0


def test_the_precursor_is_a_full_strength_thermal_runaway_on_a_busy_gpu_of_a_node_without_gang_ranks() -> (
    None
):
    sim, end = _fleet()
    risk = prediction.plant_precursor(sim, history_end=end, avoid=(sim.node_names[0],))

    assert risk.node != sim.node_names[0]
    gangs = {sim.nodes[p.node].name for j in sim.scheduler.running.values() if j.gang for p in j.placements}
    assert risk.node not in gangs
    gpu = sim.node(risk.node).gpus[risk.gpu]
    assert gpu.pod is not None
    assert risk.pod == gpu.pod
    assert gpu.process is not None
    assert gpu.process.mode.value == "thermal"
    assert gpu.process.xid == prediction.THERMAL_XID == 79
    assert risk.running_s(end) == pytest.approx(prediction.PRECURSOR_RUNNING_S)
    assert risk.due_in_s(end) == pytest.approx(prediction.PRECURSOR_REMAINING_S)
    assert risk.throttle_from < risk.progress(end) < 0.75, "SW slowdown comes and goes; no HW slowdown yet"


def test_the_past_heats_up_and_slowdown_comes_and_goes() -> None:
    sim, end = _fleet()
    risk = prediction.plant_precursor(sim, history_end=end)
    process = sim.node(risk.node).gpus[risk.gpu].process
    assert process is not None
    rises = [process.effects(t).mem_temp_c for t in (risk.onset + 2 * HOUR, risk.onset + 4 * HOUR, end)]
    assert 0 < rises[0] < rises[1] < rises[2] == pytest.approx(risk.mem_rise_at(end))
    assert rises[2] > 5.0, "degrees over its own baseline and its peers, not noise"
    # Slowdown comes and goes (GpuThermalThrottling, `for: 10m`, is a transient soft signal at most).
    minutes = [
        process.effects(risk.onset + 60.0 * i).throttle != 0
        for i in range(int((end - risk.onset) / 60.0) + 1)
    ]
    longest = run = 0
    for throttled in minutes:
        run = run + 1 if throttled else 0
        longest = max(longest, run)
    assert 0 < sum(minutes) < len(minutes) / 4, "slowdown comes and goes, in a minority of minutes"
    assert longest < len(minutes) / 4, "it comes and goes; it does not hold"
    sim.step(end - sim.time_s)
    gpu = sim.node(risk.node).gpus[risk.gpu]
    assert gpu.dbe_vol == 0
    assert not sim.truth().failures


def test_promotion_installs_the_model_whole_with_its_card(tmp_path: Path) -> None:
    target = tmp_path / "models"
    info = prediction.promote_model(REPO / "models", target)

    pointer = json.loads((target / "CURRENT.json").read_text())
    assert pointer == {"current": info.version, "previous": None}
    source = REPO / "models" / info.version
    for name in ("model.skops", "card.json"):
        assert (target / info.version / name).read_bytes() == (source / name).read_bytes()
    assert not list(target.glob(".*")), "no staging file is left behind"
    card = json.loads((source / "card.json").read_text())
    assert (info.act, info.warn) == (card["thresholds"]["act"], card["thresholds"]["warn"])
    assert info.sustain_s == card["sustain_s"]
    assert info.step_s == card["step_s"]


def test_with_owners_every_workload_pod_has_a_job_and_gang_jobs_a_jobset() -> None:
    sim, _ = _fleet()
    document = configs.cluster_seed(sim, pool="h100", owners=True)
    pods = document.pop("pods")
    api = KubeApiServer()
    api.load(document)
    api.load({"pods": pods})

    jobs = {j["metadata"]["name"]: j for j in api.store.items(JOBS)}
    jobsets = {j["metadata"]["name"]: j for j in api.store.items(JOBSETS)}
    workload_pods = [
        p for p in api.store.items(PODS) if p["metadata"]["namespace"] != configs.GPU_OPERATOR_NS
    ]
    assert workload_pods
    assert len(workload_pods) == len(pods)
    for pod in workload_pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner["kind"] == "Job"
        assert owner["controller"]
        job = jobs[owner["name"]]
        assert owner["uid"] == job["metadata"]["uid"]
        gang = pod["metadata"]["labels"].get(configs.JOBSET_LABEL)
        if gang:
            (parent,) = job["metadata"]["ownerReferences"]
            assert parent["kind"] == "JobSet"
            assert parent["uid"] == jobsets[gang]["metadata"]["uid"]
        else:
            assert "ownerReferences" not in job["metadata"]
    assert "objects" not in configs.cluster_seed(sim, pool="h100"), "owners only when asked"


@pytest.mark.parametrize(
    ("reason", "score", "drivers"),
    [
        (
            "predicted hardware-fault risk at act (score 0.9145), driven by gpu0:sbe_accel_6h_24h +6.73, "
            "gpu0:sbe_rate_1h +0.60",
            0.9145,
            (("gpu0:sbe_accel_6h_24h", 6.73), ("gpu0:sbe_rate_1h", 0.60)),
        ),
        ("predicted hardware-fault risk at warn (score 0.7)", 0.7, ()),
        ("something else", None, ()),
    ],
)
def test_the_risk_reason_reads_back(
    reason: str, score: float | None, drivers: tuple[tuple[str, float], ...]
) -> None:
    assert prediction.parse_reason(reason) == (score, drivers)


def test_gpu_scores_read_from_sickbay_metrics() -> None:
    text = (
        "# HELP sickbay_gpu_risk Calibrated probability\n# TYPE sickbay_gpu_risk gauge\n"
        'sickbay_gpu_risk{gpu="0",node="gpu-node-001"} 0.914\n'
        'sickbay_gpu_risk{gpu="3",node="gpu-node-002"} 1.5e-05\n'
        'sickbay_node_risk{node="gpu-node-001"} 0.914\n'
    )
    assert prediction.parse_gpu_risks(text) == {("gpu-node-001", 0): 0.914, ("gpu-node-002", 3): 1.5e-05}


def test_the_report_explains_the_score_the_drivers_and_the_lead() -> None:
    sim, end = _fleet()
    forecast = prediction.Forecast(
        precursor=prediction.plant_precursor(sim, history_end=end),
        model=prediction.read_card(REPO / "models" / _current() / "card.json"),
        history_s=prediction.HISTORY_S,
        history_samples=123_456,
        promoted_at=0.0,
        scored_at=3.5,
        decided_at=9.0,
        score=0.9145,
        level="act",
        drivers=(("gpu0:mem_temp_vs_baseline_c", 6.73),),
        reason="predicted hardware-fault risk at act (score 0.9145), driven by gpu0:mem_temp_vs_baseline_c +6.73",
        running_at_score_s=9 * HOUR,
        due_at_score_s=6 * HOUR,
        others_max=0.008,
        gpus_scored=32,
        taint="taint sickbay.io/at-risk=act:NoSchedule, schedulable=True",
        taint_at=9.1,
        events=[("Pod", "training/a-1", "Warning"), ("Job", "training/a", "Warning")],
        pods_kept=("training/a-1",),
        failed_at=40.0,
        brought_forward_s=6 * HOUR - 40,
        quarantined_at=41.5,
    )
    html = report.prediction_section(forecast)
    for text in (
        "0.914",
        "6 h 00 min before",
        "mem_temp_vs_baseline_c",
        "own 7-day baseline, load discounted",
        "XID 79",
        "+6.73",
        "0.008",
        "training/a",
    ):
        assert text in html
    assert "for 30.9 s of this run" in html
    assert forecast.closed_s == pytest.approx(30.9)
    page = report.render(_info(), [], [], forecast=forecast)
    assert "Prediction: a failure seen hours ahead" in page
    assert report.prediction_section(None) == ""
    assert "did not flag" in report.prediction_section(prediction.Forecast(precursor=forecast.precursor))


def _current() -> str:
    return str(json.loads((REPO / "models" / "CURRENT.json").read_text())["current"])


def _info() -> report.RunInfo:
    return report.RunInfo(
        started=datetime(2026, 1, 1, tzinfo=UTC),
        nodes=4,
        gpus_per_node=8,
        ready_s=1.0,
        scenario_s=1.0,
        total_s=2.0,
        kubeconfig=Path("kubeconfig"),
        workdir=Path("work"),
    )


def test_hours_read_as_hours_and_minutes() -> None:
    assert [report._hours(s) for s in (59.0, 3600.0, 9 * HOUR + 65.0, None)] == [
        "1 min",
        "1 h 00 min",
        "9 h 01 min",
        "—",
    ]


def test_the_report_explains_only_features_the_model_has() -> None:
    from app.predict import features  # noqa: PLC0415 - the report itself imports no predictor code

    assert set(report.FEATURE_TEXT) <= set(features.FEATURES)
