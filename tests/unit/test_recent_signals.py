"""The pipeline's in-memory classification context (`app.service.recent_signals`): loaded from the journal
once per GPU, joined by what is journaled after, cut to the window, and bounded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.domain import Signal, SignalSource, SignalStatus
from app.service.recent_signals import RecentSignals

NOW = datetime.now(UTC).replace(microsecond=0)
WINDOW = timedelta(minutes=10)


def signal(fp: str, *, ago: timedelta = timedelta(0), node: str | None = "n1", gpu: int | None = 0) -> Signal:
    at = NOW - ago
    return Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint=fp,
        status=SignalStatus.FIRING,
        name="GpuXid",
        starts_at=at,
        received_at=at,
        node=node,
        gpu=gpu,
        xid=13,
    )


class Journal:
    """What the journal holds, and the reads asked of it."""

    def __init__(self, *signals: Signal) -> None:
        self.signals = list(signals)
        self.reads: list[tuple[str, int | None, datetime]] = []

    async def recent_signals(self, *, node: str, gpu: int | None, since: datetime) -> list[Signal]:
        self.reads.append((node, gpu, since))
        return [s for s in self.signals if (s.node, s.gpu) == (node, gpu) and s.starts_at >= since]


async def test_loaded_once_per_gpu_then_joined_by_what_is_journaled() -> None:
    old = signal("old", ago=timedelta(minutes=5))
    book = Journal(old, signal("other-gpu", ago=timedelta(minutes=5), gpu=1))
    recent = RecentSignals(book)
    first = signal("a", ago=timedelta(minutes=2))
    assert [s.fingerprint for s in await recent.context(first, window=WINDOW)] == ["old"]
    recent.remember(first)
    later = signal("b")
    assert [s.fingerprint for s in await recent.context(later, window=WINDOW)] == ["old", "a"]
    assert book.reads == [("n1", 0, first.starts_at - WINDOW)], "one journal read for the GPU"


async def test_a_gpu_not_in_memory_is_not_filled_by_remember() -> None:
    book = Journal()
    recent = RecentSignals(book)
    recent.remember(signal("a", gpu=3))  # not loaded yet: the journal will have it when it is
    book.signals.append(signal("a", gpu=3))
    assert [s.fingerprint for s in await recent.context(signal("b", gpu=3), window=WINDOW)] == ["a"]


async def test_only_the_window_before_the_signal_counts() -> None:
    recent = RecentSignals(
        Journal(signal("stale", ago=timedelta(minutes=30)), signal("near", ago=timedelta(minutes=1)))
    )
    assert [s.fingerprint for s in await recent.context(signal("now"), window=WINDOW)] == ["near"]


async def test_no_node_no_context_and_no_read() -> None:
    book = Journal()
    recent = RecentSignals(book)
    assert await recent.context(signal("x", node=None), window=WINDOW) == []
    recent.remember(signal("x", node=None))
    assert book.reads == []


async def test_the_least_recently_used_gpu_is_dropped_and_reloads() -> None:
    book = Journal()
    recent = RecentSignals(book, gpus=2, per_gpu=3)
    for gpu in (0, 1, 0, 2):  # GPU 1 is the least recently used when GPU 2 arrives
        await recent.context(signal(f"g{gpu}", gpu=gpu), window=WINDOW)
    await recent.context(signal("again", gpu=0), window=WINDOW)
    await recent.context(signal("again", gpu=1), window=WINDOW)
    assert [gpu for _, gpu, _ in book.reads] == [0, 1, 2, 1]
    for i in range(5):
        recent.remember(signal(f"s{i}", gpu=1))
    kept = await recent.context(signal("last", gpu=1), window=WINDOW)
    assert [s.fingerprint for s in kept] == ["s2", "s3", "s4"], "at most per_gpu kept, the newest"
