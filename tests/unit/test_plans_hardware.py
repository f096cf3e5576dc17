"""The hardware track's plan in detail: which pods it moves, which gang members it restarts (once), what it
hands off, and the summary an operator reads."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from app.config import rules
from app.config.settings import RULES_DIR
from app.decide import footprint, plans
from app.decide.situation import Situation
from app.domain import (
    Action,
    ActionKind,
    Fault,
    FaultClass,
    NodeState,
    OwnerRef,
    PodState,
    QuarantineParams,
    RemediationParams,
    RestartParams,
    Signal,
    SignalSource,
    SignalStatus,
    Taint,
    Track,
    freeze_mapping,
)

NOW = datetime.now(UTC)
POLICY = rules.load_policy(RULES_DIR / "policy.yaml")
NODE = NodeState(name="n1", resource_version="7", gpu_capacity=8, gpu_allocatable=8)
JOBSET = "jobset.sigs.k8s.io/jobset-name"


def fault(cls: FaultClass, *, node: str | None = "n1", reason: str = "because", rule: str = "test") -> Fault:
    signal = Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint="f",
        status=SignalStatus.FIRING,
        name="A",
        starts_at=NOW,
        received_at=NOW,
        node=node,
        gpu=0,
    )
    return Fault(fault_class=cls, signal=signal, reason=reason, rule=rule)


def pod(name: str, node: str, *, gang: str | None = None, kind: str = "Job", **kw: object) -> PodState:
    labels = {JOBSET: gang} if gang else {}
    return PodState(
        namespace="train",
        name=name,
        uid=f"uid-{name}",
        node=node,
        labels=freeze_mapping(labels),
        owners=(OwnerRef(kind=kind, name=f"{gang or name}-owner", controller=True),),
        gpu_request=8,
        **kw,  # type: ignore[arg-type]
    )


def plan(cls: FaultClass, situation: Situation, **kw: object) -> plans.Plan:
    return plans.plan_for(fault(cls, **kw), policy=POLICY, now=NOW, situation=situation)  # type: ignore[arg-type]


def of_kind(p: plans.Plan, kind: ActionKind) -> list[Action]:
    return [a for a in p.actions if a.kind is kind]


def test_two_pods_of_one_gang_on_the_faulty_node_restart_the_gang_once() -> None:
    ranks = (
        pod("rank-0", "n1", gang="llm"),
        pod("rank-1", "n1", gang="llm"),
        pod("rank-2", "n2", gang="llm"),
        pod("rank-3", "n3", gang="llm"),
    )
    p = plan(FaultClass.REBOOT_NODE, Situation(node=NODE, pods_on_node=ranks[:2], group_pods=ranks))
    evicted = of_kind(p, ActionKind.EVICT_POD)
    assert [a.pod.name for a in evicted if a.pod] == ["rank-0", "rank-1"]
    assert evicted[0].reason == "requeue train/rank-0 off the faulty node (jobset:train/llm)"
    assert all(a.node == "n1" and a.track is Track.WORKLOAD for a in evicted)
    restarts = of_kind(p, ActionKind.RESTART_GANG)
    assert [(a.pod.name if a.pod else None, a.node, a.params) for a in restarts] == [
        ("rank-2", "n2", RestartParams("uid-rank-2")),
        ("rank-3", "n3", RestartParams("uid-rank-3")),
    ]
    assert restarts[0].reason == (
        "restart the gang jobset:train/llm: a member lost its node, so the survivors would hang on a "
        "collective until a timeout"
    )
    assert p.summary == (
        "quarantine n1, evict 2 GPU pod(s), restart 2 gang pod(s) elsewhere, request reboot-node; "
        "released after the healthy delay (policy: reboot-node drains every GPU pod)"
    )


def test_finished_gang_members_are_not_restarted_and_other_gangs_are_left_alone() -> None:
    ranks = (
        pod("rank-0", "n1", gang="llm"),
        pod("rank-1", "n2", gang="llm", phase="Succeeded"),
        pod("rank-2", "n3", gang="llm", phase="Failed"),
        pod("rank-3", "n4", gang="llm"),
        pod("other-0", "n5", gang="other"),
    )
    p = plan(FaultClass.RESET_GPU, Situation(node=NODE, pods_on_node=ranks[:1], group_pods=ranks))
    assert [a.pod.name for a in of_kind(p, ActionKind.RESTART_GANG) if a.pod] == ["rank-3"]


def test_a_pod_of_a_requeue_group_is_evicted_and_nothing_else_restarted() -> None:
    job = (pod("a", "n1"), pod("b", "n2"))
    p = plan(FaultClass.RESET_GPU, Situation(node=NODE, pods_on_node=job[:1], group_pods=job))
    assert of_kind(p, ActionKind.RESTART_GANG) == []
    assert [a.reason for a in of_kind(p, ActionKind.EVICT_POD)] == [
        "requeue train/a off the faulty node (job:train/a-owner)"
    ]
    assert p.summary == (
        "quarantine n1, evict 1 GPU pod(s), request reset-gpu; released after the healthy delay "
        "(partial drain: evict train/a (on GPU 0; train/a: the only GPU pod on n1))"
    )


def test_a_pod_without_a_group_is_requeued_by_name() -> None:
    bare = PodState(namespace="train", name="solo", uid="u", node="n1", gpu_request=1)
    p = plan(FaultClass.RESET_GPU, Situation(node=NODE, pods_on_node=(bare,)))
    assert [a.reason for a in of_kind(p, ActionKind.EVICT_POD)] == ["requeue train/solo off the faulty node"]


def test_leave_to_controller_groups_are_not_touched() -> None:
    workloads = POLICY.workloads.model_copy(update={"group_policy": {"jobset": "leave-to-controller"}})
    policy = POLICY.model_copy(update={"workloads": workloads})
    ranks = (pod("rank-0", "n1", gang="llm"), pod("rank-1", "n2", gang="llm"), pod("x", "n1"))
    p = plans.plan_for(
        fault(FaultClass.RESET_GPU),
        policy=policy,
        now=NOW,
        situation=Situation(node=NODE, pods_on_node=(ranks[0], ranks[2]), group_pods=ranks),
    )
    assert [a.pod.name for a in p.actions if a.pod] == ["x"]


def test_without_a_node_read_the_plan_drains_the_node() -> None:
    p = plan(FaultClass.REPLACE, Situation.unknown())
    assert [a.kind for a in p.actions] == [
        ActionKind.QUARANTINE,
        ActionKind.DRAIN,
        ActionKind.REQUEST_REMEDIATION,
    ]
    assert p.actions[1] == Action(
        kind=ActionKind.DRAIN, track=Track.WORKLOAD, node="n1", reason="move GPU pods off the node"
    )
    assert p.summary == "quarantine n1, drain GPU pods, request replace; never auto-released"


def test_the_quarantine_and_the_hand_off() -> None:
    p = plan(FaultClass.REBOOT_NODE, Situation(node=NODE), reason="XID 79")
    assert p.actions[0] == Action(
        kind=ActionKind.QUARANTINE,
        track=Track.HARDWARE,
        node="n1",
        reason="XID 79",
        params=QuarantineParams(FaultClass.REBOOT_NODE),
    )
    remediator = POLICY.remediator(FaultClass.REBOOT_NODE)
    assert p.actions[-1] == Action(
        kind=ActionKind.REQUEST_REMEDIATION,
        track=Track.HARDWARE,
        node="n1",
        reason=f"hand the node to the reboot-node remediator ({remediator.kind})",
        params=RemediationParams(
            remediation=FaultClass.REBOOT_NODE,
            remediator=remediator.kind,
            template=remediator.template,
            url=remediator.url,
        ),
    )
    assert p.decided_at == NOW


def test_the_weekly_cap_says_how_often_and_the_cap() -> None:
    week = (NOW - timedelta(days=1), NOW - timedelta(days=2), NOW - timedelta(days=3))
    p = plan(FaultClass.RESET_GPU, Situation(node=NODE, quarantines=week), reason="XID 95")
    assert p.fault.fault_class is FaultClass.REPLACE
    assert p.fault.rule == "attempt-cap"
    assert p.fault.reason == (
        "n1 was remediated 3 times this week (cap 3): hand it off for replacement; XID 95"
    )
    # A replacement is never capped (it is already the end of the line).
    replaced = plan(FaultClass.REPLACE, Situation(node=NODE, quarantines=week))
    assert replaced.fault.rule == "test"


def test_an_already_quarantined_node_says_for_what() -> None:
    node = replace(NODE, taints=(Taint(footprint.UNHEALTHY, "reboot-node", "NoSchedule"),))
    p = plan(FaultClass.RESET_GPU, Situation(node=node))
    assert p.is_noop
    assert p.summary == "n1 is already quarantined for reboot-node"


def test_record_only_reasons() -> None:
    resolved = replace(
        fault(FaultClass.REBOOT_NODE),
        signal=replace(fault(FaultClass.REBOOT_NODE).signal, status=SignalStatus.RESOLVED),
    )
    assert plans.plan_for(resolved, policy=POLICY, now=NOW).summary == (
        "resolved signal: recorded; release is decided by reconciliation, not here"
    )
    assert plan(FaultClass.REBOOT_NODE, Situation.unknown(), node=None).summary == (
        "the signal names no node, so there is nothing to act on: recorded"
    )
    assert plan(FaultClass.REBOOT_NODE, Situation.unknown(), rule=plans.DUPLICATE_RULE).summary == (
        "already reported through the other path: recorded, not acted on twice"
    )
    for cls in (FaultClass.IGNORE, FaultClass.DEPENDS):
        assert plan(cls, Situation(node=NODE)).summary == "informational: recorded as a feature for the model"
    opted_out = replace(NODE, labels=freeze_mapping({footprint.MANAGED: "false"}))
    assert plan(FaultClass.REPLACE, Situation(node=opted_out)).summary == (
        f"n1 is opted out ({footprint.MANAGED}=false): recorded only"
    )


def test_a_driver_mismatch_summary() -> None:
    p = plan(FaultClass.DRIVER_MISMATCH, Situation(node=NODE))
    assert p.summary == "taint n1 NoSchedule until its driver matches its pool; no drain"
    assert p.actions[0].track is Track.HARDWARE
    assert p.actions[0].reason == "because"
