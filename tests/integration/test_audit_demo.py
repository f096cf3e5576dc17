"""`sickbay audit` on the demo cluster (issue 14 part 4's acceptance): with the problems
`app.demo.audit_seed.plant` plants, it finds every one of them and nothing else, and without them it finds
nothing. It runs the real command (`app.cli.main`) through the official client against the simulated API
server, and against a real Prometheus holding one sample of each dcgm-exporter counter but one.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.audit.checks import Kind
from app.audit.snapshot import needed_fields
from app.cli import main
from app.config.settings import load_settings
from app.dcgm_fields import BY_NAME
from app.demo import audit_seed, configs, prediction
from app.demo.main import demo_fleet_config
from app.kube import client as kube_client
from app.obs.metrics import create_metrics
from app.service import audit_job, status
from app.service.runtime import SERVICES, build_app
from app.sim.fleet import FleetSim
from app.sim.kubeapi import KubeApiServer
from tests.prom import EMPTY_CONFIG, running_prometheus


def _demo_seed(*, planted: bool) -> dict[str, Any]:
    start = prediction.history_start(span_s=prediction.HISTORY_S, now=time.time())
    sim = FleetSim(nodes=12, seed=7, config=demo_fleet_config(), start=start)
    document = configs.cluster_seed(sim, pool="h100", owners=True)
    return audit_seed.plant(document, now=datetime.now(UTC)) if planted else document


def _server(document: dict[str, Any]) -> KubeApiServer:
    """Loaded as the demo's stack loads it: owners first, their pods after."""
    pods = document.pop("pods")
    api = KubeApiServer()
    api.load(document)
    api.load({"pods": pods})
    return api


async def _audit(
    capsys: pytest.CaptureFixture[str], kubeconfig: Path, *extra: str
) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    # The simulated API server runs on this loop: the command (its own asyncio.run) runs in a thread.
    rc = await asyncio.to_thread(main, ["audit", "--kubeconfig", str(kubeconfig), "--format", "json", *extra])
    return rc, json.loads(capsys.readouterr().out)


