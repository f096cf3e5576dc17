"""The proactive ladder's plans compared whole: the sentences and every action's fields, in and out of
shadow, with and without a node read, with the checkpoint and drain switches."""

from __future__ import annotations

from dataclasses import replace

from app.decide import footprint, gates, proactive
from app.decide.situation import Situation
from app.domain import (
    Action,
    ActionKind,
    AtRiskParams,
    CheckpointParams,
    OwnerRef,
    Plan,
    RiskLevel,
    Taint,
    Track,
    freeze_mapping,
)
from tests.unit.test_proactive import AT_ACT, AT_WARN, POLICY, T0, node, pod, risk

WHY_ACT = "predicted hardware-fault risk at act (score 0.8123), driven by gpu3:sbe_rate_1h +1.20"
FLEET = gates.ProactiveFleet(gpu_nodes=100)


def plan(level: str, situation: Situation, *, policy=POLICY, **kw: object) -> Plan:  # type: ignore[no-untyped-def]
    return proactive.plan_at_risk(risk(level, **kw), policy=policy, now=T0, situation=situation)  # type: ignore[arg-type]


def test_act_on_a_read_node_taints_and_asks_each_pod_and_owner_once() -> None:
    pods = (pod("r0", owner="job"), pod("r1", owner="job"), pod("idle", owner="x", gpus=0))
    p = plan("act", Situation(node=node(), pods_on_node=pods, proactive=FLEET))
    ask = f"{WHY_ACT}; node n1 takes no new work, checkpoint now"
    assert p.actions == (
        Action(
            kind=ActionKind.TAINT_AT_RISK,
            track=Track.HARDWARE,
            node="n1",
            reason=WHY_ACT,
            params=AtRiskParams(RiskLevel.ACT, held=""),
        ),
        Action(
            ActionKind.REQUEST_CHECKPOINT,
            Track.WORKLOAD,
            ask,
            "n1",
            pods[0].ref,
            CheckpointParams(uid="uid-r0"),
        ),
        Action(
            ActionKind.REQUEST_CHECKPOINT,
            Track.WORKLOAD,
            ask,
            "n1",
            pods[1].ref,
            CheckpointParams(uid="uid-r1"),
        ),
        Action(
            ActionKind.REQUEST_CHECKPOINT,
            Track.WORKLOAD,
            ask,
            "n1",
            None,
            CheckpointParams(owner=pods[0].controller, namespace="train"),
        ),
    )
    assert p.summary == (
        "taint n1 sickbay.io/at-risk=act:NoSchedule: no new work; ask 3 pod(s) and owner(s) to checkpoint"
    )
    assert p.decided_at == T0


def test_act_with_drain_evicts_and_says_so() -> None:
    prediction = POLICY.prediction.model_copy(update={"drain": True, "checkpoint_events": False})
    policy = POLICY.model_copy(update={"prediction": prediction})
    pods = (pod("r0", owner="job"),)
    p = plan("act", Situation(node=node(), pods_on_node=pods, proactive=FLEET), policy=policy)
    assert p.actions[1:] == (
        Action(
            ActionKind.EVICT_POD,
            Track.WORKLOAD,
            f"move train/r0 off a node predicted to fail ({WHY_ACT})",
            "n1",
            pods[0].ref,
        ),
    )
    assert p.summary == "taint n1 sickbay.io/at-risk=act:NoSchedule: no new work, evict 1 GPU pod(s)"
    both = POLICY.model_copy(update={"prediction": POLICY.prediction.model_copy(update={"drain": True})})
    asked = plan("act", Situation(node=node(), pods_on_node=pods, proactive=FLEET), policy=both)
    assert asked.actions[1].reason.endswith("checkpoint now (the pod will be evicted)")


def test_act_without_a_node_read_drains_only_when_policy_drains() -> None:
    unknown = Situation(node=None)
    p = plan("act", unknown)
    assert [a.kind for a in p.actions] == [ActionKind.TAINT_AT_RISK]
    assert p.summary == (
        "taint n1 sickbay.io/at-risk=act:NoSchedule: no new work (the proactive budget is checked when acting)"
    )
    policy = POLICY.model_copy(update={"prediction": POLICY.prediction.model_copy(update={"drain": True})})
    drained = plan("act", unknown, policy=policy)
    assert drained.actions[1] == Action(ActionKind.DRAIN, Track.WORKLOAD, "evict GPU pods: " + WHY_ACT, "n1")
    assert drained.summary.endswith(", evict its GPU pods (the proactive budget is checked when acting)")


def test_warn_steers_new_work_away() -> None:
    p = plan("warn", Situation(node=node(), proactive=FLEET))
    assert p.summary == "taint n1 sickbay.io/at-risk=warn:PreferNoSchedule: new work steers away"
    assert p.actions[0].params == AtRiskParams(RiskLevel.WARN, held="")


def test_a_full_budget_holds_act_at_warn_and_says_so() -> None:
    full = gates.ProactiveFleet(gpu_nodes=20, acting=frozenset({"other"}))
    p = plan("act", Situation(node=node(), proactive=full))
    held = p.actions[0].params
    assert isinstance(held, AtRiskParams)
    assert held.level is RiskLevel.WARN
    assert held.held
    assert p.actions[0].reason == f"{WHY_ACT}; held at warn: {held.held}"
    assert (
        p.summary
        == f"taint n1 sickbay.io/at-risk=warn:PreferNoSchedule: new work steers away (held at warn: {held.held})"
    )


