"""A do-nothing Alertmanager receiver that records when each notification arrived: the pipeline's floor."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from aiohttp import web

from app.demo.processes import StackError


@dataclass(frozen=True, slots=True)
class Delivery:
    """One alert as a webhook receiver got it: when (perf_counter and wall clock) and what."""

    at: float
    wall: datetime
    status: str
    labels: Mapping[str, str]
    fingerprint: str


class ProbeReceiver:
    """A do-nothing Alertmanager webhook receiver that records when each alert arrived.

    It runs its own event loop in its own thread, so the arrival time it records is not delayed by
    whatever the caller's loop is busy with (serving the fleet's scrapes, the simulated API server).
    """

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []  # appended by the probe's thread only
        self.url = ""
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        at, wall = time.perf_counter(), datetime.now(UTC)
        body = await request.json()
        for item in body.get("alerts", []):
            self.deliveries.append(
                Delivery(
                    at=at,
                    wall=wall,
                    status=str(item.get("status")),
                    labels=dict(item.get("labels") or {}),
                    fingerprint=str(item.get("fingerprint")),
                )
            )
        return web.Response(text="ok")

    async def _serve(self, ready: threading.Event) -> None:
        app = web.Application()
        app.router.add_post("/", self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{int(runner.addresses[0][1])}/"
        self._stopped = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        ready.set()
        try:
            await self._stopped.wait()
        finally:
            await runner.cleanup()

    async def start(self) -> None:
        ready = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._serve(ready)), name="alert-probe", daemon=True
        )
        self._thread.start()
        if not await asyncio.to_thread(ready.wait, 10.0):
            raise StackError("the probe receiver did not start")

    async def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            with contextlib.suppress(RuntimeError):  # its loop is already closed
                self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10.0)
        self._thread = self._loop = self._stopped = None

    def first(self, *, since: float, status: str = "firing", **labels: str) -> Delivery | None:
        for delivery in list(self.deliveries):
            if (
                delivery.at >= since
                and delivery.status == status
                and all(delivery.labels.get(k) == v for k, v in labels.items())
            ):
                return delivery
        return None
