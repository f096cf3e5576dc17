"""Non-XID alerts: the rule bundle's class label, the policy's name table, and the transient default."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.classify.classifier import Rules, classify
from app.config import rules
from app.config.settings import RULES_DIR
from app.decide import footprint
from app.domain import FaultClass, Signal, SignalSource, SignalStatus, freeze_mapping

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def shipped() -> Rules:
    return Rules(
        catalog=rules.load_catalog(RULES_DIR / "xid-catalog.yaml"),
        policy=rules.load_policy(RULES_DIR / "policy.yaml"),
    )


def alert(name: str, status: SignalStatus = SignalStatus.FIRING, **labels: str) -> Signal:
    return Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint="f",
        status=status,
        name=name,
        starts_at=T0,
        received_at=T0,
        node="gpu-node-2",
        labels=freeze_mapping({"alertname": name, **labels}),
    )


@pytest.mark.parametrize(
    ("labels", "name", "expected", "rule"),
    [
        ({"sickbay_class": "reset-gpu"}, "GpuDoubleBitEcc", "reset-gpu", "label"),
        ({"sickbay_class": "driver-mismatch"}, "Whatever", "driver-mismatch", "label"),
        ({"sickbay_class": "bogus"}, "Whatever", "transient", "unknown-class-label"),
        ({"sickbay_class": "depends"}, "Whatever", "transient", "depends-without-xid"),
        ({}, "GpuRowRemapFailure", "replace", "policy"),
        ({}, "SomethingNobodyKnows", "transient", "default"),
    ],
)
def test_alert_classes(shipped: Rules, labels: dict[str, str], name: str, expected: str, rule: str) -> None:
    fault = classify(alert(name, **labels), rules=shipped)
    assert fault.fault_class == FaultClass(expected)
    assert fault.rule == rule


def test_resolved_alert_keeps_its_class_and_says_resolved(shipped: Rules) -> None:
    fault = classify(alert("X", SignalStatus.RESOLVED, sickbay_class="reset-gpu"), rules=shipped)
    assert fault.fault_class is FaultClass.RESET_GPU
    assert fault.reason.startswith("resolved:")


def test_fault_annotation_is_compact_json(shipped: Rules) -> None:
    fault = classify(alert("X", sickbay_class="reset-gpu"), rules=shipped)
    assert (
        footprint.fault_annotation(fault) == '{"class":"reset-gpu","source":"alertmanager","fingerprint":"f"}'
    )
