"""The journal's JSON round trips: a plan's shadowed actions, an action's pod container and missing reason,
and a signal already decoded (datetimes and mappings given as values, not text)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from app.domain import (
    Action,
    ActionKind,
    Fault,
    FaultClass,
    Plan,
    PodRef,
    QuarantineParams,
    Signal,
    SignalSource,
    SignalStatus,
    Track,
)
from app.store import codec

NOW = datetime.now(UTC)
SIGNAL = Signal(
    source=SignalSource.AGENT,
    fingerprint="ev",
    status=SignalStatus.FIRING,
    name="agent:xid",
    starts_at=NOW,
    received_at=NOW,
    node="n1",
    gpu=2,
    xid=79,
    pod=PodRef("ml", "train-0", "main"),
    labels=(("kind", "xid"),),
)


def test_a_signal_dict_is_json_and_decodes_back() -> None:
    as_dict = codec.signal_to_dict(SIGNAL)
    assert as_dict["starts_at"] == NOW.isoformat()  # JSON mode: text, not a datetime
    assert json.loads(codec.dumps(as_dict)) == as_dict
    assert codec.signal_from_dict(as_dict) == SIGNAL
    assert codec.signal_from_dict(json.loads(codec.signal_json(SIGNAL))) == SIGNAL


def test_a_plans_shadowed_actions_are_journaled() -> None:
    fault = Fault(fault_class=FaultClass.AT_RISK, signal=SIGNAL, reason="r", rule="label")
    would = Action(
        kind=ActionKind.QUARANTINE,
        track=Track.HARDWARE,
        reason="would quarantine",
        node="n1",
        params=QuarantineParams(FaultClass.RESET_GPU),
        not_before=NOW,
    )
    encoded = codec.plan_to_dict(Plan.record_only(fault, NOW, "shadow", shadowed=(would,)))
    assert json.loads(codec.dumps(encoded)) == encoded
    assert encoded["decided_at"] == NOW.isoformat()
    assert len(encoded["shadowed"]) == 1
    assert codec.action_from_dict(encoded["shadowed"][0]) == would
    assert "shadowed" not in codec.plan_to_dict(Plan.record_only(fault, NOW, "acting"))


def test_an_action_row_keeps_its_pod_container_and_may_lack_a_reason() -> None:
    row = {
        "kind": "evict-pod",
        "track": "workload",
        "node": "n1",
        "pod": {"namespace": "ml", "name": "p", "container": "c"},
    }
    assert codec.action_from_dict(row) == Action(
        kind=ActionKind.EVICT_POD, track=Track.WORKLOAD, reason="", node="n1", pod=PodRef("ml", "p", "c")
    )
