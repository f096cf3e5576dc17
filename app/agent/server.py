"""The agent's HTTP surface: `GET /metrics` (dcgm-exporter series, then the agent's own) and `GET /healthz`.

Composed, not subclassed; the handlers read a render callback and a registry handed in, so they hold no
state and never call NVML on a scrape (readings come from the last poll).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from app.agent.exposition import CONTENT_TYPE


def build_app(*, render_gpu_metrics: Callable[[], str], registry: CollectorRegistry) -> web.Application:
    async def metrics(_request: web.Request) -> web.Response:
        body = render_gpu_metrics().encode() + generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app
