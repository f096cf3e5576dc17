"""Turns `GpuEvent`s into wire events and makes them durable: dedupe GPU loss, add id and pod, spool, wake.

Events arrive from the NVML thread through `submit` (called via `loop.call_soon_threadsafe`) and from the
poller through `record`; a burst is written to the spool in one transaction. Runs on the event loop only;
it sends nothing itself (that is the pusher's job).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from app.agent import wire
from app.agent.model import GpuEvent, GpuIdentity, PodRef
from app.agent.selfmetrics import AgentMetrics
from app.agent.spool import Spool
from app.agent.state import GpuStates

log = logging.getLogger(__name__)


class Recorder:
    def __init__(
        self,
        *,
        node: str,
        states: GpuStates,
        pod_for: Callable[[GpuIdentity], PodRef | None],
        spool: Spool,
        metrics: AgentMetrics,
        on_stored: Callable[[], None],
    ) -> None:
        self._node = node
        self._states = states
        self._pod_for = pod_for
        self._spool = spool
        self._metrics = metrics
        self._on_stored = on_stored
        self._queue: asyncio.Queue[GpuEvent] = asyncio.Queue()

    def submit(self, event: GpuEvent) -> None:
        """Queue one event; must be called on the loop's thread."""
        self._queue.put_nowait(event)

    async def run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self.record(batch)
            except Exception:
                # Losing a burst is bad; losing the recorder task would lose every later event too.
                log.exception("could not spool %d GPU events", len(batch))

    async def record(self, events: Sequence[GpuEvent]) -> int:
        """Spool the events that are news (a loss is reported once); returns how many were stored."""
        payloads = [
            wire.to_payload(
                event, node=self._node, pod=self._pod_for(event.gpu), event_id=wire.new_event_id(self._node)
            )
            for event in events
            if self._states.admit(event)
        ]
        if not payloads:
            return 0
        for payload in payloads:
            log.warning("GPU event: %s", payload.message)
            self._metrics.events.labels(kind=payload.kind.value).inc()
        items = [(payload.id, payload.model_dump_json()) for payload in payloads]
        dropped = await asyncio.to_thread(self._spool.append, items)
        if dropped:
            log.error("spool full: dropped the %d oldest undelivered events", dropped)
            self._metrics.spool_dropped.inc(dropped)
        depth = await asyncio.to_thread(self._spool.depth)
        self._metrics.spool_events.set(depth.events)
        self._metrics.spool_bytes.set(depth.bytes)
        self._on_stored()
        return len(payloads)
