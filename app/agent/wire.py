"""The JSON the agent sends to `POST /api/v1/gpu-events`, as pydantic models: the boundary with the service.

Field names and value sets are the contract the service validates; change them only together with it. The
spool stores events in exactly this form, so a batch rebuilt from disk after a restart is byte-for-byte what
would have been sent before. Nothing here does I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from app.agent.model import EventKind, GpuEvent, PodRef

WIRE_VERSION: Literal["1"] = "1"
MAX_EVENTS_PER_REQUEST = 100


class PodPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str
    name: str
    container: str


class EventPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    node: str = Field(min_length=1)
    gpu: int = Field(ge=0)
    uuid: str
    pci_bus_id: str
    # Serialised as its value: xid, double-bit-ecc, dram-retirement, dram-retirement-failure,
    # gpu-unavailable, recovery-action, gpu-lost.
    kind: EventKind
    xid: int | None = None
    recovery_action: int | None = Field(default=None, ge=0, le=7)
    occurred_at: datetime
    pod: PodPayload | None = None
    message: str

    @field_serializer("occurred_at")
    def _rfc3339_utc(self, value: datetime) -> str:
        stamp = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
        return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class EventBatch(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal["1"] = WIRE_VERSION
    agent: str = Field(min_length=1)
    events: list[EventPayload] = Field(min_length=1, max_length=MAX_EVENTS_PER_REQUEST)


def new_event_id(node: str) -> str:
    """Globally unique and made once: it is stored with the spooled event, so retries resend the same id."""
    return f"{node}-{uuid.uuid4()}"


def to_payload(event: GpuEvent, *, node: str, pod: PodRef | None, event_id: str) -> EventPayload:
    return EventPayload(
        id=event_id,
        node=node,
        gpu=event.gpu.index,
        uuid=event.gpu.uuid,
        pci_bus_id=event.gpu.pci_bus_id,
        kind=event.kind,
        xid=event.xid,
        recovery_action=event.recovery_action,
        occurred_at=event.occurred_at,
        pod=PodPayload(namespace=pod.namespace, name=pod.name, container=pod.container) if pod else None,
        message=event.message,
    )


def batch_body(node: str, events: Sequence[EventPayload]) -> bytes:
    return EventBatch(agent=node, events=list(events)).model_dump_json().encode()
