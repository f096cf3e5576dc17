"""The census gives the counts `gates.Fleet.of` gives for the same nodes, change after change."""

from __future__ import annotations

from datetime import UTC, datetime

from app.act.census import Census
from app.decide import footprint, gates
from app.domain import NodeState, Taint

POOL = "sickbay.io/pool"


def node(name: str, pool: str, *, quarantined: bool = False) -> NodeState:
    if not quarantined:
        return NodeState(name=name, labels=((POOL, pool),))
    since = datetime.now(UTC).isoformat()
    return NodeState(
        name=name,
        labels=((POOL, pool),),
        taints=(Taint(footprint.UNHEALTHY, "reboot-node", "NoSchedule"),),
        annotations=((footprint.SINCE, since),),
    )


def test_counts_match_a_fresh_count_through_every_change() -> None:
    nodes = [node("a", "p"), node("b", "p", quarantined=True), node("c", "q")]
    census = Census(pool_label=POOL)
    census.replace(nodes)
    quarantined = {n.name for n in nodes if footprint.quarantined_class(n) is not None}
    assert census.fleet() == gates.Fleet.of(nodes, pool_label=POOL, is_quarantined=quarantined)
    census.add(node("d", "q"))
    census.quarantine("d")
    census.quarantine("d")  # twice is once
    census.release("b")
    census.quarantine("ghost")  # not counted: ignored
    fresh = gates.Fleet.of([*nodes, node("d", "q")], pool_label=POOL, is_quarantined={"d"})
    assert census.fleet() == fresh
    assert census.fleet().by_pool == {"p": (2, 0), "q": (2, 1)}


def test_marks_are_the_quarantined_nodes_since_and_go_with_a_release() -> None:
    census = Census(pool_label=POOL)
    census.replace([node("a", "p"), node("b", "p", quarantined=True)])
    assert [name for name, _ in census.marks()] == ["b"]
    census.release("b")
    assert census.marks() == []


def test_a_proactive_list_keeps_who_is_counted_quarantined() -> None:
    census = Census(pool_label=POOL)
    census.replace([node("a", "p"), node("b", "p")])
    census.quarantine("a")
    census.replace_nodes([node("a", "p"), node("b", "p"), node("c", "p")])
    assert census.fleet() == gates.Fleet(total=3, quarantined=1, by_pool={"p": (3, 1)})
