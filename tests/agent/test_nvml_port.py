"""The agent's NVML port names only what the real binding has, and the fake provides all of it."""

from __future__ import annotations

import pynvml
import pytest

from app.agent.nvml import NvmlLibrary
from tests.agent.fake_pynvml import FakeNvml

PORT_NAMES = sorted(
    {name for name in vars(NvmlLibrary).get("__annotations__", {})}
    | {name for name in vars(NvmlLibrary) if name.startswith("nvml")}
)


@pytest.mark.parametrize("name", PORT_NAMES)
def test_the_real_binding_has_every_name_the_agent_uses(name: str) -> None:
    assert hasattr(pynvml, name)


@pytest.mark.parametrize("name", PORT_NAMES)
def test_the_fake_has_every_name_with_the_real_value(name: str) -> None:
    fake = FakeNvml(1)
    assert hasattr(fake, name)
    if not callable(getattr(pynvml, name)) or isinstance(getattr(pynvml, name), type):
        assert getattr(fake, name) == getattr(pynvml, name)


def test_the_fake_raises_the_real_error_classes() -> None:
    fake = FakeNvml(1)
    fake.nvmlInit()
    fake.lose_gpu(0)
    handle = fake.nvmlDeviceGetHandleByIndex(0)

    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetUUID(handle)
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        FakeNvml(library_present=False).nvmlInit()