@pytest.fixture
def fleet_prometheus(
    tmp_path: Path, prometheus: Path, promtool: Path, free_port: Callable[[], int]
) -> Iterator[str]:
    """A real Prometheus whose TSDB holds every counter the rules and the model read except
    `audit_seed.UNEXPORTED_FIELD`, two of them under their DCGM 4.6 names (as a 4.6 exporter writes them)."""
    at = int(time.time()) - 3600
    lines = []
    for name in sorted(needed_fields()):
        if name == audit_seed.UNEXPORTED_FIELD:
            continue
        exported = BY_NAME[name].exported(dcgm_4_6=name.endswith(("GPU_TEMP", "PCIE_REPLAY_COUNTER"))).name
        lines += [f"# TYPE {exported} gauge", f'{exported}{{Hostname="gpu-00",gpu="0"}} 1 {at}']
    source = tmp_path / "fleet.om"
    source.write_text("\n".join([*lines, "# EOF", ""]))
    data = tmp_path / "tsdb"
    # promtool's OpenMetrics backfill (Prometheus docs, "Backfilling from OpenMetrics format").
    subprocess.run(
        [str(promtool), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        check=True,
        capture_output=True,
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(EMPTY_CONFIG)
    with running_prometheus(prometheus, data=data, config=config, port=free_port()) as url:
        yield url


async def test_the_audit_finds_exactly_the_planted_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fleet_prometheus: str
) -> None:
    async with _server(_demo_seed(planted=True)) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        rc, report = await _audit(capsys, kubeconfig, "--prometheus", fleet_prometheus)

    found = {(f["kind"], f["object"]) for f in report["findings"]}
    assert found == set(audit_seed.PLANTED.items())
    assert len(report["findings"]) == len(audit_seed.PLANTED), "one finding per planted problem"
    assert rc == 1
    assert report["exit_code"] == 1
    assert report["prometheus_checked"] is True
    severity = {f["kind"]: f["severity"] for f in report["findings"]}
    assert severity["node-owned-by-sickbay"] == "info", "held for 2 h, under the 24 h default"
    assert {k for k, v in severity.items() if v == "warning"} == set(audit_seed.PLANTED) - {
        "node-owned-by-sickbay"
    }


async def test_the_demo_cluster_without_planted_problems_has_no_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with _server(_demo_seed(planted=False)) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        rc, report = await _audit(capsys, kubeconfig)

    assert report["findings"] == []
    assert rc == 0
    assert report["prometheus_checked"] is False


async def test_a_cluster_it_cannot_read_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with KubeApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    # The server is gone: its address refuses connections.

    rc = await asyncio.to_thread(main, ["audit", "--kubeconfig", str(kubeconfig)])

    assert rc == 2
    assert "cannot read" in capsys.readouterr().err


async def test_the_scheduled_audit_publishes_counts_and_the_status_page_shows_its_last_result(
    tmp_path: Path,
) -> None:
    clock = _FixedClock(datetime.now(UTC))
    metrics = create_metrics()
    async with _server(_demo_seed(planted=True)) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        async with await kube_client.connect(kubeconfig=str(kubeconfig)) as client:
            audits = audit_job.Audits(client, metrics=metrics, clock=clock)
            run = await audits.run_once()

    assert run is not None
    assert audits.last is run
    # Every kind is a series (zeros included), the planted ones at 1; the Prometheus check is the CLI's.
    for kind in Kind:
        value = metrics.registry.get_sample_value("sickbay_audit_findings", {"kind": kind.value})
        assert value == (0 if kind is Kind.DCGM_FIELD_MISSING else 1), kind
    assert (
        metrics.registry.get_sample_value("sickbay_audit_last_run_timestamp_seconds") == clock().timestamp()
    )
    html = status.render(
        identity="sickbay-0",
        leader=True,
        dry_run=False,
        paused=False,
        now=clock(),
        nodes=[],
        entries=[],
        outcomes=[],
        gates=None,
        audit=run,
    )
    assert "Audit of GPU-node hygiene" in html
    assert "9 warnings, 1 notes" in html
    for planted in audit_seed.PLANTED.values():
        if not planted.startswith("Metric"):
            assert planted in html


class _FixedClock:
    def __init__(self, at: datetime) -> None:
        self._at = at

    def __call__(self) -> datetime:
        return self._at


async def test_serve_with_audit_interval_runs_the_audit_and_shows_it_on_the_status_page(
    tmp_path: Path,
) -> None:
    async with _server(_demo_seed(planted=True)) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        settings = load_settings(
            auth={"mode": "none"},
            inbox={"path": tmp_path / "sickbay.db"},
            kube={"enabled": True, "kubeconfig": str(kubeconfig)},
            prediction={"enabled": False},
            pod_namespace="default",
            reconcile_interval_s=3600,
            audit_interval_s=3600,
            dry_run=True,
        )
        app = build_app(settings)
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            services = app[SERVICES]
            deadline = time.monotonic() + 30
            while services.audits is None or services.audits.last is None:
                assert time.monotonic() < deadline, "the scheduled audit never ran"
                await asyncio.sleep(0.05)
            page = await (await client.get("/")).text()
            exposition = await (await client.get("/metrics")).text()
        finally:
            await client.close()

    assert "Audit of GPU-node hygiene" in page
    assert audit_seed.PLANTED["node-cordoned-by-hand"] in page
    assert 'sickbay_audit_findings{kind="node-cordoned-by-hand"} 1.0' in exposition
    assert 'sickbay_audit_findings{kind="dcgm-field-not-exported"} 0.0' in exposition


async def test_a_prometheus_it_cannot_read_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], free_port: Callable[[], int]
) -> None:
    async with _server(_demo_seed(planted=False)) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        nobody = f"http://127.0.0.1:{free_port()}"
        rc = await asyncio.to_thread(main, ["audit", "--kubeconfig", str(kubeconfig), "--prometheus", nobody])

    assert rc == 2
    assert "cannot read" in capsys.readouterr().err
