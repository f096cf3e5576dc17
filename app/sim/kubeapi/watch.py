"""`GET ...?watch=1`: a stream of JSON lines, `{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}`.

What it does is what kube-apiserver does ("Efficient detection of changes" and "Watch bookmarks",
https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes and
#watch-bookmarks):

- `resourceVersion=N`: every change after N, then each new one as it happens. Unset or "0": synthetic
  ADDED events for every object that exists now, then the changes after ("Get State and Start at Most
  Recent" / "at Any", the "Semantics for watch" table). N older than the watch cache's window: HTTP 200
  and one ERROR event carrying a 410 Status, reason Expired, `too old resource version: N (M)`
  (watch_cache.go); a watch answers errors in-band once the stream has started (kubernetes#35068);
- label and field selectors filter the stream, and an object that enters or leaves the selection by an
  update arrives as ADDED or DELETED (cacher.go `cacheWatcher.convertToWatchEvent`);
- `allowWatchBookmarks=true`: BOOKMARK events, an object of the kind with only `metadata.resourceVersion`,
  saying every change up to that version has been sent. The cacher sends one about a minute apart
  (cacher.go `bookmarkFrequency`) and clients may not rely on when; here `bookmark_interval_s` (60 s by
  default, less in tests);
- `timeoutSeconds`: the server ends the stream after that long (a clean end, no event). Unset, the
  apiserver picks a random timeout between --min-request-timeout (1800 s) and twice that
  (endpoints/handlers/get.go `ListResource`); here the lower bound, so runs repeat.

Deleted objects arrive at the deletion's resourceVersion (see `store.remove`). A too-large resourceVersion
(ahead of the store) is not refused: it is followed like any other.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from app.sim.kubeapi import errors
from app.sim.kubeapi.errors import ApiError
from app.sim.kubeapi.resources import JsonObj, ResourceType
from app.sim.kubeapi.selectors import FieldSelector, LabelSelector, field_value
from app.sim.kubeapi.watchlog import ADDED, DELETED, MODIFIED, Change, Expired

if TYPE_CHECKING:
    from app.sim.kubeapi.handlers import Call

DEFAULT_TIMEOUT_S = 1800.0
_POLL_S = 0.5  # how often an idle stream looks whether the server is stopping


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """The simulated watch cache's knobs: how many changes per resource it keeps, how often it bookmarks."""

    capacity: int = 10_000
    bookmark_interval_s: float = 60.0


@dataclass(frozen=True, slots=True)
class _Query:
    start: int | None  # None: synthetic ADDED events for what exists, then follow
    bookmarks: bool
    timeout_s: float


def _query(call: Call) -> _Query:
    query = call.request.query
    raw_rv = query.get("resourceVersion", "")
    start: int | None = None
    if raw_rv not in ("", "0"):
        if not raw_rv.isdigit():
            raise errors.bad_request(f"invalid resource version: {raw_rv}")
        start = int(raw_rv)
    raw_timeout = query.get("timeoutSeconds", "")
    if raw_timeout and not raw_timeout.isdigit():
        raise errors.bad_request(f"invalid timeoutSeconds: {raw_timeout}")
    timeout_s = float(raw_timeout) if raw_timeout else DEFAULT_TIMEOUT_S
    return _Query(
        start=start, bookmarks=query.get("allowWatchBookmarks") in ("1", "true"), timeout_s=timeout_s
    )


def _event(kind: str, obj: JsonObj) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _typed(rt: ResourceType, obj: JsonObj) -> JsonObj:
    if obj.get("kind") == rt.kind and obj.get("apiVersion") == rt.api_version:
        return obj
    return {"kind": rt.kind, "apiVersion": rt.api_version, **obj}


def _selection(call: Call, labels: LabelSelector, fields: FieldSelector) -> Callable[[JsonObj], bool]:
    namespace = call.info.namespace

    def selected(obj: JsonObj) -> bool:
        meta = obj.get("metadata") or {}
        if namespace and meta.get("namespace") != namespace:
            return False

        def read(label: str) -> str:
            return field_value(obj, label)

        return labels.matches(meta.get("labels")) and fields.matches(read)

    return selected


def _as_seen(change: Change, selected: Callable[[JsonObj], bool]) -> tuple[str, JsonObj] | None:
    """The event this watch sees of a change, if any (an update across its selector adds or deletes)."""
    if change.type == ADDED:
        return (ADDED, change.obj) if selected(change.obj) else None
    if change.type == DELETED:
        return (DELETED, change.obj) if selected(change.obj) else None
    now_in = selected(change.obj)
    was_in = change.old is not None and selected(change.old)
    if now_in and was_in:
        return MODIFIED, change.obj
    if now_in:
        return ADDED, change.obj
    if was_in:
        return DELETED, change.obj
    return None


async def serve(
    call: Call, config: WatchConfig, *, labels: LabelSelector, fields: FieldSelector
) -> web.StreamResponse:
    """Stream the watch until its timeout, an expired start, the client leaving or the server stopping.

    `labels` and `fields` are the request's selectors, parsed (and refused with a 400) as a list's are."""
    query = _query(call)
    selected = _selection(call, labels, fields)
    state, rt = call.state, call.rt
    store = state.registry.store
    log, key = store.watch_log, rt.key()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + query.timeout_s
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(call.request)
    resource = call.info.counted_resource

    async def send(kind: str, obj: JsonObj) -> None:
        line = _event(kind, obj)
        state.counters.record_bytes("watch", resource, len(line))  # as sent, so a long watch is counted
        await response.write(line)

    if query.start is None:
        seen = int(store.resource_version)
        for obj in [o for o in store.items(rt) if selected(o)]:
            await send(ADDED, _typed(rt, obj))
    else:
        seen = query.start
    next_bookmark = loop.time() + config.bookmark_interval_s
    while not state.closing.is_set():
        # Read the log and the store's version in one step: after sending these, this watch has seen
        # every change of its resource up to `upto`.
        upto = int(store.resource_version)
        try:
            changes = log.since(key, seen)
        except Expired as expired:
            gone = ApiError(410, "Expired", message=str(expired))
            await send("ERROR", gone.status())
            break
        for change in changes:
            event = _as_seen(change, selected)
            if event is not None:
                await send(event[0], _typed(rt, event[1]))
        seen = max(seen, upto)
        now = loop.time()
        if now >= deadline:
            break
        if query.bookmarks and now >= next_bookmark:
            mark = {
                "kind": rt.kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(seen)},
            }
            await send("BOOKMARK", mark)
            next_bookmark = now + config.bookmark_interval_s
        wake = min(deadline, next_bookmark if query.bookmarks else deadline) - now
        await log.changed(within_s=max(0.0, min(wake, _POLL_S)))
    await response.write_eof()
    return response
