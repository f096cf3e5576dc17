"""The HTTP surface: routes, their handlers and the request-metrics middleware.

Handlers are thin: each finds the part it needs in `Services` (503 while it is starting) and hands the
request to `app.ingest.handlers` (the intake), `app.service.api` (the JSON API) or `app.service.status` (the page).
Writes that change the service's behaviour (breaker reset, model validation and shadow) need an operator's
credentials (`app.ingest.callers`); the read routes need a reader's only when `auth.reads.required`.
/healthz, /readyz and /metrics stay open for probes and scrapes.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.decide import footprint
from app.ingest import callers, handlers
from app.kube import errors as kube_errors
from app.service import api, status
from app.service.runtime import fallback, reads
from app.service.runtime.services import SERVICES, Services
from app.store import deadletter
from app.store.journal import Journal

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_STATUS_ROWS = 20  # refused and unattributed alerts listed on the status page


def add_routes(app: web.Application) -> None:
    # aiohttp's own Expect handler raises on a header that is not UTF-8 (a 500): see `fallback`.
    app.router.add_post("/api/v1/alerts", _alerts, expect_handler=fallback.expect)
    app.router.add_post("/api/v1/gpu-events", _gpu_events, expect_handler=fallback.expect)
    app.router.add_get("/api/v1/actions", _read(_actions), expect_handler=fallback.expect)
    app.router.add_get("/api/v1/rejected", _read(_rejected), expect_handler=fallback.expect)
    app.router.add_get("/api/v1/nodes", _read(_nodes), expect_handler=fallback.expect)
    app.router.add_get("/api/v1/nodes/{name}", _read(_node), expect_handler=fallback.expect)
    app.router.add_get("/api/v1/breaker", _read(_breaker), expect_handler=fallback.expect)
    app.router.add_post(
        "/api/v1/breaker/reset", _write(_breaker_reset, resource="breakers"), expect_handler=fallback.expect
    )
    app.router.add_get("/api/v1/model", _read(_model), expect_handler=fallback.expect)
    app.router.add_post(
        "/api/v1/model/validate", _write(_model_validate, resource="models"), expect_handler=fallback.expect
    )
    app.router.add_post(
        "/api/v1/model/shadow", _write(_model_shadow, resource="models"), expect_handler=fallback.expect
    )
    app.router.add_get("/", _read(_status_page), expect_handler=fallback.expect)
    app.router.add_get("/healthz", _healthz, expect_handler=fallback.expect)
    app.router.add_get("/readyz", _readyz, expect_handler=fallback.expect)
    app.router.add_get("/metrics", _metrics, expect_handler=fallback.expect)


def _intake(request: web.Request) -> handlers.Intake:
    services = request.app[SERVICES]
    if services.inbox is None or services.dead_letters is None:
        raise web.HTTPServiceUnavailable(text='{"error":"starting"}', content_type="application/json")
    return handlers.Intake(
        settings=services.settings,
        inbox=services.inbox,
        dead_letters=services.dead_letters,
        metrics=services.metrics,
        callers=services.callers,
        accepting=lambda: services.leader,
        clock=services.clock,
    )


def _refusal(refused: callers.Refused) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="sickbay"'} if refused.status == 401 else None
    return web.json_response(
        {"error": refused.reason, "message": refused.message}, status=refused.status, headers=headers
    )


def _write(handler: Handler, *, resource: str) -> Handler:
    """`handler` for operators allowed `update` on `resource` only (see `app.ingest.callers`)."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            await request.app[SERVICES].callers.operator(
                request.headers.get("Authorization"), resource=resource
            )
        except callers.Refused as refused:
            return _refusal(refused)
        return await handler(request)

    return guarded


