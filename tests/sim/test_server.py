"""The fleet server: per-node exporters, kube-state-metrics, the control API and the time modes."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import yaml
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.sim.fleet.server import FleetServer, ServerSettings, build_app
from tests.sim.helpers import quiet_sim

Client = TestClient[Any, Any]


async def _client(aiohttp_client: Any, settings: ServerSettings | None = None, nodes: int = 3) -> Client:
    client: Client = await aiohttp_client(build_app(quiet_sim(nodes=nodes), settings))
    return client


async def test_each_node_has_its_own_metrics_path(aiohttp_client: Any) -> None:
    client = await _client(aiohttp_client)
    for node in ("gpu-node-000", "gpu-node-002"):
        response = await client.get(f"/nodes/{node}/metrics")
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await response.text()
        assert f'Hostname="{node}"' in text
        families = {f.name for f in text_string_to_metric_families(text)}
        assert "DCGM_FI_DEV_XID_ERRORS" in families
    assert (await client.get("/nodes/nope/metrics")).status == 404


async def test_hostname_switch_on_the_server(aiohttp_client: Any) -> None:
    client = await _client(aiohttp_client, ServerSettings(hostname_label="hostname"))
    text = await (await client.get("/nodes/gpu-node-000/metrics")).text()
    assert 'hostname="gpu-node-000"' in text
    assert "Hostname=" not in text


async def test_inject_advance_and_truth(aiohttp_client: Any) -> None:
    client = await _client(aiohttp_client)
    response = await client.post(
        "/inject", json={"node": "gpu-node-001", "gpu": 4, "mode": "thermal", "lead_time_s": 3600}
    )
    assert response.status == 200, await response.text()
    injected = await response.json()
    assert injected["mode"] == "thermal"
    assert injected["failure_time"].endswith("Z")
    truth = await (await client.get("/truth?pending=1")).json()
    assert truth["failures"] == []
    assert truth["pending"][0]["gpu"] == 4
    response = await client.post("/advance", json={"seconds": 3700})
    assert response.status == 200
    truth = await (await client.get("/truth")).json()
    (failure,) = truth["failures"]
    assert failure["xid"] == 79
    assert failure["node"] == "gpu-node-001"
    assert failure["fault_class"] == "reboot-node"
    text = await (await client.get("/nodes/gpu-node-001/metrics")).text()
    assert failure["uuid"] not in text, "XID 79: the GPU's series are gone"


async def test_exporter_restart_answers_503_until_it_is_back(aiohttp_client: Any) -> None:
    client = await _client(aiohttp_client)
    response = await client.post(
        "/inject", json={"node": "gpu-node-000", "mode": "exporter-restart", "duration_s": 30}
    )
    assert response.status == 200
    assert (await client.get("/nodes/gpu-node-000/metrics")).status == 503
    assert (await client.get("/nodes/gpu-node-001/metrics")).status == 200
    await client.post("/advance", json={"seconds": 60})
    assert (await client.get("/nodes/gpu-node-000/metrics")).status == 200


async def test_bad_requests_get_clear_400s(aiohttp_client: Any) -> None:
    client = await _client(aiohttp_client)
    for body in (
        {"node": "gpu-node-000", "gpu": 0, "mode": "nope"},
        {"node": "nope", "gpu": 0, "mode": "hbm"},
        {"gpu": 0, "mode": "hbm"},
        {"node": "gpu-node-000", "gpu": "zero", "mode": "hbm"},
        {"node": "gpu-node-000", "gpu": 0, "mode": "hbm", "lead_time_s": "soon"},
    ):
        response = await client.post("/inject", json=body)
        assert response.status == 400, body
        assert "error" in await response.json()
    assert (await client.post("/inject", data=b"not json")).status == 400
    assert (await client.post("/advance", json={"seconds": -1})).status == 400


async def test_kube_state_metrics_tracks_allocatable(aiohttp_client: Any) -> None:
    client = await _client(aiohttp_client)
    await client.post("/inject", json={"node": "gpu-node-002", "gpu": 1, "mode": "sudden-xid", "xid": 48})
    text = await (await client.get("/kube-state-metrics/metrics")).text()
    samples = {
        (s.name, s.labels["node"]): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }
    assert samples[("kube_node_status_capacity", "gpu-node-002")] == 8
    assert samples[("kube_node_status_allocatable", "gpu-node-002")] == 7
    assert samples[("kube_node_status_allocatable", "gpu-node-000")] == 8


async def test_drain_moves_jobs_and_uncordon_releases(aiohttp_client: Any) -> None:
    sim = quiet_sim(nodes=4)
    busy = next(n.name for n in sim.nodes if any(g.pod for g in n.gpus))
    client: Client = await aiohttp_client(build_app(sim))
    before = await (await client.get(f"/nodes/{busy}/metrics")).text()
    assert re.search(r'pod="[^"]+"', before)
    response = await client.post("/drain", json={"node": busy})
    assert response.status == 200
    assert (await response.json())["interrupted"]
    nodes = {n["node"]: n for n in await (await client.get("/nodes")).json()}
    assert not nodes[busy]["schedulable"]
    await client.post("/advance", json={"seconds": 600})
    text = await (await client.get(f"/nodes/{busy}/metrics")).text()
    assert not re.search(r'pod="[^"]+"', text), "a drained node gets no new work"
    truth = await (await client.get("/truth")).json()
    assert any(i["cause"] == "drain" for i in truth["interruptions"])
    await client.post("/uncordon", json={"node": busy})
    nodes = {n["node"]: n for n in await (await client.get("/nodes")).json()}
    assert nodes[busy]["schedulable"]


async def test_targets_and_healthz(aiohttp_client: Any) -> None:
    client = await _client(aiohttp_client)
    assert (await client.get("/healthz")).status == 200
    groups = await (await client.get("/targets")).json()
    paths = [g["labels"]["__metrics_path__"] for g in groups]
    assert paths[:3] == [f"/nodes/gpu-node-00{i}/metrics" for i in range(3)]
    assert paths[-1] == "/kube-state-metrics/metrics"
    assert len({g["labels"]["instance"] for g in groups}) == len(groups)


async def test_realtime_mode_steps_on_its_own_with_speed_up(aiohttp_client: Any) -> None:
    sim = quiet_sim(nodes=1)
    start = sim.time_s
    settings = ServerSettings(time_mode="realtime", tick_s=0.02, speed=600.0)
    client: Client = await aiohttp_client(build_app(sim, settings))
    await asyncio.sleep(0.3)
    assert sim.time_s - start > 60, "600x speed: 0.3 s of real time is minutes of simulated time"
    assert (await client.post("/advance", json={"seconds": 10})).status == 409


async def test_fleet_server_writes_a_prometheus_config(tmp_path: Path) -> None:
    async with FleetServer(quiet_sim(nodes=2)) as server:
        assert server.port != 0
        path = server.write_prometheus_config(tmp_path, node_label=True)
        config = yaml.safe_load(path.read_text())
        jobs = [job["job_name"] for job in config["scrape_configs"]]
        assert jobs == ["dcgm-exporter", "kube-state-metrics"]
        groups = json.loads((tmp_path / "dcgm-exporter-targets.json").read_text())
        assert groups[1]["targets"] == [server.address]
        assert groups[1]["labels"] == {
            "__metrics_path__": "/nodes/gpu-node-001/metrics",
            "instance": "gpu-node-001:9400",
            "node": "gpu-node-001",
        }
