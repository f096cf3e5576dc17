"""The rule bundle works unchanged on the agent's metrics: a real Prometheus scrapes the agent (fake NVML)
and evaluates `rules/prometheus/sickbay-rules.yaml`; the expected alerts fire with the node label."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.agent.agent import Agent
from app.agent.settings import load_agent_settings
from app.demo.processes import free_port as _free_port
from tests.agent.fake_pynvml import FakeNvml, make_gpu

RULES = Path(__file__).resolve().parents[2] / "rules" / "prometheus" / "sickbay-rules.yaml"
PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        PROMETHEUS is None, reason="Debian's prometheus is not installed (make test installs it)"
    ),
]


def _firing(port: int) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5) as response:
        alerts = json.loads(response.read())["data"]["alerts"]
    return [a for a in alerts if a["state"] == "firing"]


async def test_bundle_fires_on_the_agents_series(tmp_path: Path) -> None:
    nvml = FakeNvml(gpus=[make_gpu(0), make_gpu(1, remapped_rows=(3, 1, 0, 1)), make_gpu(2)])
    agent = Agent(
        load_agent_settings(
            service_url="http://127.0.0.1:9",
            node_name="gpu-node-7",
            listen_host="127.0.0.1",
            listen_port=0,
            spool_dir=tmp_path / "spool",
            pod_resources_socket=tmp_path / "absent.sock",
            poll_interval_s=0.5,
            event_wait_ms=50,
        ),
        nvml,
    )
    await agent.start()
    prom_port = _free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": "dcgm-exporter", "static_configs": [{"targets": [f"127.0.0.1:{agent.port}"]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("w"),
    )
    try:
        while not any(event_set.masks for event_set in nvml.event_sets):
            await asyncio.sleep(0.05)
        nvml.inject_xid(0, 79)
        wanted = {("GpuFellOffBus", "0"), ("GpuRowRemapFailure", "1")}
        deadline = time.monotonic() + 45
        seen: set[tuple[str, str]] = set()
        firing: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not wanted <= seen:
            await asyncio.sleep(0.5)
            try:
                firing = await asyncio.to_thread(_firing, prom_port)
            except OSError:
                continue
            seen = {(a["labels"]["alertname"], a["labels"].get("gpu", "")) for a in firing}
        assert wanted <= seen, (seen, (tmp_path / "prometheus.log").read_text()[-2000:])
        by_name = {a["labels"]["alertname"]: a["labels"] for a in firing}
        assert by_name["GpuFellOffBus"]["node"] == "gpu-node-7"
        assert by_name["GpuFellOffBus"]["sickbay_class"] == "reboot-node"
        assert by_name["GpuFellOffBus"]["xid"] == "79"
        assert by_name["GpuRowRemapFailure"]["sickbay_class"] == "replace"
        assert not any(gpu == "2" for _, gpu in seen), "the healthy GPU raises nothing"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        await agent.stop()
