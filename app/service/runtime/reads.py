"""The read routes (`GET /`, `/api/v1/nodes[/{name}]`): answered from a short cache, single-flight, on a
budget of their own, and after urgent work.

Those routes are open to anyone who reaches the port, and each used to cost an API call on the same
client-side limiter as remediation: 300 readers pushed a fatal alert's journaling from 0.5 s to 6 s.
Here:

- `ReadCache` keeps each answer `ttl_s`, and concurrent readers of one key share the one computation in
  flight, so N readers cost one API call (and one journal query, one page render) per key per TTL;
- `NodeReads` is the node part of the port for those routes: a call that must be made first takes a
  token from the reads' own small budget, and is refused (`TooManyRequestsError`, 429) rather than
  queued when none is saved up. The client behind it paces on a bucket of its own
  (`KubeClient.with_own_limiter`), so a read never holds a token a quarantine waits for;
- `answer` serves a read route's whole response from the cache (one page render, one journal query
  per key per TTL);
- `pace`, before every read route (the routes' `_read` guard), makes each request wait its turn at
  `reads.requests_per_s` (429 past `max_wait_s`), and then for `Urgency.calm()` while the pipeline turns
  a signal into actions: even a cached answer costs the event loop remediation runs on, and readers who
  wait send nothing more, so a flood of them paces itself instead of slowing the quarantine.

It serves what the read routes show and nothing else: the pipeline and the actuators read the cluster
through the port directly, never through this cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar, cast

from aiohttp import web

from app.domain import NodeState
from app.kube import errors, port
from app.kube.ratelimit import Clock, TokenBucket, loop_clock
from app.kube.viewgate import ViewGate
from app.service.runtime.services import SERVICES

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Entry:
    expires: float
    value: object


@dataclass(frozen=True, slots=True)
class _Missing:
    """A 404 is an answer too: kept like a node, raised again to each reader."""

    error: errors.NotFoundError


@dataclass
class ReadCounts:
    """What the reads cost: computations (API calls, renders) made, answers shared or cached, refusals."""

    calls: int = 0
    hits: int = 0
    refused: int = 0


def _always(value: object) -> bool:
    return True


class ReadCache:
    """Answers by key, each kept `ttl_s` (at most `max_entries` keys), one computation in flight per key."""

    def __init__(self, *, ttl_s: float, max_entries: int = 1024, clock: Clock = loop_clock) -> None:
        self._ttl = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._kept: dict[Hashable, _Entry] = {}
        self._flying: dict[Hashable, asyncio.Task[object]] = {}
        self.counts = ReadCounts()

    async def get(
        self,
        key: Hashable,
        compute: Callable[[], Awaitable[T]],
        *,
        keep: Callable[[T], bool] = _always,
        admit: Callable[[], None] | None = None,
    ) -> T:
        """The kept answer for `key`, the one being computed, or a new one from `compute`.

        `admit` runs before a new computation starts and may refuse it by raising; `keep` says whether
        an answer may be kept for the next readers (a transient refusal should not be)."""
        entry = self._kept.get(key)
        if entry is not None and entry.expires > self._clock():
            self.counts.hits += 1
            return cast(T, entry.value)
        task = self._flying.get(key)
        if task is None:
            if admit is not None:
                try:
                    admit()
                except Exception:
                    self.counts.refused += 1
                    raise
            task = asyncio.create_task(self._compute(key, compute, keep), name="sickbay-read")
            task.add_done_callback(_retrieved)
            self._flying[key] = task
        else:
            self.counts.hits += 1
        # Shielded: a reader that goes away must not cancel the computation the others are waiting on.
        return cast(T, await asyncio.shield(task))

    async def _compute(
        self, key: Hashable, compute: Callable[[], Awaitable[T]], keep: Callable[[T], bool]
    ) -> object:
        self.counts.calls += 1
        try:
            value = await compute()
            if keep(value):
                self._keep(key, value)
            return value
        finally:
            self._flying.pop(key, None)

    def _keep(self, key: Hashable, value: object) -> None:
        if self._ttl <= 0:
            return
        self._kept.pop(key, None)
        if len(self._kept) >= self._max_entries:
            now = self._clock()
            for stale in [k for k, e in self._kept.items() if e.expires <= now]:
                del self._kept[stale]
        while len(self._kept) >= self._max_entries:  # still full of live entries: the oldest go first
            del self._kept[next(iter(self._kept))]
        self._kept[key] = _Entry(self._clock() + self._ttl, value)


class NodeReads:
    """`get_node` and `list_nodes` of a `KubePort`, cached in `cache`, new calls on their own budget.

    With a cluster view (`kube.watch`), a list by one label key (`sickbay.io/state`, the status page's and
    `GET /api/v1/nodes`') is answered from the view while it is fresh, with no request and no budget."""

    def __init__(
        self,
        kube: port.KubePort,
        *,
        cache: ReadCache,
        qps: float,
        burst: int,
        clock: Clock = loop_clock,
        view: ViewGate | None = None,
    ) -> None:
        self._kube = kube
        self._view = view
        self._cache = cache
        self._budget = TokenBucket(qps=qps, burst=burst, clock=clock)

    @property
    def counts(self) -> ReadCounts:
        return self._cache.counts

    async def get_node(self, name: str) -> NodeState:
        async def fetch() -> NodeState | _Missing:
            try:
                return await self._kube.get_node(name)
            except errors.NotFoundError as exc:
                return _Missing(exc)

        found = await self._cache.get(("node", name), fetch, admit=self._spend)
        if isinstance(found, _Missing):
            raise found.error
        return found

    async def list_nodes(self, *, label_selector: str | None = None) -> list[NodeState]:
        # Never waits for the view's first lists: a reader at start-up gets a (cached, budgeted) list.
        view = self._view.fresh("reads") if self._view is not None and _one_key(label_selector) else None
        if view is not None:
            return view.labelled(label_selector) if label_selector else view.nodes()
        return await self._cache.get(
            ("nodes", label_selector or ""),
            lambda: self._kube.list_nodes(label_selector=label_selector),
            admit=self._spend,
        )

    def _spend(self) -> None:
        if not self._budget.try_take():
            raise errors.TooManyRequestsError(
                "the read routes' API budget is spent; try again shortly", retry_after=1.0 / self._budget.qps
            )


def _one_key(selector: str | None) -> bool:
    """No selector, or one that names a single label key (`key`: the nodes that have it)."""
    if not selector:
        return True
    return all(c.isalnum() or c in "-_./" for c in selector)


@dataclass(frozen=True, slots=True)
class _Answer:
    """A read route's response, kept to be served again: status, body, content type and extra headers."""

    status: int
    body: bytes
    content_type: str
    charset: str | None
    headers: tuple[tuple[str, str], ...]

    @property
    def keepable(self) -> bool:
        return self.status < 500 and self.status != 429  # "busy" and "unavailable" are not answers

    def response(self) -> web.Response:
        return web.Response(
            status=self.status,
            body=self.body,
            content_type=self.content_type,
            charset=self.charset,
            headers=dict(self.headers),
        )


async def pace(request: web.Request) -> web.Response | None:
    """Wait this read's turn (`reads.requests_per_s`) and then for a calm moment in the pipeline; the 429
    to answer instead when the line is longer than `reads.max_wait_s`, None to go on."""
    services = request.app[SERVICES]
    if services.read_pace is not None:
        wait = services.read_pace.reserve_within(services.settings.reads.max_wait_s)
        if wait is None:
            retry = str(max(1, round(services.settings.reads.max_wait_s)))
            return web.json_response(
                {"error": "busy", "message": "too many readers; try again later"},
                status=429,
                headers={"Retry-After": retry},
            )
        if wait > 0:
            await asyncio.sleep(wait)
    if services.urgency is not None:
        await services.urgency.calm()
    return None


async def answer(request: web.Request, key: str, handler: Handler) -> web.StreamResponse:
    """`handler`'s response for `key`, computed once per TTL for all readers.

    `key` must name everything the response depends on (the route and its path parameters)."""
    cache = request.app[SERVICES].read_cache
    if cache is None:
        return await handler(request)

    async def compute() -> _Answer:
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # e.g. 503 while starting: served, not kept
            return _Answer(exc.status, (exc.text or "").encode(), exc.content_type, "utf-8", ())
        assert isinstance(response, web.Response), "read routes answer whole responses"
        extra = tuple((name, value) for name, value in response.headers.items() if name not in _OWN_HEADERS)
        body = response.body if isinstance(response.body, bytes) else b""
        return _Answer(response.status, body, response.content_type, response.charset, extra)

    kept = await cache.get(("view", key), compute, keep=lambda a: a.keepable)
    return kept.response()


_OWN_HEADERS = frozenset({"Content-Type", "Content-Length"})


def _retrieved(task: asyncio.Task[object]) -> None:
    """Every reader may have gone: read the outcome so a failure is not reported as never retrieved."""
    if not task.cancelled():
        task.exception()
