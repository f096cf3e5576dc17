"""Builds the aiohttp application and wires every part; owns start-up and shutdown order.

Composition only: the inbox, journal, Kubernetes client, actuators, pipeline and reconciler are created
here and handed to each other. Periodic background work runs as jobs on the one scheduler
(`app.service.schedule`), the inbox consumer as a guarded task; both inside a `cleanup_ctx`, so shutdown cancels
and awaits them. Only the leader consumes the inbox and reconciles; every replica
serves health and metrics. Reads no argv or environment (that is `cli`'s job).

Modules: `services` (the container of live parts), `wiring` (scheduler, storage, cluster and actuators),
`leadership` (the leader's loop and jobs), `prediction` (scoring, validation and retraining, started in
the background), `routes` (the HTTP handlers), `reads` (the read routes' cached, budgeted view of the
cluster), `surface` (JSON-only POSTs, security headers), `listener` (TLS, timeouts, the refusal of
unauthenticated public binds; what `sickbay serve` runs). `build_app`, `load_rules`, `Services` and `SERVICES` are
what the command line and the tests use.
"""

from __future__ import annotations

from aiohttp import web

from app.config.settings import Settings
from app.ingest import callers
from app.kube import port
from app.obs import logs
from app.obs.metrics import Metrics, create_metrics
from app.service.runtime import fallback, leadership, prediction, routes, surface, wiring
from app.service.runtime.services import SERVICES, Clock, Services, load_rules, utc_now

__all__ = ["SERVICES", "Services", "build_app", "load_rules", "utc_now"]


def build_app(
    settings: Settings,
    *,
    metrics: Metrics | None = None,
    kube: port.KubePort | None = None,
    reviews: port.ReviewPort | None = None,
    clock: Clock = utc_now,
) -> web.Application:
    """The whole service. `kube` overrides the client built from `settings.kube` (tests pass their own), and
    `reviews` the one that verifies callers' Kubernetes tokens (by default `kube`, when it is the real client)."""
    services = Services(
        settings=settings,
        metrics=metrics or create_metrics(),
        rules=load_rules(settings),
        callers=callers.Callers(settings.auth, reviewer=None),
        clock=clock,
        kube=kube,
        reviews=reviews,
    )
    # Our own size check streams the body and answers 413 with JSON; aiohttp's limit must not pre-empt it.
    app = web.Application(
        client_max_size=settings.max_body_bytes * 2,
        middlewares=[routes.observe, surface.security_headers, surface.require_json_posts],
    )
    app[SERVICES] = services
    # A request aiohttp's parser refuses never reaches a handler: its log line is tamed here.
    logs.refuse_quietly(settings.log)
    app.cleanup_ctx.append(wiring.run_scheduler)
    app.cleanup_ctx.append(wiring.open_storage)
    app.cleanup_ctx.append(wiring.connect_cluster)
    app.cleanup_ctx.append(wiring.run_audits)
    app.cleanup_ctx.append(leadership.lead_when_elected)
    app.cleanup_ctx.append(prediction.start_prediction_in_background)
    routes.add_routes(app)
    fallback.add_fallback(app)  # last: it matches whatever no route above did
    return app
