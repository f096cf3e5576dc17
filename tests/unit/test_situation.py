"""What decide is told about the world: `unknown` carries only history, and `pod` finds a pod by namespace
and name on the node or in its groups."""

from __future__ import annotations

from datetime import UTC, datetime

from app.decide.situation import Situation
from app.domain import FaultClass, PastFault, PodState

NOW = datetime.now(UTC)


def test_unknown_is_history_without_a_node() -> None:
    history = (PastFault(NOW, FaultClass.TRANSIENT, 0, None, None, "f"),)
    assert Situation.unknown(history) == Situation(node=None, history=history)
    assert Situation.unknown() == Situation(node=None)


def test_pod_looks_on_the_node_then_in_the_groups_by_namespace_and_name() -> None:
    here = PodState(namespace="ml", name="a", node="n1")
    there = PodState(namespace="ml", name="b", node="n2")
    other_ns = PodState(namespace="web", name="a", node="n1")
    situation = Situation(node=None, pods_on_node=(other_ns, here), group_pods=(there,))
    assert situation.pod("ml", "a") is here
    assert situation.pod("ml", "b") is there
    assert situation.pod("web", "a") is other_ns
    assert situation.pod("ml", "c") is None
