"""Soft signals, whole plans: the re-check while they fire, the condition once they last or repeat, its
clearing once they resolve, and the durations the sentences say."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from app.config import rules
from app.config.settings import RULES_DIR
from app.decide import soft
from app.decide.situation import Situation
from app.domain import (
    Action,
    ActionKind,
    ConditionParams,
    Fault,
    FaultClass,
    PastFault,
    Plan,
    RecheckParams,
    Signal,
    SignalSource,
    SignalStatus,
    Track,
)

NOW = datetime.now(UTC)
POLICY = rules.load_policy(RULES_DIR / "policy.yaml")  # persist_after 15m, repeats 3, retry 30s x2


def fault(
    *,
    ago: timedelta = timedelta(0),
    gpu: int | None = 0,
    name: str = "GpuHot",
    rule: str = "label",
    fp: str = "f",
) -> Fault:
    signal = Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint=fp,
        status=SignalStatus.FIRING,
        name=name,
        starts_at=NOW - ago,
        received_at=NOW - ago,
        node="n1",
        gpu=gpu,
    )
    return Fault(fault_class=FaultClass.TRANSIENT, signal=signal, reason="hot", rule=rule)


def firing(
    f: Fault, history: tuple[PastFault, ...] = (), policy: rules.Policy = POLICY
) -> Plan | soft.Escalate:
    return soft.plan_firing(
        f, policy=policy, now=NOW, situation=Situation(node=None, history=history), workload="w"
    )


def past(f: Fault, *, ago: timedelta, fp: str, gpu: int | None = 0, name: str = "GpuHot") -> PastFault:
    return PastFault(
        at=NOW - ago,
        fault_class=FaultClass.TRANSIENT,
        gpu=gpu,
        xid=None,
        workload=None,
        fingerprint=fp,
        name=name,
    )


def test_a_new_soft_signal_is_rechecked_with_the_retry_backoff() -> None:
    f = fault()
    plan = firing(f)
    due = NOW + timedelta(seconds=30)
    assert plan == Plan(
        fault=f,
        decided_at=NOW,
        summary=f"transient: recorded, nothing restarted, the node stays in the pool; re-check 1 at "
        f"{due.isoformat()} while it fires (visible on the node after 15m or 3 firings)",
        actions=(
            Action(
                kind=ActionKind.RECHECK,
                track=Track.RECORD,
                node="n1",
                reason="re-check 1 of GpuHot while it fires",
                params=RecheckParams(1),
                not_before=due,
            ),
        ),
        workload="w",
    )


def test_the_check_number_counts_this_firing_only() -> None:
    f = fault(ago=timedelta(minutes=1))
    history = (
        past(f, ago=timedelta(minutes=1), fp="f"),  # this firing, checked once already
        past(f, ago=timedelta(minutes=3), fp="f"),  # an earlier firing of the same alert
        past(f, ago=timedelta(minutes=1), fp="other", name="GpuCold"),  # another alert at the same moment
    )
    plan = firing(f, history)
    assert isinstance(plan, Plan)
    assert plan.actions[0].params == RecheckParams(2)
    assert plan.actions[0].not_before == NOW + timedelta(seconds=60)


def test_a_recheck_is_never_later_than_the_moment_it_becomes_visible() -> None:
    f = fault(ago=timedelta(minutes=14, seconds=50))
    plan = firing(f)
    assert isinstance(plan, Plan)
    assert plan.actions[0].not_before == f.signal.starts_at + timedelta(minutes=15)


def test_a_lasting_soft_signal_raises_the_condition() -> None:
    f = fault(ago=timedelta(minutes=15), name="gpu-hot.alert")
    plan = firing(f)
    assert plan == Plan(
        fault=f,
        decided_at=NOW,
        summary="transient signal made visible: GpuSoftFault=True on n1 and an Event; nothing restarted, the "
        "node stays in the pool",
        actions=(
            Action(
                kind=ActionKind.RAISE_CONDITION,
                track=Track.RECORD,
                node="n1",
                reason="gpu-hot.alert has been firing for 15m (visible after 15m): hot",
                params=ConditionParams("GpuSoftFault", reason="GpuHotAlert"),
            ),
        ),
        workload="w",
    )


def test_repeats_within_the_window_on_this_gpu_raise_the_condition() -> None:
    f = fault()
    window = POLICY.escalation.window
    history = (past(f, ago=timedelta(hours=1), fp="a"), past(f, ago=window, fp="b"))
    plan = firing(f, history)
    assert isinstance(plan, Plan)
    assert plan.actions[0].reason == "GpuHot fired 3 separate times on GPU 0 within 1d (visible at 3): hot"
    # Past the window, on another GPU, of another alert or not transient: not a repeat.
    others = (
        past(f, ago=window + timedelta(seconds=1), fp="b"),
        past(f, ago=timedelta(hours=1), fp="c", gpu=1),
        past(f, ago=timedelta(hours=1), fp="d", name="GpuCold"),
        replace(past(f, ago=timedelta(hours=1), fp="e"), fault_class=FaultClass.RESET_GPU),
    )
    assert isinstance(firing(f, (history[0], *others)), Plan)
    assert firing(f, (history[0], *others)).actions[0].kind is ActionKind.RECHECK  # type: ignore[union-attr]


def test_repeats_on_a_node_level_signal_say_this_node() -> None:
    f = fault(gpu=None)
    history = (
        past(f, ago=timedelta(hours=1), fp="a", gpu=None),
        past(f, ago=timedelta(hours=2), fp="b", gpu=None),
    )
    plan = firing(f, history)
    assert isinstance(plan, Plan)
    assert "3 separate times on this node within" in plan.actions[0].reason


def test_an_unknown_xid_is_visible_at_once_under_its_own_reason() -> None:
    f = replace(fault(rule=soft.UNKNOWN_XID_RULE), signal=replace(fault().signal, xid=250))
    plan = firing(f)
    assert isinstance(plan, Plan)
    assert plan.actions[0].reason == "XID 250 is not in the XID catalog; add it there (hot)"
    assert plan.actions[0].params == ConditionParams("GpuSoftFault", reason="UnknownXid")


def test_a_policy_class_sends_a_lasting_signal_to_the_hardware_track() -> None:
    transient = POLICY.transient.model_copy(update={"escalate_to": "reset-gpu"})
    policy = POLICY.model_copy(update={"transient": transient})
    f = fault(ago=timedelta(hours=2))
    got = firing(f, policy=policy)
    assert isinstance(got, soft.Escalate)
    assert got.fault.fault_class is FaultClass.RESET_GPU
    assert got.fault.rule == "transient-escalation"
    assert got.fault.reason == (
        "GpuHot has been firing for 2h (visible after 15m): hot; escalated to reset-gpu by policy "
        "(transient.escalate_to)"
    )
    assert got.condition.kind is ActionKind.RAISE_CONDITION


def test_a_resolved_soft_signal_clears_the_condition() -> None:
    f = replace(fault(), signal=replace(fault().signal, status=SignalStatus.RESOLVED))
    plan = soft.plan_resolved(
        f, policy=POLICY.transient, now=NOW, situation=Situation(node=None, soft_firing=("f",))
    )
    assert plan == Plan(
        fault=f,
        decided_at=NOW,
        summary="resolved: GpuSoftFault cleared on n1 if it was raised",
        actions=(
            Action(
                kind=ActionKind.CLEAR_CONDITION,
                track=Track.RECORD,
                node="n1",
                reason="GpuHot resolved and no other soft signal fires on n1",
                params=ConditionParams("GpuSoftFault"),
            ),
        ),
    )
    kept = soft.plan_resolved(
        f, policy=POLICY.transient, now=NOW, situation=Situation(node=None, soft_firing=("f", "g", "h"))
    )
    assert kept.summary == "resolved; 2 other soft signal(s) still fire on n1, so GpuSoftFault stays"
    assert kept.decided_at == NOW


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("GpuHot", "GpuHot"),
        ("gpu_temp high", "GpuTempHigh"),
        ("---", "SoftFault"),
        ("a" * 200, "A" + "a" * 127),
    ],
)
def test_condition_reason_is_camel_case_and_bounded(name: str, reason: str) -> None:
    assert soft.condition_reason(fault(name=name)) == reason


@pytest.mark.parametrize(
    ("lasted", "said"),
    [
        (timedelta(days=2), "2d"),
        (timedelta(hours=3), "3h"),
        (timedelta(hours=1), "1h"),
        (timedelta(minutes=1), "1m"),
        (timedelta(minutes=90), "90m"),
        (timedelta(minutes=150, seconds=30), "2.5h"),
        (timedelta(seconds=90), "1.5m"),
        (timedelta(seconds=61), "1.0m"),
        (timedelta(seconds=3601), "1.0h"),
        (timedelta(seconds=45), "45s"),
    ],
)
def test_durations_are_said_in_their_largest_unit(lasted: timedelta, said: str) -> None:
    transient = POLICY.transient.model_copy(update={"persist_after": timedelta(seconds=1)})
    policy = POLICY.model_copy(update={"transient": transient})
    plan = firing(fault(ago=lasted), policy=policy)
    assert isinstance(plan, Plan)
    assert plan.actions[0].reason.startswith(f"GpuHot has been firing for {said} (visible after 1s)")
