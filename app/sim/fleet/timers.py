"""The fleet's own timers: things due at a simulated time (a failed GPU vanishing, an automatic repair).

A heap ordered by time, then by when each was set, so two timers at one instant run in the order they
were pushed. It holds timers; the fleet decides what each kind does.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class Timer:
    time: float
    seq: int
    kind: str
    node: int
    gpu: int = -1
    uuid: str = ""


class Timers:
    def __init__(self) -> None:
        self._heap: list[Timer] = []
        self._seq = itertools.count()

    def push(self, time: float, kind: str, node: int, gpu: int = -1, uuid: str = "") -> None:
        heapq.heappush(self._heap, Timer(time, next(self._seq), kind, node, gpu, uuid))

    @property
    def next_time(self) -> float:
        return self._heap[0].time if self._heap else math.inf

    def due(self, t1: float) -> Iterator[Timer]:
        """Pop the timers due by `t1`, earliest first (one pushed meanwhile comes out in its turn)."""
        while self._heap and self._heap[0].time <= t1:
            yield heapq.heappop(self._heap)
