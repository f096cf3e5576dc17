"""Per-GPU memory the agent keeps between polls: the last XID seen and whether the GPU is lost.

Both the event thread (an XID 79 event) and the poller (GPU_IS_LOST on a read) can notice the same loss;
this latch lets exactly one of them through, so the service sees one XID-79 event per loss, never one per
poll. Only the event loop's thread touches it. It decides nothing beyond that deduplication.
"""

from __future__ import annotations

from app.agent.model import XID_GPU_LOST, GpuEvent


class GpuStates:
    def __init__(self) -> None:
        self._last_xid: dict[int, int] = {}
        self._lost: set[int] = set()

    def admit(self, event: GpuEvent) -> bool:
        """Record what the event says; False when it repeats a loss already reported."""
        index = event.gpu.index
        if event.xid is not None:
            self._last_xid[index] = event.xid
        if not event.means_lost:
            return True
        self._last_xid[index] = XID_GPU_LOST
        if index in self._lost:
            return False
        self._lost.add(index)
        return True

    def recovered(self, index: int) -> None:
        """A read succeeded again (after a reset): a later loss is a new one and gets reported."""
        self._lost.discard(index)

    def is_lost(self, index: int) -> bool:
        return index in self._lost

    def last_xid(self, index: int) -> int:
        return self._last_xid.get(index, 0)
