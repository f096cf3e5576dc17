"""The dcgm-exporter text format, written by hand so the agent's series are indistinguishable from it.

prometheus-client cannot produce these lines: it renames a counter family to `NAME_total` in `# TYPE` and
sorts labels, while dcgm-exporter writes `# TYPE NAME counter` with the bare sample name and a fixed label
order (gpu, UUID, pci_bus_id, device, modelName, Hostname, then the extra labels sorted). Everything
Sickbay's rules and the simulator expect follows that. Pure formatting: no NVML, no I/O. Standard library
only, so the standalone real-GPU check can use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from app import dcgm_fields
from app.agent import xid as xid_names
from app.agent.model import HELP_AS_SERVED, Field, GpuIdentity, GpuReading, PodRef

HostnameLabel = Literal["Hostname", "hostname"]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample:
    """What /metrics shows for one GPU: its latest reading (None once lost), last XID and current pod."""

    gpu: GpuIdentity
    reading: GpuReading | None
    last_xid: int = 0
    pod: PodRef | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    samples: tuple[GpuSample, ...] = ()
    driver_version: str = ""


def render(snapshot: Snapshot, *, hostname: str, hostname_label: HostnameLabel = "Hostname") -> str:
    """All GPU series of one snapshot; a family with no series (unsupported everywhere) is left out."""
    out: list[str] = []
    for field in Field:
        spec = dcgm_fields.BY_NAME[field.value]
        lines = [
            _line(
                field.value,
                _labels(sample, snapshot, hostname=hostname, hostname_label=hostname_label),
                _value(value, spec),
            )
            for sample in snapshot.samples
            if sample.reading is not None and (value := sample.reading.get(field)) is not None
        ]
        _family(out, field.value, HELP_AS_SERVED.get(field, spec.help), spec.kind, lines)
    xid_lines = [
        _xid_line(sample, snapshot, hostname=hostname, hostname_label=hostname_label)
        for sample in snapshot.samples
    ]
    xid = dcgm_fields.XID_ERRORS
    _family(out, xid.name, xid.help, xid.kind, xid_lines)
    return "".join(out)


def _family(out: list[str], name: str, help_text: str, kind: str, lines: Sequence[str]) -> None:
    if not lines:
        return
    out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
    out.extend(lines)


def _xid_line(sample: GpuSample, snapshot: Snapshot, *, hostname: str, hostname_label: HostnameLabel) -> str:
    labels = [
        *_labels(sample, snapshot, hostname=hostname, hostname_label=hostname_label),
        ("err_code", str(sample.last_xid)),
        ("err_msg", xid_names.describe_xid(sample.last_xid)),
    ]
    return _line(dcgm_fields.XID_ERRORS.name, labels, str(sample.last_xid))


def _labels(
    sample: GpuSample, snapshot: Snapshot, *, hostname: str, hostname_label: HostnameLabel
) -> list[tuple[str, str]]:
    gpu = sample.gpu
    pod = sample.pod
    labels = [
        ("gpu", str(gpu.index)),
        ("UUID", gpu.uuid),
        ("pci_bus_id", gpu.pci_bus_id),
        ("device", gpu.device),
        ("modelName", gpu.model),
    ]
    if hostname:
        labels.append((hostname_label, hostname))
    # The exporter writes its extra labels in sorted key order; uppercase sorts first.
    labels += [
        ("DCGM_FI_DRIVER_VERSION", snapshot.driver_version),
        ("container", pod.container if pod else ""),
        ("namespace", pod.namespace if pod else ""),
        ("pod", pod.name if pod else ""),
    ]
    return labels


def _value(value: int | float, spec: dcgm_fields.DcgmField) -> str:
    # DCGM prints doubles with Go's %f (six decimals) and int64 fields as plain integers.
    return f"{float(value):f}" if spec.is_float else str(int(value))


def _line(name: str, labels: Iterable[tuple[str, str]], value: str) -> str:
    body = ",".join(f'{key}="{escape(text)}"' for key, text in labels)
    return f"{name}{{{body}}} {value}\n"


def escape(text: str) -> str:
    """Label-value escaping of the text format: backslash, double quote and newline."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def series_names() -> tuple[str, ...]:
    """Every family name this module can emit, for tests and the dashboards' sake."""
    return (*(field.value for field in Field), dcgm_fields.XID_ERRORS.name)
