"""The simulated cluster's object store: one map per resource and one cluster-wide resourceVersion counter.

Every write goes through `put` or `remove`, which take a fresh dict and stamp a new resourceVersion, so a
stored object is never modified in place (a response being written can't see a half-applied change). All
methods are synchronous: a caller that reads, decides and writes without awaiting in between is atomic on
the event loop. Semantics (validation, preconditions, status rules) live in `registry.py`, not here.
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from app.sim.kubeapi.errors import not_found
from app.sim.kubeapi.resources import Catalog, JsonObj, Ref, ResourceType
from app.sim.kubeapi.watchlog import ADDED, DELETED, MODIFIED, Change, WatchLog

Clock = Callable[[], datetime]
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # kube's generateName alphabet: no vowels, no look-alikes


def utc_now() -> datetime:
    return datetime.now(UTC)


def format_time(moment: datetime) -> str:
    """RFC 3339 in whole seconds, as metav1.Time serialises."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Store:
    """Objects by resource, namespace and name; reads return stored dicts that callers must not modify."""

    def __init__(
        self, catalog: Catalog, *, clock: Clock = utc_now, seed: int = 0, watch_log: WatchLog | None = None
    ) -> None:
        self.catalog = catalog
        # Every write, for the watches (`watch.py`); a write is recorded as it is stored, in one step.
        self.watch_log = watch_log or WatchLog()
        self.clock = clock
        self._objects: dict[str, dict[tuple[str, str], JsonObj]] = {rt.key(): {} for rt in catalog}
        # Each table's keys kept sorted on write, as etcd keeps its keyspace ordered, so a page of a list
        # starts by bisecting to its continue key instead of sorting the collection (`paging.py`).
        self._keys: dict[str, list[tuple[str, str]]] = {rt.key(): [] for rt in catalog}
        self._rv = 0
        self._random = random.Random(seed)  # noqa: S311 - reproducible uids and names; not security

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def now(self) -> str:
        return format_time(self.clock())

    def new_uid(self) -> str:
        # Seeded so a seed file expands to the same uids every run; shaped like a v4 UUID.
        bits = self._random.getrandbits(128)
        hexed = f"{bits:032x}"
        return f"{hexed[:8]}-{hexed[8:12]}-4{hexed[13:16]}-a{hexed[17:20]}-{hexed[20:32]}"

    def random_suffix(self, length: int = 5) -> str:
        return "".join(self._random.choice(_NAME_CHARS) for _ in range(length))

    def get(self, ref: Ref) -> JsonObj | None:
        return self._objects[ref.rt.key()].get(ref.key)

    def require(self, ref: Ref) -> JsonObj:
        found = self.get(ref)
        if found is None:
            raise not_found(ref.rt, ref.name)
        return found

    def items(self, rt: ResourceType, *, namespace: str | None = None) -> list[JsonObj]:
        """Objects in key order (namespace, name), as etcd lists them."""
        return [obj for _, obj in self.scan(rt, namespace=namespace)]

    def scan(
        self, rt: ResourceType, *, namespace: str | None = None, after: tuple[str, str] | None = None
    ) -> Iterator[tuple[tuple[str, str], JsonObj]]:
        """(key, object) in key order from just past `after`, within `namespace`; lazily, so a caller that
        stops early pays only for what it read. Not to be resumed across a write to the same resource."""
        keys, table = self._keys[rt.key()], self._objects[rt.key()]
        scoped = namespace if rt.namespaced else None
        start = bisect_right(keys, after) if after is not None else 0
        if scoped is not None:
            start = max(start, bisect_left(keys, (scoped, "")))
        for index in range(start, len(keys)):
            key = keys[index]
            if scoped is not None and key[0] != scoped:
                return
            yield key, table[key]

    def count_after(self, rt: ResourceType, *, namespace: str | None, after: tuple[str, str]) -> int:
        """How many keys sort after `after` (within `namespace`), by bisection: etcd's range count."""
        keys = self._keys[rt.key()]
        if namespace is None or not rt.namespaced:
            return len(keys) - bisect_right(keys, after)
        end = bisect_left(keys, (namespace + "\x00", ""))
        return max(0, end - max(bisect_right(keys, after), bisect_left(keys, (namespace, ""))))

    def key_of(self, rt: ResourceType, obj: JsonObj) -> tuple[str, str]:
        meta = obj["metadata"]
        return (meta.get("namespace", "") if rt.namespaced else "", meta["name"])

    def has(self, rt: ResourceType, key: tuple[str, str]) -> bool:
        return key in self._objects[rt.key()]

    def put(self, rt: ResourceType, obj: JsonObj) -> JsonObj:
        """Store a fresh object under a new resourceVersion and return it."""
        self._rv += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self._rv)
        key = self.key_of(rt, obj)
        table = self._objects[rt.key()]
        old = table.get(key)
        if old is None:
            insort(self._keys[rt.key()], key)
        table[key] = obj
        self.watch_log.record(rt.key(), Change(self._rv, ADDED if old is None else MODIFIED, obj, old))
        return obj

    def remove(self, ref: Ref) -> JsonObj:
        """Drop an object; the deletion consumes a resourceVersion as it does in etcd."""
        table = self._objects[ref.rt.key()]
        if ref.key not in table:
            raise not_found(ref.rt, ref.name)
        self._rv += 1
        gone = table.pop(ref.key)
        keys = self._keys[ref.rt.key()]
        del keys[bisect_left(keys, ref.key)]
        # The DELETED event carries the object as it last was, at the deletion's resourceVersion (etcd3
        # watcher.go stamps a deleted object with the revision of its delete).
        last = {**gone, "metadata": {**gone["metadata"], "resourceVersion": str(self._rv)}}
        self.watch_log.record(ref.rt.key(), Change(self._rv, DELETED, last, gone))
        return gone