def test_record_only_sentences() -> None:
    assert plan("act", Situation(node=None), node=None).summary == (
        "the risk names no node, so there is nothing to act on: recorded"
    )
    quarantined = node("n1", Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule"))
    assert plan("act", Situation(node=quarantined)).summary == (
        "n1 is quarantined for reset-gpu: the at-risk ladder leaves it alone (its release removes the at-risk taint)"
    )
    opted_out = node(labels=freeze_mapping({footprint.MANAGED: "false"}))
    assert (
        plan("act", Situation(node=opted_out)).summary
        == "n1 is opted out (sickbay.io/managed=false): recorded only"
    )
    assert (
        plan("none", Situation(node=node())).summary
        == "the risk signal carries no warn or act level: recorded"
    )
    assert (
        plan("bogus", Situation(node=node())).summary
        == "the risk signal carries no warn or act level: recorded"
    )
    assert plan("warn", Situation(node=node("n1", AT_WARN), proactive=FLEET)).summary == (
        "n1 already carries sickbay.io/at-risk=warn:PreferNoSchedule: nothing to change"
    )


def test_a_resolved_risk_clears_the_taint_it_set() -> None:
    cleared = plan("act", Situation(node=node("n1", AT_ACT)), resolved=True)
    assert cleared.summary == "the risk on n1 is gone: remove its sickbay.io/at-risk taint"
    assert cleared.actions == (
        Action(
            ActionKind.CLEAR_AT_RISK,
            Track.HARDWARE,
            "the predicted risk fell below warn (score 0.8123)",
            "n1",
        ),
    )
    untainted = plan("act", Situation(node=node()), resolved=True)
    assert untainted.summary == "the risk on n1 is gone and it carries no at-risk taint: recorded"
    unread = plan("act", Situation(node=None), resolved=True)
    assert unread.actions[0].kind is ActionKind.CLEAR_AT_RISK
    # In shadow too: removing never harms.
    assert (
        plan("act", Situation(node=node("n1", AT_ACT), shadow="unvalidated"), resolved=True).actions
        == cleared.actions
    )


def test_in_shadow_the_plan_is_recorded_as_what_it_would_do() -> None:
    p = plan("warn", Situation(node=node(), proactive=FLEET, shadow="model m1: unvalidated"))
    assert p.summary == (
        "shadow: would taint n1 sickbay.io/at-risk=warn:PreferNoSchedule: new work steers away "
        "(model m1: unvalidated); nothing written"
    )
    assert [a.kind for a in p.actions] == [ActionKind.RECORD]
    assert [a.kind for a in p.shadowed] == [ActionKind.TAINT_AT_RISK]
    nothing = plan("none", Situation(node=node(), shadow="s"))
    assert (
        nothing.summary
        == "shadow: the risk signal carries no warn or act level: recorded (s); nothing written"
    )
    assert nothing.shadowed == ()


def test_in_shadow_a_taint_set_while_acting_goes() -> None:
    p = plan("act", Situation(node=node("n1", AT_ACT), proactive=FLEET, shadow="guard"))
    assert p.actions == (
        Action(
            ActionKind.CLEAR_AT_RISK,
            Track.HARDWARE,
            "the proactive ladder is in shadow (guard): the at-risk taint it set goes",
            "n1",
        ),
    )
    assert p.summary == (
        "shadow: n1 already carries sickbay.io/at-risk=act:NoSchedule: nothing to change; in shadow (guard), "
        "so remove the at-risk taint it carries instead"
    )
    assert p.shadowed == ()
    # A quarantined node's taints are the hardware track's: recorded only.
    both = node("n1", AT_ACT, Taint(footprint.UNHEALTHY, "reset-gpu", "NoSchedule"))
    assert (
        proactive.shadowed(
            Plan.record_only(risk("act"), T0, "x"), situation=Situation(node=both, shadow="g"), now=T0
        )
        .actions[0]
        .kind
        is ActionKind.RECORD
    )


def test_describe_risk_without_score_or_drivers() -> None:
    bare = replace(risk("warn").signal, annotations=())
    assert proactive.describe_risk(bare) == "predicted hardware-fault risk at warn"
    unlabelled = replace(bare, labels=())
    assert proactive.describe_risk(unlabelled) == "predicted hardware-fault risk at ?"
    assert proactive.level_of(unlabelled) is None


def test_owners_are_asked_once_per_controller_in_pod_order() -> None:
    pods = (
        pod("a0", owner="a"),
        pod("b0", owner="b", kind="LeaderWorkerSet"),
        pod("a1", owner="a"),
    )
    p = plan("act", Situation(node=node(), pods_on_node=pods, proactive=FLEET))
    owners = [a.params.owner for a in p.actions if isinstance(a.params, CheckpointParams) and a.params.owner]
    assert owners == [pods[0].controller, pods[1].controller]
    assert isinstance(owners[0], OwnerRef)
