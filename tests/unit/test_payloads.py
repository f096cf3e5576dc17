"""The HTTP bodies' models (`app.ingest.payloads`): what Alertmanager and the agent send is accepted, each
bound is exact (the longest allowed value passes, one more is refused), defaults and aliases are
Alertmanager's, and a timestamp that is not RFC 3339 with an offset is refused with a message that says so.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from app.ingest import payloads
from app.ingest.payloads import (
    AlertmanagerAlert,
    AlertmanagerEnvelope,
    AlertmanagerPayload,
    GpuEvent,
    GpuEventsEnvelope,
    GpuEventsPayload,
    PodModel,
)

STARTS = "2024-05-01T12:00:00Z"


def alert(**fields: Any) -> dict[str, Any]:
    return {
        "status": "firing",
        "labels": {"alertname": "GpuXid", "node": "gpu-1"},
        "startsAt": STARTS,
        "fingerprint": "0123456789abcdef",
        **fields,
    }


def body(**fields: Any) -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GpuXid"}',
        "status": "firing",
        "receiver": "sickbay",
        "alerts": [alert()],
        **fields,
    }


def event(**fields: Any) -> dict[str, Any]:
    return {
        "id": "ev-1",
        "node": "gpu-1",
        "gpu": 0,
        "kind": "xid",
        "xid": 79,
        "occurred_at": STARTS,
        **fields,
    }


def batch(**fields: Any) -> dict[str, Any]:
    return {"version": "1", "agent": "agent-gpu-1", "events": [event()], **fields}


def errors(model: type[BaseModel], data: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return [(tuple(e["loc"]), e["type"]) for e in caught.value.errors()]


def test_alertmanagers_webhook_body_with_its_defaults() -> None:
    payload = AlertmanagerPayload.model_validate(body())
    assert payload.version == "4"
    assert payload.group_key == '{}:{alertname="GpuXid"}'
    assert (payload.truncated_alerts, payload.status, payload.receiver) == (0, "firing", "sickbay")
    assert (payload.group_labels, payload.common_labels, payload.common_annotations) == ({}, {}, {})
    assert payload.external_url == ""
    (only,) = payload.alerts
    assert only.status == "firing"
    assert only.labels == {"alertname": "GpuXid", "node": "gpu-1"}
    assert only.annotations == {}
    assert only.starts_at == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert only.ends_at is None
    assert only.generator_url == ""
    assert only.fingerprint == "0123456789abcdef"


def test_every_field_by_its_alertmanager_name() -> None:
    payload = AlertmanagerPayload.model_validate(
        body(
            truncatedAlerts=3,
            groupLabels={"alertname": "GpuXid"},
            commonLabels={"node": "gpu-1"},
            commonAnnotations={"summary": "x"},
            externalURL="http://am:9093",
            alerts=[
                alert(
                    status="resolved",
                    annotations={"summary": "XID 79"},
                    endsAt="2024-05-01T12:05:00.123456789+02:00",
                    generatorURL="http://prom/graph",
                    extraField="ignored",
                )
            ],
            unknown="a newer Alertmanager's field",
        )
    )
    assert payload.truncated_alerts == 3
    assert payload.group_labels == {"alertname": "GpuXid"}
    assert payload.common_labels == {"node": "gpu-1"}
    assert payload.common_annotations == {"summary": "x"}
    assert payload.external_url == "http://am:9093"
    (only,) = payload.alerts
    assert only.status == "resolved"
    assert only.annotations == {"summary": "XID 79"}
    assert only.ends_at == datetime(2024, 5, 1, 10, 5, 0, 123456, tzinfo=UTC)
    assert only.generator_url == "http://prom/graph"


def test_the_envelope_leaves_alerts_unparsed() -> None:
    envelope = AlertmanagerEnvelope.model_validate(body(alerts=[{"junk": 1}, 7]))
    assert envelope.alerts == [{"junk": 1}, 7]
    assert errors(AlertmanagerPayload, body(alerts=[alert(), {"junk": 1}]))[0][0][:2] == ("alerts", 1)


def test_models_are_frozen_and_lax_about_numeric_strings_not_whitespace() -> None:
    parsed = GpuEvent.model_validate(event(gpu="3", node=" gpu-1 "))
    assert parsed.gpu == 3, "JSON numbers sent as strings still parse (not strict)"
    assert parsed.node == " gpu-1 ", "whitespace is kept: a name is matched whole"
    with pytest.raises(ValidationError):
        parsed.gpu = 4  # type: ignore[misc]


def s(n: int, char: str = "a") -> str:
    return char * n


# (model, builder, field overrides that are the largest/smallest accepted, overrides one past, error loc)
BOUNDS: list[tuple[type[BaseModel], Any, dict[str, Any], dict[str, Any], tuple[Any, ...]]] = [
    (AlertmanagerAlert, alert, {"labels": {s(256): "v"}}, {"labels": {s(257): "v"}}, ("labels",)),
    (AlertmanagerAlert, alert, {"labels": {"k": ""}}, {"labels": {"": "v"}}, ("labels",)),
    (AlertmanagerAlert, alert, {"labels": {"k": s(8192)}}, {"labels": {"k": s(8193)}}, ("labels", "k")),
    (
        AlertmanagerAlert,
        alert,
        {"labels": {f"k{i}": "v" for i in range(128)}},
        {"labels": {f"k{i}": "v" for i in range(129)}},
        ("labels",),
    ),
    (
        AlertmanagerAlert,
        alert,
        {"annotations": {f"k{i}": s(8192) for i in range(128)}},
        {"annotations": {f"k{i}": "v" for i in range(129)}},
        ("annotations",),
    ),
    (AlertmanagerAlert, alert, {"annotations": {s(256): ""}}, {"annotations": {"": "v"}}, ("annotations",)),
    (AlertmanagerAlert, alert, {"generatorURL": s(4096)}, {"generatorURL": s(4097)}, ("generatorURL",)),
    (AlertmanagerAlert, alert, {"fingerprint": s(128, "Z")}, {"fingerprint": s(129, "Z")}, ("fingerprint",)),
    (AlertmanagerAlert, alert, {"fingerprint": "aZ09._:-"}, {"fingerprint": ""}, ("fingerprint",)),
    (AlertmanagerAlert, alert, {"fingerprint": "x"}, {"fingerprint": "a/b"}, ("fingerprint",)),
    (AlertmanagerAlert, alert, {"status": "resolved"}, {"status": "pending"}, ("status",)),
    (AlertmanagerEnvelope, body, {"groupKey": s(8192)}, {"groupKey": s(8193)}, ("groupKey",)),
    (AlertmanagerEnvelope, body, {"truncatedAlerts": 0}, {"truncatedAlerts": -1}, ("truncatedAlerts",)),
    (AlertmanagerEnvelope, body, {"receiver": s(512)}, {"receiver": s(513)}, ("receiver",)),
    (AlertmanagerEnvelope, body, {"externalURL": s(4096)}, {"externalURL": s(4097)}, ("externalURL",)),
    (AlertmanagerEnvelope, body, {"version": "4"}, {"version": "3"}, ("version",)),
    (AlertmanagerEnvelope, body, {"status": "resolved"}, {"status": "ok"}, ("status",)),
    (
        AlertmanagerEnvelope,
        body,
        {"groupLabels": {"k": s(8192)}},
        {"groupLabels": {"k": s(8193)}},
        ("groupLabels", "k"),
    ),
    (
        AlertmanagerEnvelope,
        body,
        {"commonLabels": {"k": s(8192)}},
        {"commonLabels": {"k": s(8193)}},
        ("commonLabels", "k"),
    ),
    (
        AlertmanagerEnvelope,
        body,
        {"commonAnnotations": {"k": s(8192)}},
        {"commonAnnotations": {"k": s(8193)}},
        ("commonAnnotations", "k"),
    ),
    (AlertmanagerEnvelope, body, {"alerts": [{}] * 10000}, {"alerts": [{}] * 10001}, ("alerts",)),
    (AlertmanagerPayload, body, {"alerts": [alert()] * 10000}, {"alerts": [alert()] * 10001}, ("alerts",)),
    (
        PodModel,
        lambda **f: {"namespace": "ns", "name": "p", **f},
        {"namespace": s(253)},
        {"namespace": s(254)},
        ("namespace",),
    ),
    (
        PodModel,
        lambda **f: {"namespace": "ns", "name": "p", **f},
        {"namespace": "n"},
        {"namespace": ""},
        ("namespace",),
    ),
    (
        PodModel,
        lambda **f: {"namespace": "ns", "name": "p", **f},
        {"name": s(253)},
        {"name": s(254)},
        ("name",),
    ),
    (PodModel, lambda **f: {"namespace": "ns", "name": "p", **f}, {"name": "p"}, {"name": ""}, ("name",)),
    (
        PodModel,
        lambda **f: {"namespace": "ns", "name": "p", **f},
        {"container": s(253)},
        {"container": s(254)},
        ("container",),
    ),
    (GpuEvent, event, {"id": s(200, "9")}, {"id": s(201, "9")}, ("id",)),
    (GpuEvent, event, {"id": "aZ09._:-"}, {"id": ""}, ("id",)),
    (GpuEvent, event, {"id": "x"}, {"id": "a b"}, ("id",)),
    (GpuEvent, event, {"node": s(253)}, {"node": s(254)}, ("node",)),
    (GpuEvent, event, {"gpu": 0}, {"gpu": -1}, ("gpu",)),
    (GpuEvent, event, {"gpu": 1023}, {"gpu": 1024}, ("gpu",)),
    (GpuEvent, event, {"uuid": s(128)}, {"uuid": s(129)}, ("uuid",)),
    (GpuEvent, event, {"pci_bus_id": s(64)}, {"pci_bus_id": s(65)}, ("pci_bus_id",)),
    (GpuEvent, event, {"kind": "gpu-lost"}, {"kind": "gpu-found"}, ("kind",)),
    (GpuEvent, event, {"xid": 0}, {"xid": -1}, ("xid",)),
    (GpuEvent, event, {"xid": 65535}, {"xid": 65536}, ("xid",)),
    (GpuEvent, event, {"recovery_action": 0}, {"recovery_action": -1}, ("recovery_action",)),
    (GpuEvent, event, {"recovery_action": 255}, {"recovery_action": 256}, ("recovery_action",)),
    (GpuEvent, event, {"message": s(4096)}, {"message": s(4097)}, ("message",)),
    (GpuEventsEnvelope, batch, {"agent": s(253)}, {"agent": s(254)}, ("agent",)),
    (GpuEventsEnvelope, batch, {"version": "1"}, {"version": "2"}, ("version",)),
    (GpuEventsEnvelope, batch, {"events": [0] * 1000}, {"events": [0] * 1001}, ("events",)),
    (GpuEventsPayload, batch, {"events": [event()] * 1000}, {"events": [event()] * 1001}, ("events",)),
]


@pytest.mark.parametrize(("model", "build", "ok", "bad", "loc"), BOUNDS)
def test_each_bound_is_exact(
    model: type[BaseModel], build: Any, ok: dict[str, Any], bad: dict[str, Any], loc: tuple[Any, ...]
) -> None:
    model.model_validate(build(**ok))
    found = errors(model, build(**bad))
    assert [where[: len(loc)] for where, _ in found] == [loc], found


@pytest.mark.parametrize(
    ("model", "build", "field"),
    [
        (AlertmanagerAlert, alert, "status"),
        (AlertmanagerAlert, alert, "labels"),
        (AlertmanagerAlert, alert, "startsAt"),
        (AlertmanagerAlert, alert, "fingerprint"),
        (AlertmanagerEnvelope, body, "version"),
        (AlertmanagerEnvelope, body, "groupKey"),
        (AlertmanagerEnvelope, body, "status"),
        (AlertmanagerEnvelope, body, "receiver"),
        (AlertmanagerEnvelope, body, "alerts"),
        (GpuEvent, event, "id"),
        (GpuEvent, event, "node"),
        (GpuEvent, event, "gpu"),
        (GpuEvent, event, "kind"),
        (GpuEvent, event, "occurred_at"),
        (GpuEventsEnvelope, batch, "version"),
        (GpuEventsEnvelope, batch, "agent"),
        (GpuEventsEnvelope, batch, "events"),
    ],
)
def test_required_fields(model: type[BaseModel], build: Any, field: str) -> None:
    data = build()
    del data[field]
    assert errors(model, data) == [((field,), "missing")]


def test_an_agents_event_with_its_defaults_and_its_pod() -> None:
    parsed = GpuEvent.model_validate(event())
    assert (parsed.uuid, parsed.pci_bus_id, parsed.recovery_action, parsed.pod, parsed.message) == (
        None,
        None,
        None,
        None,
        "",
    )
    assert parsed.occurred_at == datetime(2024, 5, 1, 12, tzinfo=UTC)
    with_pod = GpuEvent.model_validate(
        event(kind="gpu-lost", xid=None, pod={"namespace": "ml", "name": "train-0"}, message="fell off")
    )
    assert with_pod.pod == PodModel(namespace="ml", name="train-0", container=None)
    assert (with_pod.kind, with_pod.xid, with_pod.message) == ("gpu-lost", None, "fell off")
    whole = GpuEventsPayload.model_validate(batch(events=[event(), event(id="ev-2")]))
    assert [e.id for e in whole.events] == ["ev-1", "ev-2"]
    assert GpuEventsEnvelope.model_validate(batch(events=[{"x": 1}])).events == [{"x": 1}]


@pytest.mark.parametrize(
    "kind",
    [
        "xid",
        "double-bit-ecc",
        "dram-retirement",
        "dram-retirement-failure",
        "gpu-unavailable",
        "recovery-action",
        "gpu-lost",
    ],
)
def test_every_event_kind(kind: str) -> None:
    assert GpuEvent.model_validate(event(kind=kind)).kind == kind


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01t12:00:00z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        (
            "2024-05-01T12:00:00.5+01:30",
            datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=timezone(timedelta(hours=1, minutes=30))),
        ),
        ("2024-05-01T12:00:00-05:00", datetime(2024, 5, 1, 17, tzinfo=UTC)),
    ],
)
def test_rfc3339_timestamps_are_accepted(value: str, expected: datetime) -> None:
    assert AlertmanagerAlert.model_validate(alert(startsAt=value)).starts_at == expected
    assert GpuEvent.model_validate(event(occurred_at=value)).occurred_at == expected


def rfc3339_error(field: str, value: Any) -> str:
    model, data = (
        (GpuEvent, event(occurred_at=value))
        if field == "occurred_at"
        else (AlertmanagerAlert, alert(**{field: value}))
    )
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    (only,) = caught.value.errors()
    assert only["loc"] == (field,)
    assert only["type"] == "rfc3339"
    return str(only["msg"])


@pytest.mark.parametrize("field", ["startsAt", "endsAt", "occurred_at"])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1714564800, "must be an RFC 3339 string such as 2024-05-01T12:00:00Z, got int 1714564800"),
        (
            12345678901234567890123456789012345678901234567890,
            "must be an RFC 3339 string such as 2024-05-01T12:00:00Z, got int 1234567890123456789012345678901234567890",
        ),
        ([], "must be an RFC 3339 string such as 2024-05-01T12:00:00Z, got list []"),
        (
            "2024-05-01T12:00:00",
            "'2024-05-01T12:00:00' is not an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.frac] with Z or an offset)",
        ),
        (
            "2024-05-01 12:00:00Z" + "x" * 40,
            "'2024-05-01 12:00:00Zxxxxxxxxxxxxxxxxxxxx' is not an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.frac] with Z or an offset)",
        ),
        (
            "٢٠٢٤-05-01T12:00:00Z",
            "'٢٠٢٤-05-01T12:00:00Z' is not an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.frac] with Z or an offset)",
        ),
    ],
)
def test_what_is_not_rfc3339_is_refused_with_its_reason(field: str, value: Any, message: str) -> None:
    assert rfc3339_error(field, value) == message


@pytest.mark.parametrize(
    "value",
    [
        "2024-05-01T12:00:00+0100",
        "2024-05-01T12:00:00.Z",
        " 2024-05-01T12:00:00Z",
        "2024-05-01T12:00:00Z ",
        "24-05-01T12:00:00Z",
    ],
)
def test_near_misses_of_rfc3339_are_refused(value: str) -> None:
    assert rfc3339_error("startsAt", value).endswith(
        "is not an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.frac] with Z or an offset)"
    )


def test_a_missing_optional_timestamp_is_none_and_a_required_one_is_an_error() -> None:
    assert AlertmanagerAlert.model_validate(alert(endsAt=None)).ends_at is None
    assert errors(AlertmanagerAlert, alert(startsAt=None)) == [(("startsAt",), "datetime_type")]


def test_datetimes_built_in_python_need_an_offset() -> None:
    aware = datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert AlertmanagerAlert.model_validate(alert(startsAt=aware)).starts_at is aware
    with pytest.raises(ValidationError) as caught:
        AlertmanagerAlert.model_validate(alert(startsAt=datetime(2024, 5, 1, 12)))
    (only,) = caught.value.errors()
    assert (only["type"], only["msg"]) == ("rfc3339", "timestamp has no UTC offset")


def test_the_batch_limits() -> None:
    assert (payloads._MAX_ALERTS, payloads._MAX_EVENTS) == (10000, 1000)
