"""What a change in the cluster means for the demo: a node's view, the change said in words, and the
scene whose effect it is (cordoned, tainted, released, at risk, a soft condition raised).

Pure functions over what the recorder read (`timeline.Recorder` polls and emits); they mark the scenes
they match and return the words, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.decide import footprint
from app.demo import verifying
from app.demo.milestones import NodeView, Scene
from app.domain import NodeState


def view_of(node: NodeState) -> NodeView:
    """The parts of a node the scenes watch."""
    taint = next((f"{x.value}:{x.effect}" for x in node.taints if x.key == footprint.UNHEALTHY), None)
    risk = next((f"{x.value}:{x.effect}" for x in node.taints if x.key == footprint.AT_RISK), None)
    return NodeView(
        unschedulable=node.unschedulable,
        taint=taint,
        state=node.label(footprint.STATE),
        remediation=node.annotation(footprint.REMEDIATION_REQUESTED),
        at_risk=risk,
        soft=next(
            (c.reason for c in node.conditions if c.type == footprint.SOFT_CONDITION and c.status == "True"),
            None,
        ),
        verification=verifying.view(node),
    )


def describe_change(before: NodeView, now: NodeView) -> str:
    """The change from `before` to `now` in words ("" when nothing the scenes watch changed)."""
    parts = []
    if now.unschedulable != before.unschedulable:
        parts.append("cordoned" if now.unschedulable else "uncordoned")
    if now.taint != before.taint:
        parts.append(f"taint {footprint.UNHEALTHY}={now.taint}" if now.taint else "taint removed")
    if now.at_risk != before.at_risk:
        parts.append(
            f"taint {footprint.AT_RISK}={now.at_risk}"
            if now.at_risk
            else f"taint {footprint.AT_RISK} removed"
        )
    if now.state != before.state:
        parts.append(f"state {now.state}" if now.state else "state cleared")
    if now.remediation != before.remediation and now.remediation:
        parts.append(f"remediation requested: {now.remediation}")
    if now.soft != before.soft:
        parts.append(
            f"condition {footprint.SOFT_CONDITION}=True ({now.soft})"
            if now.soft
            else f"condition {footprint.SOFT_CONDITION}=False"
        )
    if now.verification != before.verification and now.verification:
        parts.append(now.verification)
    return ", ".join(parts)


def mark_effects(scenes: Iterable[Scene], t: float, name: str, before: NodeView, now: NodeView) -> None:
    """Give each started scene on node `name` still waiting for its effect the effect this change is."""
    for scene in scenes:
        if scene.node != name or scene.started is None or scene.effect is not None:
            continue
        if scene.effect_kind == "unschedulable" and now.unschedulable and not before.unschedulable:
            scene.effect, scene.effect_text = t, f"unschedulable, taint {now.taint}"
        elif scene.effect_kind == "unschedulable" and now.taint and not before.taint:
            # A reset-gpu quarantine that drains partially taints without cordoning (`decide.partial`).
            scene.effect, scene.effect_text = t, f"taint {now.taint}, not cordoned (partial drain)"
        elif scene.effect_kind == "tainted" and now.taint and not before.taint:
            scene.effect, scene.effect_text = t, f"taint {now.taint}, schedulable={not now.unschedulable}"
        elif scene.effect_kind == "released" and before.taint and not now.taint:
            scene.effect, scene.effect_text = t, "released: uncordoned, marks removed"
        elif scene.effect_kind == "soft-condition" and now.soft and not before.soft:
            scene.effect = t
            scene.effect_text = (
                f"{footprint.SOFT_CONDITION}=True ({now.soft}), schedulable={not now.unschedulable}, "
                f"no taint={now.taint is None}"
            )
        elif scene.effect_kind == "at-risk" and now.at_risk and now.at_risk.startswith("act:"):
            scene.effect = t
            scene.effect_text = (
                f"taint {footprint.AT_RISK}={now.at_risk}, schedulable={not now.unschedulable}"
            )
        if scene.effect_kind == "released" and now.state == "verifying" and scene.decision is None:
            scene.decision, scene.decision_text = t, "remediation reported done: verifying"
