"""Validated payloads → domain Signals: find the node, the GPU, the XID and the pod an alert is about.

Everything here is deterministic and raises `SignalError` (with the offending label) rather than guessing:
an alert about `../x` is refused, not sent to the decision engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from app import kubenames
from app.config import settings
from app.domain import PodRef, Signal, SignalSource, SignalStatus, freeze_mapping
from app.ingest import payloads

XID_LABELS = ("xid", "err_code")
GPU_LABELS = ("gpu", "gpu_index")
UUID_LABELS = ("UUID", "uuid")
# Alertmanager's "zero" endsAt for alerts that have not ended.
_ZERO_YEAR = 1
# The plausible range of a signal's time. Nothing Sickbay watches started before 2000, and a clock a day
# ahead is a broken clock: either would poison the windows and backoffs computed from it (year 1 overflows
# `datetime` arithmetic outright). An alert's end may lie ahead by its resolve timeout, never by a year.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
AHEAD = timedelta(days=1)
ENDS_AHEAD = timedelta(days=365)
_ECHO = 40  # characters of a refused value quoted back in a refusal; the dead-letter list keeps it whole
# Where an alert names the workload on its GPU, most trustworthy first (namespace, pod, container):
# - exported_*: Prometheus renamed the exporter's own workload labels because the scrape target's labels
#   took `pod`/`namespace`/`container` (honor_labels: false, prometheus-operator's default; Prometheus
#   scrape.go mutateSampleLabels, only for a non-empty exposed value);
# - pod_namespace/pod_name/container_name: dcgm-exporter's --use-old-namespace spelling, never a target
#   label, so never the exporter's own pod;
# - namespace/pod/container: the workload with honor_labels: true or a plain scrape, but the exporter
#   itself under prometheus-operator when the GPU is idle or the exporter maps no pods.
AGENT_ATTRIBUTION = "agent"  # the agent names the pod from the kubelet's PodResources API
POD_LABELS = (
    ("exported_namespace", "exported_pod", "exported_container"),
    ("pod_namespace", "pod_name", "container_name"),
    ("namespace", "pod", "container"),
)


class SignalError(ValueError):
    """A payload that is well-formed JSON of the right shape but says something we must not act on."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


class TimestampError(SignalError):
    """A well-formed timestamp outside the plausible range (`EARLIEST`, now + `AHEAD`)."""


@dataclass(frozen=True, slots=True)
class NodeKeys:
    """How to read an alert's labels (configurable): which label names may hold the node name, in order
    of preference, and the names of the exporters whose own pod a `pod` label may be."""

    keys: tuple[str, ...]
    exporters: tuple[str, ...] = settings.DEFAULT_EXPORTERS

    @classmethod
    def of(cls, config: settings.Settings) -> NodeKeys:
        return cls(keys=config.node_label_keys, exporters=config.exporter_names)


def validate_node_name(value: str, *, where: str) -> str:
    problem = kubenames.subdomain_problem(value)
    if problem is not None:
        raise SignalError(where, f"not a valid Kubernetes node name: {problem}")
    return value


def find_node(labels: dict[str, str], *, keys: NodeKeys, where: str) -> str | None:
    """The node an alert is about; an empty label counts as absent, as it does in Prometheus.

    `instance` is only a fallback hint (under prometheus-operator it is the exporter pod's IP and port):
    a host that cannot be a node name, such as an IPv6 address, is not an error, just no node.
    """
    for key in keys.keys:
        raw = labels.get(key)
        if not raw:
            continue
        if key == "instance":
            host = instance_host(raw)
            if kubenames.subdomain_problem(host) is None:
                return host
            continue
        return validate_node_name(raw, where=f"{where}.labels.{key}")
    return None


def instance_host(instance: str) -> str:
    """`node-7:9400` → `node-7`; `[fd00::7]:9400` → `fd00::7`; a value without a port stays as it is."""
    if instance.startswith("["):
        host, bracket, _ = instance[1:].partition("]")
        return host if bracket else instance
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else instance


def _int_label(
    labels: dict[str, str], names: Sequence[str], *, where: str, what: str, top: int
) -> int | None:
    for name in names:
        raw = labels.get(name)
        if raw is None or raw == "":
            continue
        text = raw.strip()
        # isascii first: str.isdigit accepts other scripts' digits, and int() of thousands of digits is
        # slow or refused, so the length is bounded before converting.
        if not text.isascii() or not text.isdigit() or len(text) > len(str(top)):
            raise SignalError(
                f"{where}.labels.{name}", f"{what} must be an integer 0..{top}, got {_echo(raw)}"
            )
        value = int(text)
        if value > top:
            raise SignalError(f"{where}.labels.{name}", f"{what} {value} is out of range (0..{top})")
        return value
    return None


def _echo(value: str) -> str:
    """`value` quoted for a message: repr'd, and cut, so a 5,000-character label is not sent back whole."""
    return repr(value) if len(value) <= _ECHO else f"{value[:_ECHO]!r}... ({len(value)} characters)"


def check_time(moment: datetime, *, now: datetime, where: str, ahead: timedelta = AHEAD) -> datetime:
    """`moment` if it lies in [EARLIEST, now + ahead]; raises TimestampError otherwise.

    Compares aware datetimes only (no arithmetic on `moment`), so even year 1 or 9999 with an offset,
    which `astimezone` cannot convert, is refused rather than raised on.
    """
    if moment.tzinfo is None:
        raise TimestampError(where, "timestamp has no UTC offset")
    if moment < EARLIEST:
        raise TimestampError(where, f"{moment.isoformat()} is before {EARLIEST.year}: not a plausible time")
    if moment > now + ahead:
        raise TimestampError(
            where, f"{moment.isoformat()} is more than {_span(ahead)} ahead of this service's clock"
        )
    return moment


