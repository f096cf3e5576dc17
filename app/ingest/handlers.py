"""aiohttp handlers for `POST /api/v1/alerts` and `POST /api/v1/gpu-events`.

The contract with senders: 2xx only after every alert of the request is committed to the inbox; any
bad input gets a 4xx with a JSON body naming the problem and changes nothing; 503 (retry) when this
replica cannot take writes (not the leader, inbox closing). Never a 5xx for bad input.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from aiohttp import web

from app.config.settings import Settings
from app.ingest import auth, bodies, payloads, signals
from app.obs.metrics import Metrics
from app.store import inbox

log = logging.getLogger(__name__)

Source = Literal["alertmanager", "agent"]


@dataclass(frozen=True)
class Intake:
    """Everything the intake handlers need; built once by the runtime."""

    settings: Settings
    inbox: inbox.Inbox
    metrics: Metrics
    # Whether this replica may accept writes (the leader); followers answer 503 so senders retry.
    accepting: Callable[[], bool] = lambda: True
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    @property
    def node_keys(self) -> signals.NodeKeys:
        return signals.NodeKeys.of(self.settings)


def error_response(rejection: bodies.Rejection) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="sickbay"'} if rejection.status == 401 else None
    return web.json_response(rejection.body(), status=rejection.status, headers=headers)


async def _admit(request: web.Request, intake: Intake) -> bytes:
    verdict = auth.check(request.headers.get("Authorization"), intake.settings.auth)
    if not verdict.ok:
        raise bodies.Rejection(401, "unauthorized", verdict.problem)
    if not intake.accepting():
        raise bodies.Rejection(503, "not_leader", "this replica is not the leader; retry")
    ctype = request.content_type
    if ctype not in ("application/json", "application/octet-stream", "text/plain", ""):
        raise bodies.Rejection(415, "unsupported_media_type", f"expected application/json, got {ctype}")
    return await bodies.read_limited(request, limit=intake.settings.max_body_bytes)


def _alert_records(
    payload: payloads.AlertmanagerPayload, *, intake: Intake, received_at: datetime
) -> list[inbox.Record]:
    # The hot path: validate what must be refused now, store the alert; the pipeline builds the Signal.
    records = []
    keys = intake.node_keys
    received = received_at.isoformat()
    for index, alert in enumerate(payload.alerts):
        try:
            node = signals.admit_alert(alert, keys=keys, where=f"alerts.{index}")
        except signals.SignalError as exc:
            raise bodies.Rejection(
                422, "invalid_alert", str(exc), [{"loc": exc.where, "msg": exc.message}]
            ) from None
        records.append(
            inbox.Record(
                source="alertmanager",
                fingerprint=alert.fingerprint,
                starts_at=signals.utc(alert.starts_at).isoformat(),
                status=alert.status,
                node=node,
                payload=alert.model_dump_json(by_alias=True),
                received_at=received,
            )
        )
    return records


def _event_records(payload: payloads.GpuEventsPayload, *, received_at: datetime) -> list[inbox.Record]:
    records = []
    for index, event in enumerate(payload.events):
        try:
            signal = signals.from_gpu_event(event, received_at=received_at, where=f"events.{index}")
        except signals.SignalError as exc:
            raise bodies.Rejection(
                422, "invalid_event", str(exc), [{"loc": exc.where, "msg": exc.message}]
            ) from None
        records.append(inbox.record_of(signal, payload=event.model_dump_json()))
    return records


async def _store(intake: Intake, records: Sequence[inbox.Record], *, source: Source) -> web.Response:
    try:
        result = await intake.inbox.append(records)
    except inbox.InboxClosedError as exc:
        intake.metrics.rejected.labels(source=source, reason="unavailable").inc()
        return error_response(bodies.Rejection(503, "unavailable", f"{exc}; retry"))
    intake.metrics.received.labels(source=source).inc(result.stored)
    intake.metrics.duplicates.labels(source=source).inc(result.duplicates)
    return web.json_response({"accepted": result.stored, "duplicates": result.duplicates})


async def handle_alerts(request: web.Request, intake: Intake) -> web.Response:
    received_at = intake.clock()
    try:
        raw = await _admit(request, intake)
        payload = bodies.decode(raw, payloads.AlertmanagerPayload)
        records = _alert_records(payload, intake=intake, received_at=received_at)
    except bodies.Rejection as rejection:
        intake.metrics.rejected.labels(source="alertmanager", reason=rejection.reason).inc()
        return error_response(rejection)
    if payload.truncated_alerts:
        log.warning(
            "Alertmanager truncated %d alerts from group %s; raise max_alerts on the receiver",
            payload.truncated_alerts,
            payload.group_key,
        )
    return await _store(intake, records, source="alertmanager")


async def handle_gpu_events(request: web.Request, intake: Intake) -> web.Response:
    received_at = intake.clock()
    try:
        raw = await _admit(request, intake)
        payload = bodies.decode(raw, payloads.GpuEventsPayload)
        records = _event_records(payload, received_at=received_at)
    except bodies.Rejection as rejection:
        intake.metrics.rejected.labels(source="agent", reason=rejection.reason).inc()
        return error_response(rejection)
    return await _store(intake, records, source="agent")
