"""A small, bounded, time-limited memory of authentication verdicts, keyed by a hash of the credential.

So one agent costs one TokenReview per TTL, not one per push; the token itself is never kept (a SHA-256
of it is the key). Least recently used entries go first when full. Time comes from the caller's clock.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def key_of(secret: str, purpose: str) -> str:
    return hashlib.sha256(f"{purpose}\0{secret}".encode("utf-8", "surrogateescape")).hexdigest()


class Verdicts(Generic[T]):
    def __init__(self, *, ttl_s: float, size: int, clock: Callable[[], float]) -> None:
        self._ttl = ttl_s
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, T]] = OrderedDict()

    def get(self, key: str) -> T | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, verdict = entry
        if self._clock() >= expires:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return verdict

    def put(self, key: str, verdict: T) -> None:
        self._entries[key] = (self._clock() + self._ttl, verdict)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
