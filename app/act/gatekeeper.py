"""Holds the state the safety gates need between decisions: the fleet, who is quarantined, the breaker.

The pure rules live in `decide.gates`; this keeps their inputs current (from the reconciler's node list
and from our own writes), persists the breaker in the journal so a restart keeps it open, and reports
it as a metric. The rate limit's minute is observed, not only remembered: the journal's quarantines and
the nodes' own marks count (`decide.gates.recent_quarantines`), so a new leader limits the minute the old
one started. This replica's own admissions of the minute are kept beside them, and the journal is read
again only every `JOURNAL_REREAD`, so a storm does not query the journal once per quarantine.

`admit` is serialised so two nodes can never both take the last slot of a budget; the proactive budget
has its own lock, held by the writer from its node list through its write, for the same reason. Inside
the admission lock nothing waits on I/O: the counts are the census's (`act.census`, moved by one per
change instead of recounted per admission), and the breaker is changed in memory there and committed to
the journal after the lock is left, under a lock of its own that writes the latest state, so a storm's
refusals (each one moves `last_refusal`) neither queue behind one another's commits nor write one each.
An admission still returns only once the breaker it saw is committed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta

from app.act.census import Census
from app.config import rules
from app.decide import footprint, gates
from app.domain import NodeState, RiskLevel
from app.obs.metrics import Metrics
from app.store.journal import Journal

_BREAKER_KEY = "breaker"
# How old the journal's quarantines may be read before an admission reads them again. What this replica
# admits meanwhile it keeps itself; the rest (a previous leader's) is read once on taking over.
JOURNAL_REREAD = timedelta(seconds=10)
# How long an admitted quarantine counts although no node list has shown it yet. A list read before the
# write landed (the reconciler's round overlapping a storm) would otherwise drop the slot and let one more
# node past the budget; a list that shows the quarantine, a failed write or a release ends it sooner.
PENDING_TTL = timedelta(minutes=10)


class GateKeeper:
    def __init__(
        self,
        *,
        policy: rules.BudgetPolicy,
        journal: Journal,
        metrics: Metrics,
        clock: Callable[[], datetime],
    ) -> None:
        self._policy = policy
        self._journal = journal
        self._metrics = metrics
        self._clock = clock
        self._nodes: dict[str, NodeState] = {}
        self._observed = False  # a full node list seen since start
        self._census = Census(pool_label=policy.pool_label)
        # The rate limit's inputs: the journal's quarantines as last read (and when), and this replica's
        # own admissions since, pruned to the window.
        self._journaled: list[tuple[str, datetime]] = []
        self._journal_read: datetime | None = None
        self._admitted: list[tuple[str, datetime]] = []
        # Quarantines admitted that no node list has shown yet: name -> when admitted.
        self._pending: dict[str, datetime] = {}
        self._lock = asyncio.Lock()
        self.proactive_lock = asyncio.Lock()
        self.breaker = gates.Breaker()
        # The breaker as last committed to the journal, and the lock its commits take turns under.
        self._committed = gates.Breaker()
        self._commit_lock = asyncio.Lock()

    async def load(self) -> None:
        raw = await self._journal.get(_BREAKER_KEY)
        if raw:
            data = json.loads(raw)
            self.breaker = gates.Breaker(
                open=bool(data.get("open")),
                opened_at=datetime.fromisoformat(data["opened_at"]) if data.get("opened_at") else None,
                reason=str(data.get("reason", "")),
                last_refusal=datetime.fromisoformat(data["last_refusal"])
                if data.get("last_refusal")
                else None,
            )
        self._committed = self.breaker
        self._metrics.breaker_open.set(1 if self.breaker.open else 0)

    def observe(self, nodes: Iterable[NodeState]) -> None:
        """Refresh the fleet from a full node list (the reconciler calls this each round)."""
        self._nodes = {n.name: n for n in nodes}
        self._observed = True
        self._census.replace(self._nodes.values())
        self._keep_pending()
        self._export_proactive()

    def _keep_pending(self) -> None:
        """Count again the admitted quarantines a fresh list does not show yet (see `PENDING_TTL`)."""
        now = self._clock()
        for name, since in list(self._pending.items()):
            node = self._nodes.get(name)
            if node is None or now - since > PENDING_TTL or footprint.quarantined_class(node) is not None:
                del self._pending[name]
            else:
                self._census.quarantine(name)

    def fleet(self) -> gates.Fleet:
        return self._census.fleet()

    def held(self) -> frozenset[str] | None:
        """The nodes Sickbay holds (quarantined, owned, or a quarantine admitted and on its way) as of the
        last full node list; None before the first, when no one can say which rows retention must keep."""
        if not self._observed:
            return None
        return frozenset(
            name
            for name, node in self._nodes.items()
            if footprint.quarantined_class(node) is not None or node.owned_by_sickbay
        ) | frozenset(self._pending)

    async def admit(self, node: NodeState) -> gates.Verdict:
        await self._read_journal()
        async with self._lock:
            if node.name not in self._nodes:
                self._nodes[node.name] = node
                self._census.add(node)
            pool = node.label(self._policy.pool_label) or ""
            now = self._clock()
            self._admitted = gates.in_rate_window(self._admitted, now=now)
            recent = gates.recent_quarantines(
                journaled=self._journaled, admitted=self._admitted, marks=self._census.marks(), now=now
            )
            verdict = gates.admit(
                self.fleet(),
                pool=pool,
                breaker=self.breaker,
                policy=self._policy,
                now=now,
                recent_quarantines=recent,
            )
            if verdict.allowed:
                # Reserve the slot now; `withdraw` gives it back if the write then fails.
                self._census.quarantine(node.name)
                self._pending[node.name] = now
                self._admitted.append((node.name, now))
            self._move_breaker(verdict.breaker)
        await self._commit_breaker()
        return verdict

    async def _read_journal(self) -> None:
        """The journal's quarantines of the window, read again once the last read is `JOURNAL_REREAD` old;
        the limit's worth of the latest is enough: that many in the journal alone refuse already."""
        now = self._clock()
        if self._journal_read is not None and now - self._journal_read < JOURNAL_REREAD:
            return
        self._journaled = await self._journal.quarantines_since(
            now - gates.RATE_WINDOW, limit=self._policy.quarantines_per_minute
        )
        self._journal_read = now

    def listed(self, nodes: Sequence[NodeState]) -> gates.ProactiveFleet:
        """A full node list taken for the proactive budget (under `proactive_lock`): the fleet it measures,
        kept as the current fleet (and the at-risk gauge) until the next list."""
        self._nodes = {n.name: n for n in nodes}
        self._census.replace_nodes(self._nodes.values())
        self._export_proactive()
        return gates.ProactiveFleet.of(nodes)

    @property
    def policy(self) -> rules.BudgetPolicy:
        return self._policy

    def proactive_fleet(self) -> gates.ProactiveFleet:
        """The GPU fleet and its nodes at act, as last listed (and kept current by our own writes)."""
        return gates.ProactiveFleet.of(self._nodes.values())

    def count_proactive_refusal(self) -> None:
        self._metrics.proactive_refusals.inc()

    def noted(self, node: NodeState) -> None:
        """Our own write to `node`: keep the fleet (and the at-risk gauge) current until the next full list."""
        if node.name not in self._nodes:
            self._census.add(node)
        self._nodes[node.name] = node
        self._export_proactive()

    def _export_proactive(self) -> None:
        levels = [footprint.at_risk_level(n) for n in self._nodes.values() if n.gpu_capacity > 0]
        for level in (RiskLevel.WARN, RiskLevel.ACT):
            self._metrics.proactive_nodes.labels(level=level.value).set(levels.count(level))

    def forget(self, node: str) -> None:
        self._pending.pop(node, None)
        self._census.release(node)

    def withdraw(self, node: str) -> None:
        """The quarantine admitted for `node` was not written: its slot and its place in the minute go."""
        self.forget(node)
        mine = [i for i, (name, _) in enumerate(self._admitted) if name == node]
        if mine:
            del self._admitted[mine[-1]]

    async def reset(self) -> None:
        async with self._lock:
            self._move_breaker(gates.Breaker())
        await self._commit_breaker()

    async def tick(self) -> None:
        """Let the breaker close by itself after its calm period (called by the reconciler)."""
        async with self._lock:
            self._move_breaker(
                gates.maybe_close(self.breaker, self.fleet(), policy=self._policy, now=self._clock())
            )
        await self._commit_breaker()

    def _move_breaker(self, breaker: gates.Breaker) -> None:
        """The breaker's new state, in memory and in the metric (under the admission lock)."""
        if breaker == self.breaker:
            return
        self.breaker = breaker
        self._metrics.breaker_open.set(1 if breaker.open else 0)

    async def _commit_breaker(self) -> None:
        """Commit the breaker's latest state unless it is committed already. Whoever waits here while
        another commits finds the state it saw committed by then, or commits the newer one itself; states
        are written in the order they were reached, so an older one never overwrites a newer one."""
        async with self._commit_lock:
            breaker = self.breaker
            if breaker == self._committed:
                return
            await self._journal.put(
                _BREAKER_KEY,
                json.dumps(
                    {
                        "open": breaker.open,
                        "opened_at": breaker.opened_at.isoformat() if breaker.opened_at else None,
                        "reason": breaker.reason,
                        "last_refusal": breaker.last_refusal.isoformat() if breaker.last_refusal else None,
                    }
                ),
            )
            self._committed = breaker
