"""The running agent: wires NVML, the event thread, the poller, attribution, spool, pusher and /metrics.

It owns the order things start and stop in and the per-poll bookkeeping (which GPUs could not be read),
nothing else: readings, events, exposition and delivery each live in their own module. NVML comes in as a
parameter (the real `pynvml` in production, a fake in tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Coroutine
from typing import Any

import aiohttp
from aiohttp import web

from app.agent import attribution, exposition, server
from app.agent import nvml as nvml_port
from app.agent.devices import Gpu, discover_gpus
from app.agent.events import Clock, EventWatcher, describe_lost, utc_now
from app.agent.model import XID_GPU_LOST, EventKind, GpuEvent, GpuReading
from app.agent.pusher import Pusher, TokenSource, delivery_backoff
from app.agent.readings import GpuReader
from app.agent.recorder import Recorder
from app.agent.selfmetrics import AgentMetrics, create_metrics
from app.agent.settings import AgentSettings
from app.agent.spool import Spool
from app.agent.state import GpuStates

log = logging.getLogger(__name__)


class Agent:
    def __init__(
        self,
        settings: AgentSettings,
        nvml: nvml_port.NvmlLibrary,
        *,
        rng: random.Random | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self.settings = settings
        self.metrics: AgentMetrics = create_metrics()
        self._nvml = nvml
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._clock = clock
        self._states = GpuStates()
        self._reader = GpuReader(nvml)
        self._attribution = attribution.PodAttribution(
            settings.pod_resources_socket, resource_prefix=settings.gpu_resource_prefix
        )
        self._gpus: tuple[Gpu, ...] = ()
        self._driver_version = ""
        self._readings: dict[int, GpuReading] = {}
        self._unreadable: set[int] = set()
        self._nvml_started = False
        self._spool: Spool | None = None
        self._session: aiohttp.ClientSession | None = None
        self._recorder: Recorder | None = None
        self._pusher: Pusher | None = None
        self._watcher: EventWatcher | None = None
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        return self._gpus

    @property
    def port(self) -> int:
        """The port /metrics listens on (useful with listen_port=0)."""
        if self._runner is None or not self._runner.addresses:
            raise RuntimeError("the agent is not serving")
        return int(self._runner.addresses[0][1])

    @property
    def pusher(self) -> Pusher:
        if self._pusher is None:
            raise RuntimeError("the agent is not started")
        return self._pusher

    async def start(self) -> None:
        """Start everything; NvmlUnavailableError when NVML can't start. Cleans up after any failure."""
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        settings = self.settings
        self._driver_version = nvml_port.start_nvml(self._nvml)
        self._nvml_started = True
        self._gpus = discover_gpus(self._nvml)
        log.info("found %d GPUs, driver %s", len(self._gpus), self._driver_version or "unknown")
        spool = await asyncio.to_thread(
            Spool,
            settings.spool_path,
            max_events=settings.spool_max_events,
            max_bytes=settings.spool_max_bytes,
        )
        self._spool = spool
        self._session = aiohttp.ClientSession()
        self._pusher = Pusher(
            session=self._session,
            url=settings.events_url,
            node=settings.node_name,
            spool=spool,
            metrics=self.metrics,
            tokens=TokenSource(
                token=settings.token.get_secret_value() if settings.token else None,
                token_file=settings.token_file,
            ),
            backoff=delivery_backoff(settings.backoff_initial_s, settings.backoff_max_s),
            rng=self._rng,
            timeout_s=settings.push_timeout_s,
        )
        if settings.token is None and settings.token_file is None:
            log.warning("no bearer token configured; the service will likely refuse events")
        self._recorder = Recorder(
            node=settings.node_name,
            states=self._states,
            pod_for=self._attribution.pod_for,
            spool=spool,
            metrics=self.metrics,
            on_stored=self._pusher.notify,
        )
        loop = asyncio.get_running_loop()
        recorder = self._recorder

        def deliver(event: GpuEvent) -> None:
            # Runs on the NVML thread: hand over to the loop, never touch agent state from here.
            try:
                loop.call_soon_threadsafe(recorder.submit, event)
            except RuntimeError:
                log.warning("NVML event after shutdown dropped: %s", event.message)

        self._watcher = EventWatcher(
            self._nvml, self._gpus, deliver=deliver, wait_ms=settings.event_wait_ms, clock=self._clock
        )
        self._watcher.start()
        await self.poll_once()
        log.info(
            "GPU pods: %s", attribution.describe(self._attribution.pods, (g.identity for g in self._gpus))
        )
        app = server.build_app(render_gpu_metrics=self.render_gpu_metrics, registry=self.metrics.registry)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, settings.listen_host, settings.listen_port).start()
        self._spawn(recorder.run(), "agent-recorder")
        self._spawn(self._pusher.run(), "agent-pusher")
        self._spawn(self._poll_forever(), "agent-poller")
        # Whatever a previous run left in the spool goes out now.
        self._pusher.notify()

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(work, name=name))

    async def stop(self) -> None:
        """Stop in reverse order; safe to call twice and after a failed start. Undelivered events stay."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._watcher is not None:
            await asyncio.to_thread(self._watcher.stop)
            self._watcher = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self._attribution.close()
        if self._spool is not None:
            await asyncio.to_thread(self._spool.close)
            self._spool = None
        if self._nvml_started:
            nvml_port.call_optional(self._nvml, self._nvml.nvmlShutdown)
            self._nvml_started = False

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.poll_interval_s)
            try:
                await self.poll_once()
            except Exception:
                log.exception("counter poll failed; next one in %.0fs", self.settings.poll_interval_s)

    async def poll_once(self) -> None:
        """Refresh pods, read every GPU, report newly unreadable (lost) GPUs as XID 79."""
        await self._attribution.refresh()
        results = await asyncio.to_thread(self._read_all)
        lost: list[GpuEvent] = []
        for gpu, reading in results:
            index = gpu.identity.index
            if reading is None:
                self._readings.pop(index, None)
                self._unreadable.add(index)
                lost.append(
                    GpuEvent(
                        kind=EventKind.GPU_LOST,
                        gpu=gpu.identity,
                        occurred_at=self._clock(),
                        message=describe_lost(gpu.identity),
                        xid=XID_GPU_LOST,
                    )
                )
                continue
            if index in self._unreadable:
                log.info("GPU %d answers NVML again", index)
                self._unreadable.discard(index)
                self._states.recovered(index)
            self._readings[index] = reading
        if lost and self._recorder is not None:
            await self._recorder.record(lost)
        self.metrics.gpus_lost.set(len(self._unreadable))
        self.metrics.polls.inc()

    def _read_all(self) -> list[tuple[Gpu, GpuReading | None]]:
        results: list[tuple[Gpu, GpuReading | None]] = []
        for gpu in self._gpus:
            try:
                results.append((gpu, self._reader.read(gpu)))
            except nvml_port.GpuLostError:
                results.append((gpu, None))
        return results

    def snapshot(self) -> exposition.Snapshot:
        samples = tuple(
            exposition.GpuSample(
                gpu=gpu.identity,
                reading=self._readings.get(gpu.identity.index),
                last_xid=self._states.last_xid(gpu.identity.index),
                pod=self._attribution.pod_for(gpu.identity),
            )
            for gpu in self._gpus
        )
        return exposition.Snapshot(samples=samples, driver_version=self._driver_version)

    def render_gpu_metrics(self) -> str:
        return exposition.render(
            self.snapshot(), hostname=self.settings.node_name, hostname_label=self.settings.hostname_label
        )
