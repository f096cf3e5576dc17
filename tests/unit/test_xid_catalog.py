"""Every XID in the design's fault-class table classifies to its class, through the shipped catalog."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
import yaml

from app.classify.signals import Rules, classify
from app.config import rules
from app.config.settings import RULES_DIR
from app.decide import plans
from app.domain import FaultClass, Signal, SignalSource, SignalStatus, freeze_mapping

# The design's table (ARCHITECTURE.md, "Fault classes and the XID table"), copied as the contract.
DESIGN_TABLE: dict[str, list[int]] = {
    "ignore": [38, 43, 63, 92, 121, 157, 160],
    "restart-workload": [8, 13, 31, 32, 68, 69, 94],
    "reset-gpu": [46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158],
    "reboot-node": [79, 151],
    "replace": [54],
    "depends": [45, 48, 74, 144, 145, 146, 147, 148, 149, 150, 154],
}
T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def shipped() -> Rules:
    return Rules(
        catalog=rules.load_catalog(RULES_DIR / "xid-catalog.yaml"),
        policy=rules.load_policy(RULES_DIR / "policy.yaml"),
    )


def xid_signal(xid: int, **labels: str) -> Signal:
    return Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint=f"fp-{xid}",
        status=SignalStatus.FIRING,
        name="GpuXid",
        starts_at=T0,
        received_at=T0,
        node="gpu-node-1",
        gpu=0,
        xid=xid,
        labels=freeze_mapping({"xid": str(xid), **labels}),
    )


def test_catalog_file_covers_every_xid_of_the_design() -> None:
    raw = yaml.safe_load((RULES_DIR / "xid-catalog.yaml").read_text())
    listed = {int(x): entry["class"] for x, entry in raw["xids"].items()}
    for cls, xids in DESIGN_TABLE.items():
        for xid in xids:
            assert xid in listed, f"XID {xid} of the design's table is missing from rules/xid-catalog.yaml"
            assert listed[xid] == cls, f"XID {xid}: catalog says {listed[xid]}, design says {cls}"


@pytest.mark.parametrize(
    ("xid", "expected"),
    [(x, cls) for cls, xids in DESIGN_TABLE.items() if cls != "depends" for x in xids],
)
def test_plain_xids_classify_to_their_class(shipped: Rules, xid: int, expected: str) -> None:
    fault = classify(xid_signal(xid), rules_=shipped)
    assert fault.fault_class == FaultClass(expected)
    assert f"XID {xid}" in fault.reason


def test_xid_48_is_reset_gpu_without_remap_failure(shipped: Rules) -> None:
    assert classify(xid_signal(48), rules_=shipped).fault_class is FaultClass.RESET_GPU


def test_xid_48_with_remap_failure_label_is_replace(shipped: Rules) -> None:
    fault = classify(xid_signal(48, row_remap_failure="1"), rules_=shipped)
    assert fault.fault_class is FaultClass.REPLACE
    assert "row-remap failure" in fault.reason


def test_xid_48_with_remap_failure_alert_in_context_is_replace(shipped: Rules) -> None:
    remap = Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint="remap",
        status=SignalStatus.FIRING,
        name="GpuRowRemapFailure",
        starts_at=T0,
        received_at=T0,
        node="gpu-node-1",
        gpu=0,
    )
    fault = classify(xid_signal(48), rules_=shipped, context=[remap])
    assert fault.fault_class is FaultClass.REPLACE
    assert fault.evidence


def test_remap_failure_on_another_gpu_does_not_count(shipped: Rules) -> None:
    other = replace(xid_signal(48, row_remap_failure="1"), gpu=5, fingerprint="x")
    assert classify(xid_signal(48), rules_=shipped, context=[other]).fault_class is FaultClass.RESET_GPU


def test_xid_45_alone_is_ignored(shipped: Rules) -> None:
    fault = classify(xid_signal(45), rules_=shipped)
    assert fault.fault_class is FaultClass.IGNORE
    assert "never a root cause" in fault.reason


@pytest.mark.parametrize(
    ("companion", "expected"), [(79, "reboot-node"), (13, "restart-workload"), (95, "reset-gpu")]
)
def test_xid_45_takes_the_class_of_its_companion(shipped: Rules, companion: int, expected: str) -> None:
    fault = classify(xid_signal(45), rules_=shipped, context=[xid_signal(companion)])
    assert fault.fault_class == FaultClass(expected)


def test_xid_45_takes_the_worst_companion(shipped: Rules) -> None:
    fault = classify(xid_signal(45), rules_=shipped, context=[xid_signal(13), xid_signal(79)])
    assert fault.fault_class is FaultClass.REBOOT_NODE


@pytest.mark.parametrize(
    ("action", "expected"),
    [("0", "ignore"), ("1", "reset-gpu"), ("2", "reboot-node"), ("4", "reset-gpu"), ("7", "reboot-node")],
)
def test_xid_154_follows_the_recovery_action(shipped: Rules, action: str, expected: str) -> None:
    fault = classify(xid_signal(154, recovery_action=action), rules_=shipped)
    assert fault.fault_class == FaultClass(expected)


def test_xid_154_without_action_falls_back(shipped: Rules) -> None:
    fault = classify(xid_signal(154), rules_=shipped)
    assert fault.fault_class is FaultClass.RESET_GPU
    assert "without the driver's recovery action" in fault.reason


def test_xid_74_is_transient_until_the_link_repeats(shipped: Rules) -> None:
    first = classify(xid_signal(74, link="2"), rules_=shipped)
    assert first.fault_class is FaultClass.TRANSIENT
    earlier = [replace(xid_signal(74, link="2"), fingerprint=f"old-{i}") for i in range(2)]
    repeated = classify(xid_signal(74, link="2"), rules_=shipped, context=earlier)
    assert repeated.fault_class is FaultClass.RESET_GPU
    other_link = [replace(xid_signal(74, link="5"), fingerprint=f"l-{i}") for i in range(2)]
    assert (
        classify(xid_signal(74, link="2"), rules_=shipped, context=other_link).fault_class
        is FaultClass.TRANSIENT
    )


def test_unknown_xid_is_transient_not_dropped(shipped: Rules) -> None:
    fault = classify(xid_signal(999), rules_=shipped)
    assert fault.fault_class is FaultClass.TRANSIENT
    assert "not in the catalog" in fault.reason


def test_agent_event_and_alert_for_the_same_xid_are_one_fault(shipped: Rules) -> None:
    agent = replace(xid_signal(79), source=SignalSource.AGENT, fingerprint="gpu-node-1-abc")
    alert = xid_signal(79)
    first = classify(agent, rules_=shipped)
    second = classify(alert, rules_=shipped, context=[agent])
    assert first.rule == "xid"
    assert second.rule == "duplicate"
    assert "already reported by agent" in second.reason
    assert plans.plan_for(second, policy=shipped.policy, now=T0).is_noop
    # A different XID, or the same source again, is not a duplicate.
    assert classify(xid_signal(95), rules_=shipped, context=[agent]).rule == "xid"
    assert classify(replace(alert, fingerprint="x"), rules_=shipped, context=[alert]).rule == "xid"
