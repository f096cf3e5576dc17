"""Pydantic models of what arrives over HTTP: Alertmanager's webhook (version 4) and the agent's GPU events.

These are the typed boundary. They accept exactly what Alertmanager 0.25+ sends (unknown extra fields are
ignored, so a newer Alertmanager still gets through) and reject wrong types with a field path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

LabelName = Annotated[str, StringConstraints(min_length=1, max_length=256)]
LabelValue = Annotated[str, StringConstraints(max_length=8192)]
Labels = Annotated[dict[LabelName, LabelValue], Field(max_length=128)]
Fingerprint = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._:-]{1,128}$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=False, str_strip_whitespace=False)


class AlertmanagerAlert(_Strict):
    status: Literal["firing", "resolved"]
    labels: Labels
    annotations: Labels = Field(default_factory=dict)
    starts_at: datetime = Field(alias="startsAt")
    ends_at: datetime | None = Field(default=None, alias="endsAt")
    generator_url: Annotated[str, StringConstraints(max_length=4096)] = Field(
        default="", alias="generatorURL"
    )
    fingerprint: Fingerprint


class AlertmanagerPayload(_Strict):
    """Alertmanager's webhook body (`version: "4"`). Each alert's own status counts, not the group's."""

    version: Literal["4"]
    group_key: Annotated[str, StringConstraints(max_length=8192)] = Field(alias="groupKey")
    truncated_alerts: int = Field(default=0, ge=0, alias="truncatedAlerts")
    status: Literal["firing", "resolved"]
    receiver: Annotated[str, StringConstraints(max_length=512)]
    group_labels: Labels = Field(default_factory=dict, alias="groupLabels")
    common_labels: Labels = Field(default_factory=dict, alias="commonLabels")
    common_annotations: Labels = Field(default_factory=dict, alias="commonAnnotations")
    external_url: Annotated[str, StringConstraints(max_length=4096)] = Field(default="", alias="externalURL")
    alerts: Annotated[list[AlertmanagerAlert], Field(max_length=10000)]


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
    occurred_at: datetime
    pod: PodModel | None = None
    message: Annotated[str, StringConstraints(max_length=4096)] = ""


class GpuEventsPayload(_Strict):
    version: Literal["1"]
    agent: Annotated[str, StringConstraints(max_length=253)]
    events: Annotated[list[GpuEvent], Field(max_length=1000)]
