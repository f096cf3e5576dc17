"""GPU → pod attribution through a fake kubelet PodResources server on a unix socket."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.agent import podresources_pb2 as pb
from app.agent.attribution import PodAttribution, pods_by_device
from app.agent.model import GpuIdentity, PodRef
from tests.agent.conftest import FakeKubelet

GPU0 = GpuIdentity(index=0, uuid="GPU-aaaa", pci_bus_id="00000000:18:00.0", model="H100")
GPU1 = GpuIdentity(index=1, uuid="GPU-bbbb", pci_bus_id="00000000:19:00.0", model="H100")


def test_device_ids_map_to_the_container_holding_them() -> None:
    response = pb.ListPodResourcesResponse(
        pod_resources=[
            pb.PodResources(
                name="trainer-0",
                namespace="ml",
                containers=[
                    pb.ContainerResources(
                        name="main",
                        devices=[
                            pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-aaaa"]),
                            pb.ContainerDevices(resource_name="example.com/nic", device_ids=["GPU-bbbb"]),
                        ],
                    )
                ],
            ),
            pb.PodResources(
                name="notebook",
                namespace="lab",
                containers=[
                    pb.ContainerResources(
                        name="jupyter",
                        # A time-sliced replica of GPU-bbbb, as the device plugin names it.
                        devices=[
                            pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-bbbb::3"])
                        ],
                    )
                ],
            ),
        ]
    )

    assert pods_by_device(response, resource_prefix="nvidia.com/gpu") == {
        "GPU-aaaa": PodRef("ml", "trainer-0", "main"),
        "GPU-bbbb": PodRef("lab", "notebook", "jupyter"),
    }


async def test_the_kubelet_is_asked_over_its_unix_socket(kubelet: FakeKubelet) -> None:
    kubelet.allocate(namespace="ml", pod="trainer-0", container="main", device_ids=["GPU-bbbb"])
    attribution = PodAttribution(kubelet.socket)
    try:
        await attribution.refresh()
    finally:
        await attribution.close()

    assert kubelet.calls == 1
    assert attribution.pod_for(GPU1) == PodRef("ml", "trainer-0", "main")
    assert attribution.pod_for(GPU0) is None


async def test_index_device_ids_also_match(kubelet: FakeKubelet) -> None:
    kubelet.allocate(namespace="ml", pod="p", container="c", device_ids=["0"])
    attribution = PodAttribution(kubelet.socket)
    try:
        await attribution.refresh()
    finally:
        await attribution.close()

    assert attribution.pod_for(GPU0) == PodRef("ml", "p", "c")


async def test_without_the_socket_labels_stay_empty_and_it_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    attribution = PodAttribution(tmp_path / "no.sock")
    with caplog.at_level(logging.WARNING, logger="app.agent.attribution"):
        for _ in range(3):
            await attribution.refresh()

    assert attribution.pod_for(GPU0) is None
    assert len([r for r in caplog.records if "not found" in r.getMessage()]) == 1


async def test_a_dead_kubelet_empties_the_map_and_logs_once(
    short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stale = short_dir / "stale.sock"
    stale.touch()  # the file is there, nobody listens
    attribution = PodAttribution(stale, timeout_s=0.5)
    try:
        with caplog.at_level(logging.WARNING, logger="app.agent.attribution"):
            await attribution.refresh()
            await attribution.refresh()
    finally:
        await attribution.close()

    assert attribution.pods == {}
    assert len([r for r in caplog.records if "List failed" in r.getMessage()]) == 1
