"""Payload → Signal, directly: every label rule of `app.ingest.signals`, asserting the Signal it builds.

The webhook tests see only status codes and row counts; a wrong timezone, a dropped label or the wrong pod
would pass them. These tests pin each transformation: time zones, the `instance` host, where the workload
comes from (exported_*, the old dcgm-exporter names, `pod` unless it is the exporter), the GPU, UUID and
XID labels with their range limits, and `endsAt`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from app.domain import PodRef, SignalSource, SignalStatus
from app.ingest import payloads, signals

KEYS = signals.NodeKeys(("node", "kubernetes_node", "Hostname", "hostname", "instance"))
RECEIVED = datetime.now(UTC)


def alert(labels: dict[str, str], **fields: Any) -> payloads.AlertmanagerAlert:
    body: dict[str, Any] = {
        "status": "firing",
        "labels": {"alertname": "GpuXidApplicationError", **labels},
        "annotations": {"summary": "s"},
        "startsAt": (RECEIVED - timedelta(minutes=3)).isoformat(),
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": "0123456789abcdef",
        **fields,
    }
    return payloads.AlertmanagerAlert.model_validate(body)


def signal_of(labels: dict[str, str], **fields: Any) -> Any:
    return signals.from_alert(alert(labels, **fields), keys=KEYS, received_at=RECEIVED)


def test_the_whole_signal_of_a_plain_alert() -> None:
    got = signal_of(
        {"Hostname": "gpu-07", "gpu": "3", "UUID": "GPU-abc", "xid": "13", "namespace": "ml", "pod": "p-0"}
    )
    assert got.source is SignalSource.ALERTMANAGER
    assert got.status is SignalStatus.FIRING
    assert got.name == "GpuXidApplicationError"
    assert got.fingerprint == "0123456789abcdef"
    assert (got.node, got.gpu, got.uuid, got.xid) == ("gpu-07", 3, "GPU-abc", 13)
    assert got.pod == PodRef("ml", "p-0", None)
    assert got.pod_label == "pod"
    assert got.ends_at is None, "Alertmanager's zero endsAt means not ended"
    assert got.received_at == RECEIVED
    assert dict(got.labels)["Hostname"] == "gpu-07"
    assert dict(got.annotations) == {"summary": "s"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-01T10:00:00+02:00", datetime(2026, 3, 1, 8, 0, tzinfo=UTC)),
        ("2026-03-01T10:00:00-05:30", datetime(2026, 3, 1, 15, 30, tzinfo=UTC)),
        ("2026-03-01T10:00:00.123456789Z", datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2026-03-01T10:00:00Z", datetime(2026, 3, 1, 10, 0, tzinfo=UTC)),
    ],
)
def test_starts_at_keeps_the_instant_and_is_stored_in_utc(text: str, expected: datetime) -> None:
    got = signal_of({"node": "n1"}, startsAt=text)
    assert got.starts_at == expected
    assert got.starts_at.utcoffset() == timedelta(0)


def test_a_real_ends_at_is_kept_in_utc() -> None:
    ends = datetime.now(timezone(timedelta(hours=2))).replace(microsecond=0)
    got = signal_of({"node": "n1"}, status="resolved", endsAt=ends.isoformat())
    assert got.status is SignalStatus.RESOLVED
    assert got.ends_at == ends
    assert got.ends_at is not None
    assert got.ends_at.tzinfo == UTC


@pytest.mark.parametrize(
    ("labels", "node"),
    [
        ({"node": "a", "Hostname": "b"}, "a"),
        ({"node": "", "kubernetes_node": "k"}, "k"),  # an empty label is absent, as in Prometheus
        ({"Hostname": "h1"}, "h1"),
        ({"hostname": "h2"}, "h2"),
        ({"instance": "gpu-3:9400"}, "gpu-3"),
        ({"instance": "gpu-3.cluster.local:9400"}, "gpu-3.cluster.local"),
        ({"instance": "gpu-3"}, "gpu-3"),
        ({"instance": "10.0.4.7:9400"}, "10.0.4.7"),
        ({"instance": "[fd00::7]:9400"}, None),  # an address, not a node name: no node, not an error
        ({"instance": "fd00::7"}, None),
        ({"instance": "GPU-3:9400"}, None),
        ({}, None),
    ],
)
def test_node_label_order_and_the_instance_host(labels: dict[str, str], node: str | None) -> None:
    assert signal_of(labels).node == node


def test_instance_host_strips_the_port_and_brackets() -> None:
    assert signals.instance_host("node-7:9400") == "node-7"
    assert signals.instance_host("[fd00::7]:9400") == "fd00::7"
    assert signals.instance_host("[fd00::7]") == "fd00::7"
    assert signals.instance_host("node-7") == "node-7"
    assert signals.instance_host("node-7:metrics") == "node-7:metrics"


@pytest.mark.parametrize(
    "value",
    ["Node-1", "node_1", "-node", "node-", "a..b", ".", "..", "a" * 254, "nöde", "node 1"],
)
def test_an_explicit_node_label_that_is_no_node_name_is_refused(value: str) -> None:
    with pytest.raises(signals.SignalError) as caught:
        signal_of({"node": value})
    assert caught.value.where == "alerts.labels.node"


def test_the_longest_node_name_is_accepted() -> None:
    name = ".".join(["a" * 63] * 3) + "." + "b" * 61  # 253 characters
    assert len(name) == 253
    assert signal_of({"node": name}).node == name


OPERATOR = {  # what prometheus-operator's ServiceMonitor scrape attaches to dcgm-exporter's series
    "node": "gpu-07",
    "namespace": "gpu-operator",
    "pod": "nvidia-dcgm-exporter-x7k2p",
    "container": "nvidia-dcgm-exporter",
    "service": "nvidia-dcgm-exporter",
    "endpoint": "gpu-metrics",
    "job": "nvidia-dcgm-exporter",
    "instance": "10.2.3.4:9400",
}


def test_operator_scrape_the_workload_is_in_exported_labels() -> None:
    got = signal_of(
        {
            **OPERATOR,
            "exported_namespace": "ml",
            "exported_pod": "train-0",
            "exported_container": "pytorch",
        }
    )
    assert got.pod == PodRef("ml", "train-0", "pytorch")
    assert got.pod_label == "exported_pod"


def test_operator_scrape_of_an_idle_gpu_names_no_workload() -> None:
    got = signal_of(OPERATOR)
    assert got.pod is None, "the exporter's own pod is never the workload"
    assert got.pod_label is None
    assert got.node == "gpu-07"


@pytest.mark.parametrize(
    "labels",
    [
        {"namespace": "gpu-operator", "pod": "dcgm-exporter-abcde", "node": "n"},
        {"namespace": "gpu-operator", "pod": "dcgm-exporter", "node": "n"},
        {"namespace": "sickbay", "pod": "sickbay-agent-q2w3e", "node": "n"},
        {"namespace": "monitoring", "pod": "gpu-metrics-7f9c", "job": "gpu-metrics", "node": "n"},
        {"namespace": "monitoring", "pod": "custom-name", "container": "dcgm-exporter", "node": "n"},
    ],
)
def test_a_pod_label_naming_the_exporter_is_not_a_workload(labels: dict[str, str]) -> None:
    assert signal_of(labels).pod is None


def test_configured_exporter_names_are_recognised() -> None:
    keys = signals.NodeKeys(KEYS.keys, exporters=("my-gpu-exporter",))
    labels = {"node": "n", "namespace": "obs", "pod": "my-gpu-exporter-1"}
    assert signals.from_alert(alert(labels), keys=keys, received_at=RECEIVED).pod is None
    default = {"node": "n", "namespace": "gpu-operator", "pod": "dcgm-exporter-1"}
    assert signals.from_alert(alert(default), keys=keys, received_at=RECEIVED).pod == PodRef(
        "gpu-operator", "dcgm-exporter-1", None
    ), "a configured list replaces the defaults"


def test_honor_labels_scrape_the_pod_label_is_the_workload() -> None:
    got = signal_of({**OPERATOR, "namespace": "ml", "pod": "train-3", "container": "pytorch"})
    assert got.pod == PodRef("ml", "train-3", "pytorch")
    assert got.pod_label == "pod"


def test_old_dcgm_exporter_label_names() -> None:
    got = signal_of(
        {**OPERATOR, "pod_namespace": "ml", "pod_name": "train-1", "container_name": "main", "uuid": "GPU-u"}
    )
    assert got.pod == PodRef("ml", "train-1", "main")
    assert got.pod_label == "pod_name"
    assert got.uuid == "GPU-u"


def test_a_pod_without_its_namespace_is_no_attribution() -> None:
    assert signal_of({"node": "n", "exported_pod": "train-0"}).pod is None


@pytest.mark.parametrize(
    ("labels", "where"),
    [
        ({"namespace": "ml", "pod": ".."}, "alerts.labels.pod"),
        ({"namespace": "ml", "pod": "."}, "alerts.labels.pod"),
        ({"namespace": "..", "pod": "p"}, "alerts.labels.namespace"),
        ({"namespace": "ml", "pod": "a/b"}, "alerts.labels.pod"),
        ({"exported_namespace": "ml", "exported_pod": "Train"}, "alerts.labels.exported_pod"),
        ({"namespace": "a" * 64, "pod": "p"}, "alerts.labels.namespace"),
        ({"namespace": "ml", "pod": "p", "container": "C"}, "alerts.labels.container"),
    ],
)
def test_pod_names_that_are_not_kubernetes_names_are_refused(labels: dict[str, str], where: str) -> None:
    with pytest.raises(signals.SignalError) as caught:
        signal_of({"node": "n", **labels})
    assert caught.value.where == where
    with pytest.raises(signals.SignalError):
        signals.admit_alert(alert({"node": "n", **labels}), keys=KEYS, where="alerts", now=RECEIVED)


@pytest.mark.parametrize(
    ("labels", "gpu", "xid"),
    [
        ({"gpu": "0", "xid": "1"}, 0, 1),
        ({"gpu": "1023", "xid": "65535"}, 1023, 65535),
        ({"gpu_index": "4", "err_code": "79"}, 4, 79),
        ({"gpu": " 7 ", "xid": "013"}, 7, 13),
        ({"gpu": "", "xid": ""}, None, None),
    ],
)
def test_gpu_and_xid_labels(labels: dict[str, str], gpu: int | None, xid: int | None) -> None:
    got = signal_of({"node": "n", **labels})
    assert (got.gpu, got.xid) == (gpu, xid)


@pytest.mark.parametrize(
    ("labels", "where"),
    [
        ({"gpu": "1024"}, "alerts.labels.gpu"),
        ({"xid": "65536"}, "alerts.labels.xid"),
        ({"gpu": "-1"}, "alerts.labels.gpu"),
        ({"gpu": "3.0"}, "alerts.labels.gpu"),
        ({"xid": "٣"}, "alerts.labels.xid"),  # an Arabic-Indic digit: str.isdigit says yes, we say no
        ({"xid": "9" * 5000}, "alerts.labels.xid"),  # beyond Python's int digit limit: a 4xx, never a 500
        ({"err_code": "0x4f"}, "alerts.labels.err_code"),
    ],
)
def test_gpu_and_xid_out_of_range_or_not_integers(labels: dict[str, str], where: str) -> None:
    with pytest.raises(signals.SignalError) as caught:
        signal_of({"node": "n", **labels})
    assert caught.value.where == where


def test_agent_event_keeps_its_pod_and_names_the_agent_as_the_source() -> None:
    event = payloads.GpuEvent.model_validate(
        {
            "id": "ev-1",
            "node": "gpu-02",
            "gpu": 5,
            "uuid": "GPU-5",
            "kind": "xid",
            "xid": 31,
            "occurred_at": "2026-03-01T10:00:00+01:00",
            "pod": {"namespace": "ml", "name": "train-5", "container": "main"},
        }
    )
    got = signals.from_gpu_event(event, received_at=RECEIVED)
    assert got.source is SignalSource.AGENT
    assert (got.node, got.gpu, got.xid, got.uuid) == ("gpu-02", 5, 31, "GPU-5")
    assert got.pod == PodRef("ml", "train-5", "main")
    assert got.pod_label == "agent"
    assert got.starts_at == datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def test_agent_event_with_a_bad_pod_name_is_refused() -> None:
    event = payloads.GpuEvent.model_validate(
        {
            "id": "ev-2",
            "node": "gpu-02",
            "gpu": 0,
            "kind": "xid",
            "xid": 31,
            "occurred_at": "2026-03-01T10:00:00Z",
            "pod": {"namespace": "ml", "name": ".."},
        }
    )
    with pytest.raises(signals.SignalError) as caught:
        signals.from_gpu_event(event, received_at=RECEIVED)
    assert caught.value.where == "events.pod.name"


def test_gpu_lost_without_an_xid_is_xid_79() -> None:
    event = payloads.GpuEvent.model_validate(
        {"id": "ev-3", "node": "n", "gpu": 1, "kind": "gpu-lost", "occurred_at": "2026-03-01T10:00:00Z"}
    )
    assert signals.from_gpu_event(event, received_at=RECEIVED).xid == 79