def _read(handler: Handler) -> Handler:
    """`handler` open to all, or to readers only when `auth.reads.required`; paced (`reads.pace`)."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            await request.app[SERVICES].callers.reader(request.headers.get("Authorization"))
        except callers.Refused as refused:
            return _refusal(refused)
        if (busy := await reads.pace(request)) is not None:
            return busy
        return await handler(request)

    return guarded


async def _alerts(request: web.Request) -> web.StreamResponse:
    return await handlers.handle_alerts(request, _intake(request))


async def _gpu_events(request: web.Request) -> web.StreamResponse:
    return await handlers.handle_gpu_events(request, _intake(request))


def _journal(request: web.Request) -> Journal:
    journal = request.app[SERVICES].journal
    if journal is None:
        raise web.HTTPServiceUnavailable(text='{"error":"starting"}', content_type="application/json")
    return journal


async def _actions(request: web.Request) -> web.StreamResponse:
    return await api.actions(request, _journal(request))


async def _rejected(request: web.Request) -> web.StreamResponse:
    letters = request.app[SERVICES].dead_letters
    if letters is None:
        raise web.HTTPServiceUnavailable(text='{"error":"starting"}', content_type="application/json")
    return await api.rejected(request, letters)


async def _nodes(request: web.Request) -> web.StreamResponse:
    async def answer(request: web.Request) -> web.StreamResponse:
        return await api.nodes(request, request.app[SERVICES].reads)

    return await reads.answer(request, "/api/v1/nodes", answer)


async def _node(request: web.Request) -> web.StreamResponse:
    async def answer(request: web.Request) -> web.StreamResponse:
        return await api.node(request, request.app[SERVICES].reads, _journal(request))

    return await reads.answer(request, f"/api/v1/nodes/{request.match_info['name']}", answer)


async def _breaker(request: web.Request) -> web.StreamResponse:
    return await api.breaker(request, request.app[SERVICES].gates)


async def _breaker_reset(request: web.Request) -> web.StreamResponse:
    return await api.breaker_reset(request, request.app[SERVICES].gates)


async def _model(request: web.Request) -> web.StreamResponse:
    return await api.model(request, request.app[SERVICES].shadow)


async def _model_validate(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    job = services.validation

    async def backtest() -> tuple[dict[str, object] | None, str] | None:
        assert job is not None
        ran = await job.run_once(requested=True)
        return None if ran is None else (ran.figures, ran.problem)

    return await api.model_validate(request, services.shadow, backtest if job is not None else None)


async def _model_shadow(request: web.Request) -> web.StreamResponse:
    return await api.model_shadow(request, request.app[SERVICES].shadow)


async def _status_page(request: web.Request) -> web.StreamResponse:
    return await reads.answer(request, "/", _render_status_page)


async def _render_status_page(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    journal = _journal(request)
    nodes = None
    if services.reads is not None:
        try:
            nodes = await services.reads.list_nodes(label_selector=footprint.STATE)
        except kube_errors.TooManyRequestsError:
            pass  # the read budget is spent (a flood of readers): the page says nodes are unavailable
        except kube_errors.KubeError as exc:
            log.warning("status page: cannot list nodes: %s", exc)
    html = status.render(
        identity=services.settings.identity,
        leader=services.leader,
        dry_run=services.settings.dry_run,
        paused=services.settings.pause,
        now=services.clock(),
        nodes=nodes,
        entries=await journal.entries(limit=50),
        outcomes=await journal.outcomes(limit=300),
        gates=services.gates,
        intake=await _intake_problems(services),
        shadow=await _shadow_view(services),
        audit=None if services.audits is None else services.audits.last,
    )
    return web.Response(text=html, content_type="text/html")


async def _shadow_view(services: Services) -> dict[str, object] | None:
    if services.shadow is None:
        return None
    try:
        return api.model_view(services.shadow, await services.shadow.history(limit=_STATUS_ROWS))
    except sqlite3.Error as exc:
        log.warning("status page: cannot read the validation log: %s", exc)
        return api.model_view(services.shadow, [])


async def _intake_problems(services: Services) -> status.IntakeProblems | None:
    """What the status page shows of refused and unattributed alerts; None (said so) if unreadable."""
    if services.inbox is None or services.dead_letters is None:
        return None
    try:
        unattributed, newest = await services.inbox.unattributed(limit=_STATUS_ROWS)
        return status.IntakeProblems(
            rejected_total=await services.dead_letters.count(),
            rejected=tuple(await services.dead_letters.recent(limit=_STATUS_ROWS)),
            unattributed_total=unattributed,
            unattributed=tuple(newest),
        )
    except (deadletter.DeadLetterError, sqlite3.Error, ValueError) as exc:
        log.warning("status page: cannot read refused or unattributed alerts: %s", exc)
        return None


async def _healthz(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    if not services.ready:
        return web.json_response({"status": "starting"}, status=503)
    return web.json_response({"status": "ready", "leader": services.leader})


async def _metrics(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    if services.inbox is not None:
        services.metrics.inbox_depth.set(await services.inbox.depth())
    body = generate_latest(services.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


@web.middleware
async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
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
