"""Builds the aiohttp application and wires every part; owns start-up and shutdown order.

Composition only: handlers, the inbox writer and the pipeline consumer are created here and handed to
each other. Background work runs as named tasks inside a `cleanup_ctx`, so shutdown cancels and awaits
them. Reads no argv or environment (that is `cli`'s job).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.classify import signals as classify
from app.config import rules
from app.config.settings import Settings
from app.ingest import handlers, signals
from app.obs.metrics import Metrics, create_metrics
from app.pipeline import Pipeline
from app.store import inbox, journal

log = logging.getLogger(__name__)


@dataclass
class Services:
    """The live parts of a running service, reachable from handlers and tests."""

    settings: Settings
    metrics: Metrics
    rules: classify.Rules
    inbox: inbox.Inbox | None = None
    journal: journal.Journal | None = None
    pipeline: Pipeline | None = None
    ready: bool = False


SERVICES = web.AppKey("services", Services)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def load_rules(settings: Settings) -> classify.Rules:
    return classify.Rules(
        catalog=rules.load_catalog(settings.xid_catalog_file),
        policy=rules.load_policy(settings.policy_file),
    )


def build_app(settings: Settings, *, metrics: Metrics | None = None) -> web.Application:
    services = Services(settings=settings, metrics=metrics or create_metrics(), rules=load_rules(settings))
    # Our own size check streams the body and answers 413 with JSON; aiohttp's limit must not pre-empt it.
    app = web.Application(client_max_size=settings.max_body_bytes * 2, middlewares=[_observe])
    app[SERVICES] = services
    app.cleanup_ctx.append(_storage_and_pipeline)
    app.router.add_post("/api/v1/alerts", _alerts)
    app.router.add_post("/api/v1/gpu-events", _gpu_events)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/api/v1/actions", _actions)
    return app


async def _storage_and_pipeline(app: web.Application) -> AsyncIterator[None]:
    services = app[SERVICES]
    settings = services.settings
    path = Path(settings.inbox.path)
    box = await inbox.Inbox.open(
        path,
        max_batch_rows=settings.inbox.max_batch_rows,
        on_commit=services.metrics.commit_requests.observe,
    )
    journal_db = await inbox.connect(path)
    book = await journal.Journal.open(journal_db)
    pipeline = Pipeline(
        inbox_=box,
        journal_=book,
        rules=services.rules,
        settings=settings.pipeline,
        node_keys=signals.NodeKeys(settings.node_label_keys),
        metrics=services.metrics,
    )
    services.inbox, services.journal, services.pipeline = box, book, pipeline
    consumer = asyncio.create_task(_guarded(pipeline.run, "pipeline"), name="pipeline-consumer")
    services.ready = True
    log.info("sickbay ready: inbox %s, %d pending rows to resume", path, await box.depth())
    try:
        yield
    finally:
        services.ready = False
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
        await box.close()
        await journal_db.close()


async def _guarded(run: Callable[[], Awaitable[None]], name: str) -> None:
    """Keep a background loop alive: an unexpected error is logged loudly and the loop restarts."""
    delay = 1.0
    while True:
        try:
            await run()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("background task %s crashed; restarting in %.0fs", name, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 60.0)


def _intake(request: web.Request) -> handlers.Intake:
    services = request.app[SERVICES]
    if services.inbox is None:
        raise web.HTTPServiceUnavailable(text='{"error":"starting"}', content_type="application/json")
    return handlers.Intake(settings=services.settings, inbox=services.inbox, metrics=services.metrics)


async def _alerts(request: web.Request) -> web.StreamResponse:
    return await handlers.handle_alerts(request, _intake(request))


async def _gpu_events(request: web.Request) -> web.StreamResponse:
    return await handlers.handle_gpu_events(request, _intake(request))


async def _healthz(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    if not services.ready:
        return web.json_response({"status": "starting"}, status=503)
    return web.json_response({"status": "ready"})


async def _metrics(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    if services.inbox is not None:
        services.metrics.inbox_depth.set(await services.inbox.depth())
    body = generate_latest(services.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _actions(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    if services.journal is None:
        return web.json_response({"error": "starting"}, status=503)
    try:
        limit = min(max(int(request.query.get("limit", "100")), 1), 1000)
    except ValueError:
        return web.json_response({"error": "bad_query", "message": "limit must be an integer"}, status=400)
    entries = await services.journal.entries(limit=limit, node=request.query.get("node") or None)
    return web.json_response(
        {
            "items": [
                {
                    "id": e.id,
                    "at": e.at,
                    "node": e.node,
                    "gpu": e.gpu,
                    "xid": e.xid,
                    "class": e.fault_class,
                    "rule": e.rule,
                    "status": e.status,
                    "source": e.source,
                    "reason": e.reason,
                    "plan": e.plan,
                }
                for e in entries
            ]
        }
    )


@web.middleware
async def _observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    code = 500
    try:
        response = await handler(request)
        code = response.status
        return response
    except web.HTTPException as exc:
        code = exc.status
        raise
    finally:
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "unmatched"
        request.app[SERVICES].metrics.request_seconds.labels(
            route=name, method=request.method, code=str(code)
        ).observe(time.perf_counter() - started)
