"""Node reads for the read routes (`GET /`, `/api/v1/nodes[/{name}]`): cached, single-flight, budgeted.

Those routes are open to anyone who reaches the port, and each used to cost an API call on the same
client-side limiter as remediation: 300 readers pushed a fatal alert's journaling from 0.5 s to 6 s. Here
a read is answered from a cache kept `ttl_s`; concurrent readers of one key share one call in flight;
and a call that must be made takes a token from the reads' own small budget first, answered with
`TooManyRequestsError` (429) when none is saved up rather than queued. The client behind it paces on a
bucket of its own (`KubeClient.with_own_limiter`), so a read never holds a token a quarantine waits for.

It serves what the read routes show and nothing else: the pipeline and the actuators read the cluster
through the port directly, never through this cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.domain import NodeState
from app.kube import errors, port
from app.kube.ratelimit import Clock, TokenBucket, loop_clock

T = TypeVar("T")
Key = tuple[str, str]  # ("node", name) or ("nodes", label selector)


@dataclass(frozen=True, slots=True)
class _Entry(Generic[T]):
    expires: float
    value: T | None
    missing: errors.NotFoundError | None  # a 404 is an answer too: cached like a node


@dataclass
class ReadCounts:
    """What the reads cost: calls made to the API server, reads answered from cache, reads refused."""

    calls: int = 0
    hits: int = 0
    refused: int = 0


class NodeReads:
    """`get_node` and `list_nodes` of a `KubePort`, for readers who can wait a few seconds for news."""

    def __init__(
        self,
        kube: port.KubePort,
        *,
        ttl_s: float,
        qps: float,
        burst: int,
        max_entries: int = 1024,
        clock: Clock = loop_clock,
    ) -> None:
        self._kube = kube
        self._ttl = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._budget = TokenBucket(qps=qps, burst=burst, clock=clock)
        self._cache: dict[Key, _Entry[object]] = {}
        self._flying: dict[Key, asyncio.Task[_Entry[object]]] = {}
        self.counts = ReadCounts()

    async def get_node(self, name: str) -> NodeState:
        value = await self._read(("node", name), lambda: self._kube.get_node(name))
        assert isinstance(value, NodeState)
        return value

    async def list_nodes(self, *, label_selector: str | None = None) -> list[NodeState]:
        value = await self._read(
            ("nodes", label_selector or ""), lambda: self._kube.list_nodes(label_selector=label_selector)
        )
        assert isinstance(value, list)
        return value

    async def _read(self, key: Key, fetch: Callable[[], Awaitable[object]]) -> object:
        entry = self._cache.get(key)
        if entry is not None and entry.expires > self._clock():
            self.counts.hits += 1
            return _answer(entry)
        task = self._flying.get(key)
        if task is None:
            if not self._budget.try_take():
                self.counts.refused += 1
                raise errors.TooManyRequestsError(
                    "the read routes' API budget is spent; try again shortly",
                    retry_after=1.0 / self._budget.qps,
                )
            task = asyncio.create_task(self._fetch(key, fetch), name=f"sickbay-read-{key[0]}")
            task.add_done_callback(_retrieved)
            self._flying[key] = task
        else:
            self.counts.hits += 1
        # Shielded: a reader that goes away must not cancel the call the others are waiting on.
        return _answer(await asyncio.shield(task))

    async def _fetch(self, key: Key, fetch: Callable[[], Awaitable[object]]) -> _Entry[object]:
        self.counts.calls += 1
        try:
            try:
                entry: _Entry[object] = _Entry(self._clock() + self._ttl, await fetch(), None)
            except errors.NotFoundError as exc:
                entry = _Entry(self._clock() + self._ttl, None, exc)
            self._keep(key, entry)
            return entry
        finally:
            self._flying.pop(key, None)

    def _keep(self, key: Key, entry: _Entry[object]) -> None:
        if self._ttl <= 0:
            return
        self._cache.pop(key, None)
        if len(self._cache) >= self._max_entries:
            now = self._clock()
            for stale in [k for k, e in self._cache.items() if e.expires <= now]:
                del self._cache[stale]
        while len(self._cache) >= self._max_entries:  # still full of live entries: the oldest go first
            del self._cache[next(iter(self._cache))]
        self._cache[key] = entry


def _retrieved(task: asyncio.Task[_Entry[object]]) -> None:
    """Every reader may have gone: read the outcome so a failure is not reported as never retrieved."""
    if not task.cancelled():
        task.exception()


def _answer(entry: _Entry[object]) -> object:
    if entry.missing is not None:
        raise entry.missing
    return entry.value
