"""The fleet counts the blast-radius budget is measured against, kept current change by change.

`decide.gates.Fleet.of` counts a node list from scratch; the gatekeeper asks for the counts on every
admission, and in a storm of 500 nodes recounting the fleet each time was most of the admission's cost
(a label lookup per node per admission). The census counts once per full node list (`replace`) and then
moves the counts by one for each change: a node seen for the first time, a quarantine reserved, written,
withdrawn or released. It also keeps the quarantine start mark (`sickbay.io/since`) of each listed node
that carries one, the node side of the rate limit's minute (`decide.gates.recent_quarantines`).

It holds no lock: every method runs to completion without awaiting, so on one event loop no admission
sees a half-moved count.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from app.decide import footprint, gates
from app.domain import NodeState


class Census:
    def __init__(self, *, pool_label: str) -> None:
        self._pool_label = pool_label
        self._pool_of: dict[str, str] = {}
        self._quarantined: set[str] = set()
        self._by_pool: dict[str, list[int]] = {}  # pool → [nodes, quarantined]
        self._marks: dict[str, datetime] = {}

    def replace(self, nodes: Iterable[NodeState], *, quarantined: Iterable[str] | None = None) -> None:
        """Count a full node list afresh; `quarantined`: who counts as quarantined (by default, the nodes
        that carry Sickbay's quarantine)."""
        listed = list(nodes)
        self._pool_of = {n.name: n.label(self._pool_label) or "" for n in listed}
        if quarantined is None:
            quarantined = (n.name for n in listed if footprint.quarantined_class(n) is not None)
        self._quarantined = {name for name in quarantined if name in self._pool_of}
        self._by_pool = {}
        for name, pool in self._pool_of.items():
            counts = self._by_pool.setdefault(pool, [0, 0])
            counts[0] += 1
            counts[1] += name in self._quarantined
        self._marks = dict(gates.quarantine_marks(listed))

    def replace_nodes(self, nodes: Iterable[NodeState]) -> None:
        """A full node list that keeps who is counted as quarantined (the proactive budget's list)."""
        self.replace(nodes, quarantined=set(self._quarantined))

    def knows(self, name: str) -> bool:
        return name in self._pool_of

    def add(self, node: NodeState) -> None:
        """A node the last list did not have (it joined since): counted, not quarantined."""
        if node.name in self._pool_of:
            return
        pool = node.label(self._pool_label) or ""
        self._pool_of[node.name] = pool
        self._by_pool.setdefault(pool, [0, 0])[0] += 1

    def quarantine(self, name: str) -> None:
        """`name` counts as quarantined from now (a slot reserved); a node not counted is ignored."""
        pool = self._pool_of.get(name)
        if pool is None or name in self._quarantined:
            return
        self._quarantined.add(name)
        self._by_pool[pool][1] += 1

    def release(self, name: str) -> None:
        """`name` no longer counts as quarantined (released, or its reserved write failed)."""
        if name not in self._quarantined:
            return
        self._quarantined.discard(name)
        self._by_pool[self._pool_of[name]][1] -= 1
        self._marks.pop(name, None)

    def is_quarantined(self, name: str) -> bool:
        return name in self._quarantined

    def pool_of(self, name: str) -> str | None:
        return self._pool_of.get(name)

    def fleet(self) -> gates.Fleet:
        """The counts as `gates.Fleet.of` would count them from the same nodes."""
        return gates.Fleet(
            total=len(self._pool_of),
            quarantined=len(self._quarantined),
            by_pool={pool: (n, q) for pool, (n, q) in self._by_pool.items()},
        )

    def marks(self) -> list[tuple[str, datetime]]:
        """(node, when its quarantine started) of each listed node that carries Sickbay's mark."""
        return list(self._marks.items())
