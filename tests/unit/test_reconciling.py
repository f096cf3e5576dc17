"""Reconciliation's decisions are pure: (node, observations, policy, now) → what to do with an owned node.

Table-driven, no mocks, no clock: every timer is an annotation on the node in the table, so each row is
also what a new leader decides from the same node.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.config import rules
from app.decide import footprint, reconciling
from app.domain import (
    Condition,
    Fault,
    FaultClass,
    NodeState,
    OwnerRef,
    PodState,
    RemediationParams,
    RemediationState,
    Signal,
    SignalSource,
    SignalStatus,
    Taint,
    freeze_mapping,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
DELAY = 10 * MIN
RELEASE = rules.ReleasePolicy(healthy_delay=DELAY)
POLICY = rules.Policy(version=1)  # reset-gpu: annotate, 1 h; reboot-node: annotate, 2 h; replace: none


def owned(
    state: RemediationState | None,
    cls: FaultClass | None = FaultClass.RESET_GPU,
    *,
    added: str = "cordon,taint",
    unschedulable: bool = True,
    capacity: int = 8,
    allocatable: int = 8,
    conditions: tuple[Condition, ...] = (),
    **annotations: str,
) -> NodeState:
    """A node as Sickbay leaves it: owned, its marks recorded, quarantined for `cls` (taint and fault)."""
    marks = {footprint.OWNED_BY: "sickbay-0", footprint.ADDED: added, **annotations}
    if cls is not None:
        marks[footprint.FAULT] = f'{{"class":"{cls.value}"}}'
    return NodeState(
        name="n1",
        unschedulable=unschedulable,
        taints=(Taint(footprint.UNHEALTHY, cls.value, "NoSchedule"),) if cls is not None else (),
        labels=freeze_mapping({footprint.STATE: state.value} if state else {}),
        annotations=freeze_mapping(marks),
        conditions=conditions,
        gpu_capacity=capacity,
        gpu_allocatable=allocatable,
    )


def since(at: datetime | str) -> dict[str, str]:
    return {footprint.HEALTHY_SINCE: at if isinstance(at, str) else at.isoformat()}


def requested(at: datetime | str, what: str = "reset-gpu") -> dict[str, str]:
    return {
        footprint.REMEDIATION_REQUESTED: what,
        footprint.REMEDIATION_REQUESTED_AT: at if isinstance(at, str) else at.isoformat(),
    }


def shape(decision: object) -> tuple[object, ...]:
    """The part of a decision a row pins down: its kind and its time (reasons are for people)."""
    match decision:
        case reconciling.Release():
            return ("release",)
        case reconciling.Mark(since=at):
            return ("mark", at)
        case reconciling.Wait(until=at):
            return ("wait", at)
        case reconciling.Verify():
            return ("verify",)
        case reconciling.Escalate():
            return ("escalate",)
        case reconciling.DrainAgain(how=how):
            return ("drain", how)
    raise AssertionError(decision)


VERIFYING = RemediationState.VERIFYING


@pytest.mark.parametrize(
    ("node", "firing", "policy", "expected"),
    [
        # First seen healthy: the mark is written, the delay counts from now.
        (owned(VERIFYING), [], RELEASE, ("mark", T0)),
        # Marked earlier (by this replica or the one before it): wait for the rest, then release.
        (owned(VERIFYING, **since(T0 - 4 * MIN)), [], RELEASE, ("wait", T0 + 6 * MIN)),
        (owned(VERIFYING, **since(T0 - DELAY)), [], RELEASE, ("release",)),
        (owned(VERIFYING, **since(T0 - DELAY - MIN)), [], RELEASE, ("release",)),
        # No delay: released the first time it is seen healthy, no mark needed.
        (owned(VERIFYING), [], rules.ReleasePolicy(healthy_delay=timedelta(0)), ("release",)),
        # A hardware or driver fault still firing: the mark goes, the delay starts over.
        (owned(VERIFYING, **since(T0 - DELAY)), ["reset-gpu"], RELEASE, ("mark", None)),
        (owned(VERIFYING, **since(T0 - DELAY)), ["driver-mismatch"], RELEASE, ("mark", None)),
        (owned(VERIFYING), ["replace", "reboot-node"], RELEASE, ("wait", None)),
        # Faults that hold no node do not keep it: a soft signal, a workload's own failure, a risk.
        (
            owned(VERIFYING, **since(T0 - DELAY)),
            ["transient", "restart-workload", "at-risk"],
            RELEASE,
            ("release",),
        ),
        # GPU allocatable below capacity (the device plugin still hides a GPU) is not healthy.
        (owned(VERIFYING, allocatable=7, **since(T0 - DELAY)), [], RELEASE, ("mark", None)),
        (owned(VERIFYING, allocatable=7), [], RELEASE, ("wait", None)),
        (owned(VERIFYING, capacity=0, allocatable=0), [], RELEASE, ("mark", T0)),
        # A mark that cannot be read is written again from now; one without an offset is UTC.
        (owned(VERIFYING, **since("yesterday")), [], RELEASE, ("mark", T0)),
        (owned(VERIFYING, **since("")), [], RELEASE, ("mark", T0)),
        (owned(VERIFYING, **since("2026-03-01T11:50:00")), [], RELEASE, ("release",)),
        (owned(VERIFYING, **since("2026-03-01T11:55:00")), [], RELEASE, ("wait", T0 + 5 * MIN)),
        # A mark ahead of this replica's clock is honoured as written.
        (owned(VERIFYING, **since(T0 + MIN)), [], RELEASE, ("wait", T0 + MIN + DELAY)),
    ],
)
def test_release_step(
    node: NodeState, firing: list[str], policy: rules.ReleasePolicy, expected: tuple[object, ...]
) -> None:
    assert shape(reconciling.release_step(node, firing=firing, policy=policy, now=T0)) == expected


def test_a_new_leader_resumes_the_same_release_time() -> None:
    """The failover in one test: what replica A writes at t0 is all B needs to release at t0 + delay."""
    node = owned(VERIFYING)
    first = reconciling.release_step(node, firing=[], policy=RELEASE, now=T0)
    assert isinstance(first, reconciling.Mark)
    assert first.since == T0
    marked = footprint.healthy_mark_patch(node, since=first.since)
    after_failover = owned(VERIFYING, **dict(marked.annotations))
    halfway = reconciling.release_step(after_failover, firing=[], policy=RELEASE, now=T0 + DELAY / 2)
    assert shape(halfway) == ("wait", T0 + DELAY)
    at_delay = reconciling.release_step(after_failover, firing=[], policy=RELEASE, now=T0 + DELAY)
    assert shape(at_delay) == ("release",)


def test_why_names_what_keeps_the_node() -> None:
    held = reconciling.release_step(owned(VERIFYING), firing=["reset-gpu"], policy=RELEASE, now=T0)
    assert "reset-gpu" in held.why
    short = reconciling.release_step(owned(VERIFYING, allocatable=6), firing=[], policy=RELEASE, now=T0)
    assert "allocatable 6 is below capacity 8" in short.why
    released = reconciling.release_step(
        owned(VERIFYING, **since(T0 - DELAY)), firing=[], policy=RELEASE, now=T0
    )
    assert released.why == "no active fault and healthy for 0:10:00; remediation complete"


REMEDIATING = RemediationState.REMEDIATING
NO_HUMAN = POLICY.model_copy(update={"remediation": {"reset-gpu": rules.Remediator(kind="none")}})
WEBHOOK = rules.Remediator(kind="webhook", url="https://repair.example/ask", timeout=30 * MIN)
TEMPLATE = "apiVersion: repair.example/v1\nkind: Reboot\nmetadata: {name: $node}\n"
CUSTOM = POLICY.model_copy(
    update={
        "remediation": {
            "reset-gpu": WEBHOOK,
            "reboot-node": rules.Remediator(kind="custom-resource", template=TEMPLATE),
            "replace": rules.Remediator(kind="webhook", url="https://dc.example/replace"),
        }
    }
)


@pytest.mark.parametrize(
    ("node", "policy", "expected"),
    [
        # Done: verify, however long it took.
        (owned(REMEDIATING, **{footprint.REMEDIATION_DONE: "reset-gpu"}), POLICY, ("verify",)),
        (
            owned(REMEDIATING, **requested(T0 - 3 * 60 * MIN), **{footprint.REMEDIATION_DONE: "yes"}),
            POLICY,
            ("verify",),
        ),
        # The timeout (1 h for reset-gpu) counts from the request; escalation only once it is past.
        (owned(REMEDIATING, **requested(T0 - 59 * MIN)), POLICY, ("wait", T0 + MIN)),
        (owned(REMEDIATING, **requested(T0 - 60 * MIN)), POLICY, ("wait", T0)),
        (owned(REMEDIATING, **requested(T0 - 61 * MIN)), POLICY, ("escalate",)),
        # Each class has its remediator's timeout: reboot-node's is 2 h.
        (
            owned(REMEDIATING, FaultClass.REBOOT_NODE, **requested(T0 - 61 * MIN, "reboot-node")),
            POLICY,
            ("wait", T0 + 59 * MIN),
        ),
        (
            owned(REMEDIATING, FaultClass.REBOOT_NODE, **requested(T0 - 121 * MIN, "reboot-node")),
            POLICY,
            ("escalate",),
        ),
        # Written by hand without an offset: UTC.
        (owned(REMEDIATING, **requested("2026-03-01T10:00:00")), POLICY, ("escalate",)),
        # Nothing to escalate to: replacement asked for, or already escalated (no second Event each round).
        (
            owned(REMEDIATING, FaultClass.REPLACE, **requested(T0 - 99 * 60 * MIN, "replace")),
            POLICY,
            ("wait", None),
        ),
        (owned(REMEDIATING, **requested(T0 - 3 * 60 * MIN, "replace")), POLICY, ("wait", None)),
        # A human remediates (`none`): no timeout.
        (owned(REMEDIATING, **requested(T0 - 99 * 60 * MIN)), NO_HUMAN, ("wait", None)),
        # No time to count from, or one that cannot be read: wait rather than replace a node on a guess.
        (owned(REMEDIATING), POLICY, ("wait", None)),
        (owned(REMEDIATING, **requested("an hour ago")), POLICY, ("wait", None)),
        # No readable class: nothing to look the remediator up by.
        (owned(REMEDIATING, None, **requested(T0 - 3 * 60 * MIN)), POLICY, ("wait", None)),
    ],
)
def test_remediation_step(node: NodeState, policy: rules.Policy, expected: tuple[object, ...]) -> None:
    cls = reconciling.fault_class(node)
    assert shape(reconciling.remediation_step(node, cls, policy=policy, now=T0)) == expected


def test_escalation_says_what_timed_out() -> None:
    node = owned(REMEDIATING, **requested(T0 - 61 * MIN))
    decision = reconciling.remediation_step(node, FaultClass.RESET_GPU, policy=POLICY, now=T0)
    assert decision == reconciling.Escalate(
        why="reset-gpu did not complete within 1:00:00; escalating to replace",
        remediation=RemediationParams(FaultClass.REPLACE, "none"),
    )


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (POLICY, RemediationParams(FaultClass.REPLACE, "none")),
        (CUSTOM, RemediationParams(FaultClass.REPLACE, "webhook", url="https://dc.example/replace")),
    ],
)
def test_an_escalation_hands_off_to_the_replace_remediator(
    policy: rules.Policy, expected: RemediationParams
) -> None:
    node = owned(REMEDIATING, **requested(T0 - 61 * MIN))
    decision = reconciling.remediation_step(node, FaultClass.RESET_GPU, policy=policy, now=T0)
    assert isinstance(decision, reconciling.Escalate)
    assert decision.remediation == expected


def gpu_pod(name: str, **kw: object) -> PodState:
    return PodState(namespace="training", name=name, node="n1", gpu_request=2, **kw)  # type: ignore[arg-type]


DAEMON = PodState(
    namespace="gpu-operator", name="dcgm", node="n1", gpu_request=0, owners=(OwnerRef("DaemonSet", "dcgm"),)
)
DRAIN = rules.DrainPolicy(retry_after=10 * MIN)
FAILED = RemediationState.DRAIN_FAILED


def failed_at(at: datetime) -> dict[str, str]:
    return {
        footprint.DRAIN_FAILED: "1 of 1 pod(s) still on the node",
        footprint.DRAIN_FAILED_AT: at.isoformat(),
    }


@pytest.mark.parametrize(
    ("node", "pods", "policy", "expected"),
    [
        # The retry is due: drained again, whatever is on the node.
        (owned(FAILED, **failed_at(T0 - 10 * MIN)), [gpu_pod("a")], DRAIN, ("drain", "retried")),
        (owned(FAILED), [gpu_pod("a")], DRAIN, ("drain", "retried")),
        # Not due, but nothing drainable is left (a human moved the pods): finished now.
        (owned(FAILED, **failed_at(T0 - MIN)), [], DRAIN, ("drain", "finished")),
        (
            owned(FAILED, **failed_at(T0 - MIN)),
            [DAEMON, gpu_pod("done", phase="Succeeded")],
            DRAIN,
            ("drain", "finished"),
        ),
        # Not due and a GPU pod still there: wait for the retry.
        (owned(FAILED, **failed_at(T0 - MIN)), [DAEMON, gpu_pod("a")], DRAIN, ("wait", T0 + 9 * MIN)),
        # No retries by policy: only the pods leaving (or a human) moves it on.
        (
            owned(FAILED, **failed_at(T0 - 99 * MIN)),
            [gpu_pod("a")],
            rules.DrainPolicy(retry_after=None),
            ("wait", None),
        ),
        (
            owned(FAILED, **failed_at(T0 - 99 * MIN)),
            [],
            rules.DrainPolicy(retry_after=None),
            ("drain", "finished"),
        ),
    ],
)
def test_drain_again(
    node: NodeState, pods: list[PodState], policy: rules.DrainPolicy, expected: tuple[object, ...]
) -> None:
    assert shape(reconciling.drain_again(node, pods=pods, policy=policy, now=T0)) == expected


Step = reconciling.Step
S = RemediationState


@pytest.mark.parametrize(
    ("node", "drain_running", "step"),
    [
        # An operator uncordoned a node Sickbay cordoned: step back, in any state.
        (owned(S.DRAINING, unschedulable=False), True, Step.STEP_BACK),
        (owned(S.VERIFYING, unschedulable=False), False, Step.STEP_BACK),
        # Sickbay never cordoned it (a driver mismatch, or the operator's own cordon): no step back.
        (
            owned(S.QUARANTINED, FaultClass.DRIVER_MISMATCH, added="taint", unschedulable=False),
            False,
            Step.RELEASE,
        ),
        (owned(S.QUARANTINED, added="taint", unschedulable=False), False, Step.RESUME_DRAIN),
        # Quarantined or draining: released when no repair is needed, else drained (unless a drain runs).
        (owned(S.QUARANTINED, FaultClass.DRIVER_MISMATCH), False, Step.RELEASE),
        (owned(S.DRAINING, None), False, Step.RELEASE),
        (owned(S.DRAINING, FaultClass.REBOOT_NODE), False, Step.RESUME_DRAIN),
        (owned(S.QUARANTINED), True, Step.NOTHING),
        # Drain-failed: drained again unless a drain runs; with no class to drain for, a human decides.
        (owned(S.DRAIN_FAILED), False, Step.DRAIN_AGAIN),
        (owned(S.DRAIN_FAILED), True, Step.NOTHING),
        (owned(S.DRAIN_FAILED, None), False, Step.NOTHING),
        (owned(S.REMEDIATING), True, Step.FOLLOW_REMEDIATION),
        (owned(S.VERIFYING), False, Step.RELEASE),
        (owned(S.AT_RISK), False, Step.NOTHING),
        (owned(None), False, Step.NOTHING),
    ],
)
def test_next_step(node: NodeState, drain_running: bool, step: reconciling.Step) -> None:
    assert reconciling.next_step(node, drain_running=drain_running, policy=POLICY).step is step


@pytest.mark.parametrize(
    ("node", "policy", "expected"),
    [
        # A drain reconciliation starts hands the node to the remediator its class names in the policy.
        (owned(S.QUARANTINED), POLICY, RemediationParams(FaultClass.RESET_GPU, "annotate")),
        (
            owned(S.DRAIN_FAILED, FaultClass.REBOOT_NODE),
            POLICY,
            RemediationParams(FaultClass.REBOOT_NODE, "annotate"),
        ),
        (owned(S.DRAINING, FaultClass.REPLACE), POLICY, RemediationParams(FaultClass.REPLACE, "none")),
        (
            owned(S.QUARANTINED),
            CUSTOM,
            RemediationParams(FaultClass.RESET_GPU, "webhook", url="https://repair.example/ask"),
        ),
        (
            owned(S.DRAIN_FAILED, FaultClass.REBOOT_NODE),
            CUSTOM,
            RemediationParams(FaultClass.REBOOT_NODE, "custom-resource", template=TEMPLATE),
        ),
        # Nothing to start, so nothing to hand off.
        (
            owned(S.QUARANTINED),
            POLICY.model_copy(update={"remediation": {}}),
            RemediationParams(FaultClass.RESET_GPU),
        ),
        (owned(S.REMEDIATING), CUSTOM, None),
        (owned(S.VERIFYING), CUSTOM, None),
        (owned(S.QUARANTINED, FaultClass.DRIVER_MISMATCH), CUSTOM, None),
    ],
)
def test_a_drain_to_start_names_its_remediator(
    node: NodeState, policy: rules.Policy, expected: RemediationParams | None
) -> None:
    assert reconciling.next_step(node, drain_running=False, policy=policy).remediation == expected


def test_the_class_comes_from_the_fault_annotation_then_the_taint() -> None:
    both = owned(S.DRAINING, FaultClass.REBOOT_NODE)
    assert reconciling.fault_class(both) is FaultClass.REBOOT_NODE
    taint_only = NodeState(name="n1", taints=(Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule"),))
    assert reconciling.fault_class(taint_only) is FaultClass.RESET_GPU
    garbled = NodeState(name="n1", annotations=freeze_mapping({footprint.FAULT: '{"class":"melted"}'}))
    assert reconciling.fault_class(garbled) is None


FALSE = Condition(type=footprint.CONDITION, status="False", reason="ResetGpu")
TRUE = Condition(type=footprint.CONDITION, status="True", reason="GpusHealthy")


@pytest.mark.parametrize(
    ("node", "restored"),
    [
        # The condition written after the quarantine was lost, or overwritten: written again.
        (owned(S.DRAINING), True),
        (owned(S.REMEDIATING, conditions=(TRUE,)), True),
        (owned(S.QUARANTINED, FaultClass.DRIVER_MISMATCH), True),
        # It says so already, or the node is on its way back, or Sickbay steps back, or no class to say.
        (owned(S.DRAINING, conditions=(FALSE,)), False),
        (owned(S.VERIFYING), False),
        (owned(S.DRAINING, unschedulable=False), False),
        (owned(S.DRAINING, None), False),
    ],
)
def test_lost_condition(node: NodeState, restored: bool) -> None:
    step = reconciling.next_step(node, drain_running=False, policy=POLICY)
    condition = reconciling.lost_condition(node, step, now=T0)
    assert (condition is not None) is restored
    if condition is not None:
        assert (condition.type, condition.status, condition.last_transition) == (
            footprint.CONDITION,
            "False",
            T0,
        )


def test_the_healthy_mark_is_in_the_footprint_and_goes_with_every_change() -> None:
    marked = owned(VERIFYING, **since(T0))
    assert dict(footprint.healthy_mark_patch(marked, since=None).annotations) == {footprint.HEALTHY_SINCE: ""}
    assert dict(footprint.healthy_mark_patch(owned(VERIFYING), since=T0).annotations) == {
        footprint.HEALTHY_SINCE: T0.isoformat()
    }
    assert dict(footprint.release_patch(marked).annotations)[footprint.HEALTHY_SINCE] == ""
    # Any state change and any new quarantine start the healthy delay over.
    for state in RemediationState:
        assert dict(footprint.state_patch(marked, state).annotations).get(footprint.HEALTHY_SINCE) == ""
    assert footprint.HEALTHY_SINCE not in dict(
        footprint.state_patch(owned(VERIFYING), REMEDIATING).annotations
    )


def test_a_new_quarantine_clears_the_healthy_mark() -> None:
    signal = Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint="fp1",
        status=SignalStatus.FIRING,
        name="GpuXid",
        starts_at=T0,
        received_at=T0,
        node="n1",
    )
    fault = Fault(fault_class=FaultClass.REPLACE, signal=signal, reason="XID 79 again", rule="xid")
    graver = footprint.quarantine_patch(owned(VERIFYING, **since(T0)), fault, now=T0, identity="sickbay-0")
    assert dict(graver.annotations)[footprint.HEALTHY_SINCE] == ""
    fresh = footprint.quarantine_patch(NodeState(name="n1"), fault, now=T0, identity="sickbay-0")
    assert footprint.HEALTHY_SINCE not in dict(fresh.annotations)


TRANSIENT = rules.TransientPolicy(condition_ttl=60 * MIN)


def soft(status: str = "True", at: datetime | None = T0 - 61 * MIN) -> NodeState:
    condition = Condition(type="GpuSoftFault", status=status, reason="PowerBrake", last_transition=at)
    return NodeState(name="n1", conditions=(condition,))


@pytest.mark.parametrize(
    ("node", "firing", "cleared"),
    [
        # Raised longer ago than its time to live and nothing soft fires: cleared.
        (soft(), [], True),
        (soft(at=T0 - 60 * MIN), ["reset-gpu", "at-risk"], True),  # other alerts do not keep it
        # A soft alert still fires, or its time to live has not passed: kept.
        (soft(), ["transient"], False),
        (soft(at=T0 - 59 * MIN), [], False),
        (soft(at=T0 + MIN), [], False),  # a transition ahead of this replica's clock
        # Not raised, or no time to count from: nothing to clear.
        (soft("False"), [], False),
        (soft(at=None), [], False),
        (NodeState(name="n1"), [], False),
        (
            NodeState(
                name="n1", conditions=(Condition("GpuHealthy", "True", last_transition=T0 - 99 * MIN),)
            ),
            [],
            False,
        ),
    ],
)
def test_soft_condition_step(node: NodeState, firing: list[str], cleared: bool) -> None:
    decision = reconciling.soft_condition_step(node, firing=firing, policy=TRANSIENT, now=T0)
    assert isinstance(decision, reconciling.ClearSoft) is cleared
    outlived = reconciling.soft_condition_outlived(node, policy=TRANSIENT, now=T0)
    assert outlived is (cleared or firing == ["transient"]), "asked only when it could be cleared"
    if isinstance(decision, reconciling.ClearSoft):
        assert decision.condition == Condition(
            type="GpuSoftFault",
            status="False",
            reason="NoSoftFault",
            message="no soft signal has fired on the node for 1:00:00",
            last_transition=T0,
        )


GRACE = 5 * MIN
CAPACITY = rules.ReleasePolicy(allocatable_grace=GRACE)


def gpus(
    allocatable: int, *, capacity: int = 8, owner: bool = False, managed: bool = True, **annotations: str
) -> NodeState:
    marks = {**annotations, **({footprint.OWNED_BY: "sickbay-0"} if owner else {})}
    return NodeState(
        name="n1",
        gpu_capacity=capacity,
        gpu_allocatable=allocatable,
        labels=freeze_mapping({} if managed else {footprint.MANAGED: "false"}),
        annotations=freeze_mapping(marks),
    )


def short_since(at: datetime | str) -> dict[str, str]:
    return {footprint.ALLOCATABLE_SHORT_SINCE: at if isinstance(at, str) else at.isoformat()}


def capacity_shape(decision: object) -> tuple[object, ...]:
    match decision:
        case reconciling.MarkShort(since=at):
            return ("mark", at)
        case reconciling.SignalShort(signal=signal, mark=mark):
            return ("signal", signal.starts_at, mark)
        case reconciling.Wait(until=at):
            return ("wait", at)
    raise AssertionError(decision)


@pytest.mark.parametrize(
    ("node", "policy", "signalled", "expected"),
    [
        # At capacity: nothing, or the mark of an earlier drop goes.
        (gpus(8), CAPACITY, None, ("wait", None)),
        (gpus(8, **short_since(T0 - MIN)), CAPACITY, None, ("mark", None)),
        (gpus(0, capacity=0, **short_since(T0 - MIN)), CAPACITY, None, ("mark", None)),
        # First seen short: the mark is written, the grace counts from now.
        (gpus(7), CAPACITY, None, ("mark", T0)),
        (gpus(7, owner=True), CAPACITY, None, ("mark", T0)),  # a node Sickbay holds is timed too
        # Marked earlier, by this replica or the one before: wait out the grace, then signal once.
        (gpus(7, **short_since(T0 - 4 * MIN)), CAPACITY, None, ("wait", T0 + MIN)),
        (gpus(7, **short_since(T0 - GRACE)), CAPACITY, None, ("signal", T0 - GRACE, False)),
        (gpus(0, **short_since(T0 - 9 * MIN)), CAPACITY, None, ("signal", T0 - 9 * MIN, False)),
        (gpus(7, **short_since(T0 - 9 * MIN)), CAPACITY, T0 - 9 * MIN, ("wait", None)),
        # A new drop (a new mark) is signalled even if an earlier one was.
        (gpus(7, **short_since(T0 - 9 * MIN)), CAPACITY, T0 - 99 * MIN, ("signal", T0 - 9 * MIN, False)),
        # Sickbay holds the node: its quarantine already covers the GPUs.
        (gpus(7, owner=True, **short_since(T0 - 9 * MIN)), CAPACITY, None, ("wait", None)),
        # Opted out: never signalled, and its mark goes.
        (gpus(7, managed=False), CAPACITY, None, ("wait", None)),
        (gpus(7, managed=False, **short_since(T0 - 9 * MIN)), CAPACITY, None, ("mark", None)),
        # A mark that cannot be read is written again from now; one without an offset is UTC.
        (gpus(7, **short_since("a while ago")), CAPACITY, None, ("mark", T0)),
        (gpus(7, **short_since("2026-03-01T11:50:00")), CAPACITY, None, ("signal", T0 - 10 * MIN, False)),
        # No grace: signalled the round it is first seen, with its mark.
        (gpus(7), rules.ReleasePolicy(allocatable_grace=timedelta(0)), None, ("signal", T0, True)),
        (gpus(7, owner=True), rules.ReleasePolicy(allocatable_grace=timedelta(0)), None, ("mark", T0)),
    ],
)
def test_capacity_step(
    node: NodeState, policy: rules.ReleasePolicy, signalled: datetime | None, expected: tuple[object, ...]
) -> None:
    decision = reconciling.capacity_step(node, policy=policy, now=T0, signalled=signalled)
    assert capacity_shape(decision) == expected


def test_the_allocatable_signal_is_a_reset_gpu_fault_named_after_its_drop() -> None:
    since = T0 - 6 * MIN
    decision = reconciling.capacity_step(gpus(7, **short_since(since)), policy=CAPACITY, now=T0)
    assert isinstance(decision, reconciling.SignalShort)
    signal = decision.signal
    assert (signal.source, signal.status, signal.name, signal.node) == (
        SignalSource.ALLOCATABLE,
        SignalStatus.FIRING,
        "GpuAllocatableBelowCapacity",
        "n1",
    )
    assert (signal.starts_at, signal.received_at) == (since, T0)
    assert signal.fingerprint == f"allocatable-n1-{int(since.timestamp())}", "the same on any leader"
    assert signal.label("sickbay_class") == "reset-gpu"
    assert dict(signal.annotations)["summary"] == (
        "GPU allocatable 7 below capacity 8 for longer than 0:05:00: the device plugin marked a GPU unhealthy"
    )


def test_a_new_leader_signals_the_drop_when_the_old_one_would_have() -> None:
    first = reconciling.capacity_step(gpus(7), policy=CAPACITY, now=T0)
    assert capacity_shape(first) == ("mark", T0)
    assert isinstance(first, reconciling.MarkShort)
    marked = footprint.time_mark_patch(gpus(7), footprint.ALLOCATABLE_SHORT_SINCE, since=first.since)
    after_failover = gpus(7, **dict(marked.annotations))
    halfway = reconciling.capacity_step(after_failover, policy=CAPACITY, now=T0 + GRACE / 2)
    assert capacity_shape(halfway) == ("wait", T0 + GRACE)
    at_grace = reconciling.capacity_step(after_failover, policy=CAPACITY, now=T0 + GRACE)
    assert capacity_shape(at_grace) == ("signal", T0, False)
