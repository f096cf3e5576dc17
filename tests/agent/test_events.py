"""The NVML event thread: registration per GPU, each watched event type, hand-off as a GpuEvent."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from datetime import UTC, datetime

import pynvml
import pytest

from app.agent.devices import discover_gpus
from app.agent.events import EventWatcher
from app.agent.model import EventKind, GpuEvent
from app.agent.state import GpuStates
from tests.agent.fake_pynvml import ALL_WATCHED_EVENTS, FakeNvml, make_gpu

FIXED = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


class Watching:
    def __init__(self, nvml: FakeNvml) -> None:
        self.nvml = nvml
        self.received: queue.Queue[GpuEvent] = queue.Queue()
        nvml.nvmlInit()
        self.watcher = EventWatcher(
            nvml, discover_gpus(nvml), deliver=self.received.put, wait_ms=10, clock=lambda: FIXED
        )
        self.registrations = self.watcher.start()

    def next_event(self) -> GpuEvent:
        return self.received.get(timeout=5)


@pytest.fixture
def watching(request: pytest.FixtureRequest) -> Iterator[Watching]:
    nvml = getattr(request, "param", None) or FakeNvml(2)
    started = Watching(nvml)
    yield started
    started.watcher.stop()


def test_xid_event_becomes_a_gpu_event(watching: Watching) -> None:
    watching.nvml.inject_xid(1, 48)
    event = watching.next_event()

    assert event.kind is EventKind.XID
    assert event.xid == 48
    assert event.gpu.index == 1
    assert event.gpu.uuid == watching.nvml.gpus[1].uuid
    assert event.occurred_at == FIXED
    assert "XID 48" in event.message
    assert "Double Bit ECC" in event.message


@pytest.mark.parametrize(
    ("event_type", "kind"),
    [
        (pynvml.nvmlEventTypeDoubleBitEccError, EventKind.DOUBLE_BIT_ECC),
        (pynvml.nvmlEventTypeDramRetirementEvent, EventKind.DRAM_RETIREMENT),
        (pynvml.nvmlEventTypeDramRetirementFailure, EventKind.DRAM_RETIREMENT_FAILURE),
        (pynvml.nvmlEventTypeGpuUnavailableError, EventKind.GPU_UNAVAILABLE),
    ],
)
def test_each_watched_event_type_has_its_kind(watching: Watching, event_type: int, kind: EventKind) -> None:
    watching.nvml.inject_event(0, event_type)
    event = watching.next_event()

    assert event.kind is kind
    assert event.xid is None
    assert event.recovery_action is None


def test_recovery_action_comes_from_the_driver_field(watching: Watching) -> None:
    watching.nvml.gpus[0].recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
    watching.nvml.inject_event(0, pynvml.nvmlEventTypeGpuRecoveryAction)
    event = watching.next_event()

    assert event.kind is EventKind.RECOVERY_ACTION
    assert event.recovery_action == 2
    assert "node reboot" in event.message


def test_every_gpu_is_registered_for_all_watched_types(watching: Watching) -> None:
    assert [r.mask for r in watching.registrations] == [ALL_WATCHED_EVENTS, ALL_WATCHED_EVENTS]
    assert watching.nvml.registered_mask(0) == ALL_WATCHED_EVENTS


@pytest.mark.parametrize(
    "watching",
    [
        FakeNvml(
            [
                make_gpu(0, supported_events=pynvml.nvmlEventTypeXidCriticalError),
                make_gpu(1, supported_events=pynvml.nvmlEventTypeXidCriticalError),
            ]
        )
    ],
    indirect=True,
)
def test_a_gpu_registers_what_it_supports(watching: Watching) -> None:
    # Registering the full mask would be refused; the agent asks first and registers the supported part.
    assert [r.mask for r in watching.registrations] == [pynvml.nvmlEventTypeXidCriticalError] * 2


def test_bit_by_bit_registration_when_the_supported_mask_is_unknown() -> None:
    nvml = FakeNvml([make_gpu(0, supported_events=pynvml.nvmlEventTypeXidCriticalError)])
    nvml.set_unsupported(0, "nvmlDeviceGetSupportedEventTypes")
    started = Watching(nvml)
    try:
        assert started.registrations[0].mask == pynvml.nvmlEventTypeXidCriticalError
        assert started.registrations[0].error is None
        nvml.inject_xid(0, 13)
        assert started.next_event().xid == 13
    finally:
        started.watcher.stop()


def test_unwatched_types_are_not_registered(watching: Watching) -> None:
    watching.nvml.inject_event(0, pynvml.nvmlEventTypePState)
    watching.nvml.inject_xid(0, 31)

    assert watching.next_event().xid == 31


def test_stop_ends_the_thread_and_frees_the_set(watching: Watching) -> None:
    watching.watcher.stop()

    assert watching.nvml.event_sets[0].freed


def test_gpu_loss_is_admitted_once_however_it_is_noticed() -> None:
    nvml = FakeNvml(1)
    nvml.nvmlInit()
    gpu = discover_gpus(nvml)[0].identity
    states = GpuStates()
    xid79 = GpuEvent(kind=EventKind.XID, gpu=gpu, occurred_at=FIXED, message="XID 79", xid=79)
    lost = GpuEvent(kind=EventKind.GPU_LOST, gpu=gpu, occurred_at=FIXED, message="lost", xid=79)

    assert [states.admit(e) for e in (xid79, lost, lost, xid79)] == [True, False, False, False]
    assert states.last_xid(0) == 79
    states.recovered(0)
    assert states.admit(lost) is True


def test_without_an_event_set_the_watcher_starts_nothing() -> None:
    nvml = FakeNvml(1)
    nvml.nvmlInit()

    def refuse() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    nvml.nvmlEventSetCreate = refuse  # type: ignore[method-assign]
    watcher = EventWatcher(nvml, discover_gpus(nvml), deliver=lambda event: None)

    assert watcher.start() == ()
    watcher.stop()
