"""With the service down for 30 s, a burst of 100 agent events is delivered exactly once when it returns.

The real agent (fake NVML), the real service, real HTTP. The outage is 30 s of event-loop time, run
fast-forwarded with looptime: the agent's backoff sees the full 30 s, the test does not wait them.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from aiohttp import web

from app.agent.main import run_agent
from app.agent.settings import load_agent_settings
from app.config.settings import load_settings
from app.demo.processes import free_port as _free_port
from app.service.runtime import SERVICES, build_app
from tests.agent.fake_pynvml import FakeNvml

pytestmark = pytest.mark.slow
TOKEN = "outage-token"


def _agent_rows(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT fingerprint, status FROM inbox WHERE source = 'agent'").fetchall()


@pytest.mark.looptime
async def test_a_burst_during_a_30s_outage_arrives_exactly_once(tmp_path: Path) -> None:
    port = _free_port()
    nvml = FakeNvml(gpus=8)
    stop = asyncio.Event()
    agent = asyncio.create_task(
        run_agent(
            load_agent_settings(
                service_url=f"http://127.0.0.1:{port}",
                token=TOKEN,
                node_name="gpu-node-3",
                listen_host="127.0.0.1",
                listen_port=0,
                spool_dir=tmp_path / "spool",
                pod_resources_socket=tmp_path / "absent.sock",
                poll_interval_s=3600,
                event_wait_ms=20,
                backoff_max_s=8,
            ),
            nvml=nvml,
            stop=stop,
        )
    )
    runner: web.AppRunner | None = None
    try:
        while not any(event_set.masks for event_set in nvml.event_sets):
            await asyncio.sleep(0.05)
        for i in range(100):  # a burst while nothing listens on the service's port
            nvml.inject_xid(i % 8, (13, 31, 43, 48, 95)[i % 5])  # not 79: a lost GPU is reported once
        await asyncio.sleep(30)  # the outage, in event-loop time

        db = tmp_path / "sickbay.db"
        app = build_app(
            load_settings(
                auth={
                    "mode": "bearer",
                    "token": "webhook-token",
                    "agents": {"mode": "token", "token": TOKEN},
                },
                inbox={"path": db},
            )
        )
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        registry = app[SERVICES].metrics.registry
        for _ in range(600):
            # The handler counts an event just after its commit is visible: wait for both.
            if len(_agent_rows(db)) >= 100 and registry.get_sample_value(
                "sickbay_alerts_received_total", {"source": "agent"}
            ):
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(1)  # any late duplicate would arrive now
        rows = _agent_rows(db)
        assert len(rows) == 100, len(rows)
        assert len({fingerprint for fingerprint, _ in rows}) == 100, "no event stored twice"
        received = registry.get_sample_value("sickbay_alerts_received_total", {"source": "agent"})
        duplicates = registry.get_sample_value("sickbay_alerts_duplicate_total", {"source": "agent"})
        assert (received, duplicates) == (100, 0), "each event arrived once"
    finally:
        stop.set()
        assert await agent == 0
        if runner is not None:
            await runner.cleanup()
