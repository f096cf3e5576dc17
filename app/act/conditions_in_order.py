"""Condition writes for a node land in the order they were decided, not the order they finish."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("app.act")


class InOrder:
    """GpuHealthy writes for a node land in the order they were decided, not the order they finish.

    A write takes a ticket when it is decided; one whose ticket is older than the last write that landed
    on that node is dropped, so a slow background write never puts back a condition a later step replaced.
    """

    def __init__(self) -> None:
        self._issued: dict[str, int] = {}
        self._landed: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def ticket(self, node: str) -> int:
        self._issued[node] = self._issued.get(node, 0) + 1
        return self._issued[node]

    async def write(self, node: str, ticket: int, send: Callable[[], Awaitable[None]]) -> None:
        async with self._locks.setdefault(node, asyncio.Lock()):
            if self._landed.get(node, 0) > ticket:
                log.debug("GpuHealthy on %s: a later write has landed; this one is dropped", node)
                return
            await send()
            self._landed[node] = ticket
