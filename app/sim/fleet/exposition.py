"""dcgm-exporter's text format, written by hand, so simulated series are indistinguishable from it.

Same approach as app/agent/exposition.py (not imported: app.sim may only import app.domain): one
`# HELP`/`# TYPE` pair per family with the bare sample name (no `_total` renaming), integer fields as
integers and doubles with six decimals, and the exporter's label order — gpu, UUID, pci_bus_id, device,
modelName, Hostname (or `hostname`, the newest exporters' spelling; None drops it, like --no-hostname),
then DCGM_FI_DRIVER_VERSION, then the pod attributes container, namespace, pod (empty when the GPU is
idle). XID series add `err_code`/`err_msg`; health series add `health_error_code`/`health_watch`.
A lost GPU simply has no series; a node whose exporter is down has no text at all (the server answers
503 so Prometheus records `up == 0`).

`family_samples` is shared with the OpenMetrics writer, which adds timestamps to the same samples. A fleet's
`ExporterView` (its personality) decides which families exist at all and whether they carry DCGM 4.6
names; `node` and `kubernetes_node` host labels are what a Prometheus relabelling leaves in storage.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Literal

from app import dcgm_fields
from app.sim.fleet import catalog, fieldsets, metrics
from app.sim.fleet.fleet import NodeGpuCapacity
from app.sim.fleet.observe import GpuObservation, NodeObservation
from app.sim.fleet.params import ExporterView

HostnameLabel = Literal["Hostname", "hostname", "node", "kubernetes_node"] | None
CLASSIC_VIEW = ExporterView()
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Sample = tuple[str, str]  # (label text without braces, value text)
EXPORTER_JOB = "dcgm-exporter"
EXPORTER_PORT = 9400
KSM_JOB = "kube-state-metrics"
KSM_INSTANCE = "kube-state-metrics:8080"


def exporter_instance(node: str) -> str:
    """The `instance` a node's exporter gets: like a DaemonSet pod's address, distinct per node."""
    return f"{node}:{EXPORTER_PORT}"


def escape(text: str) -> str:
    """Label-value escaping of the text format: backslash, double quote and newline."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def base_labels(
    gpu: GpuObservation, *, node: NodeObservation, hostname_label: HostnameLabel, pod_labels: bool = True
) -> str:
    identity = gpu.identity
    pod = gpu.pod
    parts = [
        f'gpu="{identity.index}"',
        f'UUID="{identity.uuid}"',
        f'pci_bus_id="{identity.pci_bus_id}"',
        f'device="{identity.device}"',
        f'modelName="{escape(identity.model)}"',
    ]
    if hostname_label is not None:
        parts.append(f'{hostname_label}="{escape(node.node)}"')
    parts.append(f'DCGM_FI_DRIVER_VERSION="{escape(node.driver_version)}"')
    if not pod_labels:  # dcgm-exporter without --kubernetes maps no pods: the labels are absent
        return ",".join(parts)
    if pod is None:
        parts.append('container="",namespace="",pod=""')
    else:
        parts.append(
            f'container="{escape(pod.container)}",namespace="{escape(pod.namespace)}",pod="{escape(pod.name)}"'
        )
    return ",".join(parts)


def _target(node: NodeObservation, enabled: bool) -> str:
    if not enabled:
        return ""
    return f',instance="{exporter_instance(node.node)}",job="{EXPORTER_JOB}"'


def format_value(value: float, spec: dcgm_fields.DcgmField) -> str:
    # DCGM prints doubles with Go's %f (six decimals) and int64 fields as plain integers.
    return f"{value:f}" if spec.is_float else str(int(value))


@functools.cache
def exposed_specs(
    fields: frozenset[str] | None, dcgm_4_6: bool
) -> tuple[tuple[dcgm_fields.DcgmField, metrics.Field], ...]:
    """The value families an exporter view exposes, each with its field, under the view's names."""
    return tuple(
        (_named(spec, dcgm_4_6), field)
        for spec, field in zip(metrics.SPECS, metrics.Field, strict=True)
        if fieldsets.exposed(fields, spec.name)
    )


def _named(spec: dcgm_fields.DcgmField, dcgm_4_6: bool) -> dcgm_fields.DcgmField:
    return spec.exported(dcgm_4_6=dcgm_4_6)


