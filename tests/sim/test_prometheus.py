"""Round trips through real Prometheus: backfill from OpenMetrics, and scraping the fleet server."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.sim.fleet import scrape
from app.sim.fleet.datasets import write_dataset
from app.sim.fleet.server import FleetServer, ServerSettings
from tests.prom import EMPTY_CONFIG, instant_query, running_prometheus
from tests.sim.helpers import quiet_sim

pytestmark = pytest.mark.slow
HOUR = 3600.0


def test_openmetrics_backfill_round_trip(
    tmp_path: Path, promtool: Path, prometheus: Path, free_port: Callable[[], int]
) -> None:
    sim = quiet_sim(nodes=2)
    node = sim.node_names[0]
    sim.inject(node, 2, "hbm", lead_time_s=HOUR)
    report = write_dataset(
        tmp_path / "ds", nodes=2, duration_s=3 * HOUR, step_s=60, formats=("openmetrics",), sim=sim
    )
    (failure,) = sim.truth().failures
    data = tmp_path / "tsdb"
    result = subprocess.run(
        [
            str(promtool),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(tmp_path / "ds" / "metrics.om"),
            str(data),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert report.samples > 0
    config = tmp_path / "prometheus.yml"
    config.write_text(EMPTY_CONFIG)
    after = failure.failure_time + 600
    with running_prometheus(prometheus, data=data, config=config, port=free_port()) as url:
        deadline = time.monotonic() + 20
        while not (
            xid := instant_query(url, f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{node}",gpu="2"}}', at=after)
        ):
            assert time.monotonic() < deadline, "backfilled blocks never became queryable"
            time.sleep(0.5)
        assert xid[0]["value"][1] == str(failure.xid)
        assert xid[0]["metric"]["UUID"] == failure.uuid
        assert xid[0]["metric"]["job"] == "dcgm-exporter"
        dbe = instant_query(url, f'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{UUID="{failure.uuid}"}}', at=after)
        assert float(dbe[0]["value"][1]) == sim.node(node).gpus[2].dbe_vol
        before = instant_query(
            url, f'DCGM_FI_DEV_XID_ERRORS{{UUID="{failure.uuid}"}}', at=failure.failure_time - 1800
        )
        assert before[0]["value"][1] in ("0", "63"), "no failure XID before the failure"
        up = instant_query(url, 'count(up{job="dcgm-exporter"} == 1)', at=after)
        assert up[0]["value"][1] == "2"
        rate = instant_query(
            url, f'increase(DCGM_FI_DEV_ECC_SBE_AGG_TOTAL{{UUID="{failure.uuid}"}}[1h])', at=after
        )
        assert float(rate[0]["value"][1]) > 0, "the precursor's SBEs are in the backfilled history"


async def test_prometheus_scrapes_every_node_as_its_own_target(
    tmp_path: Path, prometheus: Path, free_port: Callable[[], int]
) -> None:
    sim = quiet_sim(nodes=3)
    async with FleetServer(sim) as server:
        config = server.write_prometheus_config(tmp_path / "prom", scrape_interval="1s")
        with running_prometheus(prometheus, data=tmp_path / "data", config=config, port=free_port()) as url:

            async def ask(promql: str) -> list[dict[str, Any]]:
                return await asyncio.to_thread(instant_query, url, promql)

            async def wait_for(promql: str, expected: str) -> None:
                deadline = time.monotonic() + 20
                while True:
                    result = await ask(promql)
                    if result and result[0]["value"][1] == expected:
                        return
                    assert time.monotonic() < deadline, f"{promql} never became {expected}: {result}"
                    await asyncio.sleep(0.3)

            await wait_for('count(up{job="dcgm-exporter"} == 1)', "3")
            await wait_for('count(up{job="kube-state-metrics"} == 1)', "1")
            per_instance = await ask("count by (instance) (DCGM_FI_DEV_GPU_TEMP)")
            assert {r["metric"]["instance"]: r["value"][1] for r in per_instance} == {
                f"gpu-node-00{i}:9400": "8" for i in range(3)
            }
            sim.inject("gpu-node-001", None, "exporter-restart", duration_s=3600)
            await wait_for('up{instance="gpu-node-001:9400"}', "0")
            await wait_for('count(up{job="dcgm-exporter"} == 1)', "2")


async def test_operator_scrapes_rename_the_workload_labels_the_way_prometheus_does(
    tmp_path: Path, prometheus: Path, free_port: Callable[[], int]
) -> None:
    """Real Prometheus does the renaming: operator (honor_labels false), honor (true), plain and unmapped."""
    sim = quiet_sim(nodes=5)
    busy = [n for n in sim.node_names if all(g.pod is not None for g in sim.node(n).gpus)]
    idle = [n for n in sim.node_names if all(g.pod is None for g in sim.node(n).gpus)]
    assert len(busy) >= 4, "seed: four nodes run work"
    assert idle, 'seed: one node is idle (the exporter exposes pod="" on its GPUs)'
    names = [*busy[:4], idle[0]]
    styles: dict[str, scrape.ScrapeStyle] = {
        names[0]: "operator",
        names[1]: "honor",
        names[2]: "plain",
        names[3]: "operator",
        names[4]: "honor",
    }
    pods = scrape.default_exporter_pods(sim.node_names)
    settings = ServerSettings(unmapped_nodes=frozenset({names[2], names[3]}))
    workload = {n: sim.node(n).gpus[0].pod for n in names[:2]}
    async with FleetServer(sim, settings=settings) as server:
        config = server.write_prometheus_config(
            tmp_path / "prom", scrape_interval="1s", styles=styles, exporter_pods=pods
        )
        with running_prometheus(prometheus, data=tmp_path / "data", config=config, port=free_port()) as url:

            async def series(node: str, gpu: int) -> dict[str, str]:
                deadline = time.monotonic() + 20
                while True:
                    found = await asyncio.to_thread(
                        instant_query, url, f'DCGM_FI_DEV_GPU_TEMP{{Hostname="{node}",gpu="{gpu}"}}'
                    )
                    if found:
                        return dict(found[0]["metric"])
                    assert time.monotonic() < deadline, f"{node} never scraped"
                    await asyncio.sleep(0.3)

            on_operator = workload[names[0]]
            labels = await series(names[0], 0)
            assert on_operator is not None
            assert labels["exported_pod"] == on_operator.name
            assert labels["exported_namespace"] == on_operator.namespace
            assert (labels["pod"], labels["namespace"]) == (pods[names[0]].name, "gpu-operator")
            assert labels["container"] == "nvidia-dcgm-exporter"
            assert labels["job"] == "nvidia-dcgm-exporter"
            assert (labels["service"], labels["endpoint"]) == ("nvidia-dcgm-exporter", "gpu-metrics")
            assert labels["instance"] == f"{pods[names[0]].ip}:9400"

            on_honor = workload[names[1]]
            assert on_honor is not None
            labels = await series(names[1], 0)
            assert labels["pod"] == on_honor.name, "honor_labels: the exposed workload wins"
            assert "exported_pod" not in labels
            labels = await series(names[4], 0)
            # Prometheus 2.x keeps the exposed empty value (lset.Has) and then drops it: neither label.
            # Versions that test the value instead fill in the exporter's pod; Sickbay's exporter rule
            # covers that case (tests/unit/test_signals.py).
            assert labels.get("pod") in (None, pods[names[4]].name), labels
            assert "exported_pod" not in labels

            labels = await series(names[2], 0)
            assert not {"pod", "namespace", "container", "exported_pod"} & set(labels), labels

            labels = await series(names[3], 0)
            assert labels["pod"] == pods[names[3]].name, "unmapped under the operator: pod is the exporter"
            assert "exported_pod" not in labels
            up = await asyncio.to_thread(instant_query, url, 'count(up{job=~".*dcgm.*"} == 1)')
            assert up[0]["value"][1] == "5", "the rule bundle's exporter selector matches every style"
