"""An agent event as a Signal, field by field, and the label helpers the alert path leans on."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from app.domain import PodRef, SignalSource, SignalStatus, freeze_mapping
from app.ingest import payloads, signals

RECEIVED = datetime.now(UTC)


def event(**fields: Any) -> payloads.GpuEvent:
    base: dict[str, Any] = {
        "id": "ev-1",
        "node": "gpu-02",
        "gpu": 5,
        "kind": "xid",
        "xid": 154,
        "occurred_at": "2026-03-01T10:00:00Z",
    }
    return payloads.GpuEvent.model_validate({**base, **fields})


def test_every_field_of_an_agent_event_reaches_the_signal() -> None:
    got = signals.from_gpu_event(
        event(
            recovery_action=2,
            pci_bus_id="00000000:3B:00.0",
            uuid="GPU-5",
            message="XID 154 reset required",
            pod={"namespace": "ml", "name": "train-5", "container": "main"},
        ),
        received_at=RECEIVED,
    )
    assert got.source is SignalSource.AGENT
    assert got.status is SignalStatus.FIRING
    assert got.fingerprint == "ev-1"
    assert got.name == "agent:xid"
    assert got.received_at == RECEIVED
    assert got.labels == freeze_mapping(
        {"kind": "xid", "recovery_action": "2", "pci_bus_id": "00000000:3B:00.0"}
    )
    assert got.annotations == freeze_mapping({"message": "XID 154 reset required"})
    assert got.pod == PodRef("ml", "train-5", "main")
    assert got.pod_label == signals.AGENT_ATTRIBUTION == "agent"


def test_a_bare_agent_event_carries_only_its_kind() -> None:
    got = signals.from_gpu_event(event(), received_at=RECEIVED)
    assert got.labels == freeze_mapping({"kind": "xid"})
    assert got.annotations == ()
    assert got.pod is None
    assert got.pod_label is None
    # A recovery action of 0 ("none") is still said.
    assert (
        signals.from_gpu_event(event(recovery_action=0), received_at=RECEIVED).label("recovery_action") == "0"
    )


def test_only_a_lost_gpu_without_an_xid_becomes_xid_79() -> None:
    assert signals.from_gpu_event(event(kind="gpu-lost", xid=None), received_at=RECEIVED).xid == 79
    assert signals.from_gpu_event(event(kind="gpu-lost", xid=62), received_at=RECEIVED).xid == 62
    assert signals.from_gpu_event(event(xid=None), received_at=RECEIVED).xid is None


@pytest.mark.parametrize(
    ("pod", "where"),
    [
        ({"namespace": "ML_", "name": "train"}, "events.pod.namespace"),
        ({"namespace": "ml", "name": "train", "container": "Main_"}, "events.pod.container"),
    ],
)
def test_a_bad_pod_field_is_refused_where_it_is(pod: dict[str, str], where: str) -> None:
    with pytest.raises(signals.SignalError) as caught:
        signals.from_gpu_event(event(pod=pod), received_at=RECEIVED)
    assert caught.value.where == where
    assert caught.value.message.startswith("not a valid Kubernetes name: ")


@pytest.mark.parametrize(
    ("instance", "host"),
    [
        ("node-7:9400", "node-7"),
        ("node-7", "node-7"),
        ("node-7:metrics", "node-7:metrics"),
        ("[fd00::7]:9400", "fd00::7"),
        ("[fd00::7]", "fd00::7"),
        ("[fd00::7", "[fd00::7"),
        ("fd00::7", "fd00::7"),
        ("a:b:9400", "a:b:9400"),
    ],
)
def test_instance_host(instance: str, host: str) -> None:
    assert signals.instance_host(instance) == host


@pytest.mark.parametrize(
    ("labels", "target"),
    [
        ({}, False),
        ({"pod": ""}, False),
        ({"pod": "", "container": "dcgm-exporter"}, False),
        ({"pod": "train-0", "container": "main"}, False),
        ({"pod": "train-0"}, False),
        ({"pod": "train-0", "container": "dcgm-exporter"}, True),
        ({"pod": "dcgm-exporter-x7f"}, True),
        ({"pod": "gpu-metrics-abc", "job": "gpu-metrics"}, True),
    ],
)
def test_is_scrape_target(labels: dict[str, str], target: bool) -> None:
    assert signals.is_scrape_target(labels, exporters=("dcgm-exporter",)) is target


def alert(labels: dict[str, str], **fields: Any) -> payloads.AlertmanagerAlert:
    body: dict[str, Any] = {
        "status": "firing",
        "labels": {"node": "gpu-02", **labels},
        "startsAt": RECEIVED.isoformat(),
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": "0123456789abcdef",
        **fields,
    }
    return payloads.AlertmanagerAlert.model_validate(body)


KEYS = signals.NodeKeys(keys=("node",), exporters=("dcgm-exporter",))


@pytest.mark.parametrize(
    ("labels", "where", "message"),
    [
        ({"gpu": "1024"}, "alerts.labels.gpu", "GPU index 1024 is out of range (0..1023)"),
        ({"xid": "65536"}, "alerts.labels.xid", "XID 65536 is out of range (0..65535)"),
        ({"gpu": "x"}, "alerts.labels.gpu", "GPU index must be an integer 0..1023, got 'x'"),
        ({"xid": "", "err_code": "x"}, "alerts.labels.err_code", "XID must be an integer 0..65535, got 'x'"),
    ],
)
def test_the_hot_path_and_the_signal_refuse_alike(labels: dict[str, str], where: str, message: str) -> None:
    for check in (
        lambda: signals.admit_alert(alert(labels), keys=KEYS, where="alerts", now=RECEIVED),
        lambda: signals.from_alert(alert(labels), keys=KEYS, received_at=RECEIVED),
    ):
        with pytest.raises(signals.SignalError) as caught:
            check()
        assert (caught.value.where, caught.value.message) == (where, message)
        assert str(caught.value) == f"{where}: {message}"


def test_an_empty_label_gives_way_to_the_next_name() -> None:
    got = signals.from_alert(
        alert({"gpu": "", "gpu_index": "5", "xid": "", "err_code": "79"}), keys=KEYS, received_at=RECEIVED
    )
    assert (got.gpu, got.xid) == (5, 79)
    assert signals.from_alert(alert({}), keys=KEYS, received_at=RECEIVED).name == "unnamed"


def test_a_bad_pod_label_is_located_under_labels() -> None:
    with pytest.raises(signals.SignalError) as caught:
        signals.admit_alert(
            alert({"pod": "..", "namespace": "ml"}), keys=KEYS, where="alerts.3", now=RECEIVED
        )
    assert caught.value.where.startswith("alerts.3.labels.")


def test_utc_keeps_the_instant() -> None:
    naive = datetime(2026, 3, 1, 10, 0)
    assert signals.utc(naive) == datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    assert signals.utc(naive).tzinfo is UTC
    aware = datetime.fromisoformat("2026-03-01T10:00:00+01:00")
    assert signals.utc(aware).tzinfo is UTC
    assert signals.utc(aware) == aware
