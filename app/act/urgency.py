"""Quarantines first: background paperwork waits while signals are being turned into actions.

In a storm (hundreds of nodes faulting at once) the thing that matters is taking every sick node out of
the pool; the GpuHealthy condition, the Events, the `draining` label and the evictions can follow. The
pipeline marks the stretches in which it processes signals as urgent; background steps wait for a calm
moment — never longer than `max_wait`, so a steady trickle of alerts cannot starve them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class Urgency:
    def __init__(self, *, max_wait_s: float = 10.0) -> None:
        self._busy = 0
        self._calm = asyncio.Event()
        self._calm.set()
        self._max_wait_s = max_wait_s

    @contextlib.asynccontextmanager
    async def urgent(self) -> AsyncIterator[None]:
        self._busy += 1
        self._calm.clear()
        try:
            yield
        finally:
            self._busy -= 1
            if self._busy == 0:
                self._calm.set()

    async def calm(self) -> None:
        """Return once no urgent work is running, or after `max_wait_s` at most."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._max_wait_s):
                await self._calm.wait()
