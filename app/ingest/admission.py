"""Per-item admission: each alert (or agent event) of a body is validated on its own.

Alertmanager never retries a 4xx, so refusing a whole group for one bad alert loses the good ones with
it. Here every item is parsed (pydantic) and checked (`signals`) separately; the valid ones become inbox
records, the invalid ones refusals that carry their reason, where, and the item exactly as it arrived,
for the dead-letter list. Deciding what the request's answer is, and storing anything, is the
handler's job; this module does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import pydantic

from app.ingest import payloads, signals
from app.store import inbox

# Fields whose errors are reported as `invalid_timestamp`: the telltale of a sender not speaking the format.
_TIMESTAMPS = frozenset({"startsAt", "endsAt", "occurred_at"})
_MAX_MESSAGE = 400


class Reason(StrEnum):
    """Why one item was refused: the `reason` of `sickbay_alerts_rejected_total` and of the list."""

    INVALID_SCHEMA = "invalid_schema"  # not an alert (event) of the format: a field missing or mistyped
    # a timestamp that is not an RFC 3339 string with an offset, or lies outside the plausible range
    INVALID_TIMESTAMP = "invalid_timestamp"
    INVALID_ALERT = "invalid_alert"  # well-formed, but its labels name something Sickbay must not act on
    INVALID_EVENT = "invalid_event"  # the same, for an agent event


@dataclass(frozen=True, slots=True)
class Refusal:
    where: str  # e.g. "alerts.2.labels.node"
    reason: Reason
    message: str
    item: Any  # the JSON value as it arrived


@dataclass(frozen=True, slots=True)
class Sorted:
    """A body's items, sorted: the records to store (in order) and the refusals (in order)."""

    records: tuple[inbox.Record, ...]
    refusals: tuple[Refusal, ...]
    total: int

    @property
    def all_refused(self) -> bool:
        return bool(self.refusals) and not self.records


Admit = Callable[[Any, str], inbox.Record]


def sort_items(items: Sequence[Any], *, field: str, admit: Admit, semantic: Reason) -> Sorted:
    """Run `admit` on each item; a pydantic or signal error refuses that item alone."""
    records: list[inbox.Record] = []
    refusals: list[Refusal] = []
    for index, item in enumerate(items):
        where = f"{field}.{index}"
        try:
            records.append(admit(item, where))
        except pydantic.ValidationError as exc:
            refusals.append(_schema_refusal(exc, where=where, item=item))
        except signals.TimestampError as exc:
            refusals.append(
                Refusal(where=exc.where, reason=Reason.INVALID_TIMESTAMP, message=exc.message, item=item)
            )
        except signals.SignalError as exc:
            refusals.append(Refusal(where=exc.where, reason=semantic, message=exc.message, item=item))
    return Sorted(records=tuple(records), refusals=tuple(refusals), total=len(items))


def _schema_refusal(exc: pydantic.ValidationError, *, where: str, item: Any) -> Refusal:
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = first["loc"]
    reason = Reason.INVALID_TIMESTAMP if loc and loc[0] in _TIMESTAMPS else Reason.INVALID_SCHEMA
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return Refusal(
        where=".".join([where, *(str(p) for p in loc)]),
        reason=reason,
        message=(first["msg"] + more)[:_MAX_MESSAGE],
        item=item,
    )


def alert_record(item: Any, where: str, *, keys: signals.NodeKeys, received_at: datetime) -> inbox.Record:
    """The hot path: validate what must be refused now, store the alert; the pipeline builds the Signal."""
    alert = payloads.AlertmanagerAlert.model_validate(item)
    node = signals.admit_alert(alert, keys=keys, where=where, now=received_at)
    return inbox.Record(
        source="alertmanager",
        fingerprint=alert.fingerprint,
        starts_at=signals.utc(alert.starts_at).isoformat(),
        status=alert.status,
        node=node,
        payload=alert.model_dump_json(by_alias=True),
        received_at=received_at.isoformat(),
    )


def event_record(item: Any, where: str, *, received_at: datetime) -> inbox.Record:
    event = payloads.GpuEvent.model_validate(item)
    signal = signals.from_gpu_event(event, received_at=received_at, where=where)
    return inbox.record_of(signal, payload=event.model_dump_json())


def sort_alerts(items: Sequence[Any], *, keys: signals.NodeKeys, received_at: datetime) -> Sorted:
    return sort_items(
        items,
        field="alerts",
        admit=lambda item, where: alert_record(item, where, keys=keys, received_at=received_at),
        semantic=Reason.INVALID_ALERT,
    )


def sort_events(items: Sequence[Any], *, received_at: datetime) -> Sorted:
    return sort_items(
        items,
        field="events",
        admit=lambda item, where: event_record(item, where, received_at=received_at),
        semantic=Reason.INVALID_EVENT,
    )
