"""An admitted quarantine keeps its budget slot when a node list read before its write lands is observed.

The reconciler's round can list nodes while a storm's writes are in flight; counting that list afresh
would forget slots already given out, and the next admission could take one more than the budget.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from app.act import gatekeeper as gatekeeper_module
from app.act.gatekeeper import GateKeeper
from app.config import rules
from app.decide import footprint
from app.domain import NodeState, Taint
from app.obs.metrics import create_metrics
from app.store import inbox
from app.store.journal import Journal

POOL = "sickbay.io/pool"


def node(name: str, *, quarantined: bool = False) -> NodeState:
    if not quarantined:
        return NodeState(name=name, labels=((POOL, "p"),))
    return NodeState(
        name=name,
        labels=((POOL, "p"),),
        taints=(Taint(footprint.UNHEALTHY, "reboot-node", "NoSchedule"),),
    )


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[Journal]:
    db = await inbox.connect(tmp_path / "journal.db")
    yield await Journal.open(db)
    await db.close()


def keeper(journal: Journal, clock: Clock) -> GateKeeper:
    policy = rules.BudgetPolicy(max_nodes=2, per_pool_max_nodes=2, max_fraction=1, per_pool_max_fraction=1)
    return GateKeeper(
        policy=policy, journal=journal, metrics=create_metrics(CollectorRegistry()), clock=clock
    )


async def two_admitted(journal: Journal) -> tuple[GateKeeper, list[NodeState]]:
    """Five listed nodes, the budget's two slots admitted to n0 and n1, neither write landed yet."""
    gates = keeper(journal, Clock())
    fleet = [node(f"n{i}") for i in range(5)]
    gates.observe(fleet)
    assert (await gates.admit(fleet[0])).allowed
    assert (await gates.admit(fleet[1])).allowed
    return gates, fleet


async def test_a_stale_list_does_not_give_an_admitted_slot_back(journal: Journal) -> None:
    gates, fleet = await two_admitted(journal)
    gates.observe(fleet)  # listed before either write landed: neither shows a quarantine
    assert gates.fleet().quarantined == 2
    assert not (await gates.admit(fleet[2])).allowed


async def test_a_pending_slot_ends_when_a_list_shows_it_or_the_write_fails(journal: Journal) -> None:
    gates, fleet = await two_admitted(journal)
    gates.withdraw("n1")  # its write failed
    gates.observe([node("n0", quarantined=True), *fleet[1:]])  # n0's write landed
    assert gates.fleet().quarantined == 1
    gates.observe([node("n0"), *fleet[1:]])  # released by hand: the list is believed now
    assert gates.fleet().quarantined == 0


async def test_a_pending_slot_no_list_ever_shows_expires(journal: Journal) -> None:
    clock = Clock()
    gates = keeper(journal, clock)
    fleet = [node(f"n{i}") for i in range(3)]
    gates.observe(fleet)
    assert (await gates.admit(fleet[0])).allowed
    clock.now += gatekeeper_module.PENDING_TTL + timedelta(seconds=1)
    gates.observe(fleet)
    assert gates.fleet().quarantined == 0


async def test_held_is_unknown_before_a_list_then_the_quarantined_owned_and_pending(journal: Journal) -> None:
    clock = Clock()
    gates = keeper(journal, clock)
    assert gates.held() is None
    owned = NodeState(name="own", labels=((POOL, "p"),), annotations=((footprint.OWNED_BY, "sickbay-0"),))
    gates.observe([node("q", quarantined=True), owned, node("free"), node("next")])
    assert (await gates.admit(node("next"))).allowed
    assert gates.held() == {"q", "own", "next"}
