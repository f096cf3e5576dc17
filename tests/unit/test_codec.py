"""The journal's JSON: rows written before the codec became pydantic TypeAdapters decode, and encode the
same bytes. The literals below were written by that earlier, hand-rolled codec."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from app.domain import (
    Action,
    ActionKind,
    Fault,
    FaultClass,
    Plan,
    PodRef,
    Signal,
    SignalSource,
    SignalStatus,
    Track,
)
from app.store import codec

SIGNAL_ROW = (
    '{"annotations":{"summary":"XID 79 on GPU 3"},"ends_at":null,"fingerprint":"3f2a9c","gpu":3,'
    '"labels":{"alertname":"GpuXidFatal","node":"gpu-node-007","xid":"79"},"name":"GpuXidFatal",'
    '"node":"gpu-node-007","pod":{"container":"trainer","name":"llm-0","namespace":"training"},'
    '"pod_label":"llm-0","received_at":"2026-03-01T12:00:06+00:00","source":"alertmanager",'
    '"starts_at":"2026-03-01T12:00:05.250000+00:00","status":"firing","uuid":"GPU-1234","xid":79}'
)
PLAN_ROW = (
    '{"actions":[{"kind":"quarantine","node":"gpu-node-007","not_before":null,"params":{"cordon":"true"},'
    '"pod":null,"reason":"XID 79","track":"hardware"},{"kind":"restart-pod","node":"gpu-node-007",'
    '"not_before":"2026-03-01T13:05:00+01:00","params":{},"pod":{"container":null,"name":"llm-0",'
    '"namespace":"training"},"reason":"XID 79","track":"workload"}],'
    '"decided_at":"2026-03-01T12:00:06.500000+00:00","summary":"quarantine, drain, reboot",'
    '"workload":"pod:training/llm-0"}'
)
SIGNAL = Signal(
    source=SignalSource.ALERTMANAGER,
    fingerprint="3f2a9c",
    status=SignalStatus.FIRING,
    name="GpuXidFatal",
    starts_at=datetime(2026, 3, 1, 12, 0, 5, 250000, tzinfo=UTC),
    received_at=datetime(2026, 3, 1, 12, 0, 6, tzinfo=UTC),
    node="gpu-node-007",
    gpu=3,
    uuid="GPU-1234",
    xid=79,
    pod=PodRef("training", "llm-0", "trainer"),
    pod_label="llm-0",
    labels=(("alertname", "GpuXidFatal"), ("node", "gpu-node-007"), ("xid", "79")),
    annotations=(("summary", "XID 79 on GPU 3"),),
)


def test_a_journaled_signal_decodes_and_encodes_to_the_same_bytes() -> None:
    decoded = codec.signal_from_dict(json.loads(SIGNAL_ROW))
    assert decoded == SIGNAL
    assert decoded.starts_at.tzinfo is UTC  # the standard library's own, as before
    assert codec.signal_json(SIGNAL) == SIGNAL_ROW
    assert codec.dumps(codec.signal_to_dict(decoded)) == SIGNAL_ROW


def test_a_plan_encodes_to_the_journaled_bytes() -> None:
    plan = Plan(
        fault=Fault(fault_class=FaultClass.REBOOT_NODE, signal=SIGNAL, reason="XID 79", rule="xid"),
        decided_at=datetime(2026, 3, 1, 12, 0, 6, 500000, tzinfo=UTC),
        summary="quarantine, drain, reboot",
        actions=(
            Action(
                kind=ActionKind.QUARANTINE,
                track=Track.HARDWARE,
                reason="XID 79",
                node="gpu-node-007",
                params=(("cordon", "true"),),
            ),
            Action(
                kind=ActionKind.RESTART_POD,
                track=Track.WORKLOAD,
                reason="XID 79",
                node="gpu-node-007",
                pod=PodRef("training", "llm-0"),
                not_before=datetime(2026, 3, 1, 13, 5, tzinfo=timezone(timedelta(hours=1))),
            ),
        ),
        workload="pod:training/llm-0",
    )
    assert codec.dumps(codec.plan_to_dict(plan)) == PLAN_ROW
    assert list(codec.plan_to_dict(plan)) == [
        "summary",
        "decided_at",
        "workload",
        "actions",
    ]  # explain's order


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (  # the fewest keys a row has carried: every optional field absent
            {
                "source": "agent",
                "fingerprint": "f",
                "status": "resolved",
                "name": "XidEvent",
                "starts_at": "2026-03-01T12:00:00+00:00",
                "received_at": "2026-03-01T12:00:01+00:00",
            },
            Signal(
                source=SignalSource.AGENT,
                fingerprint="f",
                status=SignalStatus.RESOLVED,
                name="XidEvent",
                starts_at=datetime(2026, 3, 1, 12, tzinfo=UTC),
                received_at=datetime(2026, 3, 1, 12, 0, 1, tzinfo=UTC),
            ),
        ),
        (  # a pod without a container, labels out of order, an end time
            {
                "source": "alertmanager",
                "fingerprint": "g",
                "status": "resolved",
                "name": "GpuXidFatal",
                "starts_at": "2026-03-01T12:00:00+00:00",
                "received_at": "2026-03-01T12:00:01+00:00",
                "ends_at": "2026-03-01T12:10:00+00:00",
                "pod": {"namespace": "ns", "name": "p"},
                "labels": {"z": "1", "a": "2"},
            },
            Signal(
                source=SignalSource.ALERTMANAGER,
                fingerprint="g",
                status=SignalStatus.RESOLVED,
                name="GpuXidFatal",
                starts_at=datetime(2026, 3, 1, 12, tzinfo=UTC),
                received_at=datetime(2026, 3, 1, 12, 0, 1, tzinfo=UTC),
                ends_at=datetime(2026, 3, 1, 12, 10, tzinfo=UTC),
                pod=PodRef("ns", "p"),
                labels=(("a", "2"), ("z", "1")),
            ),
        ),
    ],
)
def test_short_rows_decode(row: dict[str, object], expected: Signal) -> None:
    assert codec.signal_from_dict(row) == expected
