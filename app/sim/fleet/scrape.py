"""How a real Prometheus scrapes the simulated exporters: the plain way, and the two prometheus-operator ways.

The labels on an alert depend on the scrape as much as on the exporter, and the first release trusted the
plain one. Three styles, per node:

- `plain`: a static target with `instance` and `job` only; the exporter's own `pod`/`namespace`/`container`
  (the workload) pass through untouched.
- `operator`: what a ServiceMonitor generates with its default `honorLabels: false`. Target labels
  `namespace`, `service`, `pod`, `container`, `job` (the Service's name) and `endpoint` (the port's name)
  come from Kubernetes discovery (prometheus-operator, pkg/prometheus/promcfg.go, the ServiceMonitor
  relabelings), so they name the *exporter's* pod in its own namespace, and Prometheus renames the
  exporter's colliding workload labels to `exported_pod`/`exported_namespace`/`exported_container` — only
  when the exposed value is not empty (prometheus/scrape, mutateSampleLabels). `instance` is the pod's
  IP and port.
- `honor`: the same ServiceMonitor with `honorLabels: true` (dcgm-exporter's Helm chart can set it): the
  exposed workload labels win and the target's fill only labels the series lack.

Here the discovery is file_sd with `__meta_kubernetes_*` target labels standing in for the Kubernetes SD,
and the operator's relabel rules turn them into labels exactly as in a cluster. Every target is the same
fleet server, so the pod IP that a real `__address__` carries is a meta label too, relabelled into
`instance`. The exporter's own pod names are the simulated cluster's DaemonSet pods, so a Sickbay that
trusted `pod` would try to restart a pod that exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ScrapeStyle = Literal["plain", "operator", "honor"]
STYLES: tuple[ScrapeStyle, ...] = ("plain", "operator", "honor")
SERVICE = "nvidia-dcgm-exporter"  # the GPU Operator's Service and DaemonSet name
CONTAINER = "nvidia-dcgm-exporter"
NAMESPACE = "gpu-operator"
PORT_NAME = "gpu-metrics"
PORT = 9400
# The job_name a ServiceMonitor's endpoint gets: serviceMonitor/<namespace>/<name>/<endpoint index>.
OPERATOR_JOBS: Mapping[ScrapeStyle, str] = {
    "operator": f"serviceMonitor/{NAMESPACE}/{SERVICE}/0",
    "honor": f"serviceMonitor/{NAMESPACE}/{SERVICE}-honor-labels/0",
}


@dataclass(frozen=True, slots=True)
class ExporterPod:
    """The exporter pod serving one node's metrics, as the cluster names it."""

    namespace: str
    name: str
    ip: str
    container: str = CONTAINER


def pod_ip(index: int) -> str:
    """A pod-network address per node (10.244.0.0/16, as kubeadm's default pod CIDR)."""
    return f"10.244.{index // 250}.{index % 250 + 2}"


def default_exporter_pods(nodes: Sequence[str]) -> dict[str, ExporterPod]:
    """Exporter pods named as a DaemonSet names them, for a fleet served without a simulated cluster."""
    return {
        node: ExporterPod(NAMESPACE, f"{SERVICE}-{index:05d}", pod_ip(index))
        for index, node in enumerate(nodes)
    }


def relabel_configs() -> list[dict[str, Any]]:
    """The ServiceMonitor relabelings that turn discovery's meta labels into target labels."""
    return [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"},
        {"target_label": "endpoint", "replacement": PORT_NAME},
        # Stands in for __address__ being the pod's own IP and port (every simulated target is one server).
        {
            "source_labels": ["__meta_kubernetes_pod_ip"],
            "target_label": "instance",
            "replacement": f"${{1}}:{PORT}",
        },
    ]


def operator_group(*, address: str, metrics_path: str, pod: ExporterPod) -> dict[str, Any]:
    """One node's file_sd target group as the Kubernetes SD would describe the exporter's endpoint."""
    return {
        "targets": [address],
        "labels": {
            "__metrics_path__": metrics_path,
            "__meta_kubernetes_namespace": pod.namespace,
            "__meta_kubernetes_service_name": SERVICE,
            "__meta_kubernetes_pod_name": pod.name,
            "__meta_kubernetes_pod_container_name": pod.container,
            "__meta_kubernetes_pod_ip": pod.ip,
        },
    }


def operator_scrape_configs(files: Mapping[ScrapeStyle, Path]) -> list[dict[str, Any]]:
    """One scrape config per operator style present (`honor_labels` is what tells them apart)."""
    return [
        {
            "job_name": OPERATOR_JOBS[style],
            "honor_labels": style == "honor",
            "file_sd_configs": [{"files": [str(path)]}],
            "relabel_configs": relabel_configs(),
        }
        for style, path in files.items()
        if style != "plain"
    ]


def mixed_styles(nodes: Sequence[str]) -> dict[str, ScrapeStyle]:
    """Every third node each way: operator (honorLabels: false), honor (true), plain."""
    order: tuple[ScrapeStyle, ...] = ("operator", "honor", "plain")
    return {node: order[index % len(order)] for index, node in enumerate(nodes)}
