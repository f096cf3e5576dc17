"""Starting and stopping a simulated API server, for tests (`async with`) and the demo (`run`).

`KubeApiServer` owns one simulated cluster: its store, counters, fault settings and HTTP listener. It binds
to loopback on a free port by default and stops cleanly — pending simulated-kubelet timers are cancelled
and hanging (fault-injected) requests are released — so tests never leak sockets or tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from app.sim.kubeapi import control, discovery, seed
from app.sim.kubeapi.errors import ApiError
from app.sim.kubeapi.faults import EvictionFailure, FaultConfig, FaultInjector
from app.sim.kubeapi.handlers import error_response, handle_api, json_response
from app.sim.kubeapi.kubeconfig import DEFAULT_TOKEN, write_kubeconfig
from app.sim.kubeapi.registry import Registry
from app.sim.kubeapi.resources import Catalog, JsonObj
from app.sim.kubeapi.reviews import API_AUDIENCE, Grant, Identity
from app.sim.kubeapi.state import STATE, SimState, Timers
from app.sim.kubeapi.store import Clock, Store, utc_now
from app.sim.kubeapi.watch import WatchConfig
from app.sim.kubeapi.watchlog import WatchLog

log = logging.getLogger(__name__)

SeedSource = Mapping[str, Any] | str | Path
_MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's request body limit
# How long the simulated disruption controller takes to catch up with a pod change (see controllers.py).
# A real one reacts through informers and a work queue, with no bound a client may rely on: a test that
# needs the budget's synced state polls for it, on either server.
DISRUPTION_SYNC_S = 0.1


async def _version(request: web.Request) -> web.Response:
    return json_response(discovery.SERVER_VERSION)


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _not_found(request: web.Request) -> web.Response:
    return error_response(
        ApiError(404, "NotFound", message="the server could not find the requested resource", details={})
    )


def build_app(state: SimState) -> web.Application:
    """The aiohttp application for one simulated cluster."""
    app = web.Application(client_max_size=_MAX_BODY)
    app[STATE] = state
    for path in ("/api", "/api/{tail:.*}", "/apis", "/apis/{tail:.*}"):
        app.router.add_route("*", path, handle_api)
    app.router.add_get("/version", _version)
    for path in ("/healthz", "/livez", "/readyz"):
        app.router.add_get(path, _ok)
    for path in ("/openapi/v2", "/openapi/v3"):
        app.router.add_get(path, _not_found)
    control.add_routes(app)
    return app


class KubeApiServer:
    """A simulated kube-apiserver on loopback: `async with KubeApiServer(seed=...) as api: api.url`."""

    def __init__(
        self,
        *,
        seed: SeedSource | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        faults: FaultConfig | None = None,
        token: str | None = DEFAULT_TOKEN,
        grace_scale: float = 0.0,
        disruption_sync_s: float = DISRUPTION_SYNC_S,
        clock: Clock = utc_now,
        uid_seed: int = 0,
        watch: WatchConfig | None = None,
    ) -> None:
        """`grace_scale`: how long a deleted pod stays Terminating, per second of its grace period (see
        `Registry`); 0 removes deleted pods at once. `watch`: the watch cache's size and bookmark interval."""
        catalog = Catalog()
        watch = watch or WatchConfig()
        self.store = Store(catalog, clock=clock, seed=uid_seed, watch_log=WatchLog(capacity=watch.capacity))
        self._timers = Timers()
        self.registry = Registry(
            self.store,
            grace_scale=grace_scale,
            schedule=self._timers.schedule,
            disruption_sync_s=disruption_sync_s,
        )
        self.state = SimState(
            catalog=catalog,
            registry=self.registry,
            token=token,
            faults=FaultInjector(faults or FaultConfig()),
            watch=watch,
        )
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        load_seed(self.registry, seed)

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("server already started")
        self.state.closing.clear()
        runner = web.AppRunner(
            build_app(self.state), handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        await site.start()
        self._runner = runner
        addresses = runner.addresses
        self._port = int(addresses[0][1])
        self.state.server_address = f"{self._host}:{self._port}"
        log.info("simulated Kubernetes API serving at %s", self.url)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self.state.closing.set()  # release fault-injected hangs before the runner waits for handlers
        self._timers.cancel_all()
        await runner.cleanup()

    async def __aenter__(self) -> KubeApiServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- where it is ---------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        if self._runner is None:
            raise RuntimeError("server not started")
        return f"http://{self._host}:{self._port}"

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        return write_kubeconfig(
            path, server_url=self.url, token=self.state.token or DEFAULT_TOKEN, namespace=namespace
        )

    # -- steering ------------------------------------------------------------------------------------------

    @property
    def faults(self) -> FaultConfig:
        return self.state.faults.config

    def configure_faults(self, config: FaultConfig | None) -> None:
        """Replace the fault settings (None clears them); the generator is reseeded from `config.seed`."""
        self.state.faults.configure(config or FaultConfig())

    def configure_disruption_sync(self, seconds: float) -> None:
        """Change how long the simulated disruption controller lags behind pod changes (0: inline)."""
        if seconds < 0:
            raise ValueError(f"the disruption controller's lag must not be negative, got {seconds}")
        self.registry.disruption.sync_delay_s = seconds

    def sync_controllers(self) -> None:
        """Let the simulated disruption controller catch up now with every change it has queued."""
        self.registry.disruption.flush()

    @property
    def eviction_failures(self) -> tuple[EvictionFailure, ...]:
        return self.state.faults.eviction_failures

    def fail_evictions(self, *failures: EvictionFailure) -> None:
        """Make every eviction of these pods fail outright (none: evictions work again)."""
        self.state.faults.fail_evictions(failures)

    def register_token(
        self,
        token: str,
        username: str,
        *,
        groups: tuple[str, ...] = (),
        extra: Mapping[str, list[str]] | None = None,
        audiences: tuple[str, ...] | None = None,
        uid: str = "",
    ) -> None:
        """Make TokenReview authenticate `token` as `username` (for `audiences`; default the API server's)."""
        identity = Identity(
            username=username,
            uid=uid,
            groups=groups,
            extra=dict(extra or {}),
            audiences=audiences if audiences is not None else (API_AUDIENCE,),
        )
        self.state.reviews.register_token(token, identity)

    def register_pod_token(
        self, token: str, *, namespace: str, service_account: str, pod: str, node: str | None, audience: str
    ) -> None:
        """A pod-bound projected ServiceAccount token, as kube-apiserver reviews one: the pod in `extra`, and
        the node too unless `node` is None (a cluster older than 1.30, or the feature gate off)."""
        extra = {"authentication.kubernetes.io/pod-name": [pod]}
        if node is not None:
            extra["authentication.kubernetes.io/node-name"] = [node]
        self.register_token(
            token,
            f"system:serviceaccount:{namespace}:{service_account}",
            groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
            extra=extra,
            audiences=(audience,),
        )

    def forget_token(self, token: str) -> None:
        self.state.reviews.forget_token(token)

    def grant(self, subject: str, verb: str, group: str, resource: str, *, name: str = "*") -> None:
        """Let SubjectAccessReview allow `subject` (a user or a group) `verb` on group/resource."""
        self.state.reviews.grant(Grant(subject=subject, verb=verb, group=group, resource=resource, name=name))

    def compact_watch_history(self) -> str:
        """Forget every change made so far, as etcd's compaction does: a watch from an older resourceVersion
        is then answered 410 Expired. Returns the current resourceVersion (a watch from it still works)."""
        current = self.store.resource_version
        for rt in self.state.catalog:
            self.store.watch_log.forget_before(rt.key(), int(current))
        return current

    def counters(self) -> JsonObj:
        return self.state.counters.snapshot()

    def reset_counters(self) -> None:
        self.state.counters.reset()

    def load(self, source: SeedSource) -> int:
        """Add objects from a seed document or file to the running cluster; returns how many."""
        return load_seed(self.registry, source, base=False)


def load_seed(registry: Registry, source: SeedSource | None, *, base: bool = True) -> int:
    """Load the base namespaces (once) and a seed document or file into a registry; returns how many objects."""
    loaded = seed.load_objects(registry, seed.base_objects(registry.store)) if base else 0
    if source is None:
        return loaded
    document = seed.read_seed_file(source) if isinstance(source, str | Path) else dict(source)
    return loaded + seed.load_objects(registry, seed.expand_seed(document, store=registry.store))


async def run(
    seed_path: str | Path | None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    faults: FaultConfig | None = None,
    kubeconfig_path: str | Path | None = None,
    grace_scale: float = 0.0,
    disruption_sync_s: float = DISRUPTION_SYNC_S,
    on_ready: Callable[[KubeApiServer], None] | None = None,
) -> None:
    """Serve a seeded simulated cluster until cancelled (the entry point for `sickbay simulate kube-api`)."""
    server = KubeApiServer(
        seed=seed_path,
        host=host,
        port=port,
        faults=faults,
        grace_scale=grace_scale,
        disruption_sync_s=disruption_sync_s,
    )
    async with server:
        if kubeconfig_path is not None:
            server.write_kubeconfig(kubeconfig_path)
        if on_ready is not None:
            on_ready(server)
        await asyncio.Event().wait()
