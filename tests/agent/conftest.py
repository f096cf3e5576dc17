"""Fixtures for the agent: a fake NVML, a fake kubelet PodResources server, a fake Sickbay service.

Everything runs in-process on loopback or a unix socket in a short temp dir; nothing needs a GPU.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from app.agent import podresources_pb2 as pb
from app.agent.settings import AgentSettings
from tests.agent.fake_pynvml import FakeNvml

TOKEN = "s3cret-token"


@pytest.fixture(autouse=True)
def _clean_agent_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings read the environment; a developer's own SICKBAY_AGENT_* must not leak into tests."""
    for name in list(os.environ):
        if name.startswith("SICKBAY_AGENT_") or name == "NODE_NAME":
            monkeypatch.delenv(name)


@pytest.fixture
def fake_nvml() -> FakeNvml:
    return FakeNvml(2)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths must stay under ~100 bytes; pytest's tmp_path can be longer."""
    path = Path(tempfile.mkdtemp(prefix="sb-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_settings(tmp_path: Path, short_dir: Path) -> Callable[..., AgentSettings]:
    def make(**overrides: Any) -> AgentSettings:
        values: dict[str, Any] = {
            "service_url": "http://127.0.0.1:9",
            "node_name": "node-a",
            "listen_host": "127.0.0.1",
            "listen_port": 0,
            "spool_dir": tmp_path / "spool",
            "pod_resources_socket": short_dir / "absent.sock",
            "poll_interval_s": 3600,
            "event_wait_ms": 20,
            "backoff_initial_s": 0.01,
            "backoff_max_s": 0.05,
            "push_timeout_s": 2,
            "token": TOKEN,
        }
        values.update(overrides)
        return AgentSettings(**values)

    return make


async def eventually(check: Callable[[], bool], *, timeout_s: float = 5.0, what: str = "condition") -> None:
    """Wait until `check()` holds, polling the loop; fail with `what` after the timeout."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


# --- the Sickbay service's side of POST /api/v1/gpu-events ---------------------------------------------


@dataclass
class Receiver:
    """Records what arrives; scripted answers first (e.g. 503 while a follower), then 200."""

    port: int
    answers: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)
    seen: Counter[str] = field(default_factory=Counter)
    accepted: list[dict[str, Any]] = field(default_factory=list)
    server: TestServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.Response:
        self.auth.append(request.headers.get("Authorization"))
        body = await request.json()
        self.requests.append(body)
        if self.answers:
            status = self.answers.pop(0)
            return web.json_response({"error": "scripted"}, status=status)
        for event in body["events"]:
            # The service deduplicates by id: a resent event is acknowledged but not counted twice.
            if not self.seen[event["id"]]:
                self.accepted.append(event)
            self.seen[event["id"]] += 1
        return web.json_response({"accepted": len(body["events"])})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/v1/gpu-events", self.handle)
        self.server = TestServer(app, host="127.0.0.1", port=self.port)
        await self.server.start_server()

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()
            self.server = None


@pytest.fixture
async def receiver(unused_tcp_port: int) -> AsyncIterator[Receiver]:
    """Not listening until the test calls `start()`: a service that is down."""
    service = Receiver(port=unused_tcp_port)
    yield service
    await service.close()


@pytest.fixture
async def live_receiver(receiver: Receiver) -> Receiver:
    await receiver.start()
    return receiver


# --- the kubelet's PodResources API on a unix socket ---------------------------------------------------


@dataclass
class FakeKubelet:
    socket: Path
    pods: list[pb.PodResources] = field(default_factory=list)
    calls: int = 0

    def allocate(self, *, namespace: str, pod: str, container: str, device_ids: list[str]) -> None:
        devices = pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=device_ids)
        self.pods.append(
            pb.PodResources(
                name=pod,
                namespace=namespace,
                containers=[pb.ContainerResources(name=container, devices=[devices])],
            )
        )

    async def list_pods(
        self, request: pb.ListPodResourcesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListPodResourcesResponse:
        self.calls += 1
        return pb.ListPodResourcesResponse(pod_resources=self.pods)


def _serve(kubelet: FakeKubelet) -> grpc.aio.Server:
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {
            "List": grpc.unary_unary_rpc_method_handler(
                kubelet.list_pods,
                request_deserializer=pb.ListPodResourcesRequest.FromString,
                response_serializer=pb.ListPodResourcesResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{kubelet.socket}")
    return server


@pytest.fixture
async def kubelet(short_dir: Path) -> AsyncIterator[FakeKubelet]:
    fake = FakeKubelet(socket=short_dir / "kubelet.sock")
    server = _serve(fake)
    await server.start()
    yield fake
    await server.stop(grace=None)