def _span(delta: timedelta) -> str:
    return f"{delta.days} day" + ("s" if delta.days != 1 else "")


def check_alert_times(alert: payloads.AlertmanagerAlert, *, now: datetime, where: str) -> datetime | None:
    """Refuse an implausible startsAt or endsAt; returns the end, None for Alertmanager's zero time."""
    check_time(alert.starts_at, now=now, where=f"{where}.startsAt")
    if alert.ends_at is None or alert.ends_at.year == _ZERO_YEAR:
        return None
    return check_time(alert.ends_at, now=now, where=f"{where}.endsAt", ahead=ENDS_AHEAD)


def _first(labels: dict[str, str], names: Sequence[str]) -> str | None:
    return next((labels[n] for n in names if labels.get(n)), None)


def is_scrape_target(labels: dict[str, str], *, exporters: Sequence[str]) -> bool:
    """Whether the alert's `pod` label names the exporter that was scraped rather than a workload.

    prometheus-operator sets `pod` and `container` to the scraped pod's and `job` to its Service's
    name (prometheus-operator pkg/prometheus/promcfg.go, ServiceMonitor relabelings), so a pod named
    after the job, or after a known exporter, or whose container is a known exporter, is the target.
    """
    pod = labels.get("pod") or ""
    if not pod:
        return False
    named = [*exporters, *([labels["job"]] if labels.get("job") else [])]
    if any(pod == name or pod.startswith(name + "-") for name in named):
        return True
    return (labels.get("container") or "") in exporters


def find_pod(
    labels: dict[str, str], *, exporters: Sequence[str], where: str
) -> tuple[PodRef | None, str | None]:
    """The workload the alert names and the label it came from; (None, None) when it names none."""
    for namespace_key, pod_key, container_key in POD_LABELS:
        name, namespace = labels.get(pod_key), labels.get(namespace_key)
        if not name or not namespace:
            continue
        if pod_key == "pod" and is_scrape_target(labels, exporters=exporters):
            continue
        return _pod_ref(
            namespace,
            name,
            labels.get(container_key) or None,
            where=where,
            keys=(namespace_key, pod_key, container_key),
        ), pod_key
    return None, None


def _pod_ref(
    namespace: str, name: str, container: str | None, *, where: str, keys: tuple[str, str, str]
) -> PodRef:
    checks = (
        (keys[0], namespace, kubenames.label_problem),
        (keys[1], name, kubenames.subdomain_problem),
        (keys[2], container, kubenames.label_problem),
    )
    for key, value, check in checks:
        problem = check(value) if value is not None else None
        if problem is not None:
            raise SignalError(f"{where}.{key}", f"not a valid Kubernetes name: {problem}")
    return PodRef(namespace=namespace, name=name, container=container)


def admit_alert(
    alert: payloads.AlertmanagerAlert, *, keys: NodeKeys, where: str, now: datetime
) -> str | None:
    """The checks `from_alert` makes, without building the Signal: what the webhook's hot path needs.

    Returns the node the alert is about; raises SignalError for a bad node name, XID, GPU index or pod
    name (a pod or namespace label that is not a Kubernetes name is refused, never used in a URL), and
    TimestampError for a time outside the plausible range.
    """
    labels = alert.labels
    check_alert_times(alert, now=now, where=where)
    node = find_node(labels, keys=keys, where=where)
    _int_label(labels, GPU_LABELS, where=where, what="GPU index", top=1023)
    _int_label(labels, XID_LABELS, where=where, what="XID", top=65535)
    find_pod(labels, exporters=keys.exporters, where=f"{where}.labels")
    return node


def from_alert(
    alert: payloads.AlertmanagerAlert,
    *,
    keys: NodeKeys,
    received_at: datetime,
    where: str = "alerts",
) -> Signal:
    labels = alert.labels
    ends_at = check_alert_times(alert, now=received_at, where=where)
    pod, pod_label = find_pod(labels, exporters=keys.exporters, where=f"{where}.labels")
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
        pod=pod,
        pod_label=pod_label,
        ends_at=utc(ends_at) if ends_at else None,
        labels=freeze_mapping(labels),
        annotations=freeze_mapping(alert.annotations),
    )


def from_gpu_event(event: payloads.GpuEvent, *, received_at: datetime, where: str = "events") -> Signal:
    node = validate_node_name(event.node, where=f"{where}.node")
    check_time(event.occurred_at, now=received_at, where=f"{where}.occurred_at")
    xid = event.xid
    if event.kind == "gpu-lost" and xid is None:
        xid = 79  # NVML's "GPU is lost" is the fallen-off-the-bus case; the agent reports it once.
    labels: dict[str, str] = {"kind": event.kind}
    if event.recovery_action is not None:
        labels["recovery_action"] = str(event.recovery_action)
    if event.pci_bus_id:
        labels["pci_bus_id"] = event.pci_bus_id
    pod = (
        _pod_ref(
            event.pod.namespace,
            event.pod.name,
            event.pod.container or None,
            where=f"{where}.pod",
            keys=("namespace", "name", "container"),
        )
        if event.pod
        else None
    )
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
        pod=pod,
        pod_label=AGENT_ATTRIBUTION if pod else None,
        labels=freeze_mapping(labels),
        annotations=freeze_mapping({"message": event.message} if event.message else {}),
    )


def utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
