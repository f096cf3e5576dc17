"""List pages (`limit`/`continue`) as kube-apiserver serves them from etcd, at a cost of one page per page.

Facts this follows ("Retrieving large results sets in chunks",
https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks, and
k8s.io/apiserver/pkg/storage/etcd3/store.go `GetList`):

- Every page of one list is read at the resourceVersion of its first page: the continue token carries
  that revision and the key to start after, and later pages are an etcd range read `WithRev(continueRV)`
  from that key, so the pages together are one consistent snapshot and each reports the snapshot's
  resourceVersion. The token is base64 (URL alphabet, unpadded) JSON `{"v": "meta.k8s.io/v1", "rv": N,
  "start": "<key>\\x00"}` (k8s.io/apiserver/pkg/storage/continue.go `EncodeContinue`: the last key
  returned plus a NUL, "the next key after").
- etcd reads ranges in key order and stops once `limit` objects matched; selectors are applied while
  reading, and a page is cut short only when the limit is met.
- `remainingItemCount` (the keys after the page, etcd's range count) is set only when the request has no
  label or field selector: GetList sets it `if pred.Empty()`, since etcd's count includes objects the
  selector would drop.
- A continue token whose revision etcd has compacted is answered 410 Expired, "The provided continue
  parameter is too old to display a consistent list result..." (storage/etcd3/errors.go
  `inconsistentContinue`), with a fresh token in the Status's `metadata.continue` that resumes at the same
  key against current state (rv -1), which a client may use to finish an inconsistent list.
- A continue token together with a resourceVersion other than "0" is 400 ("specifying resource version is
  not allowed when using continue", store.go `GetList`).

The simulated store keeps only current state, so a page at an older revision is current state with the
writes since undone, read back from the watch log (`watchlog.py`: every write with the object before it).
The log therefore plays etcd's MVCC history: once it no longer covers a token's revision (its window
moved on, or `compact_watch_history`), the token has expired. A page costs its own length plus the
writes to that resource since its snapshot, never the whole collection.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from app.sim.kubeapi import errors
from app.sim.kubeapi.resources import JsonObj, ResourceType
from app.sim.kubeapi.store import Store
from app.sim.kubeapi.watchlog import ADDED, Expired

Key = tuple[str, str]
Matcher = Callable[[JsonObj], bool]
_CONTINUE_VERSION = "meta.k8s.io/v1"  # the token format's version, continue.go
_LATEST = -1  # an inconsistent continue: read current state (continue.go: "rv -1 ... the latest")
_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - "
    "objects that were created, modified, or deleted between the time the first chunk was returned and now "
    "may show up in the list."
)


@dataclass(frozen=True, slots=True)
class Page:
    """One response's items and list metadata; `examined` counts the stored objects read to build it."""

    items: list[JsonObj]
    resource_version: str
    continue_token: str | None
    remaining: int | None
    examined: int

    def list_meta(self) -> JsonObj:
        meta: JsonObj = {"resourceVersion": self.resource_version}
        if self.continue_token is not None:
            meta["continue"] = self.continue_token
        if self.remaining is not None:
            meta["remainingItemCount"] = self.remaining
        return meta


def encode_continue(rt: ResourceType, key: Key, rv: int) -> str:
    start = (f"{key[0]}/{key[1]}" if rt.namespaced else key[1]) + "\x00"
    raw = json.dumps({"v": _CONTINUE_VERSION, "rv": rv, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(rt: ResourceType, token: str) -> tuple[Key, int]:
    """The key to start after and the snapshot revision; 400 for a token this server didn't make."""
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if decoded["v"] != _CONTINUE_VERSION:
            raise ValueError(f"unsupported continue version {decoded['v']!r}")
        rv, start = int(decoded["rv"]), str(decoded["start"]).removesuffix("\x00")
        namespace, _, name = start.rpartition("/") if rt.namespaced else ("", "", start)
    except (ValueError, KeyError, TypeError, binascii.Error) as error:
        raise errors.bad_request(f"continue key is not valid: {error}") from error
    return (namespace, name), rv


def list_page(
    store: Store,
    rt: ResourceType,
    *,
    namespace: str | None,
    matches: Matcher | None,
    limit: int | None,
    token: str | None,
    resource_version: str | None = None,
) -> Page:
    """The page a list request gets; `matches` is None for a request without selectors."""
    after: Key | None = None
    snapshot = int(store.resource_version)
    if token:
        if resource_version not in (None, "", "0"):
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        after, rv = decode_continue(rt, token)
        if rv != _LATEST:
            snapshot = rv
    try:
        then = _undone_since(store, rt, snapshot, namespace=namespace, after=after)
    except Expired:
        assert after is not None  # a first page reads at the current revision, which is never compacted
        fresh = {"continue": encode_continue(rt, after, _LATEST)}
        raise errors.ApiError(410, "Expired", message=_CONTINUE_EXPIRED, list_meta=fresh) from None
    items: list[JsonObj] = []
    examined = 0
    rows = _rows(store, rt, namespace=namespace, after=after, then=then)
    for _, obj in rows:
        examined += 1
        if matches is None or matches(obj):
            items.append(obj)
            if limit is not None and len(items) == limit:
                break
    last = store.key_of(rt, items[-1]) if items else None
    more = last is not None and next(rows, None) is not None
    remaining = None
    if more and matches is None and last is not None:
        remaining = _count_after(store, rt, namespace=namespace, after=last, then=then)
    return Page(
        items=items,
        resource_version=str(snapshot),
        continue_token=encode_continue(rt, last, snapshot) if more and last is not None else None,
        remaining=remaining,
        examined=examined + (1 if more else 0),
    )


def _undone_since(
    store: Store, rt: ResourceType, rv: int, *, namespace: str | None, after: Key | None
) -> dict[Key, JsonObj | None]:
    """Each key written since `rv` (past `after`, in `namespace`) with what it held at `rv` (None: absent)."""
    if rv >= int(store.resource_version):
        return {}
    then: dict[Key, JsonObj | None] = {}
    for change in store.watch_log.since(rt.key(), rv):
        key = store.key_of(rt, change.obj)
        if key in then or (after is not None and key <= after):
            continue
        if namespace is not None and rt.namespaced and key[0] != namespace:
            continue
        then[key] = None if change.type == ADDED else change.old
    return then


def _rows(
    store: Store,
    rt: ResourceType,
    *,
    namespace: str | None,
    after: Key | None,
    then: dict[Key, JsonObj | None],
) -> Iterator[tuple[Key, JsonObj]]:
    """The snapshot in key order: current keys merged with the undone ones, each read as it was then."""
    now = store.scan(rt, namespace=namespace, after=after)
    older = iter(sorted(then))
    current, undone = next(now, None), next(older, None)
    while current is not None or undone is not None:
        if undone is None or (current is not None and current[0] < undone):
            assert current is not None
            if current[0] not in then:
                yield current
            current = next(now, None)
            continue
        was = then[undone]
        if was is not None:
            yield undone, was
        if current is not None and current[0] == undone:
            current = next(now, None)
        undone = next(older, None)


def _count_after(
    store: Store, rt: ResourceType, *, namespace: str | None, after: Key, then: dict[Key, JsonObj | None]
) -> int:
    count = store.count_after(rt, namespace=namespace, after=after)
    for key, was in then.items():
        if key > after:
            count += (was is not None) - store.has(rt, key)
    return count
