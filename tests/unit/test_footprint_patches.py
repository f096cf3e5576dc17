"""Node patches compared whole: each names the node and the resourceVersion it was read at, keeps an
earlier quarantine's start, and touches only what it owns."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.decide import conditions, footprint
from app.domain import (
    Condition,
    Fault,
    FaultClass,
    NodePatch,
    NodeState,
    RemediationState,
    RiskLevel,
    Signal,
    SignalSource,
    SignalStatus,
    Taint,
    freeze_mapping,
)

NOW = datetime.now(UTC)
OPERATOR = Taint("team/maintenance", "yes", "NoSchedule")


def node(
    *, state: str | None = None, taints: tuple[Taint, ...] = (), unschedulable: bool = False, **notes: str
) -> NodeState:
    return NodeState(
        name="n1",
        resource_version="41",
        unschedulable=unschedulable,
        taints=taints,
        labels=freeze_mapping({footprint.STATE: state} if state else {}),
        annotations=freeze_mapping(notes),
    )


def fault(cls: FaultClass) -> Fault:
    signal = Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint="f",
        status=SignalStatus.FIRING,
        name="A",
        starts_at=NOW,
        received_at=NOW,
        node="n1",
        gpu=0,
    )
    return Fault(fault_class=cls, signal=signal, reason="XID 79\n  fell off the bus", rule="xid")


@pytest.mark.parametrize(
    ("current", "incoming", "needed"),
    [
        (None, FaultClass.RESET_GPU, True),
        ("reset-gpu", FaultClass.RESET_GPU, False),
        ("reset-gpu", FaultClass.REBOOT_NODE, True),
        ("replace", FaultClass.REBOOT_NODE, False),
        ("driver-mismatch", FaultClass.RESET_GPU, True),
        ("reset-gpu", FaultClass.DRIVER_MISMATCH, False),
        ("bogus", FaultClass.RESET_GPU, True),  # a value we never wrote: not our quarantine
        ("driver-mismatch", FaultClass.TRANSIENT, False),
        ("transient", FaultClass.TRANSIENT, False),  # classes without a severity
        ("transient", FaultClass.DRIVER_MISMATCH, True),
    ],
)
def test_needs_quarantine_only_for_a_graver_class(
    current: str | None, incoming: FaultClass, needed: bool
) -> None:
    taints = (Taint(footprint.UNHEALTHY, current, "NoSchedule"),) if current else ()
    assert footprint.needs_quarantine(node(taints=taints), incoming) is needed


def test_a_requarantine_keeps_the_first_start_and_the_operators_taint() -> None:
    before = node(
        state="quarantined",
        taints=(OPERATOR, Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule")),
        unschedulable=True,
        **{
            footprint.OWNED_BY: "sickbay-0",
            footprint.SINCE: "2026-01-01T00:00:00+00:00",
            footprint.ADDED: "cordon,taint",
        },
    )
    patch = footprint.quarantine_patch(before, fault(FaultClass.REBOOT_NODE), now=NOW, identity="sickbay-1")
    assert patch.node == "n1"
    assert patch.resource_version == "41"
    assert patch.taints == (OPERATOR, Taint(footprint.UNHEALTHY, "reboot-node", "NoSchedule"))
    notes = dict(patch.annotations)
    assert notes[footprint.SINCE] == "2026-01-01T00:00:00+00:00"
    assert notes[footprint.ADDED] == "cordon,taint"
    assert notes[footprint.REASON] == "XID 79 fell off the bus"
    assert notes[footprint.OWNED_BY] == "sickbay-1"
    assert patch.unschedulable is None  # already cordoned: not ours to cordon again


def test_a_start_left_by_someone_else_is_not_ours_to_keep() -> None:
    before = node(**{footprint.SINCE: "2026-01-01T00:00:00+00:00"})
    patch = footprint.quarantine_patch(before, fault(FaultClass.RESET_GPU), now=NOW, identity="sickbay-0")
    notes = dict(patch.annotations)
    assert notes[footprint.SINCE] == NOW.isoformat()
    assert notes[footprint.ADDED] == "cordon,taint"
    assert patch.unschedulable is True


def test_state_patch_names_the_node_and_its_version() -> None:
    patch = footprint.state_patch(
        node(**{footprint.HEALTHY_SINCE: "x"}), RemediationState.DRAIN_FAILED, drain_failed="1"
    )
    assert patch == NodePatch(
        node="n1",
        resource_version="41",
        labels=((footprint.STATE, "drain-failed"),),
        annotations=((footprint.DRAIN_FAILED, "1"), (footprint.HEALTHY_SINCE, "")),
    )


def test_release_removes_only_what_sickbay_added() -> None:
    ours = node(
        state="quarantined",
        taints=(OPERATOR, Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule")),
        unschedulable=True,
        **{footprint.ADDED: "taint,cordon", footprint.REASON: "r"},
    )
    patch = footprint.release_patch(ours)
    assert (patch.node, patch.resource_version) == ("n1", "41")
    assert patch.taints == (OPERATOR,)
    assert patch.unschedulable is False
    # Nothing of ours among the taints: the list is left alone.
    assert footprint.release_patch(node(taints=(OPERATOR,))).taints is None


def test_at_risk_patch_on_a_healthy_node_and_on_a_quarantined_one() -> None:
    patch = footprint.at_risk_patch(
        node(taints=(OPERATOR,)), level=RiskLevel.WARN, reason="sbe\nrising", now=NOW
    )
    assert patch == NodePatch(
        node="n1",
        resource_version="41",
        labels=((footprint.STATE, "at-risk"),),
        annotations=((footprint.REASON, "sbe rising"), (footprint.SINCE, NOW.isoformat())),
        taints=(OPERATOR, Taint(footprint.AT_RISK, "warn", "PreferNoSchedule")),
    )
    again = footprint.at_risk_patch(
        node(state="at-risk", **{footprint.SINCE: "2026-01-01T00:00:00+00:00"}),
        level=RiskLevel.ACT,
        reason="r",
        now=NOW,
    )
    assert dict(again.annotations)[footprint.SINCE] == "2026-01-01T00:00:00+00:00"
    mid_quarantine = footprint.at_risk_patch(
        node(state="quarantined", **{footprint.SINCE: "2026-01-01T00:00:00+00:00"}),
        level=RiskLevel.ACT,
        reason="r",
        now=NOW,
    )
    assert (mid_quarantine.labels, mid_quarantine.annotations) == ((), ())


def test_clearing_at_risk_leaves_a_remediation_alone() -> None:
    at_risk = node(
        state="at-risk", taints=(Taint(footprint.AT_RISK, "act", "NoSchedule"),), **{footprint.REASON: "r"}
    )
    assert footprint.clear_at_risk_patch(at_risk) == NodePatch(
        node="n1",
        resource_version="41",
        labels=((footprint.STATE, ""),),
        annotations=((footprint.REASON, ""),),
        taints=(),
    )
    quarantined = node(state="quarantined", **{footprint.REASON: "r"})
    cleared = footprint.clear_at_risk_patch(quarantined)
    assert (cleared.labels, cleared.annotations, cleared.taints) == ((), (), None)


def test_the_unhealthy_condition_says_the_class() -> None:
    condition = conditions.unhealthy_condition(fault(FaultClass.REBOOT_NODE), now=NOW)
    assert (condition.type, condition.status, condition.reason, condition.message) == (
        "GpuHealthy",
        "False",
        "RebootNode",
        "XID 79 fell off the bus",
    )


def test_the_conditions_sickbay_writes_compared_whole() -> None:
    long = "x " * 800
    assert conditions.healthy_condition(now=NOW, message="all GPUs back") == Condition(
        type="GpuHealthy", status="True", reason="GpusHealthy", message="all GPUs back", last_transition=NOW
    )
    assert conditions.soft_condition(
        "GpuSoftFault", reason="GpuHot", message="hot\n  again", now=NOW
    ) == Condition(
        type="GpuSoftFault", status="True", reason="GpuHot", message="hot again", last_transition=NOW
    )
    assert len(conditions.soft_condition("K", reason="R", message=long, now=NOW).message) == 1000
    assert conditions.soft_cleared("GpuSoftFault", message="quiet", now=NOW) == Condition(
        type="GpuSoftFault", status="False", reason="NoSoftFault", message="quiet", last_transition=NOW
    )
    assert conditions.unhealthy_condition(fault(FaultClass.REPLACE), now=NOW) == Condition(
        type="GpuHealthy",
        status="False",
        reason="Replace",
        message="XID 79 fell off the bus",
        last_transition=NOW,
    )
    quarantined = node(**{footprint.REASON: "XID 48\nremap"})
    assert conditions.quarantined_condition(quarantined, FaultClass.RESET_GPU, now=NOW) == Condition(
        type="GpuHealthy", status="False", reason="ResetGpu", message="XID 48 remap", last_transition=NOW
    )
    assert conditions.quarantined_condition(node(), FaultClass.RESET_GPU, now=NOW).message == "reset-gpu"


def test_fault_of_reads_only_a_json_object() -> None:
    assert footprint.fault_of(node(**{footprint.FAULT: '{"class": "replace"}'})) == {"class": "replace"}
    assert footprint.fault_of(node(**{footprint.FAULT: "[1]"})) == {}
    assert footprint.fault_of(node(**{footprint.FAULT: "{broken"})) == {}
    assert footprint.fault_of(node()) == {}
