"""Pydantic models of what arrives over HTTP: Alertmanager's webhook (version 4) and the agent's GPU events.

These are the typed boundary. They accept exactly what Alertmanager 0.25+ sends (unknown extra fields are
ignored, so a newer Alertmanager still gets through) and reject wrong types with a field path.

Each body has two models: an envelope whose items are left unparsed (`AlertmanagerEnvelope`,
`GpuEventsEnvelope`), so the webhook can validate every alert on its own and one bad alert never costs
the others, and the whole-body model (`AlertmanagerPayload`, `GpuEventsPayload`) for callers that want
all or nothing (`sickbay explain`).

Timestamps must be RFC 3339 strings with an offset, as Alertmanager writes them (Go's `time.Time`
marshals to RFC 3339 with nanoseconds). Pydantic alone would also take a number (as Unix seconds) or a
time without an offset (as local time): a sender that does either is not speaking this format, and its
alert is refused rather than silently placed in time.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints
from pydantic_core import PydanticCustomError

LabelName = Annotated[str, StringConstraints(min_length=1, max_length=256)]
LabelValue = Annotated[str, StringConstraints(max_length=8192)]
Labels = Annotated[dict[LabelName, LabelValue], Field(max_length=128)]
Fingerprint = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._:-]{1,128}$")]
# RFC 3339 section 5.6 `date-time`; "T" and "Z" may be lower case (its section 5.6 note). ASCII digits only.
_RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)


def _rfc3339(value: Any) -> Any:
    """Let through only what is an RFC 3339 timestamp; pydantic's datetime parsing does the rest."""
    if value is None:
        return value  # a missing optional timestamp; a required one fails as "valid datetime" next
    if isinstance(value, datetime):  # built in Python (alert reconciliation), not parsed from JSON
        if value.tzinfo is None:
            raise PydanticCustomError("rfc3339", "timestamp has no UTC offset")
        return value
    if not isinstance(value, str):
        raise PydanticCustomError(
            "rfc3339",
            "must be an RFC 3339 string such as 2024-05-01T12:00:00Z, got {kind} {value}",
            {"kind": type(value).__name__, "value": repr(value)[:40]},
        )
    if not _RFC3339.match(value):
        raise PydanticCustomError(
            "rfc3339",
            "{value} is not an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.frac] with Z or an offset)",
            {"value": repr(value[:40])},
        )
    return value


Timestamp = Annotated[datetime, BeforeValidator(_rfc3339)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=False, str_strip_whitespace=False)


class AlertmanagerAlert(_Strict):
    status: Literal["firing", "resolved"]
    labels: Labels
    annotations: Labels = Field(default_factory=dict)
    starts_at: Timestamp = Field(alias="startsAt")
    ends_at: Annotated[datetime | None, BeforeValidator(_rfc3339)] = Field(default=None, alias="endsAt")
    generator_url: Annotated[str, StringConstraints(max_length=4096)] = Field(
        default="", alias="generatorURL"
    )
    fingerprint: Fingerprint


class _AlertmanagerBody(_Strict):
    """Alertmanager's webhook body (`version: "4"`) without its alerts."""

    version: Literal["4"]
    group_key: Annotated[str, StringConstraints(max_length=8192)] = Field(alias="groupKey")
    truncated_alerts: int = Field(default=0, ge=0, alias="truncatedAlerts")
    status: Literal["firing", "resolved"]
    receiver: Annotated[str, StringConstraints(max_length=512)]
    group_labels: Labels = Field(default_factory=dict, alias="groupLabels")
    common_labels: Labels = Field(default_factory=dict, alias="commonLabels")
    common_annotations: Labels = Field(default_factory=dict, alias="commonAnnotations")
    external_url: Annotated[str, StringConstraints(max_length=4096)] = Field(default="", alias="externalURL")


_MAX_ALERTS = 10000
_MAX_EVENTS = 1000


class AlertmanagerEnvelope(_AlertmanagerBody):
    """The body with its alerts unparsed: each is validated on its own (`AlertmanagerAlert`)."""

    alerts: Annotated[list[Any], Field(max_length=_MAX_ALERTS)]


class AlertmanagerPayload(_AlertmanagerBody):
    """The whole body, every alert valid. Each alert's own status counts, not the group's."""

    alerts: Annotated[list[AlertmanagerAlert], Field(max_length=_MAX_ALERTS)]


GpuEventKind = Literal[
    "xid",
    "double-bit-ecc",
    "dram-retirement",
    "dram-retirement-failure",
    "gpu-unavailable",
    "recovery-action",
    "gpu-lost",
]


class PodModel(_Strict):
    namespace: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    container: Annotated[str, StringConstraints(max_length=253)] | None = None


class GpuEvent(_Strict):
    id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._:-]{1,200}$")]
    node: Annotated[str, StringConstraints(max_length=253)]
    gpu: int = Field(ge=0, le=1023)
    uuid: Annotated[str, StringConstraints(max_length=128)] | None = None
    pci_bus_id: Annotated[str, StringConstraints(max_length=64)] | None = None
    kind: GpuEventKind
    xid: int | None = Field(default=None, ge=0, le=65535)
    recovery_action: int | None = Field(default=None, ge=0, le=255)
    occurred_at: Timestamp
    pod: PodModel | None = None
    message: Annotated[str, StringConstraints(max_length=4096)] = ""


class _GpuEventsBody(_Strict):
    version: Literal["1"]
    agent: Annotated[str, StringConstraints(max_length=253)]


class GpuEventsEnvelope(_GpuEventsBody):
    """The agent's batch with its events unparsed: each is validated on its own (`GpuEvent`)."""

    events: Annotated[list[Any], Field(max_length=_MAX_EVENTS)]


class GpuEventsPayload(_GpuEventsBody):
    events: Annotated[list[GpuEvent], Field(max_length=_MAX_EVENTS)]
