"""A running Sickbay against the simulated API server, for the remediation tests.

The service is the real aiohttp app with the real `KubeClient` talking HTTP to `KubeApiServer`; the
tests post alerts to the webhook and read the cluster back through the official client and kubectl.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from aiohttp.test_utils import TestClient, TestServer
from kubernetes.aio import client as aclient
from kubernetes.aio import config as aconfig

from app.config.settings import RULES_DIR, load_settings
from app.kube import client as kube_client
from app.kube.retries import RetryPolicy
from app.service.runtime import SERVICES, Services, build_app
from app.sim.kubeapi import KubeApiServer
from tests.payloads import alert, webhook

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "gang-cluster.yaml"
# Simulated seconds a deleted pod stays Terminating per second of its grace period: 30 s become 0.3 s, so
# every remediation test meets real Terminating pods and still runs in seconds.
GRACE_SCALE = 0.01


Hook = Callable[[str, tuple[Any, ...], dict[str, Any]], None]


class Spy:
    """Wraps the kube port and records every call in order: (method, first argument).

    Each hook runs synchronously just before the call is sent, with the method name and its arguments: the
    simulator shares the event loop, so a hook reading `world.sim.store` sees the cluster exactly as it is
    when Sickbay makes that call.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[tuple[str, Any]] = []
        self.hooks: list[Hook] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            first = args[0] if args else next(iter(kwargs.values()), None)
            self.calls.append((name, getattr(first, "node", first)))
            for hook in self.hooks:
                hook(name, args, kwargs)
            return await attr(*args, **kwargs)

        return call


class Clock:
    """Sickbay's wall clock, movable by tests (healthy-delay, allocatable grace)."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, delta: timedelta) -> None:
        self.offset += delta

    def set_to(self, when: datetime) -> None:
        """Read `when` now; time then runs on from there."""
        self.offset = when - datetime.now(UTC)


@dataclass
class World:
    sim: KubeApiServer
    client: TestClient[Any, Any]
    spy: Spy
    clock: Clock
    kubeconfig: Path
    tmp: Path
    core: Any
    counter: list[int] = field(default_factory=lambda: [0])

    @property
    def services(self) -> Services:
        return self.client.app[SERVICES]

    async def post_alert(self, **labels: str) -> dict[str, Any]:
        self.counter[0] += 1
        fingerprint = labels.pop("fingerprint", f"fp{self.counter[0]:06d}")
        status = labels.pop("status", "firing")
        body = webhook(alert(fingerprint=fingerprint, status=status, **labels))
        response = await self.client.post(
            "/api/v1/alerts", data=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        assert response.status == 200, await response.text()
        return dict(await response.json())

    async def node(self, name: str) -> Any:
        """The Node as the official client reads it."""
        return await self.core.read_node(name)

    async def pods(
        self, namespace: str | None = None, *, terminating: bool = False, **selectors: str
    ) -> list[Any]:
        """Pods as the official client lists them; Terminating ones (deletionTimestamp set) only if asked."""
        if namespace:
            found = await self.core.list_namespaced_pod(namespace, **selectors)
        else:
            found = await self.core.list_pod_for_all_namespaces(**selectors)
        return [p for p in found.items if terminating or not p.metadata.deletion_timestamp]

    async def events(self, reason: str) -> list[Any]:
        found = await self.core.list_event_for_all_namespaces()
        return [e for e in found.items if e.reason == reason]

    async def kubectl(self, *args: str) -> str:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), KUBECACHEDIR=str(self.tmp / "kube-cache"))
        proc = await asyncio.create_subprocess_exec(
            "kubectl", *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
        return out.decode()

    async def reconcile(self) -> None:
        reconciler = self.services.reconciler
        assert reconciler is not None
        await reconciler.run_once()


async def eventually(
    check: Callable[[], Awaitable[bool]], *, timeout: float = 45.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


def write_policy(tmp: Path, **sections: dict[str, Any]) -> Path:
    """The shipped policy with some sections overridden (shallow per section)."""
    data = yaml.safe_load((RULES_DIR / "policy.yaml").read_text())
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    path = tmp / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@contextlib.asynccontextmanager
async def open_world(
    tmp: Path,
    *,
    seed: Path | str | dict[str, Any] = SEED,
    policy: Path | None = None,
    dry_run: bool = False,
    retry: RetryPolicy | None = None,
    request_timeout: float = 5.0,
    pipeline: dict[str, Any] | None = None,
    grace_scale: float = GRACE_SCALE,
    validated: tuple[str, ...] = (),
    prediction: dict[str, Any] | None = None,
    cluster: KubeApiServer | None = None,
    identity: str = "sickbay-test-0",
    clock: Clock | None = None,
    watch: bool = False,
    kube_settings: dict[str, Any] | None = None,
) -> AsyncIterator[World]:
    """Sickbay against a simulated cluster whose deleted pods stay Terminating for their grace period
    times `grace_scale` (the default turns 30 s into 0.3 s), as behind a kubelet.

    The proactive ladder starts in shadow for every model version, as on a real fleet; the versions in
    `validated` are validated first through the operator's path (`POST /api/v1/model/validate`, force),
    so a test of the acting ladder says that it needs one.

    `cluster` (another world's `sim`) runs this replica against that world's API server instead of a
    new one: a second replica, with its own `identity`, inbox under `tmp` and `clock`.

    `watch` hands the service the client itself rather than the `Spy` around it, so it starts its cluster
    view (`kube.watch`, on the real client only) and reconciles and renders from it; `spy` then records
    nothing. `kube_settings` overrides settings of the `kube` section (`view_sync_wait_s`, say)."""
    async with contextlib.AsyncExitStack() as stack:
        sim = cluster or await stack.enter_async_context(KubeApiServer(seed=seed, grace_scale=grace_scale))
        kubeconfig = sim.write_kubeconfig(tmp / "kubeconfig")
        clock = clock or Clock()
        kube = await kube_client.connect(
            kubeconfig=str(kubeconfig),
            retry=retry or RetryPolicy(attempts=8, base=0.01, cap=0.1, timeout=request_timeout),
            qps=1000,
            burst=1000,
            now=clock,  # what the client stamps (conditions, taints, Events) reads Sickbay's clock too
        )
        spy = Spy(kube)
        settings = load_settings(
            auth={"mode": "none"},
            inbox={"path": tmp / "sickbay.db"},
            identity=identity,
            pod_namespace="default",  # where its own Events go (shadow mode): a namespace the seed has
            reconcile_interval_s=3600,
            dry_run=dry_run,
            **({"policy_file": policy} if policy else {}),
            **({"pipeline": pipeline} if pipeline else {}),
            **({"prediction": prediction} if prediction else {}),
            **({"kube": kube_settings} if kube_settings else {}),
        )
        app = build_app(settings, kube=kube if watch else spy, clock=clock)  # type: ignore[arg-type]
        client = TestClient(TestServer(app))
        await client.start_server()
        await app[SERVICES].prediction_started()  # it starts in the background
        for version in validated:
            body = {"version": version, "force": True, "who": "test", "note": "the test validates it"}
            response = await client.post("/api/v1/model/validate", json=body)
            assert response.status == 200, await response.text()
        configuration = aclient.Configuration()
        await aconfig.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        reader = aclient.ApiClient(configuration)
        try:
            yield World(
                sim=sim,
                client=client,
                spy=spy,
                clock=clock,
                kubeconfig=kubeconfig,
                tmp=tmp,
                core=aclient.CoreV1Api(reader),
            )
        finally:
            await client.close()
            await kube.close()
            await reader.close()
