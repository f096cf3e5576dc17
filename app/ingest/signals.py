"""Validated payloads → domain Signals: find the node, the GPU, the XID and the pod an alert is about.

Everything here is deterministic and raises `SignalError` (with the offending label) rather than guessing:
an alert about `../x` is refused, not sent to the decision engine.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from app.domain import PodRef, Signal, SignalSource, SignalStatus, freeze_mapping
from app.ingest import payloads

# RFC 1123 subdomain, as Kubernetes validates Node names.
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NODE_NAME_MAX = 253
XID_LABELS = ("xid", "err_code")
GPU_LABELS = ("gpu", "gpu_index")
UUID_LABELS = ("UUID", "uuid")
# Alertmanager's "zero" endsAt for alerts that have not ended.
_ZERO_YEAR = 1


class SignalError(ValueError):
    """A payload that is well-formed JSON of the right shape but says something we must not act on."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


@dataclass(frozen=True, slots=True)
class NodeKeys:
    """Label names that may hold the node name, in order of preference (configurable)."""

    keys: tuple[str, ...]


def validate_node_name(value: str, *, where: str) -> str:
    if len(value) > _NODE_NAME_MAX:
        raise SignalError(where, f"node name is {len(value)} characters; Kubernetes allows {_NODE_NAME_MAX}")
    if not _NODE_NAME.match(value):
        raise SignalError(where, f"{value!r} is not a valid Kubernetes node name (RFC 1123 subdomain)")
    return value


def find_node(labels: dict[str, str], *, keys: NodeKeys, where: str) -> str | None:
    for key in keys.keys:
        raw = labels.get(key)
        if not raw:
            continue
        value = _instance_host(raw) if key == "instance" else raw
        return validate_node_name(value, where=f"{where}.labels.{key}")
    return None


def _instance_host(instance: str) -> str:
    """`node-7:9400` → `node-7`; `[::1]:9400` stays an (invalid) address and is refused by validation."""
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() and not host.endswith("]") else instance


def _int_label(
    labels: dict[str, str], names: Sequence[str], *, where: str, what: str, top: int
) -> int | None:
    for name in names:
        raw = labels.get(name)
        if raw is None or raw == "":
            continue
        text = raw.strip()
        if not text.isdigit() or not text.isascii():
            raise SignalError(f"{where}.labels.{name}", f"{what} must be a non-negative integer, got {raw!r}")
        value = int(text)
        if value > top:
            raise SignalError(f"{where}.labels.{name}", f"{what} {value} is out of range (0..{top})")
        return value
    return None


def _first(labels: dict[str, str], names: Sequence[str]) -> str | None:
    return next((labels[n] for n in names if labels.get(n)), None)


def _pod(labels: dict[str, str]) -> PodRef | None:
    name = labels.get("pod") or labels.get("pod_name")
    namespace = labels.get("namespace") or labels.get("pod_namespace")
    if not name or not namespace:
        return None
    return PodRef(
        namespace=namespace, name=name, container=labels.get("container") or labels.get("container_name")
    )


def admit_alert(alert: payloads.AlertmanagerAlert, *, keys: NodeKeys, where: str) -> str | None:
    """The checks `from_alert` makes, without building the Signal: what the webhook's hot path needs.

    Returns the node the alert is about; raises SignalError for a bad node name, XID or GPU index.
    """
    labels = alert.labels
    node = find_node(labels, keys=keys, where=where)
    _int_label(labels, GPU_LABELS, where=where, what="GPU index", top=1023)
    _int_label(labels, XID_LABELS, where=where, what="XID", top=65535)
    return node


def from_alert(
    alert: payloads.AlertmanagerAlert,
    *,
    keys: NodeKeys,
    received_at: datetime,
    where: str = "alerts",
) -> Signal:
    labels = alert.labels
    ends_at = alert.ends_at if alert.ends_at and alert.ends_at.year > _ZERO_YEAR else None
    return Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint=alert.fingerprint,
        status=SignalStatus(alert.status),
        name=labels.get("alertname", "unnamed"),
        starts_at=utc(alert.starts_at),
        received_at=received_at,
        node=find_node(labels, keys=keys, where=where),
        gpu=_int_label(labels, GPU_LABELS, where=where, what="GPU index", top=1023),
        uuid=_first(labels, UUID_LABELS),
        xid=_int_label(labels, XID_LABELS, where=where, what="XID", top=65535),
        pod=_pod(labels),
        ends_at=utc(ends_at) if ends_at else None,
        labels=freeze_mapping(labels),
        annotations=freeze_mapping(alert.annotations),
    )


def from_gpu_event(event: payloads.GpuEvent, *, received_at: datetime, where: str = "events") -> Signal:
    node = validate_node_name(event.node, where=f"{where}.node")
    xid = event.xid
    if event.kind == "gpu-lost" and xid is None:
        xid = 79  # NVML's "GPU is lost" is the fallen-off-the-bus case; the agent reports it once.
    labels: dict[str, str] = {"kind": event.kind}
    if event.recovery_action is not None:
        labels["recovery_action"] = str(event.recovery_action)
    if event.pci_bus_id:
        labels["pci_bus_id"] = event.pci_bus_id
    pod = event.pod
    return Signal(
        source=SignalSource.AGENT,
        fingerprint=event.id,
        status=SignalStatus.FIRING,
        name=f"agent:{event.kind}",
        starts_at=utc(event.occurred_at),
        received_at=received_at,
        node=node,
        gpu=event.gpu,
        uuid=event.uuid,
        xid=xid,
        pod=PodRef(pod.namespace, pod.name, pod.container) if pod else None,
        labels=freeze_mapping(labels),
        annotations=freeze_mapping({"message": event.message} if event.message else {}),
    )


def utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
