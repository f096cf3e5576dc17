"""Which lane an inbox row waits in: fatal for what may be a hardware fault, soft for the rest, read from the
stored record's few fields and decided by the same data classification uses."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.classify.classifier import Rules, classify
from app.classify.lanes import Marks, lane_of
from app.config import rules
from app.config.settings import RULES_DIR
from app.domain import FaultClass, Lane, Signal, SignalSource, SignalStatus, freeze_mapping
from app.service import lanes as record_lanes
from app.store import codec
from app.store.inbox import RECHECK_SOURCE, Record
from tests.payloads import alert

NOW = datetime.now(UTC)


@pytest.fixture(scope="module")
def shipped() -> Rules:
    return Rules(
        catalog=rules.load_catalog(RULES_DIR / "xid-catalog.yaml"),
        policy=rules.load_policy(RULES_DIR / "policy.yaml"),
    )


@pytest.mark.parametrize(
    ("marks", "lane"),
    [
        (Marks(firing=True, xid=79), Lane.FATAL),  # fell off the bus: reboot-node
        (Marks(firing=True, xid=64), Lane.FATAL),  # reset-gpu
        (Marks(firing=True, xid=54), Lane.FATAL),  # replace
        (Marks(firing=True, xid=48), Lane.FATAL),  # double-bit ECC: depends, falls back to reset-gpu
        (Marks(firing=True, xid=74), Lane.FATAL),  # NVLink: depends, falls back to reset-gpu
        (Marks(firing=True, xid=45), Lane.SOFT),  # depends with no fallback: alone it is ignored
        (Marks(firing=True, xid=13), Lane.SOFT),  # application error: restart-workload
        (Marks(firing=True, xid=43), Lane.SOFT),  # ignore
        (Marks(firing=True, xid=250), Lane.SOFT),  # not in the catalog: the policy's unknown_xid, transient
        (Marks(firing=False, xid=79), Lane.SOFT),  # resolved: never urgent
        # The XID decides before the label, as in classification.
        (Marks(firing=True, xid=13, class_label="reboot-node"), Lane.SOFT),
        (Marks(firing=True, name="GpuRowRemapFailure", class_label="replace"), Lane.FATAL),
        (Marks(firing=True, name="GpuThermalThrottle", class_label="transient"), Lane.SOFT),
        (Marks(firing=True, name="X", class_label="no-such-class"), Lane.SOFT),
        (Marks(firing=True, name="GpuFellOffBus"), Lane.FATAL),  # the policy's alert-name table
        (Marks(firing=True, name="GpuDriverVersionMismatch"), Lane.SOFT),  # not a hardware class
        (Marks(firing=True, name="SomethingNobodyKnows"), Lane.SOFT),
        (Marks(firing=True, name="agent:gpu-lost", agent_kind="gpu-lost"), Lane.FATAL),
        (Marks(firing=True, name="agent:double-bit-ecc", agent_kind="double-bit-ecc"), Lane.FATAL),
        (Marks(firing=True, name="agent:gpu-unavailable", agent_kind="gpu-unavailable"), Lane.FATAL),
        (Marks(firing=True, name="agent:dram-retirement", agent_kind="dram-retirement"), Lane.SOFT),
    ],
)
def test_lane_of_marks(shipped: Rules, marks: Marks, lane: Lane) -> None:
    assert lane_of(marks, rules=shipped) is lane


def test_the_lane_follows_the_catalog_for_every_xid_it_classifies_alone(shipped: Rules) -> None:
    """For every XID that is not `depends`, fatal exactly when classification (with no context) says a
    hardware class: the lane and the fault are read from the same catalog."""
    for xid, entry in shipped.catalog.xids.items():
        if entry.fault_class is FaultClass.DEPENDS:
            continue
        signal = Signal(
            source=SignalSource.ALERTMANAGER,
            fingerprint=f"x{xid}",
            status=SignalStatus.FIRING,
            name="GpuXid",
            starts_at=NOW,
            received_at=NOW,
            node="gpu-node-1",
            gpu=0,
            xid=xid,
        )
        hardware = classify(signal, rules=shipped).fault_class.is_hardware
        assert (lane_of(Marks(firing=True, xid=xid), rules=shipped) is Lane.FATAL) is hardware, xid


def test_a_reclassified_xid_changes_lane(shipped: Rules) -> None:
    entry = shipped.catalog.xids[13]
    catalog = shipped.catalog.model_copy(
        update={
            "xids": {**shipped.catalog.xids, 13: entry.model_copy(update={"fault_class": FaultClass.REPLACE})}
        }
    )
    assert (
        lane_of(Marks(firing=True, xid=13), rules=Rules(catalog=catalog, policy=shipped.policy)) is Lane.FATAL
    )


def _record(source: str, payload: Any, *, status: str = "firing") -> Record:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return Record(source, "f", NOW.isoformat(), status, "gpu-node-1", text, NOW.isoformat())


def _signal_json(**fields: Any) -> str:
    signal = Signal(
        source=SignalSource.ALLOCATABLE,
        fingerprint="s",
        status=SignalStatus.FIRING,
        name=fields.pop("name", "GpuAllocatableDropped"),
        starts_at=NOW - timedelta(minutes=1),
        received_at=NOW,
        node="gpu-node-1",
        labels=freeze_mapping(fields.pop("labels", {})),
        **fields,
    )
    return codec.signal_json(signal)


@pytest.mark.parametrize(
    ("record", "marks"),
    [
        (
            _record("alertmanager", alert(xid="79")),
            Marks(firing=True, name="GpuXidFatal", xid=79, class_label="reboot-node"),
        ),
        (  # dcgm-exporter's older label for the XID
            _record(
                "alertmanager", alert(alertname="GpuXid", xid="", err_code="48", sickbay_class="depends")
            ),
            Marks(firing=True, name="GpuXid", xid=48, class_label="depends"),
        ),
        (
            _record("alertmanager", {**alert(xid="79"), "labels": {"alertname": "A", "err_code": "48"}}),
            Marks(firing=True, name="A", xid=48),
        ),
        (
            _record("alertmanager", alert(xid="79", status="resolved"), status="resolved"),
            Marks(firing=False, name="GpuXidFatal", xid=79, class_label="reboot-node"),
        ),
        (  # an XID label no XID could have: not a number the lane trusts
            _record("alertmanager", alert(xid="9" * 5000)),
            Marks(firing=True, name="GpuXidFatal", xid=None, class_label="reboot-node"),
        ),
        (
            _record("alertmanager", alert(xid="٧٩")),
            Marks(firing=True, name="GpuXidFatal", class_label="reboot-node"),
        ),
        (
            _record(
                "agent", {"id": "e1", "node": "gpu-node-1", "gpu": 0, "kind": "gpu-lost", "occurred_at": "x"}
            ),
            Marks(firing=True, name="agent:gpu-lost", agent_kind="gpu-lost"),
        ),
        (
            _record("agent", {"id": "e2", "node": "gpu-node-1", "gpu": 0, "kind": "xid", "xid": 64}),
            Marks(firing=True, name="agent:xid", xid=64, agent_kind="xid"),
        ),
        (
            _record("allocatable", _signal_json(xid=79, labels={"sickbay_class": "reboot-node"})),
            Marks(firing=True, name="GpuAllocatableDropped", xid=79, class_label="reboot-node"),
        ),
        (
            _record(RECHECK_SOURCE, _signal_json(name="GpuThermalThrottle")),
            Marks(firing=True, name="GpuThermalThrottle"),
        ),
        (_record("alertmanager", "[1, 2]"), Marks(firing=False)),
    ],
)
def test_marks_are_read_from_the_stored_record(record: Record, marks: Marks) -> None:
    assert record_lanes.marks_of(record) == marks


def test_a_record_lane_end_to_end(shipped: Rules) -> None:
    fatal = _record("alertmanager", alert(xid="79"))
    soft = _record("alertmanager", alert(alertname="GpuThermalThrottle", xid="", sickbay_class="transient"))
    assert record_lanes.lane_of(fatal, rules=shipped) is Lane.FATAL
    assert record_lanes.lane_of(soft, rules=shipped) is Lane.SOFT
