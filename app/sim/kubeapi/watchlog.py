"""The simulated watch cache: each resource's recent changes, bounded, for watches to replay and follow.

kube-apiserver serves watches from a per-resource watch cache (k8s.io/apiserver/pkg/storage/cacher/
watch_cache.go) that holds a bounded window of events; a watch from a resourceVersion older than that
window is refused with `too old resource version: N (M)`, a 410 Expired Status
(`errors.NewResourceExpired`, watch_cache.go `getAllEventsSinceLocked`: `if resourceVersion < oldest-1`),
and the client must list again ("Efficient detection of changes",
https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes: "clients must
handle the case by recognizing the status code 410 Gone, clearing their local cache, performing a new get
or list operation, and starting the watch from the resourceVersion that was returned").

Here each resource keeps its last `capacity` changes (one log per resource, as the cacher has one cache per
resource, so busy pods never push nodes' history out). The store records every write (`record`), with the
object before it, so a selector-filtered watch can tell an object entering its selection (ADDED) from one
leaving it (DELETED), as the cacher does. Synchronous, like the store; watches wait on `changed`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from app.sim.kubeapi.resources import JsonObj

# The cacher's default capacity was 100 events per resource (--default-watch-cache-size) before it grew
# dynamically with the event rate (watch_cache.go `defaultUpperBoundCapacity` = 100 * 1024); a bound
# between the two keeps a simulated fleet of thousands of pods able to resume after a short break while
# still letting tests push a watcher out of the window.
DEFAULT_CAPACITY = 10_000

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(frozen=True, slots=True)
class Change:
    """One write: the resourceVersion it made, its type, the object after it and (for an update) before it."""

    rv: int
    type: str
    obj: JsonObj
    old: JsonObj | None


class Expired(Exception):
    """A watch from a resourceVersion the log no longer covers (410, reason Expired)."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class _Window:
    def __init__(self, capacity: int) -> None:
        self.changes: deque[Change] = deque(maxlen=capacity)
        self.floor = (
            0  # the resourceVersion of the newest change pushed out: a watch must start at or after it
        )


class WatchLog:
    """Recent changes per resource key (`ResourceType.key()`), and a wake-up for the watches following them."""

    def __init__(self, *, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"a watch log needs room for at least one change, got {capacity}")
        self.capacity = capacity
        self._windows: dict[str, _Window] = {}
        self._waiters: set[asyncio.Future[None]] = set()

    def _window(self, key: str) -> _Window:
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window(self.capacity)
        return window

    def record(self, key: str, change: Change) -> None:
        window = self._window(key)
        if len(window.changes) == window.changes.maxlen:
            window.floor = window.changes[0].rv
        window.changes.append(change)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    def forget_before(self, key: str, rv: int) -> None:
        """Drop the changes up to `rv` (etcd's compaction, for tests that need a 410 without many writes)."""
        window = self._window(key)
        while window.changes and window.changes[0].rv <= rv:
            window.floor = window.changes.popleft().rv
        window.floor = max(window.floor, rv)

    def since(self, key: str, rv: int) -> list[Change]:
        """The changes after `rv`, oldest first; `Expired` when some of them are no longer kept."""
        window = self._window(key)
        if rv < window.floor:
            raise Expired(rv, window.floor)
        # From the newest back, so a caller a few writes behind (a list's later page) pays for those only.
        newer: list[Change] = []
        for change in reversed(window.changes):
            if change.rv <= rv:
                break
            newer.append(change)
        newer.reverse()
        return newer

    async def changed(self, within_s: float) -> None:
        """Return after the next change anywhere, or after `within_s` seconds."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout=within_s)
        except TimeoutError:
            pass
        finally:
            self._waiters.discard(waiter)
