"""Reconciliation's decisions compared whole: the class each step carries (lost_condition and the drain's
hand-off read it) and the sentence the journal and `explain` show for it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.decide import footprint, reconciling
from app.domain import FaultClass, NodeState, RemediationState
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