def family_samples(
    nodes: Sequence[NodeObservation],
    *,
    hostname_label: HostnameLabel,
    target_labels: bool = False,
    pod_labels: bool = True,
    view: ExporterView = CLASSIC_VIEW,
) -> Iterator[tuple[dcgm_fields.DcgmField, list[Sample]]]:
    """Each family with its samples over the given exporters, in exposition order; empty families skipped.

    `target_labels` adds the `instance` and `job` labels Prometheus would attach when scraping (for
    backfilled data, which no scrape labels). `view` picks the families and their names.
    """
    gpus = [
        (
            gpu,
            base_labels(gpu, node=node, hostname_label=hostname_label, pod_labels=pod_labels)
            + _target(node, target_labels),
        )
        for node in nodes
        if node.exporter_up
        for gpu in node.gpus
    ]
    if not gpus:
        return
    dcgm_4_6 = view.metric_names == "4.6"
    for spec, field in exposed_specs(view.fields, dcgm_4_6):
        yield spec, [(labels, format_value(gpu.values[field], spec)) for gpu, labels in gpus]
    if fieldsets.exposed(view.fields, metrics.XID_SPEC.name):
        yield _xid_family(gpus, dcgm_4_6)
    if fieldsets.exposed(view.fields, metrics.HEALTH_SPEC.name):
        yield (
            metrics.HEALTH_SPEC,
            [
                (f'{labels},health_error_code="{code}",health_watch="{watch}"', str(status))
                for gpu, labels in gpus
                for watch, status, code in gpu.health
            ],
        )


def _xid_family(
    gpus: list[tuple[GpuObservation, str]], dcgm_4_6: bool
) -> tuple[dcgm_fields.DcgmField, list[Sample]]:
    return (
        _named(metrics.XID_SPEC, dcgm_4_6),
        [
            (
                f'{labels},err_code="{gpu.last_xid}",err_msg="{escape(catalog.describe(gpu.last_xid))}"',
                str(gpu.last_xid),
            )
            for gpu, labels in gpus
        ],
    )


def render_node(
    node: NodeObservation,
    *,
    hostname_label: HostnameLabel = "Hostname",
    pod_labels: bool = True,
    view: ExporterView = CLASSIC_VIEW,
) -> str:
    """The body of one node's /metrics (empty when its exporter is down); `pod_labels` off is an exporter
    that maps no pods."""
    out: list[str] = []
    for spec, samples in family_samples(
        (node,), hostname_label=hostname_label, pod_labels=pod_labels, view=view
    ):
        out.append(f"# HELP {spec.name} {spec.help}\n# TYPE {spec.name} {spec.kind}\n")
        out.extend(f"{spec.name}{{{labels}}} {value}\n" for labels, value in samples)
    return "".join(out)


_KSM_FAMILIES = (
    ("kube_node_status_capacity", "The capacity for different resources of a node."),
    (
        "kube_node_status_allocatable",
        "The allocatable for different resources of a node that are available for scheduling.",
    ),
)


def kube_state_samples(
    capacities: Sequence[NodeGpuCapacity], *, target_labels: bool = False
) -> Iterator[tuple[str, str, list[Sample]]]:
    """(name, help, samples) of kube-state-metrics' GPU capacity and allocatable families."""
    target = f',instance="{KSM_INSTANCE}",job="{KSM_JOB}"' if target_labels else ""
    for name, help_text in _KSM_FAMILIES:
        samples = [
            (
                f'node="{escape(cap.node)}",resource="nvidia_com_gpu",unit="integer"{target}',
                str(cap.capacity if name == "kube_node_status_capacity" else cap.allocatable),
            )
            for cap in capacities
        ]
        yield name, help_text, samples


def render_kube_state(capacities: Sequence[NodeGpuCapacity]) -> str:
    """kube-state-metrics' node capacity and allocatable series for the `nvidia.com/gpu` resource."""
    out: list[str] = []
    for name, help_text, samples in kube_state_samples(capacities):
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n")
        out.extend(f"{name}{{{labels}}} {value}\n" for labels, value in samples)
    return "".join(out)
