"""An informer: list once, then watch from the list's resourceVersion, keeping a local cache exact.

What client-go's reflector does (tools/cache/reflector.go `ListAndWatch`), and the Kubernetes API concepts
prescribe ("Efficient detection of changes",
https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):

- list, replace the cache with what was listed, watch from the list's resourceVersion;
- apply each ADDED / MODIFIED / DELETED to the cache and move the resourceVersion to the event's;
- a BOOKMARK only moves the resourceVersion ("Watch bookmarks": it says every change up to it was sent),
  so a quiet resource resumes from recent history rather than falling out of the server's window;
- a watch the server ends (its timeout) resumes from the last resourceVersion, with no list;
- 410 Gone / Expired (an ERROR event, or the HTTP status) means the history is gone: list again;
- any other failure (5xx, a dropped connection, a 403) resumes after a jittered exponential backoff,
  and after a failed relist lists again. Nothing here raises out of `run`: the cache is marked stale,
  a metric and a warning say so, and the readers decide what a stale cache is good for.

`run` runs until cancelled. The cache is anything with `replace(objects)` and `apply(type, object)`
(`app.kube.views` has the typed ones); hooks report events, relists and staleness (the service wires
them to Prometheus; `app.kube` imports no metrics library).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from app.backoff import Backoff
from app.kube import errors
from app.kube.listwatch import WATCH_TIMEOUT_S, ListWatch
from app.kube.responses import JsonObj

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
# client-go's reflector backs off from 800 ms to 30 s (reflector.go `NewReflectorWithOptions`).
DEFAULT_BACKOFF = Backoff(base=0.8, factor=2.0, cap=30.0, jitter=0.2)


class Cache(Protocol):
    def replace(self, objects: Iterable[JsonObj]) -> None: ...

    def apply(self, kind: str, obj: JsonObj) -> None: ...


def _ignore(*args: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Hooks:
    """How an informer reports: each event applied `(resource, type)`, each relist `(resource, reason)`,
    and staleness `(resource, stale)`."""

    event: Callable[[str, str], None] = _ignore
    relist: Callable[[str, str], None] = _ignore
    stale: Callable[[str, bool], None] = _ignore


class _Expired(Exception):
    """The server no longer has the history to resume from: list again."""


class Informer:
    def __init__(
        self,
        source: ListWatch,
        cache: Cache,
        *,
        hooks: Hooks = Hooks(),
        backoff: Backoff = DEFAULT_BACKOFF,
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        sleep: Sleep = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.source = source
        self.cache = cache
        self.resource_version = ""
        self.synced = asyncio.Event()  # set after the first list; stays set through later outages
        self.stale = True  # the cache may miss changes: not yet listed, or the watch is down
        self.watching = asyncio.Event()  # set while not stale: listed, and a watch is open
        self.opened = False  # a watch has been open once: staleness from now on is an outage
        self.relists = 0
        self._hooks = hooks
        self._backoff = backoff
        self._watch_timeout_s = watch_timeout_s
        self._sleep = sleep
        self._rand = rand
        self._delivered = False  # the current watch has applied an event

    @property
    def resource(self) -> str:
        return self.source.resource

    async def run(self) -> None:
        """List, then watch, forever; failures are logged, counted and retried, never raised."""
        failures = 0
        must_list = True
        while True:
            try:
                if must_list:
                    await self._list()
                    must_list = False
                await self._watch()
                failures = 0  # the server ended the watch (its timeout): resume from where it stopped
            except _Expired as exc:
                self._expired(str(exc))
                must_list = True
            except errors.KubeError as exc:
                if exc.status == 410:  # the HTTP status rather than an ERROR event: the same meaning
                    self._expired(str(exc))
                    must_list = True
                    continue
                # A watch that delivered events before it broke starts the backoff over.
                failures = 1 if self._delivered else failures + 1
                self._mark_stale(True)
                wait = self._backoff.delay(failures, rand=self._rand())
                what = "list" if must_list else "watch"
                log.warning(
                    "%s of %s failed (%s); the view of %s is stale, retrying in %.1fs",
                    what,
                    self.resource,
                    exc,
                    self.resource,
                    wait,
                )
                await self._sleep(wait)

    def _expired(self, why: str) -> None:
        log.info("watch of %s from %s: %s; listing again", self.resource, self.resource_version, why)
        self._mark_stale(True)
        self.relists += 1
        self._hooks.relist(self.resource, "expired")

    async def _list(self) -> None:
        listed = await self.source.list_all()
        self.cache.replace(listed.items)
        self.resource_version = listed.resource_version
        self.synced.set()
        log.info(
            "view of %s: listed %d at resourceVersion %s",
            self.resource,
            len(listed.items),
            self.resource_version,
        )

    async def _watch(self) -> None:
        """One watch, to its end."""
        self._delivered = False
        response = await self.source.open_watch(self.resource_version, timeout_s=self._watch_timeout_s)
        self._mark_stale(False)
        async for event in self.source.events(response):
            kind = str(event.get("type", ""))
            obj = event.get("object")
            if not isinstance(obj, dict):
                raise errors.UnavailableError(
                    f"watch of {self.resource} sent a {kind} event without an object"
                )
            if kind == "ERROR":
                self._error_event(obj)
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self.cache.apply(kind, obj)
            elif kind != "BOOKMARK":
                log.warning("watch of %s: ignoring an event of type %r", self.resource, kind)
                continue
            if version:
                self.resource_version = version
            self._hooks.event(self.resource, kind)
            self._delivered = True

    def _error_event(self, status: JsonObj) -> None:
        code = status.get("code")
        if code == 410 or status.get("reason") in ("Expired", "Gone"):
            raise _Expired(str(status.get("message", "")))
        raise errors.UnavailableError(
            f"watch of {self.resource} answered an error: {code} {status.get('reason')}: {status.get('message')}",
            status=code if isinstance(code, int) else None,
        )

    def _mark_stale(self, stale: bool) -> None:
        if stale != self.stale:
            self.stale = stale
            if stale:
                self.watching.clear()
            else:
                self.watching.set()
                self.opened = True
            self._hooks.stale(self.resource, stale)
