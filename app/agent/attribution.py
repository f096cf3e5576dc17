"""GPU → pod attribution through the kubelet PodResources API v1 (`v1.PodResourcesLister/List`).

The kubelet serves it on a unix socket; the NVIDIA device plugin reports GPU UUIDs as device IDs of
`nvidia.com/gpu` (`UUID::n` when the GPU is time-sliced, the index with the index strategy). Attribution is
best effort: without the socket, or when the kubelet fails, labels stay empty and the agent logs once per
outage. It never raises into the poller and never asks the Kubernetes API server.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

import grpc
import grpc.aio

from app.agent import podresources_pb2 as pb
from app.agent.model import GpuIdentity, PodRef

log = logging.getLogger(__name__)

LIST_METHOD = "/v1.PodResourcesLister/List"
DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")


def pods_by_device(response: pb.ListPodResourcesResponse, *, resource_prefix: str) -> dict[str, PodRef]:
    """Device ID → the container holding it, for every resource whose name starts with the prefix."""
    found: dict[str, PodRef] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not devices.resource_name.startswith(resource_prefix):
                    continue
                for device_id in devices.device_ids:
                    # Several replicas of a shared GPU may map to different pods; the first one listed wins.
                    found.setdefault(_base_id(device_id), PodRef(pod.namespace, pod.name, container.name))
    return found


def _base_id(device_id: str) -> str:
    # Time-slicing and MPS replicas are advertised as "<UUID>::<replica>".
    return device_id.split("::", 1)[0]


def pod_for(gpu: GpuIdentity, pods: Mapping[str, PodRef]) -> PodRef | None:
    if gpu.uuid and gpu.uuid in pods:
        return pods[gpu.uuid]
    return pods.get(str(gpu.index))


class PodAttribution:
    """Keeps the last good device → pod map; `refresh` asks the kubelet and never raises."""

    def __init__(
        self,
        socket_path: Path = DEFAULT_SOCKET,
        *,
        resource_prefix: str = "nvidia.com/gpu",
        timeout_s: float = 2.0,
    ) -> None:
        self._socket_path = socket_path
        self._resource_prefix = resource_prefix
        self._timeout_s = timeout_s
        self._channel: grpc.aio.Channel | None = None
        self._pods: dict[str, PodRef] = {}
        self._failing = False

    @property
    def pods(self) -> Mapping[str, PodRef]:
        return self._pods

    def pod_for(self, gpu: GpuIdentity) -> PodRef | None:
        return pod_for(gpu, self._pods)

    async def refresh(self) -> Mapping[str, PodRef]:
        if not self._socket_path.exists():
            self._fail(f"kubelet PodResources socket {self._socket_path} not found")
            return self._pods
        try:
            response = await self._list()
        except grpc.aio.AioRpcError as exc:
            self._fail(f"kubelet PodResources List failed: {exc.code().name} {exc.details()}")
            return self._pods
        self._pods = pods_by_device(response, resource_prefix=self._resource_prefix)
        if self._failing:
            log.info("GPU → pod attribution is back (%d GPUs allocated)", len(self._pods))
        self._failing = False
        return self._pods

    async def _list(self) -> pb.ListPodResourcesResponse:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(f"unix://{self._socket_path}")
        call = self._channel.unary_unary(
            LIST_METHOD,
            request_serializer=pb.ListPodResourcesRequest.SerializeToString,
            response_deserializer=pb.ListPodResourcesResponse.FromString,
        )
        response = await call(pb.ListPodResourcesRequest(), timeout=self._timeout_s)
        assert isinstance(response, pb.ListPodResourcesResponse)
        return response

    def _fail(self, reason: str) -> None:
        # Pods that held GPUs may have gone; stale labels would blame the wrong workload.
        self._pods = {}
        if not self._failing:
            log.warning("%s; pod labels stay empty until it answers", reason)
        self._failing = True

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


def describe(pods: Mapping[str, PodRef], gpus: Iterable[GpuIdentity]) -> str:
    """One line for the start-up log: which GPU belongs to which pod."""
    parts = [f"{gpu.index}→{pod.namespace}/{pod.name}" for gpu in gpus if (pod := pod_for(gpu, pods))]
    return ", ".join(parts) or "no GPU allocated"
