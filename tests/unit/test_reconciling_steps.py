"""Reconciliation's decisions compared whole: the class each step carries (lost_condition and the drain's
hand-off read it) and the sentence the journal and `explain` show for it."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from app.decide import conditions, footprint, reconciling
from app.domain import Condition, FaultClass, NodeState, RemediationState
from tests.unit.test_reconciling import POLICY, T0, owned, requested, since

Step = reconciling.Step
S = RemediationState
Next = reconciling.Next
RESET = FaultClass.RESET_GPU


@pytest.mark.parametrize(
    ("node", "drain_running", "expected"),
    [
        (
            owned(S.DRAINING, unschedulable=False),
            True,
            Next(
                Step.STEP_BACK,
                RESET,
                "an operator uncordoned the node by hand; Sickbay removes its marks and steps back",
            ),
        ),
        (owned(S.DRAINING, None), False, Next(Step.RELEASE, None, "no repair needed: released once healthy")),
        (owned(S.QUARANTINED), True, Next(Step.NOTHING, RESET, "its drain is running")),
        (owned(S.DRAIN_FAILED), True, Next(Step.NOTHING, RESET, "its drain is running")),
        (
            owned(S.DRAIN_FAILED, None),
            False,
            Next(Step.NOTHING, None, "drain-failed with no readable class: waits for a human"),
        ),
        (owned(S.REMEDIATING), False, Next(Step.FOLLOW_REMEDIATION, RESET, "handed to its remediator")),
        (owned(S.VERIFYING), False, Next(Step.RELEASE, RESET, "remediation done: released once healthy")),
        (owned(None), False, Next(Step.NOTHING, RESET, "no remediation state")),
    ],
)
def test_next_step_whole(node: NodeState, drain_running: bool, expected: reconciling.Next) -> None:
    assert reconciling.next_step(node, drain_running=drain_running, policy=POLICY) == expected


@pytest.mark.parametrize(
    ("state", "why"), [(S.QUARANTINED, "no drain is running for it"), (S.DRAIN_FAILED, "drain-failed")]
)
def test_a_drain_to_start_says_why(state: RemediationState, why: str) -> None:
    got = reconciling.next_step(owned(state, FaultClass.REBOOT_NODE), drain_running=False, policy=POLICY)
    assert (got.fault_class, got.why) == (FaultClass.REBOOT_NODE, why)
    assert got.remediation is not None


def test_the_class_falls_back_to_the_taint_and_an_unreadable_one_is_none() -> None:
    tainted = owned(S.QUARANTINED, FaultClass.REBOOT_NODE)
    no_fault = NodeState(
        name="n1",
        taints=tainted.taints,
        annotations=tuple((k, v) for k, v in tainted.annotations if k != footprint.FAULT),
    )
    assert reconciling.fault_class(no_fault) is FaultClass.REBOOT_NODE
    assert reconciling.fault_class(NodeState(name="n1")) is None


def test_release_step_reasons() -> None:
    delay = POLICY.release.healthy_delay
    held = reconciling.release_step(
        owned(S.VERIFYING, **since(T0)),
        firing=["reset-gpu", "replace", "transient"],
        policy=POLICY.release,
        now=T0,
    )
    assert held == reconciling.Mark(
        since=None,
        why="not healthy: a replace, reset-gpu fault still fires on it; the healthy delay starts over",
    )
    short = reconciling.release_step(
        owned(S.VERIFYING, allocatable=6), firing=[], policy=POLICY.release, now=T0
    )
    assert short == reconciling.Wait(why="not healthy: GPU allocatable 6 is below capacity 8")
    # A node without GPUs is never short of them.
    assert isinstance(
        reconciling.release_step(
            owned(S.VERIFYING, capacity=0, allocatable=0), firing=[], policy=POLICY.release, now=T0
        ),
        reconciling.Mark,
    )
    fresh = reconciling.release_step(owned(S.VERIFYING), firing=[], policy=POLICY.release, now=T0)
    assert fresh == reconciling.Mark(
        since=T0, why=f"healthy now; released at {(T0 + delay).isoformat()} if it stays so"
    )
    waiting = reconciling.release_step(
        owned(S.VERIFYING, **since(T0)), firing=[], policy=POLICY.release, now=T0 + timedelta(seconds=1)
    )
    assert waiting == reconciling.Wait(why=f"healthy since {T0.isoformat()}", until=T0 + delay)
    done = reconciling.release_step(
        owned(S.VERIFYING, **since(T0)), firing=[], policy=POLICY.release, now=T0 + delay
    )
    assert done == reconciling.Release(why=f"no active fault and healthy for {delay}; remediation complete")


def test_remediation_step_reasons() -> None:
    def step(node: NodeState, cls: FaultClass | None = RESET) -> object:
        return reconciling.remediation_step(node, cls, policy=POLICY, now=T0)

    assert step(owned(S.REMEDIATING, **{footprint.REMEDIATION_DONE: "true"})) == reconciling.Verify(
        why="remediation reported done; verifying"
    )
    assert step(owned(S.REMEDIATING), None) == reconciling.Wait(why="the node's fault class cannot be read")
    assert step(owned(S.REMEDIATING), FaultClass.REPLACE) == reconciling.Wait(
        why="replacement is asked for; nothing to escalate to"
    )
    assert step(owned(S.REMEDIATING, **requested(T0, "replace"))) == reconciling.Wait(
        why="replacement is asked for; nothing to escalate to"
    )
    assert step(owned(S.REMEDIATING)) == reconciling.Wait(
        why="no readable remediation-requested-at: the timeout cannot be counted"
    )
    asked = T0 - timedelta(minutes=5)
    assert step(owned(S.REMEDIATING, **requested(asked))) == reconciling.Wait(
        why=f"reset-gpu requested at {asked.isoformat()}", until=asked + timedelta(hours=1)
    )


def test_the_fault_annotation_wins_over_the_taint() -> None:
    node = owned(S.QUARANTINED, FaultClass.RESET_GPU)
    annotated = NodeState(
        name="n1",
        taints=node.taints,
        annotations=((footprint.FAULT, '{"class":"reboot-node"}'),),
    )
    assert reconciling.fault_class(annotated) is FaultClass.REBOOT_NODE
    unreadable = NodeState(name="n1", annotations=((footprint.FAULT, '{"class":"bogus"}'),))
    assert reconciling.fault_class(unreadable) is None


def test_a_one_gpu_node_short_of_its_gpu_is_not_healthy() -> None:
    got = reconciling.release_step(
        owned(S.VERIFYING, capacity=1, allocatable=0), firing=[], policy=POLICY.release, now=T0
    )
    assert got == reconciling.Wait(why="not healthy: GPU allocatable 0 is below capacity 1")


GRACE = POLICY.release.allocatable_grace


def short_node(**notes: str) -> NodeState:
    return NodeState(name="n1", gpu_capacity=8, gpu_allocatable=7, annotations=tuple(notes.items()))


def capacity(node: NodeState, now: datetime = T0, signalled: datetime | None = None) -> object:
    return reconciling.capacity_step(node, policy=POLICY.release, now=now, signalled=signalled)


def test_capacity_steps_compared_whole() -> None:
    short = "GPU allocatable 7 below capacity 8"
    mark = {footprint.ALLOCATABLE_SHORT_SINCE: T0.isoformat()}
    assert capacity(short_node()) == reconciling.MarkShort(
        since=T0, why=f"{short}: signalled at {(T0 + GRACE).isoformat()} if so still"
    )
    later = T0 + timedelta(seconds=1)
    assert capacity(short_node(**mark), later) == reconciling.Wait(
        why=f"{short} since {T0.isoformat()}", until=T0 + GRACE
    )
    due = capacity(short_node(**mark), T0 + GRACE)
    assert isinstance(due, reconciling.SignalShort)
    assert due.mark is False
    assert due.signal.fingerprint == f"allocatable-n1-{int(T0.timestamp())}"
    assert (due.signal.starts_at, due.signal.received_at, due.signal.node) == (T0, T0 + GRACE, "n1")
    assert due.signal.name == reconciling.ALLOCATABLE_ALERT
    assert due.signal.label("sickbay_class") == "reset-gpu"
    assert dict(due.signal.annotations)["summary"] == (
        f"{short} for longer than {GRACE}: the device plugin marked a GPU unhealthy"
    )
    assert capacity(short_node(**mark), T0 + GRACE, signalled=T0) == reconciling.Wait(why="signalled already")
    back = NodeState(name="n1", gpu_capacity=8, gpu_allocatable=8, annotations=tuple(mark.items()))
    assert capacity(back) == reconciling.MarkShort(since=None, why="allocatable is back to capacity")
    assert capacity(NodeState(name="n1", gpu_capacity=8, gpu_allocatable=8)) == reconciling.Wait(
        why="allocatable is back to capacity"
    )
    opted_out = NodeState(
        name="n1", gpu_capacity=8, gpu_allocatable=7, labels=((footprint.MANAGED, "false"),)
    )
    assert capacity(opted_out) == reconciling.Wait(why="opted out (sickbay.io/managed=false)")


def test_a_held_node_is_marked_but_never_signalled() -> None:
    held = owned(S.QUARANTINED, capacity=8, allocatable=7)
    got = capacity(held, T0)
    assert isinstance(got, reconciling.MarkShort)
    assert got.since == T0
    marked = owned(
        S.QUARANTINED, capacity=8, allocatable=7, **{footprint.ALLOCATABLE_SHORT_SINCE: T0.isoformat()}
    )
    assert capacity(marked, T0 + GRACE) == reconciling.Wait(why="Sickbay holds the node")


def test_soft_condition_steps_compared_whole() -> None:
    ttl = POLICY.transient.condition_ttl
    raised = NodeState(
        name="n1",
        conditions=(Condition(type="GpuSoftFault", status="True", reason="GpuHot", last_transition=T0),),
    )

    def step(firing: list[str], now: datetime) -> object:
        return reconciling.soft_condition_step(raised, firing=firing, policy=POLICY.transient, now=now)

    assert step([], T0) == reconciling.Wait(why=f"GpuSoftFault is not True, or not for {ttl}")
    assert step(["transient"], T0 + ttl) == reconciling.Wait(why="a soft signal still fires on the node")
    why = f"no soft signal has fired on the node for {ttl}"
    assert step(["reset-gpu"], T0 + ttl) == reconciling.ClearSoft(
        condition=conditions.soft_cleared("GpuSoftFault", message=why, now=T0 + ttl), why=why
    )
