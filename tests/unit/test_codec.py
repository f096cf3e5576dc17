"""The journal's JSON: rows written before the codec became pydantic TypeAdapters, and before action
parameters were typed, decode; new rows keep their format. `OLD_PLAN_ROW` and `SIGNAL_ROW` were written by
the earlier, hand-rolled codec."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from app.domain import (
    Action,
    ActionKind,
    ActionParams,
    AtRiskParams,
    CheckpointParams,
    ConditionParams,
    Fault,
    FaultClass,
    OwnerRef,
    Plan,
    PodRef,
    QuarantineParams,
    RecheckParams,
    RemediationParams,
    RequeueParams,
    RestartParams,
    RiskLevel,
    Signal,
    SignalSource,
    SignalStatus,
    Track,
)
from app.store import action_params, codec

SIGNAL_ROW = (
    '{"annotations":{"summary":"XID 79 on GPU 3"},"ends_at":null,"fingerprint":"3f2a9c","gpu":3,'
    '"labels":{"alertname":"GpuXidFatal","node":"gpu-node-007","xid":"79"},"name":"GpuXidFatal",'
    '"node":"gpu-node-007","pod":{"container":"trainer","name":"llm-0","namespace":"training"},'
    '"pod_label":"llm-0","received_at":"2026-03-01T12:00:06+00:00","source":"alertmanager",'
    '"starts_at":"2026-03-01T12:00:05.250000+00:00","status":"firing","uuid":"GPU-1234","xid":79}'
)
# A plan row as the hand-rolled codec wrote it, before action parameters were typed.
OLD_PLAN_ROW = (
    '{"actions":[{"kind":"quarantine","node":"gpu-node-007","not_before":null,"params":{"cordon":"true"},'
    '"pod":null,"reason":"XID 79","track":"hardware"},{"kind":"restart-pod","node":"gpu-node-007",'
    '"not_before":"2026-03-01T13:05:00+01:00","params":{},"pod":{"container":null,"name":"llm-0",'
    '"namespace":"training"},"reason":"XID 79","track":"workload"}],'
    '"decided_at":"2026-03-01T12:00:06.500000+00:00","summary":"quarantine, drain, reboot",'
    '"workload":"pod:training/llm-0"}'
)
# The same plan as it is journaled now: typed parameters, written as the same string-valued objects.
PLAN_ROW = (
    '{"actions":[{"kind":"quarantine","node":"gpu-node-007","not_before":null,'
    '"params":{"class":"reboot-node","cordon":"true"},"pod":null,"reason":"XID 79","track":"hardware"},'
    '{"kind":"restart-pod","node":"gpu-node-007","not_before":"2026-03-01T13:05:00+01:00",'
    '"params":{"uid":"uid-llm-0"},"pod":{"container":null,"name":"llm-0","namespace":"training"},'
    '"reason":"XID 79","track":"workload"}],"decided_at":"2026-03-01T12:00:06.500000+00:00",'
    '"summary":"quarantine, drain, reboot","workload":"pod:training/llm-0"}'
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
                params=QuarantineParams(FaultClass.REBOOT_NODE),
            ),
            Action(
                kind=ActionKind.RESTART_POD,
                track=Track.WORKLOAD,
                reason="XID 79",
                node="gpu-node-007",
                pod=PodRef("training", "llm-0"),
                params=RestartParams("uid-llm-0"),
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


def test_a_plan_row_written_before_the_parameters_were_typed_decodes() -> None:
    """The old row's quarantine names no class: act took the fault's, and so does the decoder."""
    rows = json.loads(OLD_PLAN_ROW)["actions"]
    quarantine, restart = (codec.action_from_dict(r, fault_class=FaultClass.REBOOT_NODE) for r in rows)
    assert quarantine == Action(
        kind=ActionKind.QUARANTINE,
        track=Track.HARDWARE,
        reason="XID 79",
        node="gpu-node-007",
        params=QuarantineParams(FaultClass.REBOOT_NODE),
    )
    assert restart.params == RestartParams("")  # no uid: act skips it, as it did then
    assert restart.pod == PodRef("training", "llm-0")
    assert restart.not_before == datetime(2026, 3, 1, 13, 5, tzinfo=timezone(timedelta(hours=1)))
    decoded = [codec.action_from_dict(r) for r in json.loads(PLAN_ROW)["actions"]]
    assert [a.params for a in decoded] == [
        QuarantineParams(FaultClass.REBOOT_NODE),
        RestartParams("uid-llm-0"),
    ]


JOB = OwnerRef(kind="Job", name="llm", uid="uid-llm", api_version="batch/v1")
K = ActionKind


@pytest.mark.parametrize(
    ("kind", "old", "expected"),
    [
        # The parameters each kind's rows have carried, unread keys (attempt, workload, group, effect) too.
        (K.QUARANTINE, {"class": "reset-gpu", "cordon": "true"}, QuarantineParams(FaultClass.RESET_GPU)),
        (
            K.QUARANTINE,
            {"cordon": "false", "class": "driver-mismatch"},
            QuarantineParams(FaultClass.DRIVER_MISMATCH, cordon=False),
        ),
        (K.QUARANTINE, {"class": "replace"}, QuarantineParams(FaultClass.REPLACE)),  # cordon unless "false"
        (K.RESTART_POD, {"attempt": "2", "uid": "u1", "workload": "job:train/x"}, RestartParams("u1")),
        (K.RESTART_GANG, {"group": "jobset:train/llm", "uid": "u2"}, RestartParams("u2")),
        (
            K.REQUEST_REMEDIATION,
            {"remediation": "reset-gpu", "remediator": "annotate"},
            RemediationParams(FaultClass.RESET_GPU, "annotate"),
        ),
        (
            K.REQUEST_REMEDIATION,
            {"remediation": "replace", "remediator": "webhook"},
            RemediationParams(FaultClass.REPLACE, "webhook"),
        ),
        (K.TAINT_AT_RISK, {"level": "act", "effect": "NoSchedule"}, AtRiskParams(RiskLevel.ACT)),
        (
            K.TAINT_AT_RISK,
            {"level": "warn", "effect": "PreferNoSchedule", "held": "the budget is full"},
            AtRiskParams(RiskLevel.WARN, held="the budget is full"),
        ),
        (K.TAINT_AT_RISK, {}, AtRiskParams(RiskLevel.WARN)),
        (K.REQUEST_CHECKPOINT, {"uid": "u3"}, CheckpointParams(uid="u3")),
        (
            K.REQUEST_CHECKPOINT,
            {"kind": "Job", "name": "llm", "namespace": "train", "uid": "uid-llm", "api_version": "batch/v1"},
            CheckpointParams(owner=JOB, namespace="train"),
        ),
        (K.RECHECK, {"check": "3"}, RecheckParams(3)),
        (K.RECHECK, {}, RecheckParams(1)),
        (
            K.RAISE_CONDITION,
            {"condition": "GpuSoftFault", "reason": "PowerBrake"},
            ConditionParams("GpuSoftFault", reason="PowerBrake"),
        ),
        (K.CLEAR_CONDITION, {"condition": "GpuSoftFault"}, ConditionParams("GpuSoftFault")),
        (
            K.REQUEUE_WORKLOAD,
            {
                "kind": "Job",
                "name": "llm",
                "namespace": "train",
                "uid": "uid-llm",
                "api_version": "batch/v1",
                "queue": "team-a",
            },
            RequeueParams(JOB, namespace="train", queue="team-a"),
        ),
        (K.EVICT_POD, {}, None),
        (K.DRAIN, {}, None),
        (K.RECORD, {}, None),
        (K.CLEAR_AT_RISK, {}, None),
    ],
)
def test_journaled_parameters_of_every_kind_decode(
    kind: ActionKind, old: dict[str, str], expected: ActionParams | None
) -> None:
    decoded = action_params.from_object(kind, old)
    assert decoded == expected
    if decoded is not None:
        Action(kind=kind, track=Track.RECORD, reason="r", params=decoded)  # a valid action of its kind
    assert action_params.from_object(kind, action_params.to_object(decoded)) == decoded


@pytest.mark.parametrize(
    ("params", "written"),
    [
        (
            QuarantineParams(FaultClass.DRIVER_MISMATCH, cordon=False),
            {"class": "driver-mismatch", "cordon": "false"},
        ),
        (RestartParams("u1"), {"uid": "u1"}),
        # A remediator's template and URL are policy, not record: a URL may carry a token.
        (
            RemediationParams(FaultClass.REPLACE, "webhook", url="https://dc.example/replace?token=s3cret"),
            {"remediation": "replace", "remediator": "webhook"},
        ),
        (
            RemediationParams(FaultClass.RESET_GPU, "custom-resource", template="kind: Reset"),
            {"remediation": "reset-gpu", "remediator": "custom-resource"},
        ),
        (AtRiskParams(RiskLevel.ACT), {"level": "act"}),
        (AtRiskParams(RiskLevel.WARN, held="full"), {"level": "warn", "held": "full"}),
        (CheckpointParams(uid="u3"), {"uid": "u3"}),
        (
            CheckpointParams(owner=JOB, namespace="train"),
            {"kind": "Job", "name": "llm", "namespace": "train", "uid": "uid-llm", "api_version": "batch/v1"},
        ),
        (RecheckParams(2), {"check": "2"}),
        (ConditionParams("GpuSoftFault"), {"condition": "GpuSoftFault"}),
        (ConditionParams("GpuSoftFault", reason="X"), {"condition": "GpuSoftFault", "reason": "X"}),
        (None, {}),
    ],
)
def test_typed_parameters_are_written_as_string_objects(
    params: ActionParams | None, written: dict[str, str]
) -> None:
    assert action_params.to_object(params) == written


@pytest.mark.parametrize(
    ("kind", "row", "fault_class"),
    [
        (K.QUARANTINE, {"cordon": "true"}, None),  # no class in the row, none given
        (K.QUARANTINE, {"class": "melted"}, None),
        (K.REQUEST_REMEDIATION, {"remediation": "reset-gpu", "remediator": "carrier-pigeon"}, None),
        (K.RAISE_CONDITION, {"reason": "X"}, None),
        (K.RECHECK, {"check": "second"}, None),
        (K.TAINT_AT_RISK, {"level": "panic"}, None),
        (K.REQUEUE_WORKLOAD, {"kind": "Job", "name": "llm"}, None),  # no namespace: nowhere to look
    ],
)
def test_a_row_that_cannot_be_read_says_so(
    kind: ActionKind, row: dict[str, str], fault_class: FaultClass | None
) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message is for the operator, not the test
        action_params.from_object(kind, row, fault_class=fault_class)


def test_an_action_takes_exactly_its_kinds_parameters() -> None:
    with pytest.raises(TypeError, match="quarantine actions take QuarantineParams"):
        Action(kind=K.QUARANTINE, track=Track.HARDWARE, reason="r", params=RestartParams("u"))
    with pytest.raises(TypeError, match="quarantine actions take QuarantineParams, not None"):
        Action(kind=K.QUARANTINE, track=Track.HARDWARE, reason="r")
    with pytest.raises(TypeError, match="evict-pod actions take no parameters"):
        Action(kind=K.EVICT_POD, track=Track.WORKLOAD, reason="r", params=RestartParams("u"))
    action = Action(kind=K.RECHECK, track=Track.RECORD, reason="r", params=RecheckParams(1))
    with pytest.raises(TypeError, match="recheck action carries RecheckParams"):
        action.params_as(RestartParams)


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
