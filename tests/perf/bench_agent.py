"""The NVML agent's cost per polling cycle (8 GPUs, fake binding) and its event-to-service latency.

Cost: CPU time and resident memory of `poll_once` plus a `/metrics` render, per cycle, over many cycles;
baseline in the same run: the same number of bare NVML calls the cycle makes, without the agent's code
around them, so the ratio shows the agent's own overhead on top of NVML.

Latency: an XID injected into the fake NVML event set → the agent's push accepted by a receiving aiohttp
server on loopback (arrival time recorded there), p50/p99 over 200 events.

    python -m tests.perf agent
"""

from __future__ import annotations

import asyncio
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from rich.table import Table

from app.agent.agent import Agent
from app.agent.settings import load_agent_settings
from tests.agent.fake_pynvml import FakeNvml, make_gpu

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "out" / "bench" / "agent.json"
GPUS = 8
CYCLES = 300
EVENTS = 200


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _bare_calls(nvml: FakeNvml) -> None:
    """What a cycle asks NVML for, without the agent: the floor any collector pays."""
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        nvml.nvmlDeviceGetTemperature(handle, 0)
        nvml.nvmlDeviceGetPowerUsage(handle)
        for error_type in (0, 1):
            for counter in (0, 1):
                nvml.nvmlDeviceGetTotalEccErrors(handle, error_type, counter)
        nvml.nvmlDeviceGetRemappedRows(handle)
        nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
        nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        nvml.nvmlDeviceGetPcieReplayCounter(handle)
        for link in range(18):
            nvml.nvmlDeviceGetNvLinkState(handle, link)
            for counter in range(4):
                nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter)


def _h100s() -> FakeNvml:
    """Eight GPUs with 18 active NVLinks each, as on an H100 HGX board."""
    return FakeNvml(gpus=[make_gpu(i, nvlink={link: {} for link in range(18)}) for i in range(GPUS)])


async def measure_poll(tmp: Path) -> dict[str, float]:
    nvml = _h100s()
    agent = Agent(_settings(tmp, "http://127.0.0.1:9"), nvml)
    await agent.start()
    try:
        await agent.poll_once()
        rss_before = _rss_mib()
        cpu0, wall0 = _cpu(), time.perf_counter()
        for _ in range(CYCLES):
            await agent.poll_once()
            agent.render_gpu_metrics()
        cpu_cycle = (_cpu() - cpu0) / CYCLES
        wall_cycle = (time.perf_counter() - wall0) / CYCLES
        cpu1 = _cpu()
        for _ in range(CYCLES):
            _bare_calls(nvml)
        bare = (_cpu() - cpu1) / CYCLES
        return {
            "cpu_ms_per_cycle": cpu_cycle * 1000,
            "wall_ms_per_cycle": wall_cycle * 1000,
            "bare_nvml_ms_per_cycle": bare * 1000,
            "rss_mib": _rss_mib(),
            "rss_growth_mib": _rss_mib() - rss_before,
            "metrics_bytes": len(agent.render_gpu_metrics()),
        }
    finally:
        await agent.stop()


async def measure_latency(tmp: Path) -> dict[str, float]:
    arrivals: dict[int, float] = {}

    async def receive(request: web.Request) -> web.Response:
        body = await request.json()
        now = time.perf_counter()
        for event in body["events"]:
            arrivals.setdefault(int(event["xid"]), now)
        return web.json_response({"accepted": len(body["events"]), "duplicates": 0})

    app = web.Application()
    app.router.add_post("/api/v1/gpu-events", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    nvml = _h100s()
    agent = Agent(_settings(tmp, f"http://127.0.0.1:{port}"), nvml)
    await agent.start()
    try:
        while not any(s.masks for s in nvml.event_sets):
            await asyncio.sleep(0.01)
        latencies = []
        for i in range(EVENTS):
            xid = 1000 + i  # a distinct value per event to match arrivals
            sent = time.perf_counter()
            nvml.inject_xid(i % GPUS, xid)
            while xid not in arrivals:
                await asyncio.sleep(0.0005)
            latencies.append(arrivals[xid] - sent)
        latencies.sort()
        return {
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1000,
            "max_ms": latencies[-1] * 1000,
        }
    finally:
        await agent.stop()
        await runner.cleanup()


def _settings(tmp: Path, url: str) -> Any:
    return load_agent_settings(
        service_url=url,
        node_name="bench-node",
        listen_host="127.0.0.1",
        listen_port=0,
        spool_dir=tmp / "spool",
        pod_resources_socket=tmp / "absent.sock",
        poll_interval_s=3600,
        event_wait_ms=50,
    )


async def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        return {"poll": await measure_poll(Path(a)), "latency": await measure_latency(Path(b))}


def main() -> Table:
    results = asyncio.run(run())
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2))
    poll, lat = results["poll"], results["latency"]
    table = Table(title=f"NVML agent, {GPUS} GPUs, fake binding")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("baseline (same run)", justify="right")
    ratio = poll["cpu_ms_per_cycle"] / max(poll["bare_nvml_ms_per_cycle"], 1e-9)
    table.add_row(
        "CPU per polling cycle (read + render)",
        f"{poll['cpu_ms_per_cycle']:.2f} ms",
        f"bare NVML calls {poll['bare_nvml_ms_per_cycle']:.2f} ms ({ratio:.1f}x)",
    )
    table.add_row(
        "resident memory (peak)",
        f"{poll['rss_mib']:.0f} MiB",
        f"growth over {CYCLES} cycles {poll['rss_growth_mib']:.1f} MiB",
    )
    table.add_row("/metrics size", f"{poll['metrics_bytes'] / 1024:.0f} KiB", "")
    table.add_row("XID event → service, p50", f"{lat['p50_ms']:.1f} ms", "")
    table.add_row("XID event → service, p99", f"{lat['p99_ms']:.1f} ms", f"max {lat['max_ms']:.1f} ms")
    return table


if __name__ == "__main__":
    from rich.console import Console

    Console().print(main())
