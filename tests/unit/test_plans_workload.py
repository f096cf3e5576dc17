"""The workload track's plans compared whole: the restart (its pod, uid, time and words), the backoff's
"when", the escalation's rule and workload, and every record-only path dated `now`."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from app.decide import plans
from app.decide.situation import Situation
from app.domain import (
    Action,
    ActionKind,
    FaultClass,
    PastFault,
    Plan,
    RestartParams,
    SignalStatus,
    Track,
)
from tests.unit.test_decide_plans import NODE, POLICY, T0, fault, gpu_pod

KEY = "job:train/trainer-0-job"
POD = gpu_pod("trainer-0", "n1")


def past(minutes: int, workload: str | None, *, fp: str = "") -> PastFault:
    return PastFault(
        at=T0 - timedelta(minutes=minutes),
        fault_class=FaultClass.RESTART_WORKLOAD,
        gpu=0,
        xid=13,
        workload=workload,
        fingerprint=fp or f"old-{minutes}",
    )


def restart(history: tuple[PastFault, ...] = ()) -> Plan:
    f = fault(FaultClass.RESTART_WORKLOAD, pod=POD.ref)
    return plans.plan_for(
        f, policy=POLICY, now=T0, situation=Situation(node=NODE, pods_on_node=(POD,), history=history)
    )


def test_a_first_restart_is_now_and_says_which_pod() -> None:
    plan = restart()
    f = fault(FaultClass.RESTART_WORKLOAD, pod=POD.ref)
    assert plan.fault == f
    assert plan.decided_at == T0
    assert plan.workload == KEY
    assert plan.actions == (
        Action(
            kind=ActionKind.RESTART_POD,
            track=Track.WORKLOAD,
            reason="because",
            node="n1",
            pod=POD.ref,
            params=RestartParams("uid-trainer-0"),
            not_before=T0,
        ),
    )
    assert plan.summary.startswith("restart train/trainer-0 now, attempt 1 (")
    assert plan.summary.endswith("); the node stays in the pool")


def test_a_restart_due_exactly_now_is_now_and_a_later_one_says_when() -> None:
    exactly = replace(past(0, KEY), at=T0 - POLICY.retry.initial)
    due_now = restart((exactly,))
    assert due_now.actions[0].not_before == T0
    assert " now, attempt 2 " in due_now.summary
    later = restart((past(0, KEY),))
    when = T0 + POLICY.retry.initial
    assert (
        f" at {when.isoformat()} (backoff {POLICY.retry.initial.total_seconds():g}s), attempt 2 "
        in later.summary
    )


def test_no_pod_to_restart_is_recorded_with_the_workload() -> None:
    f = fault(FaultClass.RESTART_WORKLOAD)
    plan = plans.plan_for(f, policy=POLICY, now=T0, situation=Situation(node=NODE))
    assert plan.is_noop
    assert plan.decided_at == T0
    assert plan.summary.startswith("restart-workload, no pod restarted: ")


def test_an_escalation_keeps_the_workload_and_says_its_rule() -> None:
    other = gpu_pod("other-0", "n1")
    f = fault(FaultClass.RESTART_WORKLOAD, pod=other.ref)
    plan = plans.plan_for(
        f,
        policy=POLICY,
        now=T0,
        situation=Situation(node=NODE, pods_on_node=(other,), history=(past(30, KEY),)),
    )
    assert plan.fault.rule == "escalation"
    assert plan.fault.reason.endswith("; escalated from restart-workload (because)")
    assert plan.workload == "job:train/other-0-job"
    assert plan.decided_at == T0


def test_a_resent_alert_is_not_its_own_earlier_restart() -> None:
    plan = restart((past(0, KEY, fp="f"),))  # the journaled copy of this very alert
    assert plan.actions[0].not_before == T0
    assert " attempt 1 " in plan.summary


@pytest.mark.parametrize(
    ("cls", "kw", "situation"),
    [
        (FaultClass.IGNORE, {}, Situation(node=NODE)),
        (FaultClass.REBOOT_NODE, {"node": None}, Situation(node=None)),
        (FaultClass.REBOOT_NODE, {"status": SignalStatus.RESOLVED}, Situation(node=NODE)),
        (FaultClass.REBOOT_NODE, {"rule": plans.DUPLICATE_RULE}, Situation(node=NODE)),
        (FaultClass.REBOOT_NODE, {"managed": False}, None),
    ],
)
def test_every_record_only_plan_is_dated_now(
    cls: FaultClass, kw: dict[str, object], situation: Situation | None
) -> None:
    f = fault(cls, node=kw.get("node", "n1"))  # type: ignore[arg-type]
    if "status" in kw:
        f = replace(f, signal=replace(f.signal, status=kw["status"]))
    if "rule" in kw:
        f = replace(f, rule=str(kw["rule"]))
    if situation is None:
        situation = Situation(node=replace(NODE, labels=(("sickbay.io/managed", "false"),)))
    plan = plans.plan_for(f, policy=POLICY, now=T0, situation=situation)
    assert plan.is_noop
    assert plan.decided_at == T0
    assert plan.actions[0].node == f.node
