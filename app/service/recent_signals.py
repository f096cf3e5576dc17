"""Classification context kept in memory: the recent signals per (node, GPU), loaded from the journal once.

The journal holds the history across restarts; the in-memory copy saves a query and a JSON decode per row,
which is most of the pipeline's cost during an alert storm. A signal the pipeline journals joins its GPU's
copy (`remember`), so a later signal on that GPU sees it as it would after a reload. Bounded: the least
recently used GPUs are dropped past `GPUS`, and reload from the journal when they signal again.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from datetime import datetime, timedelta
from typing import Protocol

from app.domain import Signal

PER_GPU = 64  # recent signals kept per GPU; rules look at a handful within minutes
GPUS = 50_000  # GPUs whose recent signals stay in memory; older ones reload from the journal

Key = tuple[str, int | None]


class SignalSource(Protocol):
    async def recent_signals(self, *, node: str, gpu: int | None, since: datetime) -> list[Signal]: ...


class RecentSignals:
    def __init__(self, journal: SignalSource, *, per_gpu: int = PER_GPU, gpus: int = GPUS) -> None:
        self._journal = journal
        self._per_gpu = per_gpu
        self._gpus = gpus
        self._recent: OrderedDict[Key, deque[Signal]] = OrderedDict()

    async def context(self, signal: Signal, *, window: timedelta) -> list[Signal]:
        """The signals on `signal`'s node and GPU that started within `window` before it."""
        if signal.node is None:
            return []
        key = (signal.node, signal.gpu)
        recent = self._recent.get(key)
        cutoff = signal.starts_at - window
        if recent is None:
            loaded = await self._journal.recent_signals(node=signal.node, gpu=signal.gpu, since=cutoff)
            recent = deque(loaded[-self._per_gpu :], maxlen=self._per_gpu)
            self._recent[key] = recent
            if len(self._recent) > self._gpus:
                self._recent.popitem(last=False)
        self._recent.move_to_end(key)
        return [s for s in recent if s.starts_at >= cutoff]

    def remember(self, signal: Signal) -> None:
        """`signal` was just journaled: it joins its GPU's signals if they are in memory (else the next
        load from the journal finds it). Without this a GPU's later signals would never see it."""
        if signal.node is None:
            return
        recent = self._recent.get((signal.node, signal.gpu))
        if recent is not None:
            recent.append(signal)
