"""When a reader may read the cluster view instead of listing, and how long it waits for the view's first
lists: client-go's `WaitForCacheSync` pattern, with the bound controller-runtime puts on it.

A controller built on informers starts its workers only once their caches have synced
(client-go tools/cache/shared_informer.go `WaitForCacheSync`, which blocks until every `HasSynced` is true
or the stop channel closes), and controller-runtime gives up after `CacheSyncTimeout`, two minutes by
default (controller-runtime pkg/config/controller.go). Without that wait, the first reconcile round ran
while the view's first lists were in flight and listed the whole fleet itself: the fleet was listed twice
at start-up (20.6 s, 46 requests at 10,000 nodes and 100,000 pods).

So here:

- `synced(reader)`, for the periodic readers (reconcile, the audit): while the view has not yet listed and
  opened its watches, wait for that until `sync_wait_s` after the view started (`kube.view_sync_wait_s`);
  a reader that comes later, or a view that did not make it in time, does not wait;
- `fresh(reader)`, for readers that must not wait (the status page, planning a signal): the view now, or
  nothing;
- either way the answer is the view only while it can stand in for a list (listed, both watches up); when
  it cannot, the reader lists as it did before there was a view, and says so: the `fallback` hook counts
  each such read (the service wires it to `sickbay_watch_view_fallbacks_total{reader,reason}`) and a warning
  is logged the first time a reader falls back (an info line when it reads the view again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from app.kube.ratelimit import Clock, loop_clock
from app.kube.views import ClusterView

log = logging.getLogger(__name__)

# controller-runtime's default CacheSyncTimeout (pkg/config/controller.go: "Defaults to 2 minutes").
DEFAULT_SYNC_WAIT_S = 120.0
NOT_SYNCED = "not-synced"  # its first lists and watches had not come
STALE = "stale"  # it had listed and watched, but a watch is down and being retried

Fallback = Callable[[str, str], None]


def _ignore(reader: str, reason: str) -> None:
    return None


class ViewGate:
    """The cluster view for each reader while it is fresh, `None` (the reader lists) otherwise."""

    def __init__(
        self,
        view: ClusterView,
        *,
        sync_wait_s: float = DEFAULT_SYNC_WAIT_S,
        fallback: Fallback = _ignore,
        clock: Clock = loop_clock,
    ) -> None:
        self.view = view
        self._clock = clock
        self._wait_until = clock() + sync_wait_s  # the start-up window: the view starts with its gate
        self._fallback = fallback
        self._listing: set[str] = set()  # the readers that last fell back (warned once per episode)

    def fresh(self, reader: str) -> ClusterView | None:
        """The view if it can stand in for a list now; otherwise `None`, counted and logged."""
        view = self.view
        if view.synced and not view.stale:
            if reader in self._listing:
                self._listing.discard(reader)
                log.info("%s reads the cluster view again", reader)
            return view
        reason = STALE if view.opened else NOT_SYNCED
        self._fallback(reader, reason)
        if reader not in self._listing:
            self._listing.add(reader)
            what = "a watch is down" if reason == STALE else "its first lists and watches have not come"
            log.warning("%s lists from the API server: the cluster view cannot answer (%s)", reader, what)
        return None

    async def synced(self, reader: str) -> ClusterView | None:
        """`fresh`, after waiting for the view's first lists and watches while the start-up window lasts."""
        view = self.view
        left = self._wait_until - self._clock()
        if left > 0 and (not view.synced or view.stale):  # listed, a watch opening: a moment at most
            if not view.synced:
                log.info("%s waits up to %.1fs for the cluster view's first lists", reader, left)
            await view.wait_fresh(left)
        return self.fresh(reader)
