"""aiohttp handlers for `POST /api/v1/alerts` and `POST /api/v1/gpu-events`.

The contract with senders: 200 only after every valid alert of the request is committed to the inbox
and every invalid one is kept in the dead-letter list, answering `{"accepted", "duplicates",
"rejected"}`. A 4xx, with a JSON body naming the problem, only for a body that is invalid as a whole
(not JSON, wrong version, no alerts list, every alert invalid): Alertmanager never retries a 4xx, so
one bad alert must not cost the group's good ones. 503 (retry) when this replica cannot take writes
(not the leader, inbox or dead-letter list unavailable). Never a 5xx for bad input.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from aiohttp import web

from app.config.settings import Settings
from app.ingest import admission, bodies, callers, payloads, signals
from app.obs.metrics import Metrics
from app.store import deadletter, inbox

log = logging.getLogger(__name__)
_MAX_DETAILS = 20  # refusals named in one answer; the dead-letter list keeps them all

Source = Literal["alertmanager", "agent"]


@dataclass(frozen=True)
class Intake:
    """Everything the intake handlers need; built once by the runtime."""

    settings: Settings
    inbox: inbox.Inbox
    dead_letters: deadletter.DeadLetters
    metrics: Metrics
    # Who may post what (`app.ingest.callers`): one per service, so its verdict cache outlives requests.
    callers: callers.Callers
    # Whether this replica may accept writes (the leader); followers answer 503 so senders retry.
    accepting: Callable[[], bool] = lambda: True
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    @property
    def node_keys(self) -> signals.NodeKeys:
        return signals.NodeKeys.of(self.settings)


def error_response(rejection: bodies.Rejection) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="sickbay"'} if rejection.status == 401 else None
    return web.json_response(rejection.body(), status=rejection.status, headers=headers)


def refusal(refused: callers.Refused) -> bodies.Rejection:
    return bodies.Rejection(refused.status, refused.reason, refused.message)


async def _admit(request: web.Request, intake: Intake) -> bytes:
    if not intake.accepting():
        raise bodies.Rejection(503, "not_leader", "this replica is not the leader; retry")
    ctype = request.content_type
    if ctype not in ("application/json", "application/octet-stream", "text/plain", ""):
        raise bodies.Rejection(415, "unsupported_media_type", f"expected application/json, got {ctype}")
    return await bodies.read_limited(request, limit=intake.settings.max_body_bytes)


def _details(refusals: Sequence[admission.Refusal]) -> list[dict[str, str]]:
    return [{"loc": r.where, "reason": r.reason.value, "msg": r.message} for r in refusals[:_MAX_DETAILS]]


async def _keep(intake: Intake, admitted: admission.Sorted, *, source: Source, noun: str) -> bool:
    """Count, log and dead-letter the refused items; False when the list cannot be written."""
    refusals = admitted.refusals
    for refusal in refusals:
        intake.metrics.rejected.labels(source=source, reason=refusal.reason.value).inc()
    first = refusals[0]
    # One line per request, not per item (a body may hold thousands); values are repr'd, never raw.
    log.warning(
        "refused %d of %d %s (kept in GET /api/v1/rejected); first at %r (%s): %r",
        len(refusals),
        admitted.total,
        noun,
        first.where,
        first.reason.value,
        first.message,
    )
    letters = [
        deadletter.Letter(source=source, reason=r.reason.value, where=r.where, message=r.message, item=r.item)
        for r in refusals
    ]
    try:
        await intake.dead_letters.keep(letters, seen_at=intake.clock())
    except deadletter.DeadLetterError:
        log.exception(
            "could not keep %d refused %s; answering 503 so they are sent again", len(letters), noun
        )
        return False
    return True


def _unavailable(intake: Intake, message: str, *, source: Source) -> web.Response:
    intake.metrics.requests_rejected.labels(source=source, reason="unavailable").inc()
    return error_response(bodies.Rejection(503, "unavailable", f"{message}; retry"))


def _report_unattributed(intake: Intake, records: Sequence[inbox.Record], fresh: Sequence[bool]) -> None:
    """An alert that names no node reaches no node: say so loudly, once per stored alert."""
    keys = ", ".join(intake.settings.node_label_keys)
    for record, new in zip(records, fresh, strict=True):
        if not new or record.node is not None:
            continue
        intake.metrics.unattributed.inc()
        log.warning(
            "alert %r (%s, fingerprint %s) names no node: none of the labels %s is set; it is recorded "
            "as unattributed and no node will be acted on",
            _alertname(record.payload),
            record.status,
            record.fingerprint,
            keys,
        )


def _alertname(payload: str) -> str:
    labels = json.loads(payload).get("labels", {})
    return str(labels.get("alertname", "unnamed"))


async def _answer(intake: Intake, admitted: admission.Sorted, *, source: Source, noun: str) -> web.Response:
    """Store the valid items, dead-letter the others; 4xx only when no item of the body was valid."""
    if admitted.all_refused:
        if not await _keep(intake, admitted, source=source, noun=noun):
            return _unavailable(intake, "the dead-letter list is unavailable", source=source)
        first = admitted.refusals[0]
        rejection = bodies.Rejection(
            422,
            f"no_valid_{noun}",
            f"no valid {noun} in the body ({admitted.total} refused); {first.where}: {first.message}",
            _details(admitted.refusals),
        )
        intake.metrics.requests_rejected.labels(source=source, reason=rejection.reason).inc()
        return error_response(rejection)
    try:
        result = await intake.inbox.append(admitted.records)
    except inbox.InboxClosedError as exc:
        # Nothing is dead-lettered either: the sender's retry brings the refused items back.
        return _unavailable(intake, str(exc), source=source)
    intake.metrics.received.labels(source=source).inc(result.stored)
    intake.metrics.duplicates.labels(source=source).inc(result.duplicates)
    if source == "alertmanager":
        _report_unattributed(intake, admitted.records, result.fresh)
    if admitted.refusals and not await _keep(intake, admitted, source=source, noun=noun):
        # The valid items are committed (a resend finds them as duplicates); the refused ones are not kept.
        return _unavailable(intake, "the dead-letter list is unavailable", source=source)
    answer: dict[str, Any] = {
        "accepted": result.stored,
        "duplicates": result.duplicates,
        "rejected": len(admitted.refusals),
    }
    if admitted.refusals:
        answer["rejections"] = _details(admitted.refusals)
    return web.json_response(answer)


async def handle_alerts(request: web.Request, intake: Intake) -> web.Response:
    received_at = intake.clock()
    try:
        try:
            intake.callers.alertmanager(request.headers.get("Authorization"))
        except callers.Refused as refused:
            raise refusal(refused) from None
        raw = await _admit(request, intake)
        envelope = bodies.decode(raw, payloads.AlertmanagerEnvelope)
    except bodies.Rejection as rejection:
        intake.metrics.requests_rejected.labels(source="alertmanager", reason=rejection.reason).inc()
        return error_response(rejection)
    if envelope.truncated_alerts:
        log.warning(
            "Alertmanager truncated %d alerts from group %s; raise max_alerts on the receiver",
            envelope.truncated_alerts,
            envelope.group_key,
        )
    admitted = admission.sort_alerts(envelope.alerts, keys=intake.node_keys, received_at=received_at)
    return await _answer(intake, admitted, source="alertmanager", noun="alerts")


async def handle_gpu_events(request: web.Request, intake: Intake) -> web.Response:
    received_at = intake.clock()
    try:
        try:
            caller = await intake.callers.agent(request.headers.get("Authorization"))
        except callers.Refused as refused:
            raise refusal(refused) from None
        raw = await _admit(request, intake)
        envelope = bodies.decode(raw, payloads.GpuEventsEnvelope)
        _own_node_only(caller, envelope.events)
    except bodies.Rejection as rejection:
        intake.metrics.requests_rejected.labels(source="agent", reason=rejection.reason).inc()
        return error_response(rejection)
    admitted = admission.sort_events(envelope.events, received_at=received_at)
    return await _answer(intake, admitted, source="agent", noun="events")


def _own_node_only(caller: callers.Caller, events: list[Any]) -> None:
    """403 for the whole body, nothing recorded, when an agent reports for a node other than its own."""
    foreign = callers.foreign_nodes(caller, events)
    if foreign:
        log.warning(
            "refused agent events from %r on node %r for other nodes %r",
            caller.name,
            caller.node,
            foreign[:5],
        )
        raise bodies.Rejection(
            403,
            "forbidden",
            f"an agent may report its own node only: this one runs on {caller.node!r}, the body names "
            f"{', '.join(repr(n) for n in foreign[:5])}",
        )
