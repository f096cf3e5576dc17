"""The per-server state the HTTP handlers share, typed and reachable through one `web.AppKey`.

One instance per server (never module-level), so tests can run several simulated clusters side by side.
`Timers` backs delayed work (the simulated kubelet finishing a pod's deletion) with the event loop and
cancels whatever is pending when the server stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from app.sim.kubeapi.counters import Counters
from app.sim.kubeapi.faults import FaultInjector
from app.sim.kubeapi.registry import Registry
from app.sim.kubeapi.resources import Catalog
from app.sim.kubeapi.reviews import Reviews
from app.sim.kubeapi.watch import WatchConfig


class Timers:
    """Callbacks scheduled on the running loop, all cancellable at once."""

    def __init__(self) -> None:
        self._handles: set[asyncio.TimerHandle] = set()

    def schedule(self, delay: float, callback: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._handles.discard(handle)
            callback()

        handle = loop.call_later(delay, fire)
        self._handles.add(handle)

    def cancel_all(self) -> None:
        for handle in self._handles:
            handle.cancel()
        self._handles.clear()


@dataclass
class SimState:
    catalog: Catalog
    registry: Registry
    counters: Counters = field(default_factory=Counters)
    faults: FaultInjector = field(default_factory=FaultInjector)
    reviews: Reviews = field(default_factory=Reviews)
    watch: WatchConfig = field(default_factory=WatchConfig)
    token: str | None = None
    server_address: str = "127.0.0.1:0"
    closing: asyncio.Event = field(default_factory=asyncio.Event)


STATE = web.AppKey("sickbay_kubeapi_state", SimState)
